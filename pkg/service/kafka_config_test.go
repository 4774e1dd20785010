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

// TestConfigRefusesRemotePlaintext: PLAINTEXT to a broker that is not on
// this machine is refused at start unless KAFKA_ALLOW_PLAINTEXT=true says the
// network is the operator's own; loopback brokers (tests, make up) and
// SASL_SSL need no setting.
func TestConfigRefusesRemotePlaintext(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{name: "default loopback broker", env: map[string]string{}},
		{name: "loopback brokers", env: map[string]string{"KAFKA_BROKERS": "127.0.0.1:9092,localhost:9093,[::1]:9094"}},
		{name: "remote broker in the clear", env: map[string]string{"KAFKA_BROKERS": "kafka:9092"},
			wantErr: "KAFKA_SECURITY_PROTOCOL: PLAINTEXT to kafka:9092"},
		{name: "one remote among loopback", env: map[string]string{"KAFKA_BROKERS": "127.0.0.1:9092,10.0.0.5:9092",
			"KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"}, wantErr: "PLAINTEXT to 10.0.0.5:9092"},
		{name: "remote broker allowed in the clear", env: map[string]string{"KAFKA_BROKERS": "kafka:9092", "KAFKA_ALLOW_PLAINTEXT": "true"}},
		{name: "allow not a bool", env: map[string]string{"KAFKA_BROKERS": "kafka:9092", "KAFKA_ALLOW_PLAINTEXT": "yes please"},
			wantErr: "KAFKA_ALLOW_PLAINTEXT"},
		{name: "remote broker over SASL_SSL", env: map[string]string{"KAFKA_BROKERS": "kafka:9093", "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
			"KAFKA_SASL_USERNAME": "svc", "KAFKA_SASL_PASSWORD": "s3cret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"DATABASE_URL": "postgres://app@127.0.0.1/db", "AUTH_DEV_KEY": "true"}
			for k, v := range tc.env {
				env[k] = v
			}
			_, err := LoadConfig(NewEnvFrom(env), "svc", 1)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one naming %q", err, tc.wantErr)
			}
		})
	}
}
