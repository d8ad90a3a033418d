/*
 * The SQLite part of Herald's `GET /v1/jobs/{id}`: the statement SQLiteJobStatusReader runs, on the same database
 * file, with no HTTP, no JSON and no Swift in the way. Added to the C libmicrohttpd program's cost per request,
 * it is the floor of any server that reads the job from SQLite for each poll.
 *
 * Per read, as SQLiteJobStatusReader does: bind the id, step every row (the job's columns read from the first row,
 * the upload's from each), reset. A read-only connection, WAL (the database Herald left), one autocommit read
 * transaction per statement.
 *
 * Build: gcc -O2 -Wall -Wextra -o read read.c -lsqlite3
 * Run:   ./read DB JOB_ID READS SECONDS SQL [TENANT]
 *        SQL is SQLiteJobStatusReader.query (run.py reads it from the Swift source); stops after READS reads or
 *        SECONDS seconds, whichever comes first. TENANT is bound to ?2 (the statement's `jobs.tenant = ?` since
 *        API keys brought tenants; the key `herald keys create` makes belongs to "default").
 * Prints: cpu_us_per_read=<float> reads=<n> rows_per_read=<n>
 */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_READS 100000000L
#define MAX_SECONDS 600.0

static double seconds(clockid_t clock) {
    struct timespec now;
    clock_gettime(clock, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: %s DB JOB_ID READS SECONDS SQL [TENANT]\n", argv[0]);
        return 2;
    }
    long reads = atol(argv[3]);
    double limit = atof(argv[4]);
    if (reads < 1 || reads > MAX_READS || !(limit > 0 && limit <= MAX_SECONDS)) {
        fprintf(stderr, "READS must be 1..%ld and SECONDS in (0, %.0f]\n", MAX_READS, MAX_SECONDS);
        return 2;
    }
    sqlite3 *db;
    if (sqlite3_open_v2(argv[1], &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        fprintf(stderr, "open %s: %s\n", argv[1], sqlite3_errmsg(db));
        return 1;
    }
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *statement;
    if (sqlite3_prepare_v3(db, argv[5], -1, SQLITE_PREPARE_PERSISTENT, &statement, NULL) != SQLITE_OK) {
        fprintf(stderr, "prepare: %s\n", sqlite3_errmsg(db));
        return 1;
    }
    long rows = 0, bytes = 0, done = 0;
    double wall_start = seconds(CLOCK_MONOTONIC), cpu_start = seconds(CLOCK_PROCESS_CPUTIME_ID);
    for (; done < reads; done++) {
        /* The clock is read every 256 reads: often enough for the bound, rarely enough not to count. */
        if ((done & 255) == 0 && seconds(CLOCK_MONOTONIC) - wall_start > limit) break;
        sqlite3_bind_text(statement, 1, argv[2], -1, SQLITE_STATIC);
        if (argc == 7) sqlite3_bind_text(statement, 2, argv[6], -1, SQLITE_STATIC);
        int code, first = 1;
        while ((code = sqlite3_step(statement)) == SQLITE_ROW) {
            int columns = sqlite3_column_count(statement);
            /* The job's columns once, then the upload's six: what the Swift reader decodes. */
            for (int column = first ? 0 : columns - 6; column < columns; column++) {
                if (sqlite3_column_type(statement, column) == SQLITE_INTEGER) {
                    bytes += (long)sqlite3_column_int64(statement, column) & 1;
                } else if (sqlite3_column_text(statement, column) != NULL) {
                    bytes += sqlite3_column_bytes(statement, column);
                }
            }
            first = 0;
            rows++;
        }
        if (code != SQLITE_DONE) {
            fprintf(stderr, "step: %s\n", sqlite3_errmsg(db));
            return 1;
        }
        sqlite3_reset(statement);
        sqlite3_clear_bindings(statement);
    }
    double cpu = seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu_start;
    if (done == 0 || rows == 0) {
        fprintf(stderr, "no rows read: is %s a job id?\n", argv[2]);
        return 1;
    }
    printf("cpu_us_per_read=%.3f reads=%ld rows_per_read=%ld bytes_per_read=%ld\n", cpu / (double)done * 1e6, done,
           rows / done, bytes / done);
    sqlite3_finalize(statement);
    sqlite3_close(db);
    return 0;
}
