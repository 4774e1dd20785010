DROP INDEX adjustment_period;
DROP INDEX charge_line_order;
ALTER TABLE adjustment DROP COLUMN after_close;
ALTER TABLE adjustment ADD COLUMN aggregate_version bigint NOT NULL DEFAULT 0;
ALTER TABLE charge ADD COLUMN aggregate_version bigint NOT NULL DEFAULT 0;
ALTER TABLE billing_period ADD COLUMN version bigint NOT NULL DEFAULT 0 CHECK (version >= 0);
CREATE INDEX charge_period ON charge (tenant_id, period, aggregate_version);
CREATE INDEX adjustment_period ON adjustment (tenant_id, period, aggregate_version);
