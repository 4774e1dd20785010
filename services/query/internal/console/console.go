// Package console is the operator console the query service serves at
// /console: server-rendered HTML pages (html/template, embedded, no script,
// no external asset) over the same operator package the operator API uses —
// recovery per service, the quarantine view and its redrives with their
// audit, dead letters and their redrive, reconciliation per tenant and
// period, webhook intents and their retry — and the tenant summaries and
// the meter catalog (read only) of the app package, with each tenant's
// subscriptions and credit grants (read only) from the billing and invoice
// services. It holds no SQL of its own.
//
// The operator signs in with a bearer token, kept in an HttpOnly,
// SameSite=Strict cookie (Secure over TLS, or with Config.SecureCookie) and verified on every request
// with the service's key set and the operator role, as auth.Middleware does
// for /v1/operator/. Every POST behind the sign-in carries a token bound to
// that cookie (see session.go).
package console

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/services/query/internal/app"
	"github.com/usagebilling/billing/services/query/internal/operator"
)

// Console serves the operator console.
type Console struct {
	op       *operator.Operator
	hooks    *operator.Webhooks
	accounts *operator.Accounts
	reader   *app.App
	keys     auth.Keys
	cfg      Config
	pages    pages
	log      *slog.Logger
}

// Config is the console's settings (query's QUERY_CONSOLE_*).
type Config struct {
	// CSRFKey signs the forms' tokens (at least MinCSRFKey bytes). Every
	// replica behind one address needs the same key, so that a form one
	// rendered can be posted to another; nil: a random key of this
	// process, for a single replica.
	CSRFKey []byte
	// SecureCookie marks the session cookie Secure on plain HTTP too: for
	// TLS terminated in front of the service. Over TLS it is Secure anyway.
	SecureCookie bool
}

// MinCSRFKey is the shortest CSRF key Config takes, in bytes.
const MinCSRFKey = 32

// New returns the console over op, hooks, accounts and reader, admitting
// operator tokens keys verifies.
func New(op *operator.Operator, hooks *operator.Webhooks, accounts *operator.Accounts, reader *app.App, keys auth.Keys,
	cfg Config, log *slog.Logger) (*Console, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.CSRFKey == nil:
		cfg.CSRFKey = make([]byte, MinCSRFKey)
		_, _ = rand.Read(cfg.CSRFKey) // never fails (crypto/rand)
	case len(cfg.CSRFKey) < MinCSRFKey:
		return nil, fmt.Errorf("console: a CSRF key of %d bytes; want at least %d", len(cfg.CSRFKey), MinCSRFKey)
	}
	return &Console{op: op, hooks: hooks, accounts: accounts, reader: reader, keys: keys, cfg: cfg, pages: parsePages(), log: log}, nil
}

// Routes mounts the console under /console on r.
func (c *Console) Routes(r chi.Router) {
	r.Route("/console", func(r chi.Router) {
		r.Use(secureHeaders)
		r.Method(http.MethodGet, "/sign-in", auth.Public(c.signInForm))
		r.Method(http.MethodPost, "/sign-in", auth.Public(c.signIn))
		r.Group(func(r chi.Router) {
			r.Use(c.session)
			r.Method(http.MethodGet, "/", auth.Allow(c.recovery, auth.RoleOperator))
			r.Method(http.MethodPost, "/sign-out", auth.Allow(c.signOut, auth.RoleOperator))
			r.Method(http.MethodGet, "/quarantine", auth.Allow(c.quarantine, auth.RoleOperator))
			r.Method(http.MethodPost, "/redrives", auth.Allow(c.submit(events.ActionRedrive), auth.RoleOperator))
			r.Method(http.MethodGet, "/redrives/{redriveId}", auth.Allow(c.redrive, auth.RoleOperator))
			r.Method(http.MethodGet, "/dead-letters", auth.Allow(c.deadLetters, auth.RoleOperator))
			r.Method(http.MethodPost, "/dead-letters/release", auth.Allow(c.submit(events.ActionRedriveDeadLetter), auth.RoleOperator))
			r.Method(http.MethodGet, "/reconciliation", auth.Allow(c.reconciliation, auth.RoleOperator))
			r.Method(http.MethodGet, "/tenants", auth.Allow(c.tenants, auth.RoleOperator))
			r.Method(http.MethodGet, "/catalog", auth.Allow(c.catalogPage, auth.RoleOperator))
			r.Method(http.MethodGet, "/webhooks", auth.Allow(c.webhooks, auth.RoleOperator))
			r.Method(http.MethodPost, "/webhooks/{intentId}/retry", auth.Allow(c.retryIntent, auth.RoleOperator))
		})
	})
}

// secureHeaders: no caching of operator data, no framing, no script, forms
// post only to this origin.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Security-Policy",
			"default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}
