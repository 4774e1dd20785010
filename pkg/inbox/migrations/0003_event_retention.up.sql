-- The purge of decided events past the inbox retention reads them by age.
CREATE INDEX inbox_event_applied_at ON inbox_event (applied_at);
