package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/usagebilling/billing/services/invoice/internal/webhook/webhookdb"
)

// Errors of the endpoint commands.
var (
	ErrNotFound         = errors.New("not found")
	ErrTooManyEndpoints = errors.New("too many webhook endpoints")
	// ErrInvalidURL matches every InvalidURLError.
	ErrInvalidURL = errors.New("invalid webhook URL")
)

// InvalidURLError says why a webhook URL is refused.
type InvalidURLError struct{ Reason string }

func (e *InvalidURLError) Error() string { return "invalid webhook URL: " + e.Reason }

// Unwrap makes every InvalidURLError match errors.Is(err, ErrInvalidURL).
func (e *InvalidURLError) Unwrap() error { return ErrInvalidURL }

// MaxURL is the longest URL an endpoint may have, in bytes.
const MaxURL = 2048

// CheckURL accepts an absolute http or https URL with a host, a port (when
// given) from 1 to 65535 in plain digits, no credentials (user:password@)
// and no fragment. Where it may point is the Egress's to check
// (CheckEndpoint).
func CheckURL(raw string) (*url.URL, error) {
	if raw == "" || len(raw) > MaxURL {
		return nil, &InvalidURLError{fmt.Sprintf("want 1 to %d bytes", MaxURL)}
	}
	if strings.ContainsAny(raw, " \t\r\n") {
		return nil, &InvalidURLError{"contains white space"}
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, &InvalidURLError{"does not parse"}
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, &InvalidURLError{"the scheme must be http or https"}
	case u.Host == "" || u.Hostname() == "":
		return nil, &InvalidURLError{"has no host"}
	case u.User != nil:
		return nil, &InvalidURLError{"must not carry credentials"}
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return nil, &InvalidURLError{"must not have a fragment"}
	case !validPort(u):
		return nil, &InvalidURLError{"the port must be 1 to 65535"}
	}
	return u, nil
}

// validPort reports whether u's port, if any, is 1-65535 written without
// leading zeros; "host:" (a colon with no port) is refused.
func validPort(u *url.URL) bool {
	p := u.Port()
	if p == "" {
		return !strings.HasSuffix(u.Host, ":")
	}
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == p
}

// Endpoint is a tenant's webhook endpoint. Secret is set only in the answer
// of Create: it is never read back.
type Endpoint struct {
	ID        uuid.UUID
	URL       string
	Secret    string
	CreatedBy string
	CreatedAt time.Time
}

// Endpoints manages the tenants' endpoints.
type Endpoints struct {
	pool   *pgxpool.Pool
	max    int
	egress *Egress
	keys   *SecretKeys
}

// NewEndpoints returns the endpoint commands on pool, with at most max
// active endpoints per tenant (each issued invoice makes one intent per
// endpoint: this bounds them), refusing the URLs egress refuses, storing
// the secrets sealed with keys (nil: as they are).
func NewEndpoints(pool *pgxpool.Pool, max int, egress *Egress, keys *SecretKeys) *Endpoints {
	return &Endpoints{pool: pool, max: max, egress: egress, keys: keys}
}

// Create registers an endpoint of tenant at rawURL, made by actor, with a
// new signing secret. A URL CheckURL refuses is an InvalidURLError; one
// the egress policy refuses (an address that is not public, http while
// only https is allowed) a RefusedError. Either writes nothing.
func (s *Endpoints) Create(ctx context.Context, tenantID, rawURL, actor string) (Endpoint, error) {
	u, err := CheckURL(rawURL)
	if err != nil {
		return Endpoint{}, err
	}
	if err := s.egress.CheckEndpoint(ctx, u); err != nil {
		return Endpoint{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return Endpoint{}, fmt.Errorf("new endpoint id: %w", err)
	}
	secret, err := NewSecret()
	if err != nil {
		return Endpoint{}, fmt.Errorf("new signing secret: %w", err)
	}
	stored, err := s.keys.Seal(id, secret)
	if err != nil {
		return Endpoint{}, fmt.Errorf("seal the signing secret: %w", err)
	}
	ep := Endpoint{ID: id, URL: u.String(), Secret: secret, CreatedBy: actor}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := webhookdb.New(tx)
		if err := q.LockTenantEndpoints(ctx, tenantID); err != nil {
			return fmt.Errorf("lock endpoints of %s: %w", tenantID, err)
		}
		n, err := q.CountActiveEndpoints(ctx, tenantID)
		if err != nil {
			return fmt.Errorf("count endpoints of %s: %w", tenantID, err)
		}
		if n >= int64(s.max) {
			return fmt.Errorf("%w: tenant %s has %d, at most %d", ErrTooManyEndpoints, tenantID, n, s.max)
		}
		ep.CreatedAt, err = q.InsertEndpoint(ctx, webhookdb.InsertEndpointParams{
			EndpointID: id, TenantID: tenantID, Url: ep.URL, Secret: stored, CreatedBy: actor})
		if err != nil {
			return fmt.Errorf("insert endpoint: %w", err)
		}
		return nil
	})
	if err != nil {
		return Endpoint{}, err
	}
	ep.CreatedAt = ep.CreatedAt.UTC()
	return ep, nil
}

// List reads up to limit of tenant's active endpoints after id after (the
// zero id: from the first), in creation order. Secrets are not read.
func (s *Endpoints) List(ctx context.Context, tenantID string, after uuid.UUID, limit int32) ([]Endpoint, error) {
	rows, err := webhookdb.New(s.pool).ListEndpoints(ctx, webhookdb.ListEndpointsParams{
		TenantID: tenantID, After: after, MaxRows: limit})
	if err != nil {
		return nil, fmt.Errorf("list endpoints of %s: %w", tenantID, err)
	}
	out := make([]Endpoint, len(rows))
	for i, r := range rows {
		out[i] = Endpoint{ID: r.EndpointID, URL: r.Url, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt.UTC()}
	}
	return out, nil
}

// Delete deactivates tenant's endpoint id; its intents not yet delivered
// become failed (endpoint_deleted). An unknown or deleted id is ErrNotFound.
func (s *Endpoints) Delete(ctx context.Context, tenantID string, id uuid.UUID) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		q := webhookdb.New(tx)
		n, err := q.DeleteEndpoint(ctx, webhookdb.DeleteEndpointParams{TenantID: tenantID, EndpointID: id})
		if err != nil {
			return fmt.Errorf("delete endpoint %s: %w", id, err)
		}
		if n == 0 {
			return ErrNotFound
		}
		if _, err := q.FailOpenIntentsOfEndpoint(ctx, id); err != nil {
			return fmt.Errorf("end the intents of endpoint %s: %w", id, err)
		}
		return nil
	})
}
