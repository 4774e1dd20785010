package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			w.WriteHeader(http.StatusOK)
			return
		}
		http.Error(w, `{"database":"connection refused"}`, http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)

	tests := []struct {
		url     string
		wantErr bool
	}{
		{srv.URL + "/readyz", false},
		{srv.URL + "/other", true},
		{"http://127.0.0.1:1/readyz", true}, // nothing listens there
		{"::not a url", true},
	}
	for _, tt := range tests {
		err := probe(t.Context(), srv.Client(), tt.url)
		if (err != nil) != tt.wantErr {
			t.Errorf("probe(%q) = %v, want error %v", tt.url, err, tt.wantErr)
		}
	}
}
