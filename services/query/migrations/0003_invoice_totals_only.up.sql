-- InvoiceIssued no longer carries an invoice's lines (they are aggregated
-- and read from invoice); query projects the invoice's figures only.
DROP TABLE projected_invoice_line;
