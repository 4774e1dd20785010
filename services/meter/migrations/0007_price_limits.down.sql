DROP INDEX IF EXISTS price_tenant_effective;
DROP TABLE IF EXISTS price_entry;
