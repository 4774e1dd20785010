// Package faultproxy puts an in-process TCP proxy (toxiproxy) in front of a
// dependency so a test or the stack launcher can cut, stall or slow the path
// to it: Cut and Restore for an outage, Blackhole for a silent network,
// Latency for a slow one.
//
// A Kafka broker must advertise the proxy's address, since clients connect
// to what the broker advertises: create the proxy first, then start the
// broker with kafkabroker.ApacheOptions{Port: brokerPort, AdvertisedAddr:
// proxy.Addr()}, the proxy's upstream being 127.0.0.1:brokerPort.
package faultproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/usagebilling/billing/testkit/freeport"
)

// Proxy forwards TCP connections from Addr to an upstream address, with
// faults switched on and off by its methods. Its methods are safe for
// concurrent use.
type Proxy struct {
	name     string
	addr     string
	upstream string
	log      *slog.Logger

	mu     sync.Mutex
	p      *toxiproxy.Proxy
	closed bool
}

// New starts a proxy named name that listens on listen (host:port;
// "127.0.0.1:0" picks a free port outside the ephemeral range, kept across
// Cut and Restore) and
// forwards each connection to upstream, dialled when the connection
// arrives. A nil log discards toxiproxy's messages; they go to log at
// debug level.
func New(name, listen, upstream string, log *slog.Logger) (*Proxy, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if host, port, err := net.SplitHostPort(listen); err == nil && port == "0" && (host == "127.0.0.1" || host == "localhost") {
		// Restore listens again on the same port: pick it outside the
		// ephemeral range, where no client connection can take it while the
		// proxy is cut (freeport).
		p, err := freeport.Port()
		if err != nil {
			return nil, fmt.Errorf("start proxy %s: %w", name, err)
		}
		listen = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	zl := zerolog.New(slogWriter{log}).Level(zerolog.InfoLevel)
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zl)
	p := toxiproxy.NewProxy(server, name, listen, upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("start proxy %s on %s: %w (is the port in use? use port 0 for a free one)", name, listen, err)
	}
	fp := &Proxy{name: name, addr: p.Listen, upstream: upstream, log: log, p: p}
	log.Info("proxy started", "proxy", name, "addr", fp.addr, "upstream", upstream)
	return fp, nil
}

// Addr returns the address the proxy listens on (host:port).
func (p *Proxy) Addr() string { return p.addr }

// Upstream returns the address the proxy forwards to.
func (p *Proxy) Upstream() string { return p.upstream }

// Cut closes every open connection through the proxy and closes its
// listener, so new connections are refused, until Restore.
func (p *Proxy) Cut() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	p.log.Info("proxy cut", "proxy", p.name, "addr", p.addr)
	p.p.Stop()
	return nil
}

// Restore undoes Cut and Blackhole: the proxy accepts and forwards
// connections again on the same address. Latency stays until Clear.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	if err := p.removeToxics(blackholeUp, blackholeDown); err != nil {
		return err
	}
	if err := p.p.Start(); err != nil && !errors.Is(err, toxiproxy.ErrProxyAlreadyStarted) {
		return fmt.Errorf("restore proxy %s on %s: %w (another process may have taken the port while it was cut)", p.name, p.addr, err)
	}
	p.log.Info("proxy restored", "proxy", p.name, "addr", p.addr)
	return nil
}

// Blackhole keeps connections open but drops all data in both directions
// until Restore or Clear, like a network that silently loses packets:
// clients block until their own timeouts. Bytes dropped meanwhile are gone
// for good, so connections open during it are usually unusable afterwards.
func (p *Proxy) Blackhole() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	p.log.Info("proxy blackholed", "proxy", p.name, "addr", p.addr)
	return p.setToxics("timeout", map[string]any{"timeout": 0}, blackholeUp, blackholeDown)
}

// Latency delays data in both directions by latency, plus or minus up to
// jitter, until Clear. Calling it again replaces the previous values.
func (p *Proxy) Latency(latency, jitter time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	p.log.Info("proxy latency", "proxy", p.name, "addr", p.addr, "latency", latency, "jitter", jitter)
	return p.setToxics("latency", map[string]any{"latency": latency.Milliseconds(), "jitter": jitter.Milliseconds()},
		latencyUp, latencyDown)
}

// Clear removes every toxic (Latency, Blackhole). It does not undo Cut.
func (p *Proxy) Clear() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	p.p.Toxics.ResetToxics(context.Background())
	p.log.Info("proxy cleared", "proxy", p.name, "addr", p.addr)
	return nil
}

// Close removes all toxics, closes every connection and stops listening.
func (p *Proxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.p.Toxics.ResetToxics(context.Background())
	p.p.Stop()
	return nil
}

var errClosed = errors.New("proxy is closed")

// Toxic names; the stream (direction) is part of the name.
const (
	latencyUp     = "latency_upstream"
	latencyDown   = "latency_downstream"
	blackholeUp   = "blackhole_upstream"
	blackholeDown = "blackhole_downstream"
)

// setToxics adds (or replaces) toxic type typ with attrs under the names
// given, the first upstream and the second downstream.
func (p *Proxy) setToxics(typ string, attrs map[string]any, up, down string) error {
	if err := p.removeToxics(up, down); err != nil {
		return err
	}
	for name, stream := range map[string]string{up: "upstream", down: "downstream"} {
		body, err := json.Marshal(map[string]any{
			"name": name, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs,
		})
		if err != nil {
			return fmt.Errorf("encode %s toxic: %w", typ, err)
		}
		if _, err := p.p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
			return fmt.Errorf("add %s toxic to proxy %s: %w", typ, p.name, err)
		}
	}
	return nil
}

func (p *Proxy) removeToxics(names ...string) error {
	for _, name := range names {
		err := p.p.Toxics.RemoveToxic(context.Background(), name)
		if err != nil && !errors.Is(err, toxiproxy.ErrToxicNotFound) {
			return fmt.Errorf("remove toxic %s from proxy %s: %w", name, p.name, err)
		}
	}
	return nil
}

// slogWriter passes toxiproxy's zerolog JSON lines to slog at debug level.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(b []byte) (int, error) {
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		w.log.Debug(strings.TrimSpace(string(b)), "component", "toxiproxy")
		return len(b), nil
	}
	msg, _ := fields["message"].(string)
	delete(fields, "message")
	delete(fields, "level")
	args := []any{"component", "toxiproxy"}
	for k, v := range fields {
		args = append(args, k, v)
	}
	w.log.Debug(msg, args...)
	return len(b), nil
}
