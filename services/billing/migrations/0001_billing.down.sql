DROP TABLE IF EXISTS adjustment;
DROP TABLE IF EXISTS charge;
DROP TABLE IF EXISTS billing_period;
DROP TABLE IF EXISTS price_evidence;
