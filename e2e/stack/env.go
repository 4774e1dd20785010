package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Environment variables read by FromEnv: what `make demo`, `make up` and the
// e2e tests accept.
const (
	EnvKafka        = "KAFKA"               // embedded (default) or apache
	EnvKafkaBrokers = "KAFKA_BROKERS"       // an existing cluster: host:port,...
	EnvPostgresURL  = "STACK_POSTGRES_URL"  // an existing server: postgres://user@host:port/postgres
	EnvPostgresPort = "STACK_POSTGRES_PORT" // the throwaway cluster's port (default: free)
	EnvKafkaPort    = "STACK_KAFKA_PORT"    // the Kafka proxy's port (default: free)
	EnvPartitions   = "STACK_PARTITIONS"    // partitions per topic (default 6)
	EnvPortBase     = "STACK_PORT_BASE"     // meter's HTTP port; usage +1 ... query +4; 0: free ports
	EnvInstances    = "STACK_INSTANCES"     // processes per service: usage=2,billing=2
	EnvStateDir     = "STACK_DIR"           // parent of the run directories
	EnvKeep         = "STACK_KEEP"          // 1: keep the run directory after stop
	EnvLogLevel     = "STACK_LOG_LEVEL"     // the services' LOG_LEVEL (default info)
	EnvPprofBase    = "STACK_PPROF_BASE"    // serve pprof on 127.0.0.1: meter here, usage +1 ... query +4 (one instance each)
	EnvDirectDB     = "STACK_DIRECT_DB"     // 1: services reach their databases directly, no proxy (load runs)
)

// FromEnv returns o with the settings the environment gives (the Env*
// variables), reporting every malformed one at once.
func FromEnv(o Options) (Options, error) {
	var problems []string
	bad := func(name, format string, args ...any) {
		problems = append(problems, name+": "+fmt.Sprintf(format, args...))
	}
	get := func(name string) (string, bool) {
		v := strings.TrimSpace(os.Getenv(name))
		return v, v != ""
	}
	port := func(name string) (int, bool) {
		v, ok := get(name)
		if !ok {
			return 0, false
		}
		p, err := strconv.Atoi(v)
		if err != nil || p < 0 || p > 65535 {
			bad(name, "want a port number (0 for a free one), got %q", v)
			return 0, false
		}
		return p, true
	}

	if v, ok := get(EnvKafka); ok {
		if v != KafkaEmbedded && v != KafkaApache {
			bad(EnvKafka, "want %q or %q (or set %s for an existing cluster), got %q", KafkaEmbedded, KafkaApache, EnvKafkaBrokers, v)
		}
		o.Kafka = v
	}
	if v, ok := get(EnvKafkaBrokers); ok {
		o.KafkaBrokers = nil
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				o.KafkaBrokers = append(o.KafkaBrokers, b)
			}
		}
		if o.Kafka == KafkaApache {
			bad(EnvKafkaBrokers, "set together with %s=apache: pick one", EnvKafka)
		}
		o.Kafka = KafkaExternal
	}
	if v, ok := get(EnvPostgresURL); ok {
		o.PostgresURL = v
	}
	if p, ok := port(EnvPostgresPort); ok {
		o.PostgresPort = p
	}
	if p, ok := port(EnvKafkaPort); ok {
		o.KafkaPort = p
	}
	if v, ok := get(EnvPartitions); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			bad(EnvPartitions, "want a positive count, got %q", v)
		}
		o.Partitions = n
	}
	if base, ok := port(EnvPortBase); ok {
		if base > 65535-len(Services) {
			bad(EnvPortBase, "%d leaves no room for %d ports", base, len(Services))
		}
		o.Ports = map[string]int{}
		if base != 0 {
			for i, name := range Services {
				o.Ports[name] = base + i
			}
		}
	}
	if base, ok := port(EnvPprofBase); ok && base != 0 {
		if base > 65535-len(Services) {
			bad(EnvPprofBase, "%d leaves no room for %d ports", base, len(Services))
		}
		if o.ServiceEnv == nil {
			o.ServiceEnv = map[string]map[string]string{}
		}
		for i, name := range Services {
			if o.ServiceEnv[name] == nil {
				o.ServiceEnv[name] = map[string]string{}
			}
			o.ServiceEnv[name]["PPROF_ADDR"] = fmt.Sprintf("127.0.0.1:%d", base+i)
		}
	}
	if v, ok := get(EnvDirectDB); ok {
		direct, err := strconv.ParseBool(v)
		if err != nil {
			bad(EnvDirectDB, "want 1 or 0, got %q", v)
		}
		o.DirectDB = direct
	}
	if v, ok := get(EnvInstances); ok {
		o.Instances = map[string]int{}
		for _, kv := range strings.Split(v, ",") {
			name, count, found := strings.Cut(strings.TrimSpace(kv), "=")
			n, err := strconv.Atoi(count)
			if !found || err != nil || n < 1 {
				bad(EnvInstances, "want service=count,... such as usage=2,billing=2, got %q", v)
				break
			}
			o.Instances[name] = n
		}
	}
	if v, ok := get(EnvStateDir); ok {
		o.StateDir = v
	}
	if v, ok := get(EnvKeep); ok {
		keep, err := strconv.ParseBool(v)
		if err != nil {
			bad(EnvKeep, "want 1 or 0, got %q", v)
		}
		o.Keep = keep
	}
	if v, ok := get(EnvLogLevel); ok {
		o.LogLevel = v
	}
	if len(problems) > 0 {
		return o, errors.New("invalid environment:\n  " + strings.Join(problems, "\n  "))
	}
	return o, nil
}

// ConsoleLogger returns a logger for people watching a terminal: progress
// as "==> message key=value", trouble as "warning: ...".
func ConsoleLogger(w io.Writer) *slog.Logger {
	return slog.New(&consoleHandler{w: w, mu: new(sync.Mutex)})
}

type consoleHandler struct {
	w     io.Writer
	mu    *sync.Mutex
	attrs []slog.Attr
}

func (h *consoleHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *consoleHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	default:
		b.WriteString("==> ")
	}
	b.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		v := a.Value.Resolve().String()
		if strings.ContainsAny(v, " \t\n\"") {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, " %s=%s", a.Key, v)
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	b.WriteString("\n")
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *consoleHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &consoleHandler{w: h.w, mu: h.mu, attrs: append(append([]slog.Attr{}, h.attrs...), as...)}
}

func (h *consoleHandler) WithGroup(string) slog.Handler { return h }
