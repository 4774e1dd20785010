DROP TABLE IF EXISTS price_schedule;
