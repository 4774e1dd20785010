package service

import (
	"strings"
	"testing"

	"github.com/usagebilling/billing/pkg/kafkaconf"
)

// TestConfigKafkaSecurity checks that LoadConfig reads the Kafka security
// settings and refuses inconsistent ones at start, each named, among the
// other problems.
func TestConfigKafkaSecurity(t *testing.T) {
	base := map[string]string{"DATABASE_URL": "postgres://app@127.0.0.1/db", "AUTH_DEV_KEY": "true"}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	cfg, err := LoadConfig(NewEnvFrom(base), "svc", 1)
	if err != nil || cfg.Kafka.Protocol != kafkaconf.Plaintext {
		t.Fatalf("default: %v, protocol %q; want PLAINTEXT", err, cfg.Kafka.Protocol)
	}
	cfg, err = LoadConfig(NewEnvFrom(with(map[string]string{"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_USERNAME": "svc",
		"KAFKA_SASL_PASSWORD": "s3cret"})), "svc", 1)
	if err != nil || cfg.Kafka.Protocol != kafkaconf.SASLSSL || cfg.Kafka.Mechanism != kafkaconf.ScramSHA512 || cfg.Kafka.Password != "s3cret" {
		t.Fatalf("SASL_SSL: %v, %+v", err, cfg.Kafka)
	}
	_, err = LoadConfig(NewEnvFrom(with(map[string]string{"KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_SASL_USERNAME": "svc",
		"LOG_LEVEL": "loud"})), "svc", 1)
	if err == nil {
		t.Fatal("SASL_SSL without a password accepted")
	}
	for _, want := range []string{"KAFKA_SASL_PASSWORD: required", "LOG_LEVEL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	for _, name := range kafkaconf.EnvNames {
		found := false
		for _, n := range EnvNames {
			found = found || n == name
		}
		if !found {
			t.Errorf("EnvNames lacks %s", name)
		}
	}
}
