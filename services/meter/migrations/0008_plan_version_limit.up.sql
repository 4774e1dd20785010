-- A plan's versions taking effect in a UTC month are counted
-- (METER_MAX_PLAN_VERSIONS_PER_MONTH) on this index without reading the
-- plan's other versions: with billing's subscriptions per period they bound
-- a period's lines priced by a plan (decision 0014, "A period's lines are
-- bounded by the tenant's prices and plans").
CREATE INDEX plan_version_code_effective ON plan_version (code, effective_at);
