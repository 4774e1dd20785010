package console

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"time"

	"github.com/usagebilling/billing/services/query/internal/operator"
)

//go:embed templates/*.html
var templateFS embed.FS

// pages are the console's templates by page name, each with the layout.
type pages map[string]*template.Template

var pageNames = []string{"sign-in", "error", "recovery", "quarantine", "redrive", "dead-letters", "reconciliation", "tenants", "catalog", "webhooks"}

var funcs = template.FuncMap{
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"age": func(seconds float64) string {
		if seconds <= 0 {
			return "—"
		}
		return (time.Duration(seconds) * time.Second).String()
	},
}

func parsePages() pages {
	p := pages{}
	for _, name := range pageNames {
		p[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(templateFS,
			"templates/layout.html", "templates/"+name+".html"))
	}
	return p
}

// view is what the layout renders around a page.
type view struct {
	Title   string
	Page    string
	Actor   string // empty before sign-in
	CSRF    string
	Refresh int // seconds; 0: the page does not reload itself
	Data    any
}

// render writes page with data, or a 500 if it cannot be rendered.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page, title string, data any) {
	s := sessionFrom(r.Context())
	v := view{Title: title, Page: page, Actor: s.claims.Subject, CSRF: s.csrf, Data: data}
	if rv, ok := data.(redriveView); ok && rv.Pending() {
		v.Refresh = 1
	}
	var buf bytes.Buffer
	if err := c.pages[page].ExecuteTemplate(&buf, "layout", v); err != nil {
		c.log.ErrorContext(r.Context(), "render console page", "page", page, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type errorView struct {
	Message string
}

// invalid renders a 400 page naming what is wrong with the request.
func (c *Console) invalid(w http.ResponseWriter, r *http.Request, format string, args ...any) {
	c.render(w, r, http.StatusBadRequest, "error", "Invalid request", errorView{Message: fmt.Sprintf(format, args...)})
}

// fail renders an operator error as the operator API maps it.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	status, msg := http.StatusInternalServerError, "Internal error: "+what+" failed (see the service log)."
	if up, ok := operator.IsUpstreamProblem(err); ok {
		c.render(w, r, up.Status, "error", "Refused", errorView{Message: up.Error()})
		return
	}
	switch {
	case errors.Is(err, operator.ErrUnknownService):
		status, msg = http.StatusBadRequest, err.Error()
	case errors.Is(err, operator.ErrNotFound):
		status, msg = http.StatusNotFound, "No redrive with that id."
	case errors.Is(err, operator.ErrEventNotFound):
		status, msg = http.StatusNotFound, err.Error()
	case errors.Is(err, operator.ErrUpstream):
		status, msg = http.StatusBadGateway, err.Error()
	}
	if status >= 500 {
		c.log.ErrorContext(r.Context(), "console: "+what, "err", err, "status", status)
	}
	c.render(w, r, status, "error", "Error", errorView{Message: msg})
}
