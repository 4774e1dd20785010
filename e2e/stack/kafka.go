package stack

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/usagebilling/billing/testkit/faultproxy"
	"github.com/usagebilling/billing/testkit/kafkabroker"
)

// startEmbedded starts a one-broker kfake cluster behind a faultproxy and
// makes it advertise the proxy's address, so that every client connection
// (bootstrap and the broker addresses metadata returns) runs through the
// proxy and Cut really cuts Kafka off.
//
// kfake has no advertised-listener setting; it advertises the address of
// its listener (net.Listener.Addr). Its ListenFn option lets us hand it a
// listener we opened ourselves, whose Addr reports the proxy's address.
// testkit/kafkabroker.StartEmbedded does not expose ListenFn, hence kfake here.
//
// direct starts it with no proxy, on port (zero: a free one), advertising
// its own address; the proxy returned is nil then.
func startEmbedded(port, partitions int, direct bool, log *slog.Logger) (*faultproxy.Proxy, *kfake.Cluster, error) {
	if direct {
		ln, err := net.Listen("tcp", listenAddr(port))
		if err != nil {
			if port != 0 {
				return nil, nil, portInUse(port, "Kafka broker", "kafka")
			}
			return nil, nil, fmt.Errorf("embedded kafka: listen: %w", err)
		}
		c, err := newEmbedded(ln, ln.Addr(), partitions, log)
		return nil, c, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("embedded kafka: listen: %w", err)
	}
	proxy, err := faultproxy.New(ProxyKafka, listenAddr(port), ln.Addr().String(), log)
	if err != nil {
		ln.Close()
		return nil, nil, kafkaProxyError(port, err)
	}
	advertised, err := net.ResolveTCPAddr("tcp", proxy.Addr())
	if err != nil {
		ln.Close()
		proxy.Close()
		return nil, nil, fmt.Errorf("embedded kafka: proxy address %s: %w", proxy.Addr(), err)
	}
	c, err := newEmbedded(ln, advertised, partitions, log)
	if err != nil {
		proxy.Close()
		return nil, nil, err
	}
	return proxy, c, nil
}

// newEmbedded starts the one-broker kfake cluster on ln, advertising
// advertised; it closes ln when it fails.
func newEmbedded(ln net.Listener, advertised net.Addr, partitions int, log *slog.Logger) (*kfake.Cluster, error) {
	var once sync.Once
	listen := func(string, string) (net.Listener, error) {
		err := errors.New("embedded kafka: one broker only")
		once.Do(func() { err = nil })
		if err != nil {
			return nil, err
		}
		return advertisingListener{ln, advertised}, nil
	}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.ListenFn(listen),
		kfake.DefaultNumPartitions(partitions),
		kfake.BrokerConfigs(kafkabroker.BrokerConfigs()), // message.max.bytes, as every broker we start
		kfake.WithLogger(kfakeLogger{log}),
	)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("start embedded kafka: %w", err)
	}
	return c, nil
}

// advertisingListener is a listener whose Addr is the address clients
// should use, not the one it is bound to.
type advertisingListener struct {
	net.Listener
	addr net.Addr
}

func (l advertisingListener) Addr() net.Addr { return l.addr }

// kfakeLogger passes kfake's warnings and errors to slog.
type kfakeLogger struct{ log *slog.Logger }

func (l kfakeLogger) Logf(level kfake.LogLevel, format string, args ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, args...))
	switch level {
	case kfake.LogLevelError:
		l.log.Error(msg, "component", "kfake")
	case kfake.LogLevelWarn:
		l.log.Warn(msg, "component", "kfake")
	}
}
