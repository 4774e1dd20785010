package stack_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/usagebilling/billing/e2e/stack"
)

// FromEnv maps each variable onto its option, and reports every malformed
// one at once, by name.
func TestFromEnv(t *testing.T) {
	for _, name := range []string{stack.EnvKafka, stack.EnvKafkaBrokers, stack.EnvPostgresURL, stack.EnvPostgresPort,
		stack.EnvKafkaPort, stack.EnvPartitions, stack.EnvPortBase, stack.EnvInstances, stack.EnvStateDir, stack.EnvKeep,
		stack.EnvLogLevel, stack.EnvPprofBase, stack.EnvDirectDB, stack.EnvDirectKafka, stack.EnvServiceEnv} {
		t.Setenv(name, "")
	}
	t.Run("every variable", func(t *testing.T) {
		for k, v := range map[string]string{
			stack.EnvKafkaBrokers: "a:9092, b:9092", stack.EnvPostgresURL: "postgres://u@h:5432/postgres",
			stack.EnvPartitions: "3", stack.EnvPortBase: "9000", stack.EnvPprofBase: "6060",
			stack.EnvDirectDB: "1", stack.EnvDirectKafka: "1", stack.EnvInstances: "usage=2,billing=3", stack.EnvStateDir: "/tmp/s",
			stack.EnvKeep: "true", stack.EnvLogLevel: "warn",
			stack.EnvServiceEnv: "CONSUMER_LANES=2, billing:CONSUMER_BATCH_SIZE=1000,billing:CONSUMER_LANES=3",
		} {
			t.Setenv(k, v)
		}
		o, err := stack.FromEnv(stack.Options{ServiceEnv: map[string]map[string]string{"usage": {"X": "1"}}})
		if err != nil {
			t.Fatal(err)
		}
		if o.Kafka != stack.KafkaExternal || !slices.Equal(o.KafkaBrokers, []string{"a:9092", "b:9092"}) ||
			o.PostgresURL != "postgres://u@h:5432/postgres" || o.Partitions != 3 || !o.DirectDB || !o.DirectKafka ||
			o.StateDir != "/tmp/s" || !o.Keep || o.LogLevel != "warn" {
			t.Fatalf("options %+v", o)
		}
		if want := map[string]int{"meter": 9000, "usage": 9001, "billing": 9002, "invoice": 9003, "query": 9004}; !maps.Equal(o.Ports, want) {
			t.Fatalf("ports %v, want %v", o.Ports, want)
		}
		if want := map[string]int{"usage": 2, "billing": 3}; !maps.Equal(o.Instances, want) {
			t.Fatalf("instances %v, want %v", o.Instances, want)
		}
		if got := o.ServiceEnv["usage"]; got["X"] != "1" || got["PPROF_ADDR"] != "127.0.0.1:6061" || got["CONSUMER_LANES"] != "2" {
			t.Fatalf("usage's environment %v, want X kept, PPROF_ADDR 127.0.0.1:6061 and CONSUMER_LANES 2", got)
		}
		if got := o.ServiceEnv["billing"]; got["CONSUMER_LANES"] != "3" || got["CONSUMER_BATCH_SIZE"] != "1000" {
			t.Fatalf("billing's environment %v, want CONSUMER_LANES 3 (its own, after every service's) and CONSUMER_BATCH_SIZE 1000", got)
		}
		if _, ok := o.ServiceEnv["query"]["CONSUMER_BATCH_SIZE"]; ok {
			t.Fatalf("query's environment %v has billing's setting", o.ServiceEnv["query"])
		}
	})
	t.Run("malformed", func(t *testing.T) {
		bad := map[string]string{
			stack.EnvKafka: "redpanda", stack.EnvPostgresPort: "70000", stack.EnvKafkaPort: "x", stack.EnvPartitions: "0",
			stack.EnvPortBase: "65534", stack.EnvInstances: "usage", stack.EnvKeep: "maybe", stack.EnvDirectDB: "2",
			stack.EnvDirectKafka: "yes please",
		}
		// Each wrong item of STACK_SERVICE_ENV is named.
		t.Setenv(stack.EnvServiceEnv, "LANES, ledger:CONSUMER_LANES=2,HTTP_ADDR=:1,lower=1")
		for k, v := range bad {
			t.Setenv(k, v)
		}
		_, err := stack.FromEnv(stack.Options{})
		if err == nil {
			t.Fatal("no error")
		}
		for name := range bad {
			if !strings.Contains(err.Error(), "\n  "+name+": ") {
				t.Errorf("%s not reported:\n%v", name, err)
			}
		}
		for _, item := range []string{`"LANES"`, `"ledger"`, `"HTTP_ADDR"`, `"lower"`} {
			if !strings.Contains(err.Error(), "\n  "+stack.EnvServiceEnv+": ") || !strings.Contains(err.Error(), item) {
				t.Errorf("%s's %s not reported:\n%v", stack.EnvServiceEnv, item, err)
			}
		}
	})
}

// Start refuses inconsistent options before it starts anything, naming
// every problem at once.
func TestStartRefusesInconsistentOptions(t *testing.T) {
	_, err := stack.Start(t.Context(), stack.Options{
		StateDir: t.TempDir(), BinDir: t.TempDir(),
		Kafka: "redpanda", Partitions: -1,
		Services: []string{"meter", "ledger"}, Instances: map[string]int{"usage": -1}, Ports: map[string]int{"query": 70000},
		PostgresURL: "postgres://u@h:5432/postgres", PostgresPort: 5433,
	})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`Kafka "redpanda"`, "Partitions -1", `unknown service "ledger"`, `Instances["usage"] = -1`,
		`Ports["query"] = 70000`, "PostgresPort is the throwaway cluster's port"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q not reported:\n%v", want, err)
		}
	}
	_, err = stack.Start(t.Context(), stack.Options{StateDir: t.TempDir(), BinDir: t.TempDir(),
		Kafka: stack.KafkaExternal, KafkaPort: 9092})
	for _, want := range []string{"needs KafkaBrokers", "KafkaPort is the port of the launcher's Kafka proxy"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q not reported: %v", want, err)
		}
	}
}
