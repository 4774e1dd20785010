DROP TABLE IF EXISTS usage_fact;
DROP TABLE IF EXISTS price_evidence;
