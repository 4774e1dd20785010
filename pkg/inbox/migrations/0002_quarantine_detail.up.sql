-- What the handler said when it quarantined a message: its error, or the
-- panic value and the stack of a handler_panic (bounded by the inbox to
-- 8 KiB). NULL when the inbox quarantined the message itself.
ALTER TABLE inbox_quarantine ADD COLUMN detail text;
