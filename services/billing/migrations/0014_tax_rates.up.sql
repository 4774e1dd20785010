-- A tenant's tax rates (DESIGN.md section 3a), part of its period settings:
-- from the period a settings row applies from, each invoice of the period
-- gets one tax line per rate. [{code, name, rate}], in the order given.
ALTER TABLE tenant_settings
    ADD COLUMN tax_rates jsonb NOT NULL DEFAULT '[]'
        CHECK (jsonb_typeof(tax_rates) = 'array' AND jsonb_array_length(tax_rates) <= 5);
