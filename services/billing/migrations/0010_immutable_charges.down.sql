DROP TRIGGER adjustment_not_truncated ON adjustment;
DROP TRIGGER adjustment_immutable ON adjustment;
DROP TRIGGER charge_not_truncated ON charge;
DROP TRIGGER charge_immutable ON charge;
DROP FUNCTION billing_refuse_change();
