-- A resumable upload whose bytes go to an object store (S3, replicas on PostgreSQL) is one multipart upload there: its
-- id, from CreateMultipartUpload. NULL when the bytes are appended to a file (the data directory, a file store).
ALTER TABLE resumable_uploads ADD COLUMN multipart_id TEXT CHECK (multipart_id <> '');
