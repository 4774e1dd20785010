package querytest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

// Call sends a JSON request (body marshalled when not nil, header set) and
// decodes a 2xx JSON answer into out; it returns the status and the
// problem code, if any.
func Call(t testing.TB, c *http.Client, method, url string, header map[string]string, body, out any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, url, b, err)
		}
	}
	var p struct{ Code string }
	_ = json.Unmarshal(b, &p)
	return resp.StatusCode, p.Code
}
