package deploy

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
)

// proxy is one entry of toxiproxy/toxiproxy.json, as toxiproxy reads it.
type proxy struct {
	Name     string `json:"name"`
	Listen   string `json:"listen"`
	Upstream string `json:"upstream"`
	Enabled  *bool  `json:"enabled"`
}

type proxyList []proxy

func loadProxies(t *testing.T) proxyList {
	t.Helper()
	b, err := os.ReadFile("toxiproxy/toxiproxy.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var l proxyList
	if err := dec.Decode(&l); err != nil {
		t.Fatalf("toxiproxy.json: %v", err)
	}
	return l
}

func (l proxyList) byListenPort(port int) (proxy, bool) {
	for _, p := range l {
		if strings.HasSuffix(p.Listen, ":"+strconv.Itoa(port)) {
			return p, true
		}
	}
	return proxy{}, false
}

// TestToxiproxyFrontsEveryPath checks that every service reaches its
// database and Kafka through a proxy of its own path (so one can be cut
// alone), that each proxy forwards to the right place, and that the broker
// advertises the proxy's address (clients reconnect to what it advertises).
func TestToxiproxyFrontsEveryPath(t *testing.T) {
	p := loadCompose(t)
	proxies := loadProxies(t)

	seen := map[string]bool{}
	for _, pr := range proxies {
		if pr.Name == "" || pr.Upstream == "" {
			t.Errorf("proxy %+v: name and upstream are required", pr)
		}
		if pr.Enabled != nil && !*pr.Enabled {
			t.Errorf("proxy %s is disabled at start", pr.Name)
		}
		if host, _ := splitHostPort(t, pr.Listen); host != "0.0.0.0" {
			t.Errorf("proxy %s listens on %s: other containers cannot reach it", pr.Name, pr.Listen)
		}
		if seen[pr.Listen] {
			t.Errorf("two proxies listen on %s", pr.Listen)
		}
		seen[pr.Listen] = true
	}

	kafkaEnv := env(composeService(t, p, kafkaService))
	listeners := kafkaListeners(t, kafkaEnv["KAFKA_LISTENERS"])
	advertised := kafkaListeners(t, kafkaEnv["KAFKA_ADVERTISED_LISTENERS"])

	used := map[string]string{} // proxy name -> service (for DB proxies)
	usedAny := map[string]bool{}
	for _, spec := range specs {
		cfg := serviceConfig(t, p, spec)

		host, port := dbAddr(t, cfg.DatabaseURL)
		if host != proxyService {
			t.Errorf("%s: DATABASE_URL goes to %s, not through %s", spec.Name, host, proxyService)
		} else if pr, ok := proxies.byListenPort(port); !ok {
			t.Errorf("%s: DATABASE_URL port %d: no proxy listens there", spec.Name, port)
		} else {
			if other, ok := used[pr.Name]; ok {
				t.Errorf("%s and %s share proxy %s: cutting one database would cut both", spec.Name, other, pr.Name)
			}
			used[pr.Name] = spec.Name
			usedAny[pr.Name] = true
			if pr.Upstream != pgService+":5432" {
				t.Errorf("%s: proxy %s forwards to %s, want %s:5432", spec.Name, pr.Name, pr.Upstream, pgService)
			}
		}

		for _, b := range cfg.Brokers {
			host, port := splitHostPort(t, b)
			if host != proxyService {
				t.Errorf("%s: broker %s is not reached through %s", spec.Name, b, proxyService)
				continue
			}
			pr, ok := proxies.byListenPort(port)
			if !ok {
				t.Errorf("%s: broker %s: no proxy listens on port %d", spec.Name, b, port)
				continue
			}
			usedAny[pr.Name] = true
			// The broker must advertise exactly this address on some
			// listener, and that listener must be what the proxy forwards to.
			var name string
			for n, addr := range advertised {
				if addr == b {
					name = n
				}
			}
			if name == "" {
				t.Errorf("%s: the broker advertises %v, not the proxy address %s: clients would bypass the proxy", spec.Name, advertised, b)
				continue
			}
			_, listenPort := splitHostPort(t, listeners[name])
			if want := kafkaService + ":" + strconv.Itoa(listenPort); pr.Upstream != want {
				t.Errorf("%s: proxy %s forwards to %s, want the broker's %s listener %s", spec.Name, pr.Name, pr.Upstream, name, want)
			}
		}
	}
	for _, pr := range proxies {
		if !usedAny[pr.Name] {
			t.Errorf("proxy %s is used by no service", pr.Name)
		}
	}

	// toxiproxy loads this very file, and its healthcheck waits for the
	// proxy it creates last.
	tp := composeService(t, p, proxyService)
	var configPath string
	for _, arg := range tp.Command {
		if v, ok := strings.CutPrefix(arg, "-config="); ok {
			configPath = v
		}
	}
	if !mounts(tp, "toxiproxy/toxiproxy.json", configPath) {
		t.Errorf("%s: -config=%q is not toxiproxy/toxiproxy.json mounted", proxyService, configPath)
	}
	if hc := tp.HealthCheck; hc == nil || !slices.Contains(hc.Test, proxies[len(proxies)-1].Name) {
		t.Errorf("%s: healthcheck %v does not look for the last proxy, %s", proxyService, hc, proxies[len(proxies)-1].Name)
	}
}

// mounts reports whether the service bind-mounts the file or directory at
// relPath (relative to deploy/) at target.
func mounts(s types.ServiceConfig, relPath, target string) bool {
	for _, v := range s.Volumes {
		if v.Type == "bind" && strings.HasSuffix(v.Source, "/deploy/"+relPath) && v.Target == target {
			return true
		}
	}
	return false
}

// dbName returns the database, user and password of a DATABASE_URL.
func dbName(t *testing.T, rawURL string) (db, user, password string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	password, _ = u.User.Password()
	return strings.TrimPrefix(u.Path, "/"), u.User.Username(), password
}
