DROP INDEX IF EXISTS inbox_event_applied_at;
