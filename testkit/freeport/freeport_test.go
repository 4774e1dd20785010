package freeport

import (
	"net"
	"strconv"
	"testing"
)

// The premise: a connection's local port blocks a listener on that port, so
// a server restarted on a port the kernel has meanwhile given to a client
// cannot start.
func TestAConnectionsLocalPortBlocksAListener(t *testing.T) {
	srv, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	port := c.LocalAddr().(*net.TCPAddr).Port
	if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
		l.Close()
		t.Fatalf("listened on port %d while a connection uses it as its local port", port)
	}
	if lo, hi, ok := ephemeralRange(); ok && (port < lo || port > hi) {
		t.Fatalf("the kernel gave a connection local port %d, outside its range %d-%d", port, lo, hi)
	}
}

func TestPortIsOutsideTheEphemeralRange(t *testing.T) {
	lo, hi, ok := ephemeralRange()
	if !ok {
		t.Fatal("no ephemeral range in /proc/sys/net/ipv4/ip_local_port_range")
	}
	seen := map[int]bool{}
	for range 50 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if p >= lo && p <= hi {
			t.Fatalf("port %d is inside the ephemeral range %d-%d", p, lo, hi)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		l.Close()
		seen[p] = true
	}
	if len(seen) < 40 {
		t.Fatalf("50 picks gave only %d distinct ports", len(seen))
	}
}

// A stack picks every port before it starts a server on any: no two picks
// of one process may return one port, though each is free when picked (CI
// once gave usage and query one port: usage could not bind, and the demo's
// requests for usage reached query). 3,000 picks from about 22,000 ports
// would repeat one a hundred times over by chance alone.
func TestPortNeverRepeatsInAProcess(t *testing.T) {
	seen := map[int]bool{}
	for i := range 3000 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("pick %d returned port %d again", i, p)
		}
		seen[p] = true
	}
}
