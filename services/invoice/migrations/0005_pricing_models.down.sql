DROP TABLE IF EXISTS invoice_price_version;
