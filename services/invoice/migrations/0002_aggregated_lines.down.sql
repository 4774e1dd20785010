-- Back to 0001's one line per origin event: each charge becomes a charge
-- line of its invoice again, and the aggregated charge lines go. The
-- immutability trigger is lifted for the rewrite only.
ALTER TABLE invoice DROP CONSTRAINT IF EXISTS invoice_number_check,
    DROP CONSTRAINT IF EXISTS invoice_number_key,
    DROP COLUMN IF EXISTS number;
DROP TABLE IF EXISTS invoice_number_counter;

ALTER TABLE invoice_line DISABLE TRIGGER invoice_line_immutable;
DELETE FROM invoice_line WHERE kind = 'charge';
ALTER TABLE invoice_line ENABLE TRIGGER invoice_line_immutable;
DROP INDEX IF EXISTS invoice_line_charge_key;
ALTER TABLE invoice_line DROP CONSTRAINT IF EXISTS invoice_line_shape_check,
    DROP COLUMN IF EXISTS meter_code,
    DROP COLUMN IF EXISTS price_version,
    DROP COLUMN IF EXISTS unit_price,
    DROP COLUMN IF EXISTS quantity,
    DROP COLUMN IF EXISTS charge_count;

INSERT INTO invoice_line (invoice_id, origin_event_id, kind, amount, created_at)
SELECT i.invoice_id, c.origin_event_id, 'charge', c.amount, c.created_at
FROM invoice_charge c
JOIN invoice i ON i.tenant_id = c.tenant_id AND i.period = c.period AND i.currency = c.currency
ORDER BY c.created_at, c.origin_event_id;
ALTER TABLE invoice_line ALTER COLUMN origin_event_id SET NOT NULL;

DROP TABLE IF EXISTS invoice_charge;
