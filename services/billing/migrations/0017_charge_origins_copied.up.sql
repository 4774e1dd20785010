-- Charges by month, step 2 of 3 (decision 0025), in a transaction of its
-- own whose locks let charges be inserted meanwhile: the origins of the
-- charges from before step 1 are copied (those since are recorded by its
-- trigger), and step 1's bound is validated (SHARE UPDATE EXCLUSIVE).
-- charge_immutable refuses updates, not this read.
INSERT INTO charge_origin (tenant_id, usage_id, usage_event_id, event_id, charge_id)
SELECT tenant_id, usage_id, usage_event_id, event_id, charge_id FROM charge
ON CONFLICT DO NOTHING;
ALTER TABLE charge VALIDATE CONSTRAINT charge_legacy_bound;
