DROP INDEX IF EXISTS billing_period_close_requested_idx;
ALTER TABLE billing_period DROP COLUMN IF EXISTS close_requested_by;
ALTER TABLE billing_period DROP COLUMN IF EXISTS close_requested_at;
DROP TABLE IF EXISTS usage_watermark;
