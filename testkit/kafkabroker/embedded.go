package kafkabroker

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/usagebilling/billing/pkg/kafkaconf"
)

// DefaultPartitions is the partition count of topics created without one
// (Kafka's num.partitions), unless options say otherwise.
const DefaultPartitions = 12

// EmbeddedOptions configures StartEmbedded.
type EmbeddedOptions struct {
	// Port is the TCP port on 127.0.0.1; zero picks a free one.
	Port int
	// Partitions is the partition count of topics created without one;
	// zero means DefaultPartitions.
	Partitions int
	// Logger receives the fake broker's warnings and errors; nil discards
	// them.
	Logger *slog.Logger
}

// Embedded is an in-process, in-memory Kafka-protocol broker (kfake). Its
// data is lost on Close.
type Embedded struct {
	c *kfake.Cluster
}

// BrokerConfigs returns the broker settings every broker the code base
// starts shares, as kfake.BrokerConfigs takes them and as server.properties
// lines (key=value) say them: message.max.bytes is
// kafkaconf.BrokerMessageMaxBytes, so an envelope at envelope.MaxBytes and a
// full producer batch pass (see kafkaconf's Size limits).
func BrokerConfigs() map[string]string {
	return map[string]string{
		"message.max.bytes": strconv.Itoa(kafkaconf.BrokerMessageMaxBytes),
	}
}

// StartEmbedded starts a single-broker kfake cluster on 127.0.0.1, with
// BrokerConfigs.
func StartEmbedded(opts EmbeddedOptions) (*Embedded, error) {
	if opts.Partitions == 0 {
		opts.Partitions = DefaultPartitions
	}
	if opts.Port != 0 {
		if err := checkPortFree("embedded kafka", opts.Port); err != nil {
			return nil, err
		}
	}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.Ports(opts.Port),
		kfake.DefaultNumPartitions(opts.Partitions),
		kfake.BrokerConfigs(BrokerConfigs()),
		kfake.WithLogger(kfakeLogger{orDiscard(opts.Logger)}),
	)
	if err != nil {
		return nil, fmt.Errorf("start embedded kafka: %w", err)
	}
	return &Embedded{c: c}, nil
}

// Addrs returns the broker addresses (host:port) to bootstrap from.
func (e *Embedded) Addrs() []string { return e.c.ListenAddrs() }

// Cluster returns the underlying kfake cluster, for fault injection
// (Control, MoveTopicPartition, ...).
func (e *Embedded) Cluster() *kfake.Cluster { return e.c }

// Close stops the broker and drops its data.
func (e *Embedded) Close() { e.c.Close() }

// kfakeLogger forwards kfake's warnings and errors to slog; its info and
// debug output (every request) is too chatty for tests.
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
