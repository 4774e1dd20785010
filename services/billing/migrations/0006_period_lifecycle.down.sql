DROP INDEX billing_period_closing_idx;
DROP TABLE period_ended;
DROP TABLE tenant_settings;
