DROP TABLE webhook_intent;
DROP TABLE webhook_endpoint;
