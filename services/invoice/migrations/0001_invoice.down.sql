DROP TABLE IF EXISTS period_close;
DROP TABLE IF EXISTS invoice_correction;
DROP TABLE IF EXISTS invoice_line;
DROP TABLE IF EXISTS invoice;
DROP FUNCTION IF EXISTS invoice_refuse_change();
