-- A resumable upload whose bytes go to an object store (S3) is one multipart upload there: its id, from
-- CreateMultipartUpload. NULL when the bytes are appended to a file (a file store every replica shares).
ALTER TABLE resumable_uploads ADD COLUMN multipart_id text CHECK (multipart_id <> '');
