DROP TABLE invoice_meter_value_part;
DROP TABLE invoice_meter_value;
DROP TABLE invoice_line_value_part;
