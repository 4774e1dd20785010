-- Run once by the postgres image on an empty data directory
-- (/docker-entrypoint-initdb.d). One database per service with two roles:
-- the owner (<service>), which runs `<service> migrate`, and the runtime
-- role (<service>_app) the service runs as, granted DML only by migrate
-- (pkg/pgmigrate.Grant). Only those two may connect to it: no service can
-- read another's tables. The passwords are for a local stack only.
-- deploy/compose_test.go checks every service's DATABASE_URL against this
-- file, and runs it on a real PostgreSQL with each service's migrations.

CREATE ROLE meter LOGIN PASSWORD 'meter';
CREATE ROLE meter_app LOGIN PASSWORD 'meter_app';
CREATE DATABASE meter OWNER meter;
REVOKE CONNECT ON DATABASE meter FROM PUBLIC;
GRANT CONNECT ON DATABASE meter TO meter_app;

CREATE ROLE usage LOGIN PASSWORD 'usage';
CREATE ROLE usage_app LOGIN PASSWORD 'usage_app';
CREATE DATABASE usage OWNER usage;
REVOKE CONNECT ON DATABASE usage FROM PUBLIC;
GRANT CONNECT ON DATABASE usage TO usage_app;

CREATE ROLE billing LOGIN PASSWORD 'billing';
CREATE ROLE billing_app LOGIN PASSWORD 'billing_app';
CREATE DATABASE billing OWNER billing;
REVOKE CONNECT ON DATABASE billing FROM PUBLIC;
GRANT CONNECT ON DATABASE billing TO billing_app;

CREATE ROLE invoice LOGIN PASSWORD 'invoice';
CREATE ROLE invoice_app LOGIN PASSWORD 'invoice_app';
CREATE DATABASE invoice OWNER invoice;
REVOKE CONNECT ON DATABASE invoice FROM PUBLIC;
GRANT CONNECT ON DATABASE invoice TO invoice_app;

CREATE ROLE query LOGIN PASSWORD 'query';
CREATE ROLE query_app LOGIN PASSWORD 'query_app';
CREATE DATABASE query OWNER query;
REVOKE CONNECT ON DATABASE query FROM PUBLIC;
GRANT CONNECT ON DATABASE query TO query_app;
