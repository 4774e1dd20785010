ALTER TABLE inbox_quarantine DROP COLUMN detail;
