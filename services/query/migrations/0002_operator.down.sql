DROP TABLE IF EXISTS redrive_audit;
DROP FUNCTION IF EXISTS redrive_audit_append_only();
DROP TABLE IF EXISTS quarantine_notice;
