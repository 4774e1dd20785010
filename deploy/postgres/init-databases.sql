-- Run once by the postgres image on an empty data directory
-- (/docker-entrypoint-initdb.d). One role and one database per service, and
-- only the owner may connect to it: no service can read another's tables.
-- The passwords are for a local stack only.
-- deploy/compose_test.go checks every service's DATABASE_URL against this
-- file, and runs it on a real PostgreSQL with each service's migrations.

CREATE ROLE meter LOGIN PASSWORD 'meter';
CREATE DATABASE meter OWNER meter;
REVOKE CONNECT ON DATABASE meter FROM PUBLIC;

CREATE ROLE usage LOGIN PASSWORD 'usage';
CREATE DATABASE usage OWNER usage;
REVOKE CONNECT ON DATABASE usage FROM PUBLIC;

CREATE ROLE billing LOGIN PASSWORD 'billing';
CREATE DATABASE billing OWNER billing;
REVOKE CONNECT ON DATABASE billing FROM PUBLIC;

CREATE ROLE invoice LOGIN PASSWORD 'invoice';
CREATE DATABASE invoice OWNER invoice;
REVOKE CONNECT ON DATABASE invoice FROM PUBLIC;

CREATE ROLE query LOGIN PASSWORD 'query';
CREATE DATABASE query OWNER query;
REVOKE CONNECT ON DATABASE query FROM PUBLIC;
