DROP FUNCTION inbox_event_months(text, text, uuid, uuid);
CREATE TABLE inbox_event_flat (
    event_id          uuid        PRIMARY KEY,
    payload_digest    text        NOT NULL,
    event_type        text        NOT NULL,
    tenant_id         text        NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    applied_at        timestamptz NOT NULL DEFAULT now()
);
INSERT INTO inbox_event_flat SELECT * FROM inbox_event;
DROP TABLE inbox_event;
ALTER TABLE inbox_event_flat RENAME TO inbox_event;
ALTER TABLE inbox_event RENAME CONSTRAINT inbox_event_flat_pkey TO inbox_event_pkey;
ALTER TABLE inbox_event ADD CONSTRAINT inbox_event_aggregate_slot
    UNIQUE (tenant_id, aggregate_type, aggregate_id, aggregate_version);
CREATE INDEX inbox_event_applied_at ON inbox_event (applied_at);
