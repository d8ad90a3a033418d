-- The queue's pause switch, one row: written by POST /v1/queue/pause and /resume, read at start, so that a paused
-- queue stays paused across restarts until it is resumed (as it does on PostgreSQL, where every replica reads it).
CREATE TABLE queue_control (
    id     INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1))
) STRICT;

INSERT INTO queue_control (id, paused) VALUES (1, 0);
