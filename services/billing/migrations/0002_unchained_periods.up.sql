-- Periods without a version chain (decision 0007). A period's charges and
-- adjustments are no longer versions of one aggregate: rating holds the
-- period's shared advisory lock, a close its exclusive one, and the close
-- proves what it counted by counts, sums and digests per currency.
--
-- The old period indexes go first: they hold the aggregate_version columns
-- dropped below, and dropping a column drops its indexes with it.
DROP INDEX charge_period;
DROP INDEX adjustment_period;
ALTER TABLE billing_period DROP COLUMN version;
ALTER TABLE charge DROP COLUMN aggregate_version;
ALTER TABLE adjustment DROP COLUMN aggregate_version;

-- An adjustment posted once its period was closed is not counted by the
-- close: invoice makes it a correction note of the issued invoice.
ALTER TABLE adjustment ADD COLUMN after_close boolean NOT NULL DEFAULT false;

-- The charges of a period in line order: one line per meter, currency and
-- price version, charges in id order inside it. Serves the close's tally,
-- the charges list (keyset) and the charges behind one invoice line.
CREATE INDEX charge_line_order ON charge (tenant_id, period, meter_code, currency, price_version, charge_id);

CREATE INDEX adjustment_period ON adjustment (tenant_id, period, adjustment_id);
