DROP INDEX subscription_in_effect;
DROP INDEX subscription_tenant_in_effect;
