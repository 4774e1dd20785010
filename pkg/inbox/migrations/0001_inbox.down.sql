DROP TABLE IF EXISTS inbox_quarantine;
DROP TABLE IF EXISTS inbox_deferred;
DROP TABLE IF EXISTS inbox_event;
