DROP TABLE invoice_line_part;
