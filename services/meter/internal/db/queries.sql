-- name: LockPriceSeries :one
-- Creates the series on its first activation and locks its row until the
-- transaction ends; concurrent activations of the series wait here and then
-- see the version the previous one committed.
INSERT INTO price_series (tenant_id, meter_code, currency)
VALUES (@tenant_id, @meter_code, @currency)
ON CONFLICT (tenant_id, meter_code, currency)
    DO UPDATE SET last_version = price_series.last_version
RETURNING last_version, last_effective_at;

-- name: AdvancePriceSeries :execrows
UPDATE price_series
SET last_version = @version, last_effective_at = @effective_at
WHERE tenant_id = @tenant_id AND meter_code = @meter_code AND currency = @currency
  AND last_version + 1 = @version;

-- name: InsertPrice :exec
INSERT INTO price (price_id, tenant_id, meter_code, currency, version, unit_price,
                   effective_at, activated_at, event_id)
VALUES (@price_id, @tenant_id, @meter_code, @currency, @version, @unit_price,
        @effective_at, @activated_at, @event_id);

-- name: ListPrices :many
-- ListPrices reads a page of a tenant's price versions in (meter_code,
-- currency, version) order, after that keyset position (the zero position,
-- ('', '', 0), is before every version). price_version_key serves it: one
-- index range scan from the position, whatever the page.
SELECT price_id, tenant_id, meter_code, currency, version, unit_price, effective_at,
       activated_at, event_id
FROM price
WHERE tenant_id = @tenant_id
  AND (meter_code, currency, version) > (@after_meter_code::text, @after_currency::text, @after_version::bigint)
ORDER BY meter_code, currency, version
LIMIT @max_rows;

-- name: ListMeterPrices :many
-- ListMeterPrices is ListPrices of one meter: (currency, version) order
-- after that position, from the same index.
SELECT price_id, tenant_id, meter_code, currency, version, unit_price, effective_at,
       activated_at, event_id
FROM price
WHERE tenant_id = @tenant_id AND meter_code = @meter_code
  AND (currency, version) > (@after_currency::text, @after_version::bigint)
ORDER BY currency, version
LIMIT @max_rows;
