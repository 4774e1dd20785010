package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
)

// CookieName is the console's session cookie: the operator's bearer token.
const CookieName = "console_session"

// CSRFField is the form field every POST behind the sign-in carries.
const CSRFField = "csrf"

// maxForm bounds a form body, in bytes.
const maxForm = 64 << 10

// session is the signed-in operator of a request.
type session struct {
	claims auth.Claims
	csrf   string // the token this session's forms carry
}

type sessionKey struct{}

func sessionFrom(ctx context.Context) session {
	s, _ := ctx.Value(sessionKey{}).(session)
	return s
}

// errNotOperator: a valid token of another role.
var errNotOperator = errors.New("not an operator token")

// verify checks a token as auth.Middleware checks a bearer of /v1/operator/:
// the service's keys, then the operator role.
func (c *Console) verify(token string) (auth.Claims, error) {
	claims, err := c.keys.Verify(token)
	if err != nil {
		return auth.Claims{}, err
	}
	if !claims.Has(auth.RoleOperator) {
		return auth.Claims{}, errNotOperator
	}
	return claims, nil
}

// csrfToken is the form token of a session: an HMAC of its bearer token
// under the console's key (Config.CSRFKey), so it is bound to the cookie and cannot be
// made without reading it.
func (c *Console) csrfToken(bearer string) string {
	m := hmac.New(sha256.New, c.cfg.CSRFKey)
	m.Write([]byte("console-csrf\x00" + bearer))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// session admits a request with a valid operator cookie, and a POST only
// with its session's form token; without a session it redirects to the
// sign-in page, showing no data.
func (c *Console) session(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cookie, err := r.Cookie(CookieName)
		if err != nil {
			http.Redirect(w, r, "/console/sign-in", http.StatusSeeOther)
			return
		}
		claims, err := c.verify(cookie.Value)
		if err != nil {
			c.clearCookie(w, r)
			http.Redirect(w, r, "/console/sign-in?expired=1", http.StatusSeeOther)
			return
		}
		s := session{claims: claims, csrf: c.csrfToken(cookie.Value)}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			if !hmac.Equal([]byte(r.PostFormValue(CSRFField)), []byte(s.csrf)) {
				c.log.InfoContext(r.Context(), "console form refused: bad csrf token", "path", r.URL.Path, "sub", claims.Subject)
				c.render(w, r, http.StatusForbidden, "error", "Refused", errorView{
					Message: "This form was not sent from a page of this console session. Reload the page and try again."})
				return
			}
		}
		ctx := context.WithValue(r.Context(), sessionKey{}, s)
		next.ServeHTTP(w, r.WithContext(auth.WithClaims(ctx, claims)))
	})
}

type signInView struct {
	Message string
}

// signInForm: GET /console/sign-in.
func (c *Console) signInForm(w http.ResponseWriter, r *http.Request) {
	var v signInView
	if r.URL.Query().Get("expired") != "" {
		v.Message = "Your session ended or its token is no longer valid. Sign in again."
	}
	c.render(w, r, http.StatusOK, "sign-in", "Sign in", v)
}

// signIn: POST /console/sign-in token=<bearer>. An operator token becomes
// the session cookie (HttpOnly, SameSite=Strict, Secure over TLS, expiring
// with the token); any other is refused with the form again and no cookie.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		// There is no session yet to bind a form token to; a browser
		// names the page a cross-origin POST comes from.
		c.render(w, r, http.StatusForbidden, "sign-in", "Sign in", signInView{
			Message: "Sign in from this console's own sign-in page."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	token := strings.TrimSpace(r.PostFormValue("token"))
	token = strings.TrimSpace(strings.TrimPrefix(token, "Bearer "))
	claims, err := c.verify(token)
	switch {
	case errors.Is(err, errNotOperator):
		c.render(w, r, http.StatusForbidden, "sign-in", "Sign in", signInView{
			Message: "This token is valid but not an operator's: the console needs the operator role."})
		return
	case err != nil:
		c.log.InfoContext(r.Context(), "console sign-in refused", "err", err)
		c.render(w, r, http.StatusUnauthorized, "sign-in", "Sign in", signInView{
			Message: "This token is invalid or expired."})
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: token, Path: "/console", Expires: claims.ExpiresAt.Time,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || c.cfg.SecureCookie,
	})
	c.log.InfoContext(r.Context(), "console sign-in", "sub", claims.Subject)
	http.Redirect(w, r, "/console", http.StatusSeeOther)
}

// sameOrigin: the request names no Origin (not a browser's cross-origin
// POST) or this host's. It keeps another site from signing the browser in
// with a token of its choosing.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// signOut: POST /console/sign-out clears the cookie. The token itself stays
// valid until it expires (tokens are not revocable).
func (c *Console) signOut(w http.ResponseWriter, r *http.Request) {
	c.clearCookie(w, r)
	http.Redirect(w, r, "/console/sign-in", http.StatusSeeOther)
}

func (c *Console) clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: "", Path: "/console", MaxAge: -1, Expires: time.Unix(1, 0),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || c.cfg.SecureCookie,
	})
}
