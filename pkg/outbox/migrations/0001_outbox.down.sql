DROP TRIGGER outbox_event_notify ON outbox_event;
DROP FUNCTION outbox_notify();
DROP TABLE outbox_relay;
DROP TABLE outbox_shard;
DROP TABLE outbox_event;
