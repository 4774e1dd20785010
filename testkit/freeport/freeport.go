// Package freeport picks loopback TCP ports for servers that a test stops
// and starts again on the same port: a database restarted after a crash, a
// broker after a kill, a proxy after a cut, a service after SIGKILL.
//
// A port the kernel picks for Listen("127.0.0.1:0") comes from the ephemeral
// range, the same range it gives every outgoing connection its local port
// from. While such a server is down, any client connecting anywhere on the
// machine may be given its port, and the restart then fails with "address
// already in use" for as long as that connection lives: rare on an idle
// machine, common on a loaded one running many tests. Ports outside the
// ephemeral range are never handed to outgoing connections, so only another
// listener can take them.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// The ports Port picks from when the ephemeral range leaves room below it.
const (
	low     = 10000 // above the well-known and usual development ports
	minRoom = 1000  // fewer ports than this outside the range: fall back to the kernel's pick
	tries   = 200
)

// given holds every port Port returned in this process. A port is free when
// picked, but its server may start later: a stack picks all its ports before
// it starts its servers, so without this record a second pick could return
// the first's port (two services given one port: the second fails to bind,
// and a client of it reaches the first). Bounded by the ports Port picks
// from.
var given = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Port returns a loopback TCP port that nothing listens on at the moment,
// that the kernel does not give to outgoing connections, and that Port has
// not returned before in this process.
func Port() (int, error) {
	given.Lock()
	defer given.Unlock()
	p, err := pick()
	if err == nil {
		given.ports[p] = true
	}
	return p, err
}

func pick() (int, error) {
	lo, hi, ok := ephemeralRange()
	var from, to int // [from, to)
	switch {
	case ok && lo-low >= minRoom:
		from, to = low, lo
	case ok && 65536-(hi+1) >= minRoom:
		from, to = hi+1, 65536
	default:
		return kernelPort()
	}
	for range tries {
		p := from + rand.IntN(to-from)
		if given.ports[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("free port: close %d: %w", p, err)
		}
		return p, nil
	}
	return 0, fmt.Errorf("free port: %d random ports in %d-%d were all in use", tries, from, to-1)
}

// Addr returns "127.0.0.1:<Port()>".
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// ephemeralRange reads the kernel's range of local ports for outgoing
// connections (Linux).
func ephemeralRange() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || lo < 1 || hi < lo || hi > 65535 {
		return 0, 0, false
	}
	return lo, hi, true
}

func kernelPort() (int, error) {
	for range tries {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("free port: close %d: %w", p, err)
		}
		if !given.ports[p] {
			return p, nil
		}
	}
	return 0, fmt.Errorf("free port: the kernel gave %d ports already returned", tries)
}
