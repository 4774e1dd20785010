CREATE TABLE projected_invoice_line (
    invoice_event_id uuid    NOT NULL REFERENCES projected_event (event_id),
    invoice_id       uuid    NOT NULL,
    tenant_id        text    NOT NULL,
    origin_event_id  uuid    NOT NULL,
    kind             text    NOT NULL,
    amount           numeric NOT NULL,
    CONSTRAINT projected_invoice_line_pkey PRIMARY KEY (invoice_id, origin_event_id, kind)
);
CREATE INDEX projected_invoice_line_origin_idx ON projected_invoice_line (origin_event_id);
