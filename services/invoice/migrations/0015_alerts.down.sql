DROP TABLE invoice_alert_crossing;
DROP TABLE invoice_alert;
