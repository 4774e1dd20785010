DROP INDEX inbox_quarantine_redriven;
