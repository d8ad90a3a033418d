/*
 * status: Herald's `GET /v1/jobs/{id}` in plain C on libmicrohttpd 0.9.75 and SQLite, as the baseline of the
 * status poll (issue 18, P1: Herald >= 0.8x this server).
 *
 * Per request it does the work Herald does for a poll: SQLiteJobStatusReader's statement (passed as SQL; run.py asks
 * `herald status-statement` for it) bound to the id and the tenant, on Herald's database opened read-only (WAL, the
 * file Herald left; SQLite's memory statistics off, as Herald sets SQLite up), prepared once per polling thread and
 * reused (one connection per thread, as Herald keeps one read-only connection per HTTP thread); the job's columns
 * from the first row, an upload from each row; the job object written as JSON with the members, order and values of
 * Herald's JSONWriter (`extension Job: JSONWritable` in Sources/HeraldCore/Job.swift): `done` and `progress` derived
 * as Job.Progress does, timestamps parsed and written back in the fixed-width RFC 3339 form, strings escaped as
 * JSONWriter escapes them. Answers carry Content-Type: application/json, Retry-After: 1 until the job is done, and an
 * X-Request-Id of 32 hex digits like Herald's; an unknown id is a 404 with Herald's problem body.
 *
 * What it skips of Herald's work, unless started with --product: the API key is only checked to be present
 * (`Authorization: Bearer ` and something after it), the tenant comes from the command line, no rate limits, no
 * access log, no metrics. Always skipped: `?wait=` (the query string is ignored), the router, and live upload
 * progress (Herald lays the bytes its uploads have sent, kept in memory, over a running job's `bytes_sent`; this
 * server answers the database's, the same for a job that is not uploading).
 *
 * --product (issue 35) adds Herald's per-request product work, done the way Herald does it: the failed-auth bucket
 * of the client's address checked (a flag read while no address has failed); the key by two SipHash-1-3 values
 * under salts drawn at start into a cache trusted for 1 s (AccessGate, Authenticator), the SHA-256 and the key's row
 * (`keys`, by hash, on the thread's connection) only on a miss, the tenant the key's; the key's token bucket
 * (RateLimiter: RATE a second, burst twice that, --rate-limit, Herald's default 100; 0: none); at the request's end
 * (libmicrohttpd's completion callback, as Daemon.record) a counter by method, route and status and a histogram of
 * 11 buckets (swift-prometheus' default) with the clock read at both ends, and the access-log line in Herald's text
 * format into a 256 KiB buffer that a thread writes to stdout every 100 ms (AccessLog). Each shared table is behind
 * one mutex, as each of Herald's is behind one Mutex.
 *
 * Daemon: the flags and options Herald's MicroHTTP Daemon passes by default: MHD_USE_EPOLL_INTERNAL_THREAD |
 * MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, connection limit 1000 + 125, 256 per IP, 30 s timeout, 32 KiB
 * connection memory, strict parsing; one polling thread unless THREADS > 1 (Herald's --http-threads, default 1).
 *
 * Build: gcc -O2 -Wall -Wextra status.c -o status $(pkg-config --cflags --libs libmicrohttpd) -lsqlite3 -lcrypto -lpthread
 * Usage: status [--product] [--rate-limit RATE] PORT DB TENANT SQL [THREADS]
 *        (binds 127.0.0.1 only; PORT 0 picks a free port)
 *        SQL is SQLiteJobStatusReader.query: ?1 the job id, ?2 the tenant (with --product, the key's).
 *
 * SIGTERM or SIGINT stops the daemon and exits 0.
 */
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <time.h>
#include <unistd.h>

#include <microhttpd.h>
#include <openssl/sha.h>
#include <sqlite3.h>

/* The upload's six columns end Herald's statement; the job's come before them, as many as it selects. */
#define UPLOAD_COLUMNS 6
static int job_columns;
#define MAX_THREADS 64
#define PREFIX "/v1/jobs/"

static const char *database_path;
static const char *tenant;
static const char *query;
static int request_marker;

/* The X-Request-Id: a random prefix per process, then a counter, 16 hex digits each (Herald's shape). */
static char request_prefix[17];
static atomic_uint_fast64_t request_counter;

/* One read-only connection and its prepared statement per polling thread, opened on the thread's first poll. */
struct reader {
    sqlite3 *db;
    sqlite3_stmt *statement;
    sqlite3_stmt *key_statement; /* --product: a key's row by its hash (KeyRepository.find(hash:)) */
};
static __thread struct reader *thread_reader;
static struct reader readers[MAX_THREADS];
static int reader_count;
static pthread_mutex_t readers_lock = PTHREAD_MUTEX_INITIALIZER;

static struct reader *reader(void)
{
    if (thread_reader != NULL)
        return thread_reader;
    pthread_mutex_lock(&readers_lock);
    struct reader *slot = reader_count < MAX_THREADS ? &readers[reader_count++] : NULL;
    pthread_mutex_unlock(&readers_lock);
    if (slot == NULL)
        return NULL;
    if (sqlite3_open_v2(database_path, &slot->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        fprintf(stderr, "open %s: %s\n", database_path, sqlite3_errmsg(slot->db));
        return NULL;
    }
    sqlite3_busy_timeout(slot->db, 5000);
    if (sqlite3_prepare_v3(slot->db, query, -1, SQLITE_PREPARE_PERSISTENT, &slot->statement, NULL) != SQLITE_OK
        || sqlite3_prepare_v3(slot->db, "SELECT id, tenant, revoked_at FROM keys WHERE hash = ?1", -1,
                              SQLITE_PREPARE_PERSISTENT, &slot->key_statement, NULL) != SQLITE_OK) {
        fprintf(stderr, "prepare: %s\n", sqlite3_errmsg(slot->db));
        return NULL;
    }
    thread_reader = slot;
    return slot;
}

/* MARK: JSON, as JSONWriter writes it */

struct buffer {
    char *bytes;
    size_t count, capacity;
};

static int reserve(struct buffer *buffer, size_t more)
{
    if (buffer->count + more <= buffer->capacity)
        return 1;
    size_t grown = buffer->capacity * 2 > buffer->count + more ? buffer->capacity * 2 : buffer->count + more;
    char *bytes = realloc(buffer->bytes, grown);
    if (bytes == NULL)
        return 0;
    buffer->bytes = bytes;
    buffer->capacity = grown;
    return 1;
}

static void put(struct buffer *buffer, const char *bytes, size_t count)
{
    memcpy(buffer->bytes + buffer->count, bytes, count);
    buffer->count += count;
}

#define LITERAL(buffer, text) put((buffer), (text), sizeof(text) - 1)

/* A JSON string: one copy when nothing needs escaping (ids, states, timestamps), else escaped byte by byte. */
static int string(struct buffer *buffer, const unsigned char *text, size_t count)
{
    int plain = 1;
    for (size_t index = 0; index < count; index++)
        if (text[index] < 0x20 || text[index] == '"' || text[index] == '\\') {
            plain = 0;
            break;
        }
    if (!reserve(buffer, (plain ? 1 : 6) * count + 3))
        return 0;
    buffer->bytes[buffer->count++] = '"';
    if (plain) {
        put(buffer, (const char *) text, count);
    } else {
        static const char hex[] = "0123456789abcdef";
        for (size_t index = 0; index < count; index++) {
            unsigned char byte = text[index];
            char escaped = 0;
            switch (byte) {
            case '"': escaped = '"'; break;
            case '\\': escaped = '\\'; break;
            case '\n': escaped = 'n'; break;
            case '\r': escaped = 'r'; break;
            case '\t': escaped = 't'; break;
            case '\b': escaped = 'b'; break;
            case '\f': escaped = 'f'; break;
            default:
                if (byte < 0x20) {
                    char sequence[6] = {'\\', 'u', '0', '0', hex[byte >> 4], hex[byte & 15]};
                    put(buffer, sequence, 6);
                } else {
                    buffer->bytes[buffer->count++] = (char) byte;
                }
                continue;
            }
            buffer->bytes[buffer->count++] = '\\';
            buffer->bytes[buffer->count++] = escaped;
        }
    }
    buffer->bytes[buffer->count++] = '"';
    return 1;
}

/* A nullable text column as a string or null. */
static int text_or_null(struct buffer *buffer, sqlite3_stmt *statement, int column)
{
    const unsigned char *text = sqlite3_column_text(statement, column);
    if (text == NULL) {
        if (!reserve(buffer, 4))
            return 0;
        LITERAL(buffer, "null");
        return 1;
    }
    return string(buffer, text, (size_t) sqlite3_column_bytes(statement, column));
}

static int integer(struct buffer *buffer, long long value)
{
    if (!reserve(buffer, 21))
        return 0;
    char digits[24];
    int index = sizeof digits;
    unsigned long long magnitude = value < 0 ? 0ULL - (unsigned long long) value : (unsigned long long) value;
    do {
        digits[--index] = (char) ('0' + magnitude % 10);
        magnitude /= 10;
    } while (magnitude > 0);
    if (value < 0)
        buffer->bytes[buffer->count++] = '-';
    put(buffer, digits + index, sizeof digits - (size_t) index);
    return 1;
}

/* MARK: Timestamps: the fixed-width YYYY-MM-DDTHH:MM:SS.SSSZ Herald stores, parsed and written back */

static long long floor_divide(long long a, long long b)
{
    long long quotient = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? quotient - 1 : quotient;
}

static long long days_from_civil(long long year, long long month, long long day)
{
    year -= month <= 2;
    long long era = floor_divide(year, 400);
    long long year_of_era = year - era * 400;
    long long day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    long long day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    return era * 146097 + day_of_era - 719468;
}

static void civil_from_days(long long days, long long *year, long long *month, long long *day)
{
    long long shifted = days + 719468;
    long long era = floor_divide(shifted, 146097);
    long long day_of_era = shifted - era * 146097;
    long long year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096) / 365;
    long long day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    long long month_from_march = (5 * day_of_year + 2) / 153;
    *day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    *month = month_from_march < 10 ? month_from_march + 3 : month_from_march - 9;
    *year = year_of_era + era * 400 + (*month <= 2);
}

static int digits_at(const unsigned char *text, int start, int width, long long *value)
{
    *value = 0;
    for (int index = start; index < start + width; index++) {
        if (text[index] < '0' || text[index] > '9')
            return 0;
        *value = *value * 10 + (text[index] - '0');
    }
    return 1;
}

static int days_in(long long month, long long year)
{
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    return month == 2 && leap ? 29 : days[month - 1];
}

/* The column's timestamp in milliseconds since the epoch; 0 if it is not in Herald's stored form. */
static int parse_timestamp(const unsigned char *text, int count, long long *milliseconds)
{
    long long year, month, day, hour, minute, second, millisecond;
    if (count != 24 || text[4] != '-' || text[7] != '-' || text[10] != 'T' || text[13] != ':' || text[16] != ':'
        || text[19] != '.' || text[23] != 'Z' || !digits_at(text, 0, 4, &year) || !digits_at(text, 5, 2, &month)
        || !digits_at(text, 8, 2, &day) || !digits_at(text, 11, 2, &hour) || !digits_at(text, 14, 2, &minute)
        || !digits_at(text, 17, 2, &second) || !digits_at(text, 20, 3, &millisecond) || month < 1 || month > 12
        || day < 1 || day > days_in(month, year) || hour > 23 || minute > 59 || second > 59)
        return 0;
    *milliseconds = (days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second) * 1000 + millisecond;
    return 1;
}

static void put_digits(char *end, long long value, int width)
{
    for (int index = 1; index <= width; index++) {
        end[-index] = (char) ('0' + value % 10);
        value /= 10;
    }
}

static int timestamp(struct buffer *buffer, sqlite3_stmt *statement, int column, int nullable)
{
    const unsigned char *text = sqlite3_column_text(statement, column);
    if (text == NULL) {
        if (!nullable || !reserve(buffer, 4))
            return 0;
        LITERAL(buffer, "null");
        return 1;
    }
    long long milliseconds;
    if (!parse_timestamp(text, sqlite3_column_bytes(statement, column), &milliseconds) || !reserve(buffer, 26))
        return 0;
    long long days = floor_divide(milliseconds, 86400000), of_day = milliseconds - days * 86400000;
    long long year, month, day;
    civil_from_days(days, &year, &month, &day);
    char *out = buffer->bytes + buffer->count;
    out[0] = '"';
    put_digits(out + 5, year, 4);
    out[5] = '-';
    put_digits(out + 8, month, 2);
    out[8] = '-';
    put_digits(out + 11, day, 2);
    out[11] = 'T';
    put_digits(out + 14, of_day / 3600000, 2);
    out[14] = ':';
    put_digits(out + 17, of_day / 60000 % 60, 2);
    out[17] = ':';
    put_digits(out + 20, of_day / 1000 % 60, 2);
    out[20] = '.';
    put_digits(out + 24, of_day % 1000, 3);
    out[24] = 'Z';
    out[25] = '"';
    buffer->count += 26;
    return 1;
}

/* MARK: The job object */

static int equals(const unsigned char *text, int count, const char *literal)
{
    return text != NULL && (size_t) count == strlen(literal) && memcmp(text, literal, (size_t) count) == 0;
}

static int is_one_of(const unsigned char *text, int count, const char *const *names)
{
    for (; *names != NULL; names++)
        if (equals(text, count, *names))
            return 1;
    return 0;
}

static const char *const job_states[] = {"queued", "scheduled", "running", "succeeded", "failed", "cancelled", NULL};
static const char *const done_states[] = {"succeeded", "failed", "cancelled", NULL};
static const char *const upload_states[] = {"pending", "uploading", "uploaded", "failed", "cancelled", NULL};
static const char *const error_codes[] = {"upload_failed", "cancelled", "media_missing", "internal", NULL};
static const char *const priorities[] = {"high", "normal", "low"}; /* by jobs.priority, the rank */

/* Per thread: the head (up to cancel_requested), the uploads array, the tail (error to finished_at). */
static __thread struct buffer head, uploads, tail;

enum outcome { FOUND, NOT_FOUND, FAILED };

/* Steps the statement bound to `id`: the job from its first row, an upload from each row; the JSON in `out`. */
static enum outcome read_job(struct reader *reader, const char *id, size_t id_count, const char *of_tenant,
                             struct buffer *out, int *done)
{
    sqlite3_stmt *statement = reader->statement;
    sqlite3_bind_text(statement, 1, id, (int) id_count, SQLITE_STATIC);
    sqlite3_bind_text(statement, 2, of_tenant, -1, SQLITE_STATIC);
    enum outcome outcome = FAILED;
    int code = sqlite3_step(statement);
    if (code != SQLITE_ROW) {
        outcome = code == SQLITE_DONE ? NOT_FOUND : FAILED;
        goto finish;
    }
    head.count = uploads.count = tail.count = 0;

    /* The job's columns, read from the first row (its text is only valid until the next step). */
    const unsigned char *state = sqlite3_column_text(statement, 2);
    int state_count = sqlite3_column_bytes(statement, 2);
    long long rank = sqlite3_column_int64(statement, 3);
    if (!is_one_of(state, state_count, job_states) || sqlite3_column_type(statement, 3) != SQLITE_INTEGER || rank < 0
        || rank > 2 || sqlite3_column_type(statement, 4) != SQLITE_INTEGER
        || sqlite3_column_type(statement, 6) != SQLITE_INTEGER || sqlite3_column_text(statement, 0) == NULL
        || sqlite3_column_text(statement, 1) == NULL)
        goto finish;
    int succeeded = equals(state, state_count, "succeeded");
    *done = is_one_of(state, state_count, done_states);
    if (!reserve(&head, 8) || (LITERAL(&head, "{\"id\":"), 0) || !text_or_null(&head, statement, 0)
        || !reserve(&head, 16) || (LITERAL(&head, ",\"post_id\":"), 0) || !text_or_null(&head, statement, 1)
        || !reserve(&head, 16) || (LITERAL(&head, ",\"state\":"), 0) || !string(&head, state, (size_t) state_count)
        || !reserve(&head, 64))
        goto finish;
    if (*done)
        LITERAL(&head, ",\"done\":true,\"priority\":");
    else
        LITERAL(&head, ",\"done\":false,\"priority\":");
    if (!string(&head, (const unsigned char *) priorities[rank], strlen(priorities[rank])) || !reserve(&head, 16))
        goto finish;
    LITERAL(&head, ",\"attempt\":");
    if (!integer(&head, sqlite3_column_int64(statement, 4)) || !reserve(&head, 16))
        goto finish;
    LITERAL(&head, ",\"run_at\":");
    if (!timestamp(&head, statement, 5, 0) || !reserve(&head, 32))
        goto finish;
    if (sqlite3_column_int64(statement, 6) != 0)
        LITERAL(&head, ",\"cancel_requested\":true");
    else
        LITERAL(&head, ",\"cancel_requested\":false");

    if (!reserve(&tail, 16))
        goto finish;
    LITERAL(&tail, ",\"error\":");
    const unsigned char *error_code = sqlite3_column_text(statement, 7);
    if (error_code == NULL) {
        if (!reserve(&tail, 4))
            goto finish;
        LITERAL(&tail, "null");
    } else {
        const unsigned char *message = sqlite3_column_text(statement, 8);
        if (!is_one_of(error_code, sqlite3_column_bytes(statement, 7), error_codes) || !reserve(&tail, 16)
            || (LITERAL(&tail, "{\"code\":"), 0)
            || !string(&tail, error_code, (size_t) sqlite3_column_bytes(statement, 7)) || !reserve(&tail, 16)
            || (LITERAL(&tail, ",\"message\":"), 0)
            || !string(&tail, message ? message : (const unsigned char *) "", message ? (size_t) sqlite3_column_bytes(statement, 8) : 0))
            goto finish;
        if (sqlite3_column_text(statement, 9) != NULL) {
            if (!reserve(&tail, 16))
                goto finish;
            LITERAL(&tail, ",\"media_id\":");
            if (!text_or_null(&tail, statement, 9))
                goto finish;
        }
        if (!reserve(&tail, 1))
            goto finish;
        LITERAL(&tail, "}");
    }
    if (!reserve(&tail, 16) || (LITERAL(&tail, ",\"created_at\":"), 0) || !timestamp(&tail, statement, 10, 0)
        || !reserve(&tail, 16) || (LITERAL(&tail, ",\"started_at\":"), 0) || !timestamp(&tail, statement, 11, 1)
        || !reserve(&tail, 16) || (LITERAL(&tail, ",\"finished_at\":"), 0) || !timestamp(&tail, statement, 12, 1)
        || !reserve(&tail, 16) || (LITERAL(&tail, ",\"runner\":"), 0) || !text_or_null(&tail, statement, 13)
        || !reserve(&tail, 1))
        goto finish;
    LITERAL(&tail, "}");

    /* The uploads, one a row (NULL on the LEFT JOIN's row of a job without media), and Job.Progress's sums. */
    long long total = 0, uploaded = 0, failed = 0, bytes_total = 0, bytes_uploaded = 0;
    while (code == SQLITE_ROW) {
        if (sqlite3_column_type(statement, job_columns) != SQLITE_NULL) {
            const unsigned char *upload_state = sqlite3_column_text(statement, job_columns + 1);
            int upload_state_count = sqlite3_column_bytes(statement, job_columns + 1);
            if (!is_one_of(upload_state, upload_state_count, upload_states))
                goto finish;
            long long size = sqlite3_column_int64(statement, job_columns + 4);
            long long sent = sqlite3_column_int64(statement, job_columns + 5);
            int is_uploaded = equals(upload_state, upload_state_count, "uploaded");
            total++;
            uploaded += is_uploaded;
            failed += equals(upload_state, upload_state_count, "failed");
            bytes_total += size;
            bytes_uploaded += is_uploaded ? size : (sent < size ? sent : size);
            if (!reserve(&uploads, 16))
                goto finish;
            if (total > 1)
                LITERAL(&uploads, ",");
            LITERAL(&uploads, "{\"media_id\":");
            if (!text_or_null(&uploads, statement, job_columns) || !reserve(&uploads, 16)
                || (LITERAL(&uploads, ",\"state\":"), 0) || !string(&uploads, upload_state, (size_t) upload_state_count)
                || !reserve(&uploads, 16) || (LITERAL(&uploads, ",\"attempts\":"), 0)
                || !integer(&uploads, sqlite3_column_int64(statement, job_columns + 2)) || !reserve(&uploads, 16)
                || (LITERAL(&uploads, ",\"error\":"), 0) || !text_or_null(&uploads, statement, job_columns + 3)
                || !reserve(&uploads, 16) || (LITERAL(&uploads, ",\"size\":"), 0) || !integer(&uploads, size)
                || !reserve(&uploads, 16) || (LITERAL(&uploads, ",\"bytes_sent\":"), 0) || !integer(&uploads, sent)
                || !reserve(&uploads, 1))
                goto finish;
            LITERAL(&uploads, "}");
        }
        code = sqlite3_step(statement);
    }
    if (code != SQLITE_DONE)
        goto finish;
    long long percent;
    if (total == 0)
        percent = succeeded ? 100 : 0;
    else if (uploaded == total)
        percent = 100;
    else if (bytes_total == 0)
        percent = uploaded * 100 / total;
    else
        percent = bytes_uploaded * 100 / bytes_total < 99 ? bytes_uploaded * 100 / bytes_total : 99;

    /* The object: head, progress, uploads, tail, into one buffer the response then owns. */
    out->count = 0;
    out->capacity = head.count + uploads.count + tail.count + 256;
    out->bytes = malloc(out->capacity);
    if (out->bytes == NULL)
        goto finish;
    put(out, head.bytes, head.count);
    LITERAL(out, ",\"progress\":{\"total\":");
    integer(out, total);
    LITERAL(out, ",\"uploaded\":");
    integer(out, uploaded);
    LITERAL(out, ",\"failed\":");
    integer(out, failed);
    LITERAL(out, ",\"percent\":");
    integer(out, percent);
    LITERAL(out, ",\"bytes_total\":");
    integer(out, bytes_total);
    LITERAL(out, ",\"bytes_uploaded\":");
    integer(out, bytes_uploaded);
    LITERAL(out, "},\"uploads\":[");
    if (!reserve(out, uploads.count + tail.count + 1)) {
        free(out->bytes);
        out->bytes = NULL;
        goto finish;
    }
    put(out, uploads.bytes, uploads.count);
    LITERAL(out, "]");
    put(out, tail.bytes, tail.count);
    outcome = FOUND;
finish:
    /* Reset at once, as Herald does: a statement left stepping holds its read snapshot open. */
    sqlite3_reset(statement);
    sqlite3_clear_bindings(statement);
    return outcome;
}

/* MARK: Herald's product work (--product) */

static int product;
static double key_rate = 100; /* --rate-limit: tokens a second per key, burst twice that; 0: no bucket */

static long long monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long) now.tv_sec * 1000000000LL + now.tv_nsec;
}

/* SipHash-1-3 (Aumasson and Bernstein; one round a word, three at the end), the function Swift's Hasher runs. */
#define ROTATE(x, b) (uint64_t) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                              \
    do {                                                                                                      \
        v0 += v1; v1 = ROTATE(v1, 13); v1 ^= v0; v0 = ROTATE(v0, 32);                                         \
        v2 += v3; v3 = ROTATE(v3, 16); v3 ^= v2;                                                              \
        v0 += v3; v3 = ROTATE(v3, 21); v3 ^= v0;                                                              \
        v2 += v1; v1 = ROTATE(v1, 17); v1 ^= v2; v2 = ROTATE(v2, 32);                                         \
    } while (0)

static uint64_t siphash(const unsigned char *in, size_t count, uint64_t k0, uint64_t k1)
{
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    const unsigned char *end = in + count - count % 8;
    for (; in != end; in += 8) {
        uint64_t m;
        memcpy(&m, in, 8);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t last = (uint64_t) count << 56;
    for (size_t index = 0; index < count % 8; index++)
        last |= (uint64_t) in[index] << (8 * index);
    v3 ^= last;
    SIPROUND;
    v0 ^= last;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* The key cache: a key's two keyed hashes to its row's answer, trusted for a second (Authenticator). */
#define KEY_SLOTS 16384
#define KEY_CAPACITY 10000
struct key_entry {
    uint64_t first, second;
    int used, valid;
    long long checked, recorded_use;
    char id[40], tenant[65];
};
static struct key_entry key_cache[KEY_SLOTS];
static int key_count;
static pthread_mutex_t key_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t salts[4];

static struct key_entry *key_slot(uint64_t first, uint64_t second)
{
    for (size_t index = first & (KEY_SLOTS - 1);; index = (index + 1) & (KEY_SLOTS - 1))
        if (!key_cache[index].used || ((key_cache[index].first ^ first) | (key_cache[index].second ^ second)) == 0)
            return &key_cache[index];
}

/* `hrld_` and 43 to 256 base64url characters (KeySecret.isWellFormed). */
static int well_formed(const unsigned char *key, size_t count)
{
    if (count < 5 + 43 || count > 5 + 256 || memcmp(key, "hrld_", 5) != 0)
        return 0;
    for (size_t index = 5; index < count; index++) {
        unsigned char byte = key[index];
        if (!((byte >= 'a' && byte <= 'z') || (byte >= 'A' && byte <= 'Z') || (byte >= '0' && byte <= '9') || byte == '-'
              || byte == '_'))
            return 0;
    }
    return 1;
}

enum authentication { VALID, INVALID, UNAVAILABLE };

/* The key's tenant and id into the caller's buffers, from the cache or (stale or unknown) from its row. */
static enum authentication authenticate(struct reader *reader, const unsigned char *key, size_t count, long long now,
                                        char *tenant_out, char *id_out)
{
    uint64_t first = siphash(key, count, salts[0], salts[1]), second = siphash(key, count, salts[2], salts[3]);
    pthread_mutex_lock(&key_lock);
    struct key_entry *entry = key_slot(first, second);
    if (entry->used && now - entry->checked < 1000000000LL) {
        int valid = entry->valid;
        if (valid) {
            if (now - entry->recorded_use >= 60000000000LL)
                entry->recorded_use = now; /* Herald queues the use for last_used_at here, once a minute */
            memcpy(tenant_out, entry->tenant, sizeof entry->tenant);
            memcpy(id_out, entry->id, sizeof entry->id);
        }
        pthread_mutex_unlock(&key_lock);
        return valid ? VALID : INVALID;
    }
    pthread_mutex_unlock(&key_lock);
    if (!well_formed(key, count))
        return INVALID;
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(key, count, digest);
    char hex[2 * SHA256_DIGEST_LENGTH + 1];
    for (int index = 0; index < SHA256_DIGEST_LENGTH; index++)
        snprintf(hex + 2 * index, 3, "%02x", digest[index]);
    sqlite3_stmt *statement = reader->key_statement;
    sqlite3_bind_text(statement, 1, hex, 2 * SHA256_DIGEST_LENGTH, SQLITE_STATIC);
    int code = sqlite3_step(statement);
    struct key_entry found = {.first = first, .second = second, .used = 1, .checked = now, .recorded_use = now};
    if (code == SQLITE_ROW && sqlite3_column_type(statement, 2) == SQLITE_NULL) {
        found.valid = 1;
        snprintf(found.id, sizeof found.id, "%s", (const char *) sqlite3_column_text(statement, 0));
        snprintf(found.tenant, sizeof found.tenant, "%s", (const char *) sqlite3_column_text(statement, 1));
    }
    sqlite3_reset(statement);
    if (code != SQLITE_ROW && code != SQLITE_DONE)
        return UNAVAILABLE;
    pthread_mutex_lock(&key_lock);
    if (key_count >= KEY_CAPACITY) {
        memset(key_cache, 0, sizeof key_cache);
        key_count = 0;
    }
    entry = key_slot(first, second);
    key_count += !entry->used;
    *entry = found;
    pthread_mutex_unlock(&key_lock);
    memcpy(tenant_out, found.tenant, sizeof found.tenant);
    memcpy(id_out, found.id, sizeof found.id);
    return found.valid ? VALID : INVALID;
}

/* Token buckets by a string (a key's id, a client's address), as RateLimiter: refilled at `rate`, at most `burst`. */
#define BUCKET_SLOTS 4096
struct bucket {
    char name[48];
    int used;
    double tokens;
    long long updated;
};
struct buckets {
    struct bucket slots[BUCKET_SLOTS];
    pthread_mutex_t lock;
    atomic_bool in_use;
    double rate, burst;
};
static struct buckets key_buckets = {.lock = PTHREAD_MUTEX_INITIALIZER};
static struct buckets failure_buckets = {.lock = PTHREAD_MUTEX_INITIALIZER, .rate = 20.0 / 60, .burst = 20};

static struct bucket *bucket_slot(struct buckets *buckets, const char *name)
{
    uint64_t hash = siphash((const unsigned char *) name, strlen(name), salts[0], salts[2]);
    for (size_t index = hash & (BUCKET_SLOTS - 1);; index = (index + 1) & (BUCKET_SLOTS - 1))
        if (!buckets->slots[index].used || strcmp(buckets->slots[index].name, name) == 0)
            return &buckets->slots[index];
}

static double refilled(const struct buckets *buckets, const struct bucket *bucket, long long now)
{
    double tokens = bucket->tokens + (double) (now - bucket->updated) * 1e-9 * buckets->rate;
    return tokens < buckets->burst ? tokens : buckets->burst;
}

/* Takes a token; 1 if there was one. (The table is not pruned: the benchmark's keys and addresses are few.) */
static int take(struct buckets *buckets, const char *name, long long now)
{
    atomic_store_explicit(&buckets->in_use, 1, memory_order_relaxed);
    pthread_mutex_lock(&buckets->lock);
    struct bucket *bucket = bucket_slot(buckets, name);
    if (!bucket->used) {
        bucket->used = 1;
        snprintf(bucket->name, sizeof bucket->name, "%s", name);
        bucket->tokens = buckets->burst;
        bucket->updated = now;
    } else if (bucket->updated < now) {
        bucket->tokens = refilled(buckets, bucket, now);
        bucket->updated = now;
    }
    int allowed = bucket->tokens >= 1;
    bucket->tokens -= allowed;
    pthread_mutex_unlock(&buckets->lock);
    return allowed;
}

/* Whether `name` has a token, without taking one: a relaxed load while no bucket exists. */
static int check(struct buckets *buckets, const char *name, long long now)
{
    if (!atomic_load_explicit(&buckets->in_use, memory_order_relaxed))
        return 1;
    pthread_mutex_lock(&buckets->lock);
    struct bucket *bucket = bucket_slot(buckets, name);
    int allowed = !bucket->used || refilled(buckets, bucket, now) >= 1;
    pthread_mutex_unlock(&buckets->lock);
    return allowed;
}

/* Metrics: a counter by method, route and status and a histogram by method and route (Daemon.record's Meters). */
static const double histogram_bounds[11] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
struct meter {
    const char *method, *route;
    unsigned int status;
    unsigned long long requests, buckets[12], count;
    double sum;
};
static struct meter meters[64];
static int meter_count;
static pthread_mutex_t meters_lock = PTHREAD_MUTEX_INITIALIZER;

static void measure(const char *method, const char *route, unsigned int status, double seconds)
{
    pthread_mutex_lock(&meters_lock);
    struct meter *meter = NULL;
    for (int index = 0; index < meter_count && meter == NULL; index++)
        if (meters[index].status == status && strcmp(meters[index].method, method) == 0 && strcmp(meters[index].route, route) == 0)
            meter = &meters[index];
    if (meter == NULL && meter_count < 64)
        meter = &meters[meter_count++], *meter = (struct meter) {.method = method, .route = route, .status = status};
    if (meter != NULL) {
        meter->requests++;
        int bucket = 0;
        while (bucket < 11 && seconds > histogram_bounds[bucket])
            bucket++;
        meter->buckets[bucket]++;
        meter->count++;
        meter->sum += seconds;
    }
    pthread_mutex_unlock(&meters_lock);
}

/* The access log (AccessLog, text format): lines into a buffer under a lock, written out every 100 ms by a thread. */
#define LOG_CAPACITY (256 << 10)
static struct {
    char *bytes;
    size_t count, capacity;
    long long second;
    char prefix[40];
    size_t prefix_count;
} access_log;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool log_stopping;

static void log_put(const char *bytes, size_t count)
{
    if (access_log.count + count > access_log.capacity) {
        size_t grown = access_log.capacity * 2 > access_log.count + count ? access_log.capacity * 2 : access_log.count + count;
        char *more = realloc(access_log.bytes, grown);
        if (more == NULL)
            return;
        access_log.bytes = more;
        access_log.capacity = grown;
    }
    memcpy(access_log.bytes + access_log.count, bytes, count);
    access_log.count += count;
}

static void log_decimal(long long value)
{
    char digits[24];
    int index = sizeof digits;
    do {
        digits[--index] = (char) ('0' + value % 10);
        value /= 10;
    } while (value > 0);
    log_put(digits + index, sizeof digits - (size_t) index);
}

#define LOG_LITERAL(text) log_put((text), sizeof(text) - 1)

static void log_request(const char *method, const char *path, unsigned int status, size_t bytes, long long micros,
                        const char *request_id, const char *client)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    pthread_mutex_lock(&log_lock);
    if (access_log.second != now.tv_sec) {
        struct tm parts;
        time_t seconds = now.tv_sec;
        localtime_r(&seconds, &parts);
        access_log.second = now.tv_sec;
        access_log.prefix_count = strftime(access_log.prefix, sizeof access_log.prefix, "%Y-%m-%dT%H:%M:%S%z", &parts);
    }
    log_put(access_log.prefix, access_log.prefix_count);
    LOG_LITERAL(" info herald: bytes=");
    log_decimal((long long) bytes);
    LOG_LITERAL(" client=");
    log_put(client, strlen(client));
    LOG_LITERAL(" duration_us=");
    log_decimal(micros);
    LOG_LITERAL(" method=");
    log_put(method, strlen(method));
    LOG_LITERAL(" path=");
    log_put(path, strlen(path));
    LOG_LITERAL(" request_id=");
    log_put(request_id, 32);
    LOG_LITERAL(" status=");
    log_decimal(status);
    LOG_LITERAL(" [MicroHTTP] request\n");
    pthread_mutex_unlock(&log_lock);
}

static void log_flush(void)
{
    char *fresh = malloc(LOG_CAPACITY);
    if (fresh == NULL)
        return;
    pthread_mutex_lock(&log_lock);
    char *taken = access_log.bytes;
    size_t count = access_log.count;
    access_log.bytes = fresh;
    access_log.count = 0;
    access_log.capacity = LOG_CAPACITY;
    pthread_mutex_unlock(&log_lock);
    for (size_t offset = 0; offset < count;) {
        ssize_t written = write(STDOUT_FILENO, taken + offset, count - offset);
        if (written < 0 && errno == EINTR)
            continue;
        if (written <= 0)
            break;
        offset += (size_t) written;
    }
    free(taken);
}

static void *log_writer(void *unused)
{
    (void) unused;
    struct timespec tick = {0, 100 * 1000000L};
    while (!atomic_load(&log_stopping)) {
        nanosleep(&tick, NULL);
        log_flush();
    }
    log_flush();
    return NULL;
}

/* What a request carries from its first call to its completion: when it began, its answer, for the log. */
struct exchange {
    long long started;
    unsigned int status;
    size_t bytes;
    char request_id[33];
    char path[160];
    char client[INET6_ADDRSTRLEN];
};

/* The client's address, formatted once a connection as Herald does (Daemon: "not per request"). */
static void connection_notified(void *cls, struct MHD_Connection *connection, void **socket_context,
                                enum MHD_ConnectionNotificationCode code)
{
    (void) cls;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        free(*socket_context);
        *socket_context = NULL;
        return;
    }
    char *client = malloc(INET6_ADDRSTRLEN);
    if (client == NULL)
        return;
    memcpy(client, "-", 2);
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info != NULL && info->client_addr != NULL && info->client_addr->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *) info->client_addr)->sin_addr, client, INET6_ADDRSTRLEN);
    *socket_context = client;
}

static void completed(void *cls, struct MHD_Connection *connection, void **req_cls, enum MHD_RequestTerminationCode code)
{
    (void) cls;
    (void) connection;
    (void) code;
    struct exchange *exchange = *req_cls;
    if (exchange == NULL || exchange == (void *) &request_marker)
        return;
    *req_cls = NULL;
    long long elapsed = monotonic_ns() - exchange->started;
    measure("GET", "/v1/jobs/{id}", exchange->status, (double) elapsed * 1e-9);
    log_request("GET", exchange->path, exchange->status, exchange->bytes, elapsed / 1000, exchange->request_id, exchange->client);
    free(exchange);
}

/* MARK: HTTP */

/* The request's exchange with --product (its answer is logged at completion), else NULL. */
static __thread struct exchange *current_exchange;

static enum MHD_Result answer(struct MHD_Connection *connection, unsigned int status, const char *type, char *body,
                              size_t count, int retry)
{
    struct MHD_Response *response = MHD_create_response_from_buffer(count, body, MHD_RESPMEM_MUST_FREE);
    if (response == NULL) {
        free(body);
        return MHD_NO;
    }
    char request_id[33];
    memcpy(request_id, request_prefix, 16);
    snprintf(request_id + 16, 17, "%016llx", (unsigned long long) atomic_fetch_add(&request_counter, 1) + 1);
    if (current_exchange != NULL) {
        current_exchange->status = status;
        current_exchange->bytes = count;
        memcpy(current_exchange->request_id, request_id, sizeof request_id);
    }
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(response, "X-Request-Id", request_id);
    if (retry)
        MHD_add_response_header(response, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(response, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"herald\"");
    enum MHD_Result result = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return result;
}

/* Herald's problem body: {"type":"about:blank","title":TITLE,"status":N,"detail":DETAIL}. */
static enum MHD_Result problem(struct MHD_Connection *connection, unsigned int status, const char *title,
                               const char *detail, const char *subject, size_t subject_count)
{
    struct buffer body = {0};
    if (!reserve(&body, 96 + strlen(title) + strlen(detail)))
        return MHD_NO;
    LITERAL(&body, "{\"type\":\"about:blank\",\"title\":");
    string(&body, (const unsigned char *) title, strlen(title));
    LITERAL(&body, ",\"status\":");
    integer(&body, status);
    LITERAL(&body, ",\"detail\":");
    /* The detail with the subject (an id) appended, escaped as one string. */
    size_t detail_count = strlen(detail);
    char *joined = malloc(detail_count + subject_count + 1);
    if (joined == NULL) {
        free(body.bytes);
        return MHD_NO;
    }
    memcpy(joined, detail, detail_count);
    memcpy(joined + detail_count, subject, subject_count);
    int written = string(&body, (const unsigned char *) joined, detail_count + subject_count) && reserve(&body, 1);
    free(joined);
    if (!written) {
        free(body.bytes);
        return MHD_NO;
    }
    LITERAL(&body, "}");
    return answer(connection, status, "application/problem+json", body.bytes, body.count, 0);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size, void **req_cls)
{
    (void) cls;
    (void) version;
    (void) upload_data;
    /* First call: only the headers are known. */
    if (*req_cls == NULL) {
        struct exchange *exchange = product ? malloc(sizeof *exchange) : NULL;
        if (exchange != NULL) {
            exchange->started = monotonic_ns();
            exchange->status = 0;
            exchange->bytes = 0;
            memcpy(exchange->request_id, "-", 2);
            size_t count = strnlen(url, sizeof exchange->path - 1);
            memcpy(exchange->path, url, count);
            exchange->path[count] = '\0';
        }
        *req_cls = exchange != NULL ? (void *) exchange : (void *) &request_marker;
        return MHD_YES;
    }
    current_exchange = *req_cls == (void *) &request_marker ? NULL : *req_cls;
    /* Body data (not expected for GET): discard it and wait for the final call. */
    if (*upload_data_size != 0) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    size_t url_count = strlen(url);
    const char *id = url + sizeof PREFIX - 1;
    size_t id_count = url_count - (sizeof PREFIX - 1);
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 || url_count <= sizeof PREFIX - 1
        || memcmp(url, PREFIX, sizeof PREFIX - 1) != 0 || memchr(id, '/', id_count) != NULL)
        return problem(connection, MHD_HTTP_NOT_FOUND, "Not Found", "no route for ", url, url_count);
    struct reader *current = reader();
    if (current == NULL)
        return problem(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, "Internal Server Error", "no database connection", "", 0);
    const char *authorization = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *of_tenant = tenant;
    char key_tenant[65], key_id[40];
    if (current_exchange == NULL) {
        /* The key: present, not checked. */
        if (authorization == NULL || strncmp(authorization, "Bearer ", 7) != 0 || authorization[7] == '\0')
            return problem(connection, MHD_HTTP_UNAUTHORIZED, "Unauthorized",
                           "this call needs an API key: send Authorization: Bearer KEY", "", 0);
    } else {
        /* AccessGate.admit: the address's failures, the key (scheme in any case, then spaces), the key's bucket. */
        long long now = monotonic_ns();
        struct exchange *exchange = current_exchange;
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        const char *client = info != NULL && info->socket_context != NULL ? info->socket_context : "-";
        memcpy(exchange->client, client, strlen(client) + 1);
        if (!check(&failure_buckets, exchange->client, now))
            return problem(connection, MHD_HTTP_TOO_MANY_REQUESTS, "Too Many Requests",
                           "too many failed authentications from this address; retry later", "", 0);
        const char *key = NULL;
        if (authorization != NULL && strncasecmp(authorization, "bearer ", 7) == 0) {
            key = authorization + 7;
            while (*key == ' ')
                key++;
        }
        enum authentication outcome = key == NULL || *key == '\0'
            ? INVALID : authenticate(current, (const unsigned char *) key, strlen(key), now, key_tenant, key_id);
        if (outcome == UNAVAILABLE)
            return problem(connection, MHD_HTTP_SERVICE_UNAVAILABLE, "Service Unavailable", "API keys cannot be checked", "", 0);
        if (outcome == INVALID) {
            take(&failure_buckets, exchange->client, now);
            return problem(connection, MHD_HTTP_UNAUTHORIZED, "Unauthorized",
                           "this call needs an API key: send Authorization: Bearer KEY", "", 0);
        }
        if (key_rate > 0 && !take(&key_buckets, key_id, now))
            return problem(connection, MHD_HTTP_TOO_MANY_REQUESTS, "Too Many Requests", "this key made too many requests", "", 0);
        of_tenant = key_tenant;
    }
    struct buffer body = {0};
    int done = 0;
    switch (read_job(current, id, id_count, of_tenant, &body, &done)) {
    case FOUND:
        return answer(connection, MHD_HTTP_OK, "application/json", body.bytes, body.count, !done);
    case NOT_FOUND:
        return problem(connection, MHD_HTTP_NOT_FOUND, "Not Found", "no job with id ", id, id_count);
    default:
        return problem(connection, MHD_HTTP_INTERNAL_SERVER_ERROR, "Internal Server Error", "unreadable job ", id, id_count);
    }
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
    long rate = 100;
    const char *program = argc > 0 ? argv[0] : "status";
    while (argc > 1 && strncmp(argv[1], "--", 2) == 0) {
        if (strcmp(argv[1], "--product") == 0) {
            product = 1;
            argv++, argc--;
        } else if (strcmp(argv[1], "--rate-limit") == 0 && argc > 2 && parse_number(argv[2], 0, 1000000000, &rate)) {
            argv += 2, argc -= 2;
        } else {
            break;
        }
    }
    key_rate = (double) rate;
    key_buckets.rate = key_rate;
    key_buckets.burst = 2 * key_rate;
    argv[0] = (char *) program;
    if (argc < 5 || argc > 6 || !parse_number(argv[1], 0, 65535, &port)
        || (argc == 6 && !parse_number(argv[5], 1, MAX_THREADS, &threads))) {
        fprintf(stderr, "usage: %s [--product] [--rate-limit RATE] PORT DB TENANT SQL [THREADS]\n", program);
        return 2;
    }
    database_path = argv[2];
    tenant = argv[3];
    query = argv[4];

    unsigned char random_bytes[8];
    if (getrandom(random_bytes, sizeof random_bytes, 0) != (ssize_t) sizeof random_bytes) {
        fprintf(stderr, "getrandom: %s\n", strerror(errno));
        return 1;
    }
    for (int index = 0; index < 8; index++)
        snprintf(request_prefix + 2 * index, 3, "%02x", random_bytes[index]);
    if (getrandom(salts, sizeof salts, 0) != (ssize_t) sizeof salts) {
        fprintf(stderr, "getrandom: %s\n", strerror(errno));
        return 1;
    }

    /* SQLite configured as Herald configures it (SQLiteStorage: SQLiteLibrary), before its first use: no memory
       statistics, so no process-wide mutex around each of its allocations. */
    if (sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) != SQLITE_OK) {
        fprintf(stderr, "sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) failed\n");
        return 1;
    }

    /* The statement must prepare: fail at start, not on the first poll. */
    sqlite3 *check;
    sqlite3_stmt *statement;
    if (sqlite3_open_v2(database_path, &check, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK
        || sqlite3_prepare_v2(check, query, -1, &statement, NULL) != SQLITE_OK) {
        fprintf(stderr, "%s: %s\n", database_path, sqlite3_errmsg(check));
        return 1;
    }
    job_columns = sqlite3_column_count(statement) - UPLOAD_COLUMNS;
    if (sqlite3_bind_parameter_count(statement) != 2 || job_columns != 14) {
        fprintf(stderr, "SQL: expected 2 parameters (id, tenant) and 14 job columns: this server writes the job of that statement\n");
        return 1;
    }
    sqlite3_finalize(statement);
    sqlite3_close(check);

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
    struct MHD_OptionItem options[12] = {
        {MHD_OPTION_CONNECTION_LIMIT, 1000 + 125, NULL},
        {MHD_OPTION_PER_IP_CONNECTION_LIMIT, 256, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, 30, NULL},
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, 32 << 10, NULL},
        {MHD_OPTION_STRICT_FOR_CLIENT, 1, NULL},
        {MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, NULL},
    };
    int option_count = 6;
    if (threads > 1)
        options[option_count++] = (struct MHD_OptionItem) {MHD_OPTION_THREAD_POOL_SIZE, threads, NULL};
    if (product) {
        options[option_count++] = (struct MHD_OptionItem) {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t) connection_notified, NULL};
        options[option_count++] = (struct MHD_OptionItem) {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t) completed, NULL};
    }
    options[option_count] = (struct MHD_OptionItem) {MHD_OPTION_END, 0, NULL};
    pthread_t writer;
    if (product) {
        access_log.bytes = malloc(LOG_CAPACITY);
        access_log.capacity = LOG_CAPACITY;
        access_log.second = -1;
        if (access_log.bytes == NULL || pthread_create(&writer, NULL, log_writer, NULL) != 0) {
            fprintf(stderr, "the access log's writer could not start\n");
            return 1;
        }
    }
    struct MHD_Daemon *daemon = MHD_start_daemon(flags, (uint16_t) port, NULL, NULL, handle, NULL,
                                                 MHD_OPTION_SOCK_ADDR, (const struct sockaddr *) &address,
                                                 MHD_OPTION_ARRAY, options, MHD_OPTION_END);
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
    if (product) {
        atomic_store(&log_stopping, 1);
        pthread_join(writer, NULL);
    }
    for (int index = 0; index < reader_count; index++) {
        sqlite3_finalize(readers[index].key_statement);
        sqlite3_finalize(readers[index].statement);
        sqlite3_close(readers[index].db);
    }
    return rc == 0 ? 0 : 1;
}
