package stack

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/usagebilling/billing/testkit/freeport"
)

// PortInUseError reports the configured ports that something else holds,
// all of them at once.
type PortInUseError struct {
	Ports []PortUse
}

// PortUse is one port taken.
type PortUse struct {
	Port   int
	What   string // "meter HTTP", "PostgreSQL", "Kafka proxy"
	Holder string // "pid 1234 (meter)" when it can be found
	Hint   string // how to choose another port
}

func (e *PortInUseError) Error() string {
	var uses, hints []string
	for _, u := range e.Ports {
		s := fmt.Sprintf("%d (%s)", u.Port, u.What)
		if u.Holder != "" {
			s += " by " + u.Holder
		}
		uses = append(uses, s)
		if !slices.Contains(hints, u.Hint) {
			hints = append(hints, u.Hint)
		}
	}
	if len(uses) == 1 {
		return fmt.Sprintf("port %s on 127.0.0.1 is already in use; stop whatever holds it (a `make up` still running?), or %s",
			uses[0], strings.Join(hints, "; or "))
	}
	return fmt.Sprintf("ports already in use on 127.0.0.1: %s; stop whatever holds them (a `make up` still running?), or %s",
		strings.Join(uses, ", "), strings.Join(hints, "; or "))
}

func portInUse(port int, what, kind string) *PortInUseError {
	return &PortInUseError{Ports: []PortUse{{Port: port, What: what, Holder: portHolder(port), Hint: portHint(kind)}}}
}

func portHint(kind string) string {
	switch kind {
	case "postgres":
		return "choose another port: " + EnvPostgresPort + "=<port> (0 picks a free one)"
	case "kafka":
		return "choose another port: " + EnvKafkaPort + "=<port> (0 picks a free one)"
	default:
		return "choose other HTTP ports: " + EnvPortBase + "=9081 puts the services on 9081-9085 (" + EnvPortBase + "=0 picks free ports)"
	}
}

// checkPorts checks every configured port before anything starts, and
// reports all that are taken (or given twice) at once.
func checkPorts(o Options) error {
	type want struct {
		port       int
		what, kind string
	}
	var wants []want
	for _, name := range o.Services {
		if p := o.Ports[name]; p != 0 {
			wants = append(wants, want{p, name + " HTTP", "http"})
		}
	}
	if o.PostgresURL == "" && o.PostgresPort != 0 {
		wants = append(wants, want{o.PostgresPort, "PostgreSQL", "postgres"})
	}
	if o.Kafka != KafkaExternal && o.KafkaPort != 0 {
		wants = append(wants, want{o.KafkaPort, "Kafka proxy", "kafka"})
	}
	var dups []string
	inUse := &PortInUseError{}
	seen := map[int]string{}
	for _, w := range wants {
		if other, dup := seen[w.port]; dup {
			dups = append(dups, fmt.Sprintf("port %d is configured for both %s and %s", w.port, other, w.what))
			continue
		}
		seen[w.port] = w.what
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(w.port)))
		if err != nil {
			inUse.Ports = append(inUse.Ports, PortUse{Port: w.port, What: w.what, Holder: portHolder(w.port), Hint: portHint(w.kind)})
			continue
		}
		_ = l.Close()
	}
	if len(dups) > 0 {
		return errors.New(strings.Join(dups, "; "))
	}
	if len(inUse.Ports) > 0 {
		return inUse
	}
	return nil
}

func kafkaProxyError(port int, err error) error {
	if port != 0 {
		return portInUse(port, "Kafka proxy", "kafka")
	}
	return err
}

// freePort picks a port outside the ephemeral range: services, proxies and
// the database are restarted on their ports, and a client connection must
// not have taken one meanwhile (freeport).
func freePort() (int, error) { return freeport.Port() }

// portHolder names the process listening on TCP port, from /proc (Linux;
// other processes' sockets are visible to root or their owner), or "".
func portHolder(port int) string {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(f[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); ok && err == nil && int(p) == port {
				inodes[f[9]] = true
			}
		}
	}
	if len(inodes) == 0 {
		return ""
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, proc := range procs {
		fds, _ := os.ReadDir(filepath.Join(proc, "fd"))
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(proc, "fd", fd.Name()))
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				comm, _ := os.ReadFile(filepath.Join(proc, "comm"))
				return fmt.Sprintf("pid %s (%s)", filepath.Base(proc), strings.TrimSpace(string(comm)))
			}
		}
	}
	return ""
}
