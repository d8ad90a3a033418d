-- `Upload-Metadata` as the client sent it when it created the upload: tus's creation extension has a HEAD answer it.
-- NULL when it sent none.
ALTER TABLE resumable_uploads ADD COLUMN metadata text;
