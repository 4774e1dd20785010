// Package testkit holds what only tests and developer tools use: throwaway
// PostgreSQL clusters and migrated templates (pgcluster, pgtest), an
// embedded or Apache Kafka broker (kafkabroker, kafkatest), a fault-injecting
// proxy (faultproxy), the services started in one process (servicetest),
// OpenAPI checks and generation (apitest, apigen), test credentials
// (authtest), and the developer commands under cmd/. Nothing that ships
// imports it: services and pkg import it from _test.go files and from test
// helper packages only.
package testkit
