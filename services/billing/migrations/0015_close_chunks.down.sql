DROP TABLE close_value;
DROP TABLE close_line;
DROP TABLE close_progress;
