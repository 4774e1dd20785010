-- Run once by the postgres image on an empty data directory
-- (/docker-entrypoint-initdb.d). One role and one database per service: no
-- service can read another's tables. The passwords are for a local stack only.
-- deploy/compose_test.go checks every service's DATABASE_URL against this file.

CREATE ROLE meter LOGIN PASSWORD 'meter';
CREATE DATABASE meter OWNER meter;

CREATE ROLE usage LOGIN PASSWORD 'usage';
CREATE DATABASE usage OWNER usage;

CREATE ROLE billing LOGIN PASSWORD 'billing';
CREATE DATABASE billing OWNER billing;

CREATE ROLE invoice LOGIN PASSWORD 'invoice';
CREATE DATABASE invoice OWNER invoice;

CREATE ROLE query LOGIN PASSWORD 'query';
CREATE DATABASE query OWNER query;
