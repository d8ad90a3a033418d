-- Which process has claimed a pending delivery for its attempt (its next_attempt_at pushed to the claim's end): a
-- process that starts again takes its claims back at once, rather than waiting for them to lapse.
ALTER TABLE webhook_deliveries ADD COLUMN claimed_by TEXT;
