-- Tracing (--otlp-endpoint): the W3C traceparent of the request that made a job (or re-published its post), for the
-- job's run span to link to, on whichever replica and after whatever restart it runs; an ended job's webhook event
-- carries the same, for each delivery attempt's span. NULL when the request was not traced.
ALTER TABLE jobs ADD COLUMN traceparent text;
ALTER TABLE webhook_events ADD COLUMN traceparent text;
