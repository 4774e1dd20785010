package auth_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
)

// A command's actor is its verified bearer's subject; without claims, or
// with claims naming no subject, it is 401 unauthorized.
func TestActorOf(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	if _, p := auth.ActorOf(r); p == nil || p.Status != http.StatusUnauthorized || p.Code != "unauthorized" {
		t.Fatalf("no claims: %+v, want 401 unauthorized", p)
	}
	anon := r.WithContext(auth.WithClaims(r.Context(), auth.NewClaims("", auth.RoleTenant, "acme", time.Hour)))
	if _, p := auth.ActorOf(anon); p == nil || p.Status != http.StatusUnauthorized {
		t.Fatalf("claims without a subject: %+v, want 401", p)
	}
	signed := r.WithContext(auth.WithClaims(r.Context(), auth.NewClaims("alice", auth.RoleTenant, "acme", time.Hour)))
	if actor, p := auth.ActorOf(signed); p != nil || actor != "alice" {
		t.Fatalf("actor %q, problem %+v, want alice", actor, p)
	}
}
