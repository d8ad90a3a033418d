-- Byte progress: how many bytes of each upload the store has taken.
--
-- Written only at an upload's state changes (the live count while it uploads is kept in memory and published to
-- event streams at most every 250 ms per job): all of the medium's bytes once uploaded, 0 when an attempt starts
-- or the job goes back to the queue, what the attempt reached when it stops.
ALTER TABLE uploads ADD COLUMN bytes_sent INTEGER NOT NULL DEFAULT 0 CHECK (bytes_sent >= 0);

UPDATE uploads SET bytes_sent = (SELECT size FROM media WHERE media.id = uploads.media_id) WHERE state = 'uploaded';
