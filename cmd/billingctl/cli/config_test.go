package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestDevWarning: the development key is signed with in silence against a
// stack on loopback (make up), and with a warning on stderr, never stdout,
// when a URL points elsewhere.
func TestDevWarning(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		warn string
	}{
		{"make up's defaults", map[string]string{}, ""},
		{"localhost", map[string]string{envURL: "http://localhost:9000"}, ""},
		{"IPv6 loopback", map[string]string{envURL: "http://[::1]:9000"}, ""},
		{"a gateway", map[string]string{envURL: "https://billing.example.com"}, "https://billing.example.com, which is not loopback"},
		{"one service elsewhere", map[string]string{"BILLINGCTL_QUERY_URL": "http://10.0.0.5:8085"}, "http://10.0.0.5:8085"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.env[envDev] = "true"
			c := configFromEnv(func(k string) string { return tc.env[k] })
			var out, errOut bytes.Buffer
			if _, err := c.client(roleOperator, IO{Out: &out, Err: &errOut}); err != nil {
				t.Fatal(err)
			}
			if out.Len() > 0 {
				t.Errorf("stdout: %q, want nothing", out.String())
			}
			switch {
			case tc.warn == "" && errOut.Len() > 0:
				t.Errorf("stderr: %q, want nothing", errOut.String())
			case tc.warn != "" && !strings.Contains(errOut.String(), tc.warn):
				t.Errorf("stderr: %q, want a warning naming %q", errOut.String(), tc.warn)
			}
		})
	}
}
