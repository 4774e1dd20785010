package servicetest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usagebilling/billing/testkit/freeport"
)

// FreeAddr returns a loopback address nothing listens on at the moment,
// outside the ports the kernel gives outgoing connections (freeport), so a
// service restarted on it finds it free again.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// Eventually polls cond every 100 ms until it holds; the test fails when
// it still does not after timeout. It is for what the code under test
// cannot signal: an HTTP answer of a service, a row in another service's
// database, a message on the broker.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond) // polled: see above
	}
}

// Background runs each fn until the test ends, then stops it and checks it
// returned nil. The returned function reports an fn that returned early.
func Background(t testing.TB, fns ...func(context.Context) error) (early func() error) {
	t.Helper()
	// Not t.Context(): the work runs until the cleanup below stops it.
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, len(fns))
	var first atomic.Pointer[error]
	for _, fn := range fns {
		go func() {
			err := fn(ctx)
			if ctx.Err() == nil {
				if err == nil {
					err = errors.New("returned before it was stopped")
				}
				first.CompareAndSwap(nil, &err)
			}
			done <- err
		}()
	}
	t.Cleanup(func() {
		stop()
		for range fns {
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("background: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("background work did not stop")
				return
			}
		}
	})
	return func() error {
		if err := first.Load(); err != nil {
			return *err
		}
		return nil
	}
}
