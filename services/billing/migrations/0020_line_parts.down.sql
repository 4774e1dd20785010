DROP TABLE charge_line_value;

DROP TABLE charge_line_part;
