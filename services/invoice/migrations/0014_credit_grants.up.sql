-- Prepaid credits (DESIGN.md section 3a): a tenant's credit grants per
-- currency, in whole minor units. At issue an invoice draws from the grants
-- in effect at its period's end (lowest priority first, then the earliest
-- expiry, then the oldest), one credit_applied line per grant drawn, never
-- past its total; balance is what a grant has left. An expired grant's
-- remainder is void (its balance stays as it was, shown as expired).
CREATE TABLE credit_grant (
    grant_id     uuid        PRIMARY KEY,
    tenant_id    text        NOT NULL,
    currency     text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    amount       numeric     NOT NULL CHECK (amount > 0),
    balance      numeric     NOT NULL CHECK (balance >= 0 AND balance <= amount),
    effective_at timestamptz NOT NULL,
    expires_at   timestamptz CHECK (expires_at > effective_at),
    priority     integer     NOT NULL CHECK (priority BETWEEN 0 AND 1000),
    reason       text        NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 500),
    actor        text        NOT NULL CHECK (char_length(actor) BETWEEN 1 AND 256),
    created_at   timestamptz NOT NULL
);
-- A tenant's list, and the draw's candidates of a currency.
CREATE INDEX credit_grant_list ON credit_grant (tenant_id, created_at, grant_id);
CREATE INDEX credit_grant_draw ON credit_grant (tenant_id, currency, priority, expires_at, created_at, grant_id)
    WHERE balance > 0;

ALTER TABLE invoice
    ADD COLUMN credits_applied numeric NOT NULL DEFAULT 0 CHECK (credits_applied <= 0),
    ADD COLUMN amount_due      numeric CHECK (amount_due >= 0);

ALTER TABLE invoice_line
    ADD COLUMN grant_id uuid REFERENCES credit_grant (grant_id),
    DROP CONSTRAINT invoice_line_kind_check,
    ADD CONSTRAINT invoice_line_kind_check
        CHECK (kind IN ('charge', 'unpriced', 'adjustment', 'rounding', 'fixed_fee', 'minimum_true_up', 'tax',
                        'credit_applied')),
    ADD CONSTRAINT invoice_line_credit_check CHECK ((kind = 'credit_applied') = (grant_id IS NOT NULL)),
    ADD CONSTRAINT invoice_line_credit_amount_check CHECK (kind <> 'credit_applied' OR (amount < 0 AND origin_event_id IS NOT NULL));
DROP INDEX invoice_line_origin_key;
CREATE UNIQUE INDEX invoice_line_origin_key ON invoice_line (origin_event_id)
    WHERE kind NOT IN ('rounding', 'fixed_fee', 'minimum_true_up', 'tax', 'credit_applied');
CREATE UNIQUE INDEX invoice_line_credit_key ON invoice_line (invoice_id, grant_id) WHERE kind = 'credit_applied';
