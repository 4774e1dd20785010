package httpx

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A handler that extends its deadline runs past the server's request
// timeout and answers; one that does not is cut.
func TestExtendDeadline(t *testing.T) {
	for _, extend := range []bool{true, false} {
		h := Deadline(50 * time.Millisecond)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if extend {
				ExtendDeadline(w, r, 5*time.Second)
			}
			select {
			case <-time.After(300 * time.Millisecond):
				w.WriteHeader(http.StatusOK)
			case <-r.Context().Done():
				w.WriteHeader(http.StatusInternalServerError)
			}
		}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		want := http.StatusServiceUnavailable
		if extend {
			want = http.StatusOK
		}
		if rec.Code != want {
			t.Errorf("extend %v: %d, want %d", extend, rec.Code, want)
		}
	}
}
