package soak

import (
	"testing"

	"github.com/usagebilling/billing/e2e/chaos"
)

// A run that did not reconcile says so in its table: unknown, not zero.
func TestReconRowOfARunNotReconciled(t *testing.T) {
	row := &chaos.Row{Facts: 3600000, Requests: 145585, DupSubmitted: 23931}
	if got, want := reconRow(row), "| 3600000 | 145585 | 23931 | 0 | 0 | 0 | 0 | ? | ? | ? |"; got != want {
		t.Fatalf("not reconciled:\n got %s\nwant %s", got, want)
	}
	row.Reconciled, row.Lost = true, 2
	if got, want := reconRow(row), "| 3600000 | 145585 | 23931 | 0 | 0 | 0 | 0 | 2 | 0 | 0 |"; got != want {
		t.Fatalf("reconciled:\n got %s\nwant %s", got, want)
	}
}
