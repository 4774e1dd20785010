-- Facts by month, step 2 of 3 (decision 0025), in a transaction of its own
-- whose locks let facts be accepted meanwhile: the identities of the facts
-- accepted before step 1 are copied (those accepted since are recorded by
-- its trigger; a row both recorded is kept once), and the bound of step 1
-- is validated (SHARE UPDATE EXCLUSIVE: inserts go on).
INSERT INTO usage_fact_source (tenant_id, source_system, source_event_id, usage_id, event_id)
SELECT tenant_id, source_system, source_event_id, usage_id, event_id FROM usage_fact
ON CONFLICT DO NOTHING;
ALTER TABLE usage_fact VALIDATE CONSTRAINT usage_fact_legacy_bound;
