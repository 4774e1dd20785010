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
func startEmbedded(proxyPort, partitions int, log *slog.Logger) (*faultproxy.Proxy, *kfake.Cluster, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("embedded kafka: listen: %w", err)
	}
	proxy, err := faultproxy.New(ProxyKafka, listenAddr(proxyPort), ln.Addr().String(), log)
	if err != nil {
		ln.Close()
		return nil, nil, kafkaProxyError(proxyPort, err)
	}
	advertised, err := net.ResolveTCPAddr("tcp", proxy.Addr())
	if err != nil {
		ln.Close()
		proxy.Close()
		return nil, nil, fmt.Errorf("embedded kafka: proxy address %s: %w", proxy.Addr(), err)
	}
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
		proxy.Close()
		return nil, nil, fmt.Errorf("start embedded kafka: %w", err)
	}
	return proxy, c, nil
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
