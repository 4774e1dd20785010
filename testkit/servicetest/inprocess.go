package servicetest

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/pkg/service"
)

// Services are services running in the test process through service.Run,
// the path their mains take, each on a fresh database of its own (NewDB)
// and a free loopback address, all on the same brokers, each with the
// others' URLs in SERVICE_URLS and the development key accepted.
type Services struct {
	t       testing.TB
	Brokers []string
	env     map[string]string
	names   []string
	addrs   map[string]string
	dbs     map[string]string
	procs   map[string]*process
}

type process struct {
	stop context.CancelFunc
	done chan error
}

// StartServices starts specs on brokers, with env added to every
// service's environment (over the defaults: LOG_LEVEL=error), and returns
// once each answers /readyz; they stop when the test ends.
func StartServices(t testing.TB, brokers []string, env map[string]string, specs ...service.Spec) *Services {
	t.Helper()
	s := &Services{t: t, Brokers: brokers, env: env, addrs: map[string]string{}, dbs: map[string]string{},
		procs: map[string]*process{}}
	for _, spec := range specs {
		s.names = append(s.names, spec.Name)
		s.addrs[spec.Name] = FreeAddr(t)
		s.dbs[spec.Name] = NewDB(t, spec)
	}
	t.Cleanup(func() {
		for name := range s.procs {
			s.Stop(name)
		}
	})
	for _, spec := range specs {
		s.Start(spec)
	}
	return s
}

// URL is the base URL of the service name.
func (s *Services) URL(name string) string { return "http://" + s.addrs[name] }

// URLs are the services' base URLs by name.
func (s *Services) URLs() map[string]string {
	out := make(map[string]string, len(s.names))
	for _, name := range s.names {
		out[name] = s.URL(name)
	}
	return out
}

// DatabaseURLs are the services' database URLs by name.
func (s *Services) DatabaseURLs() map[string]string { return maps.Clone(s.dbs) }

// Pool returns a pool on the database of the service name, closed when the
// test ends.
func (s *Services) Pool(name string) *pgxpool.Pool {
	s.t.Helper()
	pool, err := pgxpool.New(context.Background(), s.dbs[name]) // outlives t.Context: closed in Cleanup
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(pool.Close)
	return pool
}

// Start runs spec on its service's database and address (after Stop: the
// same service again, or a new release of it) and waits for /readyz.
func (s *Services) Start(spec service.Spec) {
	s.t.Helper()
	var urls []string
	for _, name := range s.names {
		urls = append(urls, name+"="+s.URL(name))
	}
	vars := map[string]string{"LOG_LEVEL": "error"}
	maps.Copy(vars, s.env)
	maps.Copy(vars, map[string]string{
		"DATABASE_URL": s.dbs[spec.Name], "KAFKA_BROKERS": strings.Join(s.Brokers, ","), "HTTP_ADDR": s.addrs[spec.Name],
		"AUTH_DEV_KEY": "true", "SERVICE_URLS": strings.Join(urls, ","),
	})
	ctx, stop := context.WithCancel(context.Background()) // runs until Stop, in Cleanup at the latest
	p := &process{stop: stop, done: make(chan error, 1)}
	go func() { p.done <- service.Run(ctx, spec, nil, service.NewEnvFrom(vars)) }()
	s.procs[spec.Name] = p
	deadline := time.Now().Add(time.Minute)
	for !s.ready(spec.Name) {
		select {
		case err := <-p.done:
			delete(s.procs, spec.Name)
			s.t.Fatalf("%s stopped: %v", spec.Name, err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s not ready after a minute", spec.Name)
		}
	}
}

func (s *Services) ready(name string) bool {
	resp, err := http.Get(s.URL(name) + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Stop stops the service name and waits for it, at most 30 s.
func (s *Services) Stop(name string) {
	p := s.procs[name]
	delete(s.procs, name)
	p.stop()
	select {
	case err := <-p.done:
		if err != nil {
			s.t.Errorf("%s: %v", name, err)
		}
	case <-time.After(30 * time.Second):
		s.t.Errorf("%s did not stop", name)
	}
}
