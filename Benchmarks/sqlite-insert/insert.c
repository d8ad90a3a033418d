/*
 * The SQLite limit for Herald's `POST /v1/posts` (text only): how many posts per second SQLite itself can
 * accept with Herald's schema, pragmas and transaction shape, with no HTTP, no JSON and no Swift in the way.
 *
 * Per post, ONE `BEGIN IMMEDIATE` transaction inserts what PostRepository.create inserts for a text-only post
 * without media: the `posts` row and its `jobs` row (media updates and `uploads` rows only exist with media).
 * With -k it also does the Idempotency-Key work Herald does when the header is sent: purge expired keys, look
 * the key up, insert it as completed. Herald also reads the post and job back inside that transaction to answer;
 * that is not done here (it costs microseconds next to the commit's fsync).
 *
 * The connection is set up as Storage.open leaves Herald's writer: WAL, synchronous=FULL (one fsync of the WAL
 * per commit: a 2xx means durable), foreign_keys=ON (posts.job_id is checked at COMMIT), busy_timeout=5000.
 *
 * Build: gcc -O2 -Wall -Wextra -o insert insert.c -lsqlite3
 * Run:   ./insert [-k] DB POSTS SECONDS ../../Migrations/[0-9]*.sql
 *        DB must not exist yet; stops after POSTS posts or SECONDS seconds, whichever comes first.
 * Prints: posts_per_second=<float>
 *         posts=<n> seconds=<s>
 */
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

/* Bounds on the arguments, so a typo cannot start an endless run. */
#define MAX_POSTS 100000000L
#define MAX_SECONDS 3600.0

/* The walkthrough's post (README.md); text length barely matters next to the fsync. */
#define POST_TEXT "Hello"

/* Stands in for the sha256 of the request that Herald computes before it opens the transaction. */
#define REQUEST_HASH "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

#define KEY_LIFETIME_MS (24LL * 3600 * 1000)

static sqlite3 *db;

static void fail(const char *what) {
    fprintf(stderr, "insert: %s: %s\n", what, db ? sqlite3_errmsg(db) : "cannot open");
    exit(1);
}

static void check(int rc, int expected, const char *what) {
    if (rc != expected) fail(what);
}

static void exec(const char *sql) {
    char *message = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &message) != SQLITE_OK) {
        fprintf(stderr, "insert: %s: %s\n", sql, message);
        exit(1);
    }
}

static double monotonic_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

static int64_t wall_milliseconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

/* Herald's one timestamp spelling, `YYYY-MM-DDTHH:MM:SS.SSSZ`: the schema's CHECKs refuse any other. */
static void rfc3339(int64_t milliseconds, char out[25]) {
    time_t seconds = (time_t)(milliseconds / 1000);
    struct tm utc;
    gmtime_r(&seconds, &utc);
    size_t length = strftime(out, 20, "%Y-%m-%dT%H:%M:%S", &utc);
    snprintf(out + length, 6, ".%03uZ", (unsigned)((uint64_t)milliseconds % 1000));
}

/*
 * A UUIDv7 like Herald's: the millisecond first, so ids grow with time and primary-key inserts land at the end
 * of the index as they do in Herald. rand_b is a counter with a random start (RFC 9562 section 6.2, method 2),
 * which keeps ids unique and increasing within a millisecond; rand_a is random once.
 */
static void uuid7(int64_t milliseconds, char out[37]) {
    static uint64_t counter;
    static uint16_t rand_a;
    static int seeded;
    if (!seeded) {
        if (getrandom(&counter, sizeof counter, 0) != sizeof counter) counter = (uint64_t)milliseconds;
        rand_a = (uint16_t)(counter >> 52);
        counter &= (1ULL << 61) - 1; /* half of rand_b's range left to count up */
        seeded = 1;
    }
    uint64_t rand_b = ++counter;
    uint8_t bytes[16];
    for (int i = 0; i < 6; i++) bytes[i] = (uint8_t)((uint64_t)milliseconds >> (40 - 8 * i));
    bytes[6] = 0x70 | (uint8_t)((rand_a >> 8) & 0x0f); /* version 7 */
    bytes[7] = (uint8_t)rand_a;
    bytes[8] = 0x80 | (uint8_t)((rand_b >> 56) & 0x3f); /* variant 10 */
    for (int i = 9; i < 16; i++) bytes[i] = (uint8_t)(rand_b >> (8 * (15 - i)));
    static const char digits[] = "0123456789abcdef";
    int position = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) out[position++] = '-';
        out[position++] = digits[bytes[i] >> 4];
        out[position++] = digits[bytes[i] & 0x0f];
    }
    out[position] = '\0';
}

static char *read_file(const char *path) {
    FILE *file = fopen(path, "rb");
    if (!file) {
        perror(path);
        exit(1);
    }
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    rewind(file);
    char *text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, file) != (size_t)size) {
        fprintf(stderr, "insert: cannot read %s\n", path);
        exit(1);
    }
    text[size] = '\0';
    fclose(file);
    return text;
}

static sqlite3_stmt *prepare(const char *sql) {
    sqlite3_stmt *statement;
    check(sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &statement, NULL), SQLITE_OK, sql);
    return statement;
}

/* Steps a statement that returns no row (or, for a lookup, possibly one), then readies it for the next post. */
static void run(sqlite3_stmt *statement) {
    int rc = sqlite3_step(statement);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) fail(sqlite3_sql(statement));
    sqlite3_reset(statement);
    sqlite3_clear_bindings(statement);
}

static void bind_text(sqlite3_stmt *statement, int index, const char *text) {
    check(sqlite3_bind_text(statement, index, text, -1, SQLITE_TRANSIENT), SQLITE_OK, "bind");
}

static void usage(void) {
    fprintf(stderr, "usage: insert [-k] DB POSTS SECONDS MIGRATION.sql...\n"
                    "  DB       a database file that does not exist yet\n"
                    "  POSTS    stop after this many posts (1 to %ld)\n"
                    "  SECONDS  or after this many seconds (up to %.0f)\n"
                    "  -k       also record an Idempotency-Key per post, as Herald does when the header is sent\n",
            MAX_POSTS, MAX_SECONDS);
    exit(2);
}

int main(int argc, char **argv) {
    int idempotency = 0;
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "-k") == 0) {
        idempotency = 1;
        first = 2;
    }
    if (argc - first < 4) usage();
    const char *path = argv[first];
    char *end;
    long limit = strtol(argv[first + 1], &end, 10);
    if (*end || limit < 1 || limit > MAX_POSTS) usage();
    double duration = strtod(argv[first + 2], &end);
    if (*end || !(duration > 0 && duration <= MAX_SECONDS)) usage();

    /* A fresh file every run: never write into an existing (maybe Herald's own) database. */
    struct stat existing;
    if (stat(path, &existing) == 0) {
        fprintf(stderr, "insert: %s exists; give a path for a new database\n", path);
        return 2;
    }

    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK) fail(path);
    sqlite3_busy_timeout(db, 5000);
    exec("PRAGMA foreign_keys = ON");
    exec("PRAGMA journal_mode = WAL");
    exec("PRAGMA synchronous = FULL");

    /* Each migration in its own transaction, in the order given, as GRDB's migrator applies them. */
    for (int i = first + 3; i < argc; i++) {
        char *sql = read_file(argv[i]);
        exec("BEGIN IMMEDIATE");
        exec(sql);
        exec("COMMIT");
        free(sql);
    }

    sqlite3_stmt *insert_post = prepare(
        "INSERT INTO posts (id, text, state, priority, scheduled_at, created_at, published_at, job_id) "
        "VALUES (?, ?, 'queued', 'normal', NULL, ?, NULL, ?)");
    sqlite3_stmt *insert_job = prepare(
        "INSERT INTO jobs (id, post_id, state, priority, attempt, run_at, cancel_requested, created_at) "
        "VALUES (?, ?, 'queued', 1, 0, ?, 0, ?)");
    sqlite3_stmt *purge_keys = prepare("DELETE FROM idempotency_keys WHERE expires_at <= ?");
    sqlite3_stmt *find_key =
        prepare("SELECT request_hash, state, post_id, job_id, created_at FROM idempotency_keys WHERE key = ?");
    sqlite3_stmt *insert_key = prepare(
        "INSERT INTO idempotency_keys (key, request_hash, post_id, job_id, state, created_at, expires_at) "
        "VALUES (?, ?, ?, ?, 'completed', ?, ?)");

    sqlite3_stmt *begin = prepare("BEGIN IMMEDIATE"); /* as GRDB begins every write */
    sqlite3_stmt *commit = prepare("COMMIT");

    long posts = 0;
    double start = monotonic_seconds();
    double elapsed = 0;
    while (posts < limit && elapsed < duration) {
        int64_t now_ms = wall_milliseconds();
        char now[25], expires[25], post_id[37], job_id[37], key[32];
        rfc3339(now_ms, now);
        uuid7(now_ms, post_id);
        uuid7(now_ms, job_id);

        run(begin);
        if (idempotency) {
            snprintf(key, sizeof key, "bench-%ld", posts);
            bind_text(purge_keys, 1, now);
            run(purge_keys);
            bind_text(find_key, 1, key);
            run(find_key);
        }
        bind_text(insert_post, 1, post_id);
        bind_text(insert_post, 2, POST_TEXT);
        bind_text(insert_post, 3, now);
        bind_text(insert_post, 4, job_id);
        run(insert_post);
        bind_text(insert_job, 1, job_id);
        bind_text(insert_job, 2, post_id);
        bind_text(insert_job, 3, now);
        bind_text(insert_job, 4, now);
        run(insert_job);
        if (idempotency) {
            rfc3339(now_ms + KEY_LIFETIME_MS, expires);
            bind_text(insert_key, 1, key);
            bind_text(insert_key, 2, REQUEST_HASH);
            bind_text(insert_key, 3, post_id);
            bind_text(insert_key, 4, job_id);
            bind_text(insert_key, 5, now);
            bind_text(insert_key, 6, expires);
            run(insert_key);
        }
        run(commit);

        posts++;
        elapsed = monotonic_seconds() - start;
    }

    sqlite3_finalize(begin);
    sqlite3_finalize(commit);
    sqlite3_finalize(insert_post);
    sqlite3_finalize(insert_job);
    sqlite3_finalize(purge_keys);
    sqlite3_finalize(find_key);
    sqlite3_finalize(insert_key);
    check(sqlite3_close(db), SQLITE_OK, "close");

    printf("posts_per_second=%.1f\n", posts / elapsed);
    printf("posts=%ld seconds=%.3f\n", posts, elapsed);
    return 0;
}
