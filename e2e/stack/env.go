package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
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
	EnvKafkaPort    = "STACK_KAFKA_PORT"    // the Kafka proxy's port, the broker's with STACK_DIRECT_KAFKA (default: free)
	EnvPartitions   = "STACK_PARTITIONS"    // partitions per topic (default 6)
	EnvPortBase     = "STACK_PORT_BASE"     // meter's HTTP port; usage +1 ... query +4; 0: free ports
	EnvInstances    = "STACK_INSTANCES"     // processes per service: usage=2,billing=2
	EnvStateDir     = "STACK_DIR"           // parent of the run directories
	EnvKeep         = "STACK_KEEP"          // 1: keep the run directory after stop
	EnvLogLevel     = "STACK_LOG_LEVEL"     // the services' LOG_LEVEL (default info)
	EnvPprofBase    = "STACK_PPROF_BASE"    // serve pprof on 127.0.0.1: meter here, usage +1 ... query +4 (one instance each)
	EnvDirectDB     = "STACK_DIRECT_DB"     // 1: services reach their databases directly, no proxy (load runs)
	EnvDirectKafka  = "STACK_DIRECT_KAFKA"  // 1: services reach the broker directly, no proxy (load runs)
	EnvServiceEnv   = "STACK_SERVICE_ENV"   // services' settings: NAME=value (every service) or service:NAME=value, comma-separated
)

// FromEnv returns o with the settings the environment gives (the Env*
// variables), reporting every malformed one at once.
func FromEnv(o Options) (Options, error) {
	var e envReader
	e.kafka(&o)
	e.postgres(&o)
	e.ports(&o)
	e.run(&o)
	e.serviceEnv(&o)
	if len(e.problems) > 0 {
		return o, errors.New("invalid environment:\n  " + strings.Join(e.problems, "\n  "))
	}
	return o, nil
}

// envReader reads the Env* variables and collects what is wrong with them.
type envReader struct{ problems []string }

func (e *envReader) bad(name, format string, args ...any) {
	e.problems = append(e.problems, name+": "+fmt.Sprintf(format, args...))
}

func (e *envReader) get(name string) (string, bool) {
	v := strings.TrimSpace(os.Getenv(name))
	return v, v != ""
}

func (e *envReader) port(name string) (int, bool) {
	v, ok := e.get(name)
	if !ok {
		return 0, false
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < 0 || p > 65535 {
		e.bad(name, "want a port number (0 for a free one), got %q", v)
		return 0, false
	}
	return p, true
}

// portBase reads the port of the first service, the others following it,
// checking that there is room for them all.
func (e *envReader) portBase(name string) (int, bool) {
	base, ok := e.port(name)
	if ok && base > 65535-len(Services) {
		e.bad(name, "%d leaves no room for %d ports", base, len(Services))
	}
	return base, ok
}

func (e *envReader) bool(name string) (bool, bool) {
	v, ok := e.get(name)
	if !ok {
		return false, false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e.bad(name, "want 1 or 0, got %q", v)
	}
	return b, true
}

// kafka reads the broker's settings: KAFKA, KAFKA_BROKERS, the proxy's port
// and the partitions.
func (e *envReader) kafka(o *Options) {
	if v, ok := e.get(EnvKafka); ok {
		if v != KafkaEmbedded && v != KafkaApache {
			e.bad(EnvKafka, "want %q or %q (or set %s for an existing cluster), got %q", KafkaEmbedded, KafkaApache, EnvKafkaBrokers, v)
		}
		o.Kafka = v
	}
	if v, ok := e.get(EnvKafkaBrokers); ok {
		o.KafkaBrokers = nil
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				o.KafkaBrokers = append(o.KafkaBrokers, b)
			}
		}
		if o.Kafka == KafkaApache {
			e.bad(EnvKafkaBrokers, "set together with %s=apache: pick one", EnvKafka)
		}
		o.Kafka = KafkaExternal
	}
	if p, ok := e.port(EnvKafkaPort); ok {
		o.KafkaPort = p
	}
	if direct, ok := e.bool(EnvDirectKafka); ok {
		o.DirectKafka = direct
	}
	if v, ok := e.get(EnvPartitions); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			e.bad(EnvPartitions, "want a positive count, got %q", v)
		}
		o.Partitions = n
	}
}

// postgres reads the database's settings: an existing server or the
// throwaway cluster's port, and whether the services bypass the proxies.
func (e *envReader) postgres(o *Options) {
	if v, ok := e.get(EnvPostgresURL); ok {
		o.PostgresURL = v
	}
	if p, ok := e.port(EnvPostgresPort); ok {
		o.PostgresPort = p
	}
	if direct, ok := e.bool(EnvDirectDB); ok {
		o.DirectDB = direct
	}
}

// ports reads the services' HTTP and pprof port bases.
func (e *envReader) ports(o *Options) {
	if base, ok := e.portBase(EnvPortBase); ok {
		o.Ports = map[string]int{}
		if base != 0 {
			for i, name := range Services {
				o.Ports[name] = base + i
			}
		}
	}
	if base, ok := e.portBase(EnvPprofBase); ok && base != 0 {
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
}

// run reads the instances per service, the state directory, whether to
// keep it, and the services' log level.
func (e *envReader) run(o *Options) {
	if v, ok := e.get(EnvInstances); ok {
		o.Instances = map[string]int{}
		for _, kv := range strings.Split(v, ",") {
			name, count, found := strings.Cut(strings.TrimSpace(kv), "=")
			n, err := strconv.Atoi(count)
			if !found || err != nil || n < 1 {
				e.bad(EnvInstances, "want service=count,... such as usage=2,billing=2, got %q", v)
				break
			}
			o.Instances[name] = n
		}
	}
	if v, ok := e.get(EnvStateDir); ok {
		o.StateDir = v
	}
	if keep, ok := e.bool(EnvKeep); ok {
		o.Keep = keep
	}
	if v, ok := e.get(EnvLogLevel); ok {
		o.LogLevel = v
	}
}

// settingName is the shape of a service's environment variable.
var settingName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// serviceEnv reads the services' own settings to run them with, such as
// CONSUMER_LANES=2,billing:CONSUMER_BATCH_SIZE=1000: a setting without a
// service goes to every one. The launcher's own environment does not reach
// the services for pkg/service's settings (childEnv), so this is how a run
// chooses them.
func (e *envReader) serviceEnv(o *Options) {
	v, ok := e.get(EnvServiceEnv)
	if !ok {
		return
	}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		target, setting := "", item
		if svc, rest, found := strings.Cut(item, ":"); found && !strings.Contains(svc, "=") {
			target, setting = svc, rest
		}
		name, value, found := strings.Cut(setting, "=")
		switch {
		case !found || name == "":
			e.bad(EnvServiceEnv, "want NAME=value or service:NAME=value, comma-separated, got %q", item)
			continue
		case !settingName.MatchString(name) || name == "HTTP_ADDR":
			e.bad(EnvServiceEnv, "%q is not a setting the stack may give (upper case, digits and _; not HTTP_ADDR, which it chooses)", name)
			continue
		case target != "" && !slices.Contains(Services, target):
			e.bad(EnvServiceEnv, "unknown service %q in %q", target, item)
			continue
		}
		if o.ServiceEnv == nil {
			o.ServiceEnv = map[string]map[string]string{}
		}
		for _, svc := range Services {
			if target != "" && svc != target {
				continue
			}
			if o.ServiceEnv[svc] == nil {
				o.ServiceEnv[svc] = map[string]string{}
			}
			o.ServiceEnv[svc][name] = value
		}
	}
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
