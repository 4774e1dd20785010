package clock

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestOffsetFileMovesEveryReader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock")
	a, err := NewOffsetFile(path) // absent: offset 0
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewOffsetFile(path)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if got := a.Now(); got.Before(before) || got.After(time.Now()) {
		t.Fatalf("offset 0: %s, want the wall clock", got)
	}
	const jump = 40 * 24 * time.Hour
	if err := SetOffset(path, jump); err != nil {
		t.Fatal(err)
	}
	lo := time.Now().Add(jump)
	for _, c := range []*OffsetFile{a, b} {
		if got := c.Now(); got.Before(lo) || got.After(time.Now().Add(jump)) {
			t.Fatalf("after SetOffset(%s): %s, want the wall clock plus the offset", jump, got)
		}
	}
	// a smaller offset never moves a clock back
	last := a.Now()
	if err := SetOffset(path, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := a.Now(); got.Before(last) {
		t.Fatalf("went back from %s to %s", last, got)
	}
	// a garbled file keeps the last offset read
	if err := SetOffset(path, 2*jump); err != nil {
		t.Fatal(err)
	}
	b.Now()
	if err := os.WriteFile(path, []byte("soon"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := b.Now(); got.Before(lo.Add(jump)) {
		t.Fatalf("garbled file: %s, want the last offset kept", got)
	}
}

func TestNewOffsetFileRefusesAGarbledFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clock")
	if err := os.WriteFile(path, []byte("1h"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewOffsetFile(path); err == nil {
		t.Fatal("a file of 1h: want an error (nanoseconds only)")
	}
}
