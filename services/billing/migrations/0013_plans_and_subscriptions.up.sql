-- Plans and subscriptions (DESIGN.md section 3a; decision 0021).
--
-- The plans' schedule shard (events.PlanShard = 16) beside the tenants'
-- 0 to 15: plan versions are proven by its watermarks as price versions
-- are by a tenant shard's.
ALTER TABLE schedule_shard DROP CONSTRAINT IF EXISTS schedule_shard_shard_check;
ALTER TABLE schedule_shard ADD CONSTRAINT schedule_shard_shard_check CHECK (shard >= 0 AND shard <= 16);
INSERT INTO schedule_shard (shard) VALUES (16) ON CONFLICT (shard) DO NOTHING;

-- Plan versions as PlanPublished announced them, immutable: the fixed fees
-- and minimum spend per period, and (plan_charge) each charge as an entry
-- of the version's price sheet, keyed and ordered as price_evidence is.
CREATE TABLE plan_evidence (
    code          text        NOT NULL,
    version       bigint      NOT NULL CHECK (version >= 1),
    name          text        NOT NULL,
    currency      text        NOT NULL,
    fixed_fees    jsonb       NOT NULL DEFAULT '[]',
    minimum_spend numeric     CHECK (minimum_spend >= 0),
    effective_at  timestamptz NOT NULL,
    plan_id       uuid        NOT NULL,
    event_id      uuid        NOT NULL CONSTRAINT plan_evidence_event_id_key UNIQUE,
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (code, version)
);

CREATE TABLE plan_charge (
    code            text     NOT NULL,
    version         bigint   NOT NULL,
    meter_code      text     NOT NULL,
    dimensions      jsonb    NOT NULL DEFAULT '{}',
    dimensions_key  text     NOT NULL DEFAULT '',
    dimension_count smallint NOT NULL DEFAULT 0 CHECK (dimension_count >= 0),
    model           text     NOT NULL,
    unit_price      numeric  NOT NULL DEFAULT 0 CHECK (unit_price >= 0),
    tiers           jsonb,
    package_size    numeric,
    package_price   numeric,
    PRIMARY KEY (code, version, meter_code, dimensions_key),
    FOREIGN KEY (code, version) REFERENCES plan_evidence (code, version)
);

-- A tenant's subscriptions: at most one in effect at any instant, from
-- starts_at (inclusive) to ends_at (exclusive; NULL: open). Neither is ever
-- at or before what billing has told raters of the tenant's schedule shard
-- (never backdated); a plan change ends the current one at the new one's
-- starts_at. Written under the tenant's shard row lock (app.Subscribe).
CREATE TABLE subscription (
    subscription_id uuid        PRIMARY KEY,
    tenant_id       text        NOT NULL,
    plan_code       text        NOT NULL,
    starts_at       timestamptz NOT NULL,
    ends_at         timestamptz CHECK (ends_at > starts_at),
    created_at      timestamptz NOT NULL,
    actor           text        NOT NULL CHECK (char_length(actor) BETWEEN 1 AND 256),
    ended_by        text
);
CREATE INDEX subscription_tenant_starts ON subscription (tenant_id, starts_at DESC);

-- A charge priced by a plan's charge names the plan (its version is the
-- charge's price_version); '' for a tenant's own price or unpriced.
ALTER TABLE charge ADD COLUMN plan_code text NOT NULL DEFAULT '';
