DROP TABLE charge_line;
