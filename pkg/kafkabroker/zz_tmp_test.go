package kafkabroker

import (
	"log/slog"
	"os"
	"testing"
	"time"
)

func TestTmpEnsureJars(t *testing.T) {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	began := time.Now()
	lib, err := EnsureJars(t.Context(), "", "", log)
	t.Log(lib, err, time.Since(began))
}
