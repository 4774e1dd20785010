package query_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/usagebilling/billing/pkg/service"
	"github.com/usagebilling/billing/services/query"
)

// The console's settings as Build reads them: without a key file each
// process makes its own key; a file's key (trimmed) is shared by whoever is
// given the file, and one shorter than 32 bytes, or a file that cannot be
// read, is refused naming the variable.
func TestConsoleSettings(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("csrf.key", strings.Repeat("ab", 32)+"\n") // openssl rand -hex 32
	short := write("short.key", strings.Repeat("a", 31)+"\n")
	cases := []struct {
		name           string
		env            map[string]string
		shared, secure bool
		err            string
	}{
		{"defaults", map[string]string{}, false, false, ""},
		{"key file and Secure cookie", map[string]string{"QUERY_CONSOLE_CSRF_KEY_FILE": good, "QUERY_CONSOLE_SECURE_COOKIE": "true"}, true, true, ""},
		{"short key", map[string]string{"QUERY_CONSOLE_CSRF_KEY_FILE": short}, false, false, "QUERY_CONSOLE_CSRF_KEY_FILE " + short + ": 31 bytes, want at least 32"},
		{"no such file", map[string]string{"QUERY_CONSOLE_CSRF_KEY_FILE": filepath.Join(dir, "none")}, false, false, "QUERY_CONSOLE_CSRF_KEY_FILE: "},
		{"not a bool", map[string]string{"QUERY_CONSOLE_SECURE_COOKIE": "yes please"}, false, false, "QUERY_CONSOLE_SECURE_COOKIE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			shared, secure, err := query.ConsoleSettings(service.NewEnvFrom(c.env))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one with %q", err, c.err)
				}
				return
			}
			if err != nil || shared != c.shared || secure != c.secure {
				t.Errorf("shared key %v, Secure cookie %v, err %v; want %v, %v, none", shared, secure, err, c.shared, c.secure)
			}
		})
	}
}
