package service

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestDefaultGC: a service runs its collector at gcPercent unless GOGC says
// otherwise (the runtime has then read it already).
func TestDefaultGC(t *testing.T) {
	was := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(was) })

	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	defaultGC()
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("GOGC unset: the collector's target is %d, want %d", got, gcPercent)
	}

	t.Setenv("GOGC", "150")
	defaultGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC set: the target was changed to %d; the environment's must stand", got)
	}
}
