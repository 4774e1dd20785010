-- Plans (DESIGN.md section 3a; decision 0021): versioned offers shared by
-- the tenants subscribed to them, defined by a catalog-admin. plan holds a
-- code's latest version (its row is the lock a new version is published
-- under); plan_version every immutable version. A version's place in the
-- plans' schedule shard (events.PlanShard) is its schedule_seq, and the
-- shard's row of schedule_shard numbers and proves them as it does a
-- tenant shard's price versions.
CREATE TABLE plan (
    code              text        PRIMARY KEY CHECK (code ~ '^[A-Za-z0-9_.-]{1,64}$'),
    last_version      bigint      NOT NULL DEFAULT 0 CHECK (last_version >= 0),
    last_effective_at timestamptz
);

CREATE TABLE plan_version (
    plan_id       uuid        PRIMARY KEY,
    code          text        NOT NULL REFERENCES plan (code),
    version       bigint      NOT NULL CHECK (version >= 1),
    name          text        NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    currency      text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    -- [{code, name, amount}] and [{meterCode, dimensions, model, ...}]:
    -- events.PlanFee and events.PlanCharge, as PlanPublished carries them.
    fixed_fees    jsonb       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(fixed_fees) = 'array'),
    charges       jsonb       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(charges) = 'array'),
    minimum_spend numeric     CHECK (minimum_spend >= 0),
    effective_at  timestamptz NOT NULL,
    published_at  timestamptz NOT NULL,
    schedule_seq  bigint      NOT NULL CHECK (schedule_seq >= 1),
    actor         text        NOT NULL CHECK (char_length(actor) BETWEEN 1 AND 256),
    event_id      uuid        NOT NULL CONSTRAINT plan_version_event_id_key UNIQUE,
    CONSTRAINT plan_version_code_version_key UNIQUE (code, version)
);

-- A version is never edited or deleted.
CREATE FUNCTION plan_version_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'plan versions are immutable' USING ERRCODE = 'integrity_constraint_violation';
END
$$;

CREATE TRIGGER plan_version_immutable BEFORE UPDATE OR DELETE ON plan_version
    FOR EACH ROW EXECUTE FUNCTION plan_version_immutable();

-- The plans' schedule shard (events.PlanShard = 16), known through what the
-- tenants' shards are: nothing was promised about plans before, and no
-- plan exists.
INSERT INTO schedule_shard (shard, known_through)
VALUES (16, (SELECT max(known_through) FROM schedule_shard))
ON CONFLICT (shard) DO NOTHING;
