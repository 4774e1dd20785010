// Package deploy holds the deployment files and the tests that keep them honest.
//
// compose.yaml runs the whole system in containers (PostgreSQL, Apache Kafka
// in KRaft mode, toxiproxy, the five services, Prometheus, Grafana and a Kafka
// exporter), built from docker/<service>.Dockerfile; see README.md. No Docker
// engine is needed to test them: the tests load compose.yaml with compose-go
// and check it, the Dockerfiles, the toxiproxy, Prometheus and Grafana files
// and the database init script against the services' real configuration,
// ports, topics and metrics.
package deploy
