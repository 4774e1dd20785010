ALTER TABLE charge DROP COLUMN IF EXISTS plan_code;
DROP TABLE IF EXISTS subscription;
DROP TABLE IF EXISTS plan_charge;
DROP TABLE IF EXISTS plan_evidence;
DELETE FROM schedule_seq WHERE shard = 16;
DELETE FROM schedule_shard WHERE shard = 16;
ALTER TABLE schedule_shard DROP CONSTRAINT IF EXISTS schedule_shard_shard_check;
ALTER TABLE schedule_shard ADD CONSTRAINT schedule_shard_shard_check CHECK (shard >= 0 AND shard < 16);
