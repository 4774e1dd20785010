package stack

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestReadyMeansThisService: a port on which another service answers ready
// is not the instance ready; once the answer names the instance's own
// service, it is.
func TestReadyMeansThisService(t *testing.T) {
	var answer atomic.Value
	answer.Store(`{"status":"ready","service":"query","database":"ok"}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(answer.Load().(string)))
	}))
	defer srv.Close()
	in := &instance{
		service: "usage", port: srv.Listener.Addr().(*net.TCPAddr).Port,
		logPath: filepath.Join(t.TempDir(), "usage.0.log"), log: slog.New(slog.DiscardHandler),
		exited: make(chan struct{}),
	}
	// The wait runs to its end (the other service keeps answering): long
	// enough for an answer on a busy machine.
	err := in.waitReady(t.Context(), 3*time.Second)
	if err == nil || !strings.Contains(err.Error(), "query answers on the port, not usage") {
		t.Fatalf("another service answering: %v, want not ready, naming the one that answers", err)
	}
	if in.ready {
		t.Fatal("marked ready on another service's answer")
	}

	answer.Store(`{"status":"ready","service":"usage","database":"ok"}`)
	if err := in.waitReady(t.Context(), 5*time.Second); err != nil || !in.ready {
		t.Fatalf("its own service answering: %v, ready %v; want ready", err, in.ready)
	}
}
