DROP TABLE close_tally_line;
DROP TABLE close_tally;
