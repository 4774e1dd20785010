// Command probe is the health check of the service images: it GETs a URL and
// exits 0 on 200 OK, 1 otherwise. The images are distroless (no shell, no
// curl), so compose and Kubernetes run this instead:
//
//	probe http://127.0.0.1:8081/readyz
//
// It imports only the standard library, so the Dockerfiles build it from
// this one file, outside any module.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: probe URL")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	// No proxy from the environment: the probe talks to its own container.
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	if err := probe(ctx, client, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

// probe returns nil when url answers 200 OK.
func probe(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, body)
	}
	return nil
}
