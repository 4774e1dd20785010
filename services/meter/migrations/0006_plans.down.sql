DELETE FROM schedule_shard WHERE shard = 16;
DROP TABLE IF EXISTS plan_version;
DROP FUNCTION IF EXISTS plan_version_immutable();
DROP TABLE IF EXISTS plan;
