-- A correction note is decided on the invoice's total, the sum of its notes
-- so far and the next version: kept here per invoice (updated in the
-- transaction that adds a note, under the invoice's lock) so that deciding
-- a note reads one row, not every earlier note of the invoice.
CREATE TABLE invoice_correction_total (
    invoice_id   uuid    PRIMARY KEY REFERENCES invoice (invoice_id),
    corrected    numeric NOT NULL,
    last_version bigint  NOT NULL CHECK (last_version >= 2)
);

INSERT INTO invoice_correction_total (invoice_id, corrected, last_version)
SELECT invoice_id, sum(amount), max(version) FROM invoice_correction GROUP BY invoice_id;
