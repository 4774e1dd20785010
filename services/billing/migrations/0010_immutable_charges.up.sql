-- Charges and adjustments are what was billed: insert-only. A charge is
-- corrected by an adjustment, never edited; nothing deletes either (no
-- retention purges them). A statement that would update, delete or
-- truncate one fails with an integrity violation (SQLSTATE 23000), which
-- the inbox treats as permanent, as invoice's immutable tables do.
CREATE FUNCTION billing_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% of % is not allowed: charges and adjustments are immutable (post an adjustment to correct a charge)', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation';
END
$$;

CREATE TRIGGER charge_immutable BEFORE UPDATE OR DELETE ON charge
    FOR EACH ROW EXECUTE FUNCTION billing_refuse_change();
CREATE TRIGGER charge_not_truncated BEFORE TRUNCATE ON charge
    FOR EACH STATEMENT EXECUTE FUNCTION billing_refuse_change();
CREATE TRIGGER adjustment_immutable BEFORE UPDATE OR DELETE ON adjustment
    FOR EACH ROW EXECUTE FUNCTION billing_refuse_change();
CREATE TRIGGER adjustment_not_truncated BEFORE TRUNCATE ON adjustment
    FOR EACH STATEMENT EXECUTE FUNCTION billing_refuse_change();
