ALTER TABLE usage_fact DROP COLUMN properties;
DROP TABLE meters;
