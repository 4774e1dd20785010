-- The subscriptions in effect at or after an instant, read by range scans
-- of those alone. Subscriptions are never deleted, and the index of
-- migration 0013, subscription_tenant_starts, keys on the start, which
-- cannot bound "ends_at IS NULL OR ends_at > t": every such read walked
-- the tenant's whole history, and the close scheduler's every tenant's
-- each BILLING_CLOSE_INTERVAL. The queries (internal/db/queries.sql) now
-- compare COALESCE(ends_at, 'infinity') > t, an open subscription ending
-- at infinity, and these indexes hold that expression in order.
--
-- A tenant's: SubscriptionsFrom and CountLiveSubscriptions (Subscribe,
-- EndSubscription), SubscriptionsDuring (a period's fees), PlansKnownFor
-- (a close's wait for the plans' schedule) and TenantSubscriptionsSince (the
-- earlier unclosed periods of fees a close waits for).
CREATE INDEX subscription_tenant_in_effect
    ON subscription (tenant_id, (COALESCE(ends_at, 'infinity'::timestamptz)));
-- Every tenant's: the close scheduler's SubscriptionsSince (the periods of
-- fees of its last 92 days).
CREATE INDEX subscription_in_effect
    ON subscription ((COALESCE(ends_at, 'infinity'::timestamptz)));
