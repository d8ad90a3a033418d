/*
 * hello: the smallest useful libmicrohttpd 0.9.75 server, as a baseline for Herald's GET /healthz.
 *
 * Answers every request with 200, Content-Type: application/json and {"status":"ok"} (the body
 * Herald's /healthz returns), from one response created at start-up and reused.
 *
 * Build: gcc -O2 -Wall -Wextra hello.c -o hello $(pkg-config --cflags --libs libmicrohttpd)
 * Usage: hello PORT [THREADS [BODY_FILE]]   (binds 127.0.0.1 only; PORT 0 picks a free port)
 *        BODY_FILE: answer with that file's bytes instead (up to 64 KiB), e.g. a job's JSON, so that the limit
 *        is measured with the same response size as the server it is compared with.
 *
 * SIGTERM or SIGINT stops the daemon and exits 0.
 */
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

static const char BODY[] = "{\"status\":\"ok\"}";
static char file_body[65536];

/* Any non-NULL address will do: it only marks "headers seen, waiting for the final call". */
static int request_marker;

static enum MHD_Result handle(void *cls, struct MHD_Connection *connection, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_cls)
{
    struct MHD_Response *response = cls;
    (void) url;
    (void) method;
    (void) version;
    (void) upload_data;

    /* First call: only the headers are known. Remember the request, answer nothing yet. */
    if (*req_cls == NULL) {
        *req_cls = &request_marker;
        return MHD_YES;
    }
    /* Body data (not expected for GET): discard it and wait for the body-less final call. */
    if (*upload_data_size != 0) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    /* Final call: the whole request has been read. */
    return MHD_queue_response(connection, MHD_HTTP_OK, response);
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
    long port = 0;
    long threads = 1;
    if (argc < 2 || argc > 4 || !parse_number(argv[1], 0, 65535, &port)
        || (argc >= 3 && !parse_number(argv[2], 1, 1024, &threads))) {
        fprintf(stderr, "usage: %s PORT [THREADS [BODY_FILE]]\n", argc > 0 ? argv[0] : "hello");
        return 2;
    }
    const char *body = BODY;
    size_t body_size = sizeof BODY - 1;
    if (argc == 4) {
        FILE *file = fopen(argv[3], "rb");
        if (file == NULL) {
            fprintf(stderr, "%s: %s\n", argv[3], strerror(errno));
            return 2;
        }
        body_size = fread(file_body, 1, sizeof file_body, file);
        int too_big = fgetc(file) != EOF;
        fclose(file);
        if (too_big) {
            fprintf(stderr, "%s: larger than %zu bytes\n", argv[3], sizeof file_body);
            return 2;
        }
        body = file_body;
    }

    /* Block SIGTERM/SIGINT before libmicrohttpd starts its threads, so they inherit the mask
     * and the signals are only ever taken by sigwait() below. A shell without job control starts
     * background jobs with SIGINT ignored, and an ignored signal is discarded, never waited for:
     * restore the default disposition first. */
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

    struct MHD_Response *response = MHD_create_response_from_buffer(
        body_size, (void *) body, MHD_RESPMEM_PERSISTENT);
    if (response == NULL) {
        fprintf(stderr, "MHD_create_response_from_buffer failed\n");
        return 1;
    }
    if (MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json")
        != MHD_YES) {
        fprintf(stderr, "MHD_add_response_header failed\n");
        MHD_destroy_response(response);
        return 1;
    }

    struct sockaddr_in address;
    memset(&address, 0, sizeof address);
    address.sin_family = AF_INET;
    address.sin_port = htons((uint16_t) port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    const unsigned int flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    struct MHD_Daemon *daemon;
    if (threads > 1)
        daemon = MHD_start_daemon(flags, (uint16_t) port, NULL, NULL, handle, response,
                                  MHD_OPTION_SOCK_ADDR, (const struct sockaddr *) &address,
                                  MHD_OPTION_THREAD_POOL_SIZE, (unsigned int) threads,
                                  MHD_OPTION_END);
    else
        daemon = MHD_start_daemon(flags, (uint16_t) port, NULL, NULL, handle, response,
                                  MHD_OPTION_SOCK_ADDR, (const struct sockaddr *) &address,
                                  MHD_OPTION_END);
    if (daemon == NULL) {
        fprintf(stderr, "MHD_start_daemon failed on 127.0.0.1:%ld\n", port);
        MHD_destroy_response(response);
        return 1;
    }

    /* With PORT 0 the kernel chose the port: report the real one. */
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
    MHD_destroy_response(response);
    return rc == 0 ? 0 : 1;
}
