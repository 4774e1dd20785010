// Package console is the operator console the query service serves at
// /console: server-rendered HTML pages (html/template, embedded, no script,
// no external asset) over the same operator package the operator API uses —
// recovery per service, the quarantine view and its redrives with their
// audit, dead letters and their redrive, reconciliation per tenant and
// period, webhook intents and their retry — and the tenant summaries and
// the meter catalog (read only) of the app package. It holds no SQL of
// its own.
//
// The operator signs in with a bearer token, kept in an HttpOnly,
// SameSite=Strict cookie (Secure over TLS) and verified on every request
// with the service's key set and the operator role, as auth.Middleware does
// for /v1/operator/. Every POST behind the sign-in carries a token bound to
// that cookie (see session.go).
package console

import (
	"crypto/rand"
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
	op      *operator.Operator
	hooks   *operator.Webhooks
	reader  *app.Reader
	keys    auth.Keys
	csrfKey []byte // signs the forms' tokens; new at each start
	pages   pages
	log     *slog.Logger
}

// New returns the console over op, hooks and reader, admitting operator
// tokens keys verifies.
func New(op *operator.Operator, hooks *operator.Webhooks, reader *app.Reader, keys auth.Keys, log *slog.Logger) *Console {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return &Console{op: op, hooks: hooks, reader: reader, keys: keys, csrfKey: key, pages: parsePages(), log: log}
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
