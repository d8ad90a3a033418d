/*
 * ingest: Herald's `POST /v1/media` (a raw body, not a form) in plain C on libmicrohttpd 0.9.75, as the
 * baseline of media ingest (issue 18, P6: Herald >= 0.8x this server, on the data disk and on tmpfs).
 *
 * Per request, as Herald's StagingArea.stage does: a new file DIR/<id>.<ext>.partial (O_CREAT|O_TRUNC, 0600),
 * each chunk libmicrohttpd hands over written with write(2) as it arrives (nothing buffered beyond that chunk),
 * the first 12 bytes checked against the Content-Type's signature (MediaType.matches), then fsync(2) of the
 * file, rename to DIR/<id>.<ext>, and fsync(2) of DIR. Answers 201 with {"id","content_type","size","sha256"}
 * (sha256 null unless --sha256), Content-Type: application/json and a Location; 415 for a type Herald does not
 * take, 422 for bytes that are not that type, 400 for an empty body, 413 over 8 GiB. `GET /healthz` answers 200
 * (run.py's readiness probe).
 *
 * What it skips of Herald's work: SHA-256 of the body unless --sha256 (OpenSSL's EVP, libcrypto; Herald always
 * hashes while staging, with swift-crypto), the key's check (present only: `Authorization: Bearer ` and
 * something after it), the free-space check (statvfs), the media row in SQLite (one durable transaction), the
 * access log and metrics, multipart forms, and Herald's batching of chunks into 256 KiB writes (this server
 * writes each chunk). The fsyncs run on the polling thread (Herald hands the file's to a thread pool; with one
 * upload at a time nothing waits behind it either way). Herald does not fsync the directory; this server does.
 *
 * Daemon: Herald's default flags and options (as c-status/status.c), among them the 32 KiB connection memory
 * that bounds the chunks libmicrohttpd hands over, so both servers get the same chunks.
 *
 * Build: gcc -O2 -Wall -Wextra -DHAVE_LIBCRYPTO ingest.c -o ingest $(pkg-config --cflags --libs libmicrohttpd) -lcrypto
 *        (without -DHAVE_LIBCRYPTO and -lcrypto, for a machine without Debian's libssl-dev: --sha256 is refused)
 * Usage: ingest [--sha256] PORT DIR   (binds 127.0.0.1 only; PORT 0 picks a free port; DIR must exist)
 *        Prints one line per upload on stdout: bytes, chunks, and the seconds of the body and of the fsyncs.
 *
 * SIGTERM or SIGINT stops the daemon and exits 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>
#ifdef HAVE_LIBCRYPTO
#include <openssl/evp.h>
#else
typedef struct no_hash EVP_MD_CTX;
#define EVP_MAX_MD_SIZE 64
static void EVP_MD_CTX_free(EVP_MD_CTX *context) { (void) context; }
#endif

#define MAX_BYTES (8ULL << 30)
#define SIGNATURE_LENGTH 12

static const char *directory;
static int directory_fd = -1;
static int hash_bodies;
static char id_prefix[17];
static atomic_uint_fast64_t id_counter;

/* The types Herald accepts (MediaType), each with its extension and signature check. */
struct media_type {
    const char *name, *extension;
    int (*matches)(const unsigned char *bytes, size_t count);
};

static int has(const unsigned char *bytes, size_t count, const char *expected, size_t length, size_t offset)
{
    return count >= offset + length && memcmp(bytes + offset, expected, length) == 0;
}

static int is_jpeg(const unsigned char *b, size_t n) { return has(b, n, "\xFF\xD8\xFF", 3, 0); }
static int is_png(const unsigned char *b, size_t n) { return has(b, n, "\x89PNG\r\n\x1A\n", 8, 0); }
static int is_gif(const unsigned char *b, size_t n) { return has(b, n, "GIF87a", 6, 0) || has(b, n, "GIF89a", 6, 0); }
static int is_webp(const unsigned char *b, size_t n) { return has(b, n, "RIFF", 4, 0) && has(b, n, "WEBP", 4, 8); }
static int is_mp4(const unsigned char *b, size_t n) { return has(b, n, "ftyp", 4, 4) && n >= 12 && !has(b, n, "qt  ", 4, 8); }
static int is_webm(const unsigned char *b, size_t n) { return has(b, n, "\x1A\x45\xDF\xA3", 4, 0); }
static int is_quicktime(const unsigned char *b, size_t n)
{
    if (has(b, n, "ftyp", 4, 4))
        return has(b, n, "qt  ", 4, 8);
    return has(b, n, "moov", 4, 4) || has(b, n, "mdat", 4, 4) || has(b, n, "wide", 4, 4) || has(b, n, "free", 4, 4);
}

static const struct media_type media_types[] = {
    {"image/jpeg", "jpg", is_jpeg},   {"image/png", "png", is_png},         {"image/gif", "gif", is_gif},
    {"image/webp", "webp", is_webp},  {"video/mp4", "mp4", is_mp4},         {"video/quicktime", "mov", is_quicktime},
    {"video/webm", "webm", is_webm},
};

/* The type a Content-Type names, ignoring case, parameters and blanks; NULL when Herald does not take it. */
static const struct media_type *media_type(const char *content_type)
{
    if (content_type == NULL)
        return NULL;
    while (*content_type == ' ' || *content_type == '\t')
        content_type++;
    size_t length = strcspn(content_type, ";");
    while (length > 0 && (content_type[length - 1] == ' ' || content_type[length - 1] == '\t'))
        length--;
    for (size_t index = 0; index < sizeof media_types / sizeof media_types[0]; index++)
        if (strlen(media_types[index].name) == length && strncasecmp(content_type, media_types[index].name, length) == 0)
            return &media_types[index];
    return NULL;
}

/* One upload in progress. */
struct upload {
    const struct media_type *type;
    int fd;
    unsigned int status; /* 0 while fine, else the answer's status */
    const char *problem;
    char id[33];
    char final[4000], partial[4096];
    unsigned long long size, chunks;
    unsigned char head[SIGNATURE_LENGTH];
    size_t head_count;
    EVP_MD_CTX *hash;
    double started;
};

static double now(void)
{
    struct timespec time;
    clock_gettime(CLOCK_MONOTONIC, &time);
    return (double) time.tv_sec + (double) time.tv_nsec / 1e9;
}

static void fail(struct upload *upload, unsigned int status, const char *problem)
{
    if (upload->status == 0) {
        upload->status = status;
        upload->problem = problem;
    }
}

static int write_all(int fd, const char *bytes, size_t count)
{
    while (count > 0) {
        ssize_t written = write(fd, bytes, count);
        if (written < 0) {
            if (errno == EINTR)
                continue;
            return 0;
        }
        bytes += written;
        count -= (size_t) written;
    }
    return 1;
}

static enum MHD_Result answer(struct MHD_Connection *connection, unsigned int status, const char *type,
                              const char *body, const char *location)
{
    struct MHD_Response *response =
        MHD_create_response_from_buffer(strlen(body), (void *) body, MHD_RESPMEM_MUST_COPY);
    if (response == NULL)
        return MHD_NO;
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (location != NULL)
        MHD_add_response_header(response, MHD_HTTP_HEADER_LOCATION, location);
    enum MHD_Result result = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return result;
}

static enum MHD_Result problem(struct MHD_Connection *connection, unsigned int status, const char *detail)
{
    char body[512];
    snprintf(body, sizeof body, "{\"type\":\"about:blank\",\"status\":%u,\"detail\":\"%s\"}", status, detail);
    return answer(connection, status, "application/problem+json", body, NULL);
}

/* Closes and removes what an unfinished upload left. */
static void discard(struct upload *upload)
{
    if (upload->fd >= 0) {
        close(upload->fd);
        upload->fd = -1;
        unlink(upload->partial);
    }
}

static enum MHD_Result finish(struct MHD_Connection *connection, struct upload *upload)
{
    if (upload->status == 0 && upload->size == 0)
        fail(upload, MHD_HTTP_BAD_REQUEST, "the media body is empty");
    if (upload->status == 0 && !upload->type->matches(upload->head, upload->head_count))
        fail(upload, MHD_HTTP_UNPROCESSABLE_CONTENT, "the bytes are not of the declared type");
    double body_done = now();
    if (upload->status == 0) {
        /* Durable before it is announced: the file, its name, then the directory that holds the name. */
        if (fsync(upload->fd) != 0)
            fail(upload, MHD_HTTP_INTERNAL_SERVER_ERROR, "fsync failed");
        else if (close(upload->fd) != 0)
            fail(upload, MHD_HTTP_INTERNAL_SERVER_ERROR, "close failed");
        else {
            upload->fd = -1;
            if (rename(upload->partial, upload->final) != 0) {
                unlink(upload->partial);
                fail(upload, MHD_HTTP_INTERNAL_SERVER_ERROR, "rename failed");
            } else if (fsync(directory_fd) != 0) {
                unlink(upload->final);
                fail(upload, MHD_HTTP_INTERNAL_SERVER_ERROR, "fsync of the directory failed");
            }
        }
    }
    if (upload->status != 0) {
        discard(upload);
        return problem(connection, upload->status, upload->problem);
    }
    char digest[2 * EVP_MAX_MD_SIZE + 3] = "null";
#ifdef HAVE_LIBCRYPTO
    if (upload->hash != NULL) {
        unsigned char bytes[EVP_MAX_MD_SIZE];
        unsigned int length = 0;
        EVP_DigestFinal_ex(upload->hash, bytes, &length);
        digest[0] = '"';
        for (unsigned int index = 0; index < length; index++)
            snprintf(digest + 1 + 2 * index, 3, "%02x", bytes[index]);
        digest[1 + 2 * length] = '"';
        digest[2 + 2 * length] = '\0';
    }
#endif
    double synced = now();
    printf("upload id=%s bytes=%llu chunks=%llu body_s=%.3f fsync_s=%.3f\n", upload->id, upload->size, upload->chunks,
           body_done - upload->started, synced - body_done);
    fflush(stdout);
    char body[512], location[64];
    snprintf(body, sizeof body, "{\"id\":\"%s\",\"content_type\":\"%s\",\"size\":%llu,\"sha256\":%s}", upload->id,
             upload->type->name, upload->size, digest);
    snprintf(location, sizeof location, "/v1/media/%s", upload->id);
    return answer(connection, MHD_HTTP_CREATED, "application/json", body, location);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size, void **req_cls)
{
    (void) cls;
    (void) version;
    struct upload *upload = *req_cls;
    if (upload == NULL) {
        /* First call: the head. Refuse what is not an upload here, before any body is read. */
        if (strcmp(url, "/healthz") == 0 && strcmp(method, MHD_HTTP_METHOD_GET) == 0)
            return answer(connection, MHD_HTTP_OK, "application/json", "{\"status\":\"ok\"}", NULL);
        if (strcmp(url, "/v1/media") != 0)
            return problem(connection, MHD_HTTP_NOT_FOUND, "no such route");
        if (strcmp(method, MHD_HTTP_METHOD_POST) != 0)
            return problem(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "POST only");
        const char *authorization = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (authorization == NULL || strncmp(authorization, "Bearer ", 7) != 0 || authorization[7] == '\0')
            return problem(connection, MHD_HTTP_UNAUTHORIZED, "this call needs an API key: send Authorization: Bearer KEY");
        const struct media_type *type =
            media_type(MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE));
        if (type == NULL)
            return problem(connection, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "unsupported media type");
        upload = calloc(1, sizeof *upload);
        if (upload == NULL)
            return MHD_NO;
        upload->type = type;
        upload->started = now();
        snprintf(upload->id, sizeof upload->id, "%s%016llx", id_prefix,
                 (unsigned long long) atomic_fetch_add(&id_counter, 1) + 1);
        snprintf(upload->final, sizeof upload->final, "%s/%s.%s", directory, upload->id, type->extension);
        snprintf(upload->partial, sizeof upload->partial, "%s.partial", upload->final);
        upload->fd = open(upload->partial, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (upload->fd < 0)
            fail(upload, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot create the staging file");
#ifdef HAVE_LIBCRYPTO
        if (hash_bodies) {
            upload->hash = EVP_MD_CTX_new();
            if (upload->hash == NULL || EVP_DigestInit_ex(upload->hash, EVP_sha256(), NULL) != 1)
                fail(upload, MHD_HTTP_INTERNAL_SERVER_ERROR, "no SHA-256");
        }
#endif
        *req_cls = upload;
        return MHD_YES;
    }
    if (*upload_data_size == 0)
        return finish(connection, upload);
    /* A chunk: written as it is, hashed, its first bytes kept for the signature. After a failure, read and dropped. */
    size_t count = *upload_data_size;
    *upload_data_size = 0;
    if (upload->status != 0)
        return MHD_YES;
    upload->chunks++;
    upload->size += count;
    if (upload->size > MAX_BYTES) {
        fail(upload, MHD_HTTP_CONTENT_TOO_LARGE, "the body is larger than 8 GiB");
        discard(upload);
        return MHD_YES;
    }
    if (upload->head_count < SIGNATURE_LENGTH) {
        size_t take = SIGNATURE_LENGTH - upload->head_count < count ? SIGNATURE_LENGTH - upload->head_count : count;
        memcpy(upload->head + upload->head_count, upload_data, take);
        upload->head_count += take;
        if (upload->head_count == SIGNATURE_LENGTH && !upload->type->matches(upload->head, upload->head_count)) {
            fail(upload, MHD_HTTP_UNPROCESSABLE_CONTENT, "the bytes are not of the declared type");
            discard(upload);
            return MHD_YES;
        }
    }
#ifdef HAVE_LIBCRYPTO
    if (upload->hash != NULL)
        EVP_DigestUpdate(upload->hash, upload_data, count);
#endif
    if (!write_all(upload->fd, upload_data, count)) {
        fail(upload, errno == ENOSPC ? MHD_HTTP_INSUFFICIENT_STORAGE : MHD_HTTP_INTERNAL_SERVER_ERROR, "write failed");
        discard(upload);
    }
    return MHD_YES;
}

/* The request is over, answered or not (the client may have gone mid-body): nothing unfinished stays. */
static void completed(void *cls, struct MHD_Connection *connection, void **req_cls, enum MHD_RequestTerminationCode toe)
{
    (void) cls;
    (void) connection;
    (void) toe;
    struct upload *upload = *req_cls;
    if (upload == NULL)
        return;
    discard(upload);
    EVP_MD_CTX_free(upload->hash);
    free(upload);
    *req_cls = NULL;
}

static int parse_number(const char *text, long min, long max, long *out)
{
    char *end = NULL;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < min || value > max)
        return 0;
    *out = value;
    return 1;
}

int main(int argc, char **argv)
{
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "--sha256") == 0) {
#ifndef HAVE_LIBCRYPTO
        fprintf(stderr, "--sha256: built without libcrypto (-DHAVE_LIBCRYPTO -lcrypto)\n");
        return 2;
#endif
        hash_bodies = 1;
        first = 2;
    }
    long port = 0;
    if (argc != first + 2 || !parse_number(argv[first], 0, 65535, &port)) {
        fprintf(stderr, "usage: %s [--sha256] PORT DIR\n", argc > 0 ? argv[0] : "ingest");
        return 2;
    }
    directory = argv[first + 1];
    if (strlen(directory) > 3000) {
        fprintf(stderr, "%s: too long a path\n", directory);
        return 2;
    }
    directory_fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (directory_fd < 0) {
        fprintf(stderr, "%s: %s\n", directory, strerror(errno));
        return 2;
    }
    unsigned char random_bytes[8];
    if (getrandom(random_bytes, sizeof random_bytes, 0) != (ssize_t) sizeof random_bytes) {
        fprintf(stderr, "getrandom: %s\n", strerror(errno));
        return 1;
    }
    for (int index = 0; index < 8; index++)
        snprintf(id_prefix + 2 * index, 3, "%02x", random_bytes[index]);

    /* Block SIGTERM/SIGINT before libmicrohttpd starts its threads (see c-hello/hello.c). */
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    int rc = pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    if (rc != 0) {
        fprintf(stderr, "pthread_sigmask: %s\n", strerror(rc));
        return 1;
    }

    struct sockaddr_in address;
    memset(&address, 0, sizeof address);
    address.sin_family = AF_INET;
    address.sin_port = htons((uint16_t) port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    /* Herald's Daemon.start, with its defaults (ServerConfiguration, herald serve). */
    const unsigned int flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct MHD_Daemon *daemon = MHD_start_daemon(
        flags, (uint16_t) port, NULL, NULL, handle, NULL, MHD_OPTION_SOCK_ADDR, (const struct sockaddr *) &address,
        MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_CONNECTION_LIMIT, (unsigned int) (1000 + 125),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int) 256, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int) 30,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) (32 << 10), MHD_OPTION_STRICT_FOR_CLIENT, (int) 1,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned int) 1, MHD_OPTION_END);
    if (daemon == NULL) {
        fprintf(stderr, "MHD_start_daemon failed on 127.0.0.1:%ld\n", port);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    if (info != NULL && info->port != 0)
        port = info->port;
    printf("listening on 127.0.0.1:%ld\n", port);
    fflush(stdout);

    int signal_number = 0;
    do {
        rc = sigwait(&stop_signals, &signal_number);
    } while (rc == EINTR);
    if (rc != 0)
        fprintf(stderr, "sigwait: %s\n", strerror(rc));

    MHD_stop_daemon(daemon);
    close(directory_fd);
    return rc == 0 ? 0 : 1;
}
