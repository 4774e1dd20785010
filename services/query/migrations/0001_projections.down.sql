DROP TABLE IF EXISTS tenant_summary;
DROP TABLE IF EXISTS tenant_total;
DROP TABLE IF EXISTS summary_delta;
DROP TABLE IF EXISTS projected_invoice_line;
DROP TABLE IF EXISTS projected_event;
