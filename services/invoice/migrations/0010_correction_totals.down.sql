DROP TABLE invoice_correction_total;
