package service

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/clock"
)

// CLOCK_OFFSET_FILE (decision 0015): the test clock where the development
// key is accepted, refused by a production configuration.
func TestClockConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "clock")
	const offset = 45 * 24 * time.Hour
	if err := clock.SetOffset(file, offset); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) *Env { return NewEnvFrom(m) }
	for _, c := range []Config{
		{HTTPAddr: "127.0.0.1:8080"},               // production keys (issuer and JWKS)
		{HTTPAddr: ":8080", DevKey: true},          // not loopback (LoadConfig refuses it too)
		{HTTPAddr: "10.0.0.5:8080", DevKey: false}, // production on a private address
	} {
		_, err := loadClock(env(map[string]string{"CLOCK_OFFSET_FILE": file}), c)
		if err == nil || !strings.Contains(err.Error(), "CLOCK_OFFSET_FILE: a test clock is accepted only with AUTH_DEV_KEY=true on a loopback listener") {
			t.Fatalf("%+v with CLOCK_OFFSET_FILE: err %v, want it refused by name", c, err)
		}
	}
	dev := Config{HTTPAddr: "127.0.0.1:8080", DevKey: true}
	now, err := loadClock(env(map[string]string{"CLOCK_OFFSET_FILE": file}), dev)
	if err != nil {
		t.Fatal(err)
	}
	lo := time.Now().Add(offset)
	if got := now(); got.Before(lo) || got.After(time.Now().Add(offset)) {
		t.Fatalf("test clock: %s, want the wall clock plus %s", got, offset)
	}
	if _, err := loadClock(env(map[string]string{"CLOCK_OFFSET_FILE": filepath.Join(t.TempDir(), "absent")}), dev); err != nil {
		t.Fatalf("an absent file (offset 0): %v", err)
	}
	for _, c := range []Config{dev, {HTTPAddr: ":8080"}} {
		now, err := loadClock(env(map[string]string{}), c)
		if err != nil {
			t.Fatal(err)
		}
		if got := now(); time.Until(got).Abs() > time.Minute {
			t.Fatalf("unset: %s, want the wall clock", got)
		}
	}
}
