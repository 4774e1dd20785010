-- The cross-service quarantine view: one row per message a service
-- quarantined, from the EventQuarantined notices on ops.events.v1. event_id
-- is the notice (its origin); (service, raw_sha256) the message. Whether a
-- message is still quarantined is read from redrive_audit, so the order in
-- which notices and redrive results arrive does not matter.
CREATE TABLE quarantine_notice (
    seq                  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id             uuid        NOT NULL,
    service              text        NOT NULL,
    quarantined_event_id uuid,       -- NULL for bytes that are no envelope
    event_type           text        NOT NULL,
    tenant_id            text        NOT NULL,
    reason               text        NOT NULL,
    raw_sha256           text        NOT NULL,
    topic                text        NOT NULL,
    partition            integer     NOT NULL,
    "offset"             bigint      NOT NULL,
    quarantined_at       timestamptz NOT NULL,
    CONSTRAINT quarantine_notice_event_key UNIQUE (event_id),
    CONSTRAINT quarantine_notice_message_key UNIQUE (service, raw_sha256)
);
CREATE INDEX quarantine_notice_event_idx ON quarantine_notice (service, quarantined_event_id);

-- The redrive audit: every state of every operator action (a redrive of a
-- retained event, the release of an outbox dead letter) is a new row, never
-- updated or deleted (the trigger below refuses it). 'requested' is written
-- with the RedriveRequested it sends; 'completed' when the owning service's
-- RedriveCompleted arrives. source_event_id is that event.
CREATE TABLE redrive_audit (
    seq             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    redrive_id      uuid        NOT NULL,
    service         text        NOT NULL,
    event_id        uuid        NOT NULL,
    action          text        NOT NULL,
    state           text        NOT NULL,
    outcome         text,
    actor           text        NOT NULL,
    correlation_id  text        NOT NULL,
    reason          text        NOT NULL,
    at              timestamptz NOT NULL DEFAULT clock_timestamp(),
    source_event_id uuid        NOT NULL,
    CONSTRAINT redrive_audit_action_check CHECK (action IN ('redecide', 'release_dead_letter')),
    CONSTRAINT redrive_audit_state_check CHECK (state IN ('requested', 'completed')),
    CONSTRAINT redrive_audit_outcome_check CHECK ((state = 'completed') = (outcome IS NOT NULL)),
    CONSTRAINT redrive_audit_state_key UNIQUE (redrive_id, state),
    CONSTRAINT redrive_audit_source_key UNIQUE (source_event_id)
);
CREATE INDEX redrive_audit_event_idx ON redrive_audit (service, event_id);

CREATE FUNCTION redrive_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'redrive_audit is append-only: % refused', TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END
$$;

CREATE TRIGGER redrive_audit_append_only BEFORE UPDATE OR DELETE ON redrive_audit
    FOR EACH ROW EXECUTE FUNCTION redrive_audit_append_only();
CREATE TRIGGER redrive_audit_no_truncate BEFORE TRUNCATE ON redrive_audit
    FOR EACH STATEMENT EXECUTE FUNCTION redrive_audit_append_only();
