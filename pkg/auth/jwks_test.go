package auth_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
)

// jwksHandler serves key's JWKS document, counting the reads.
func jwksHandler(t *testing.T, hits *atomic.Int64) http.HandlerFunc {
	doc, err := json.Marshal(auth.JWKS{Keys: []auth.JWK{auth.PublicJWK(key)}})
	if err != nil {
		t.Fatal(err)
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(doc)
	}
}

// A JWKS document named by an https URL is never read over plain http: a
// redirect from the https server to http is refused (the service does not
// start) and the http server is never asked, while a redirect to another
// https URL is followed. The control shows what the test guards against: a
// client like http.DefaultClient (trusting the test's CA) follows the same
// redirect and reads the keys in the clear.
func TestJWKSIsNotReadThroughARedirectToHTTP(t *testing.T) {
	var plainHits, direct atomic.Int64
	plain := httptest.NewServer(jwksHandler(t, &plainHits))
	defer plain.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/to-http", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL+"/jwks.json", http.StatusFound)
	})
	mux.HandleFunc("/to-https", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/jwks.json", http.StatusFound)
	})
	mux.Handle("/jwks.json", jwksHandler(t, &direct))
	secure := httptest.NewTLSServer(mux)
	defer secure.Close()
	roots := x509.NewCertPool()
	roots.AddCert(secure.Certificate())
	restore := auth.SetJWKSClient(auth.NewJWKSClient(roots))
	defer restore()

	config := func(path string) auth.Config {
		return auth.Config{Service: "billing", Issuer: issuer, JWKS: secure.URL + path}
	}
	_, err := auth.New(config("/to-http"))
	if err == nil || !strings.Contains(err.Error(), "refused a redirect to http://") {
		t.Fatalf("redirected from https to http: %v, want the redirect refused", err)
	}
	if n := plainHits.Load(); n != 0 {
		t.Fatalf("the plain-http server was read %d times, want never", n)
	}

	// Over https, directly or redirected, the document is read.
	for _, path := range []string{"/jwks.json", "/to-https"} {
		k, err := auth.New(config(path))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if _, err := k.Verify(sign(t, key, claims("alice", auth.RoleOperator, "", time.Hour))); err != nil {
			t.Fatalf("%s: a token of the document's key: %v", path, err)
		}
	}
	if n := direct.Load(); n != 2 {
		t.Fatalf("the https document was read %d times, want 2", n)
	}

	// The control: http.DefaultClient's behaviour (its redirect policy and
	// proxy, only the test's CA added) reads the keys from plain http.
	auth.SetJWKSClient(&http.Client{Transport: &http.Transport{
		Proxy: http.ProxyFromEnvironment, TLSClientConfig: &tls.Config{RootCAs: roots},
	}})
	if _, err := auth.New(config("/to-http")); err != nil || plainHits.Load() != 1 {
		t.Fatalf("control: a default client read the plain-http server %d times (%v), want once, successfully",
			plainHits.Load(), err)
	}
}

// jwksProxyChild, set, makes TestJWKSReadIgnoresTheEnvironmentsProxy the
// child process it starts.
const jwksProxyChild = "AUTH_TEST_JWKS_PROXY_CHILD"

// A JWKS read does not go through the proxy the environment names
// (HTTPS_PROXY): the document comes from the host the URL names or not at
// all. Run in a child process because net/http reads the proxy variables
// once per process (the first request wins) and never proxies a loopback
// host: the child names its proxy before any request and asks for
// https://jwks.invalid, which resolves nowhere, so only a proxy could answer.
func TestJWKSReadIgnoresTheEnvironmentsProxy(t *testing.T) {
	if os.Getenv(jwksProxyChild) != "" {
		_, err := auth.LoadJWKS("https://jwks.invalid/jwks.json")
		fmt.Printf("jwks-child-result: %v\n", err)
		return
	}
	var proxied atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied.Add(1)
		http.Error(w, "the test's proxy", http.StatusBadGateway)
	}))
	defer proxy.Close()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestJWKSReadIgnoresTheEnvironmentsProxy$", "-test.count=1")
	cmd.Env = append(os.Environ(), jwksProxyChild+"=1",
		"HTTPS_PROXY="+proxy.URL, "https_proxy="+proxy.URL, "NO_PROXY=", "no_proxy=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "jwks-child-result: read JWKS") {
		t.Fatalf("the child read no JWKS, or read one from nowhere:\n%s", out)
	}
	if n := proxied.Load(); n != 0 {
		t.Fatalf("the environment's proxy was asked %d times, want never:\n%s", n, out)
	}
	t.Logf("child: %s", strings.TrimSpace(string(out)))
}
