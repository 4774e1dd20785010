package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/kafkaconf"
)

// ConsumerGroups are the services' consumer groups (CONSUMER_GROUP
// defaults to the service name) and the topics each consumes: the
// services' own topics (services/*/internal/app Topics) plus
// ops.commands.v1, which every service consumes, and ops.events.v1 for
// query.
var ConsumerGroups = map[string][]string{
	"meter":   {events.TopicOpsCommands},
	"usage":   {events.TopicMeter, events.TopicOpsCommands},
	"billing": {events.TopicMeter, events.TopicUsage, events.TopicOpsCommands},
	"invoice": {events.TopicBilling, events.TopicOpsCommands},
	"query": {events.TopicMeter, events.TopicUsage, events.TopicBilling, events.TopicInvoice,
		events.TopicOps, events.TopicOpsCommands},
}

// Kafka is the suite's own view of the broker: consumer lag, the
// duplicates in the topics' logs, and a producer for publishing events
// out of order on purpose. It reconnects after the broker restarts.
type Kafka struct {
	brokers []string

	mu     sync.Mutex
	client sarama.Client
	// Log scan state: the next offset to read per topic and partition,
	// and how often each event id was seen per topic.
	next map[string]map[int32]int64
	seen map[string]map[[16]byte]uint32
	// The newest offsets of earlier Lag readings, oldest first: what the
	// lag is measured against (see LagGrace).
	history []offsetsAt
}

// offsetsAt are the newest offsets of every topic and partition at a time.
type offsetsAt struct {
	at     time.Time
	newest map[string]map[int32]int64
}

// LagGrace: on the meter and usage topics Lag counts the messages published more than
// LagGrace before the reading (by the newest offsets of a reading LagGrace
// to twice that ago; without one, every message) that a group has not
// consumed. Meter publishes its price schedules' watermarks every few
// seconds whatever the load (decision 0011), and usage its partitions'
// watermarks every second (decision 0014), so "no meter or usage message
// unconsumed at this instant" is rarely true of a healthy system; "nothing
// older than LagGrace" is. Every other topic counts every message.
const LagGrace = 10 * time.Second

// NewKafka returns a Kafka view of brokers.
func NewKafka(brokers []string) *Kafka {
	return &Kafka{brokers: brokers, next: map[string]map[int32]int64{}, seen: map[string]map[[16]byte]uint32{}}
}

func (k *Kafka) clientLocked() (sarama.Client, error) {
	if k.client != nil && !k.client.Closed() {
		return k.client, nil
	}
	cfg := kafkaconf.New("chaos-suite")
	cfg.Consumer.Return.Errors = true
	c, err := sarama.NewClient(k.brokers, cfg)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	k.client = c
	return c, nil
}

func (k *Kafka) resetLocked() {
	if k.client != nil {
		_ = k.client.Close()
		k.client = nil
	}
}

// Close closes the client.
func (k *Kafka) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.resetLocked()
}

// Lag returns, per consumer group, the messages not yet committed: the
// sum over its topics' partitions of the newest offset minus the group's
// committed offset (none committed counts from the start); on the meter
// topic, the newest offset of LagGrace ago.
func (k *Kafka) Lag(ctx context.Context) (map[string]int64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	lag, err := k.lagLocked()
	if err != nil {
		k.resetLocked()
	}
	return lag, err
}

func (k *Kafka) lagLocked() (map[string]int64, error) {
	c, err := k.clientLocked()
	if err != nil {
		return nil, err
	}
	if err := c.RefreshMetadata(); err != nil {
		return nil, err
	}
	newest := map[string]map[int32]int64{}
	for _, topic := range events.AllTopics {
		ps, err := c.Partitions(topic)
		if err != nil {
			return nil, fmt.Errorf("partitions of %s: %w", topic, err)
		}
		newest[topic] = map[int32]int64{}
		for _, p := range ps {
			off, err := c.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				return nil, fmt.Errorf("newest offset of %s/%d: %w", topic, p, err)
			}
			newest[topic][p] = off
		}
	}
	// The meter and usage topics are measured with LagGrace (their
	// watermarks never stop: decisions 0011 and 0014); every other topic to
	// its newest offset.
	ref := k.reference(time.Now(), newest)
	admin, err := sarama.NewClusterAdminFromClient(c)
	if err != nil {
		return nil, err
	}
	// Closing the admin would close the shared client: it is left to the
	// client's Close.
	out := map[string]int64{}
	for _, group := range slices.Sorted(maps.Keys(ConsumerGroups)) {
		want := map[string][]int32{}
		for _, topic := range ConsumerGroups[group] {
			want[topic] = slices.Sorted(maps.Keys(newest[topic]))
		}
		resp, err := admin.ListConsumerGroupOffsets(group, want)
		if err != nil {
			return nil, fmt.Errorf("offsets of group %s: %w", group, err)
		}
		if resp.Err != sarama.ErrNoError {
			return nil, fmt.Errorf("offsets of group %s: %w", group, resp.Err)
		}
		var lag int64
		for topic, ps := range want {
			for _, p := range ps {
				committed := int64(0)
				if b := resp.GetBlock(topic, p); b != nil {
					if b.Err != sarama.ErrNoError {
						return nil, fmt.Errorf("offset of group %s on %s/%d: %w", group, topic, p, b.Err)
					}
					if b.Offset >= 0 {
						committed = b.Offset
					}
				}
				end := newest[topic][p]
				if topic == events.TopicMeter || topic == events.TopicUsage {
					end = ref[topic][p]
				}
				lag += max(end-committed, 0)
			}
		}
		out[group] = lag
	}
	return out, nil
}

// reference records this reading's newest offsets and returns those of the
// latest reading between 2 x LagGrace and LagGrace ago, or these when there
// is none.
func (k *Kafka) reference(now time.Time, newest map[string]map[int32]int64) map[string]map[int32]int64 {
	k.history = append(k.history, offsetsAt{at: now, newest: newest})
	for len(k.history) > 0 && now.Sub(k.history[0].at) > 2*LagGrace {
		k.history = k.history[1:]
	}
	ref := newest
	for _, h := range k.history {
		if now.Sub(h.at) >= LagGrace {
			ref = h.newest
		}
	}
	return ref
}

// LogDuplicates is what a scan of the topics found.
type LogDuplicates struct {
	// Messages read, and duplicates: messages whose event id was already
	// in the topic (a relay sent it again), by topic.
	Messages   map[string]int
	Duplicates map[string]int
	// IDs are some duplicated event ids, by topic.
	IDs map[string][]string
}

// Total returns the duplicates over every topic.
func (d LogDuplicates) Total() int {
	n := 0
	for _, v := range d.Duplicates {
		n += v
	}
	return n
}

// ScanLog reads every topic from where the previous scan stopped to its
// end and counts the event ids met again: real duplicate publications.
func (k *Kafka) ScanLog(ctx context.Context) (LogDuplicates, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out, err := k.scanLocked(ctx)
	if err != nil {
		k.resetLocked()
	}
	return out, err
}

func (k *Kafka) scanLocked(ctx context.Context) (LogDuplicates, error) {
	out := LogDuplicates{Messages: map[string]int{}, Duplicates: map[string]int{}, IDs: map[string][]string{}}
	c, err := k.clientLocked()
	if err != nil {
		return out, err
	}
	consumer, err := sarama.NewConsumerFromClient(c)
	if err != nil {
		return out, err
	}
	defer consumer.Close()
	for _, topic := range events.AllTopics {
		ps, err := c.Partitions(topic)
		if err != nil {
			return out, err
		}
		if k.next[topic] == nil {
			k.next[topic] = map[int32]int64{}
			k.seen[topic] = map[[16]byte]uint32{}
		}
		for _, p := range ps {
			end, err := c.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				return out, err
			}
			from := k.next[topic][p]
			if from >= end {
				continue
			}
			pc, err := consumer.ConsumePartition(topic, p, from)
			if err != nil {
				return out, fmt.Errorf("read %s/%d from %d: %w", topic, p, from, err)
			}
			err = func() error {
				defer pc.Close()
				timeout := time.NewTimer(30 * time.Second)
				defer timeout.Stop()
				for from < end {
					select {
					case m := <-pc.Messages():
						from = m.Offset + 1
						var e struct {
							EventID string `json:"eventId"`
						}
						if json.Unmarshal(m.Value, &e) != nil || e.EventID == "" {
							continue
						}
						out.Messages[topic]++
						id := idKey(e.EventID)
						k.seen[topic][id]++
						if k.seen[topic][id] > 1 {
							out.Duplicates[topic]++
							if len(out.IDs[topic]) < 5 {
								out.IDs[topic] = append(out.IDs[topic], e.EventID)
							}
						}
					case err := <-pc.Errors():
						return err
					case <-timeout.C:
						return fmt.Errorf("read %s/%d: stuck at offset %d of %d", topic, p, from, end)
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return nil
			}()
			k.next[topic][p] = from
			if err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// Seen returns how many times each of ids was published on topic, as far
// as the scans have read.
func (k *Kafka) Seen(topic string, ids []string) map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]int{}
	for _, id := range ids {
		out[id] = int(k.seen[topic][idKey(id)])
	}
	return out
}

// Publish sends messages to topic one at a time, in the order given, each
// acknowledged before the next is sent, with the relay's producer
// configuration (so a key lands on the partition the relay would choose).
func (k *Kafka) Publish(ctx context.Context, topic string, msgs []KeyValue) error {
	p, err := sarama.NewSyncProducer(k.brokers, kafkaconf.NewIdempotentProducer("chaos-suite"))
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	defer p.Close()
	for _, m := range msgs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(m.Key), Value: sarama.ByteEncoder(m.Value)}); err != nil {
			return fmt.Errorf("publish to %s: %w", topic, err)
		}
	}
	return nil
}

// KeyValue is one message.
type KeyValue struct {
	Key   string
	Value []byte
}

// Members returns the number of members of each consumer group.
func (k *Kafka) Members(ctx context.Context) (map[string]int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, err := k.clientLocked()
	if err != nil {
		return nil, err
	}
	admin, err := sarama.NewClusterAdminFromClient(c)
	if err != nil {
		return nil, err
	}
	groups, err := admin.DescribeConsumerGroups(slices.Sorted(maps.Keys(ConsumerGroups)))
	if err != nil {
		k.resetLocked()
		return nil, err
	}
	out := map[string]int{}
	for _, g := range groups {
		out[g.GroupId] = len(g.Members)
	}
	return out, nil
}

// idKey is the compact form the scans count an event id under: its 16
// bytes when it is a UUID (every event id the services write), else the
// first 16 bytes of its SHA-256. A long run's scans count millions of ids.
func idKey(id string) [16]byte {
	if u, err := uuid.Parse(id); err == nil {
		return u
	}
	var k [16]byte
	sum := sha256.Sum256([]byte(id))
	copy(k[:], sum[:16])
	return k
}

// Assigned reports whether every consumer group of every service is
// stable and holds every partition of the topics it consumes, each
// assigned to one of its members; when not, what is missing. A service's
// resources are at their working level only once its consumers hold their
// partitions (a consumer's fetchers run a goroutine group per partition).
func (k *Kafka) Assigned(ctx context.Context) (bool, string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, err := k.clientLocked()
	if err != nil {
		return false, "", err
	}
	admin, err := sarama.NewClusterAdminFromClient(c)
	if err != nil {
		return false, "", err
	}
	groups, err := admin.DescribeConsumerGroups(slices.Sorted(maps.Keys(ConsumerGroups)))
	if err != nil {
		k.resetLocked()
		return false, "", err
	}
	var missing []string
	for _, g := range groups {
		if g.State != "Stable" {
			missing = append(missing, fmt.Sprintf("%s is %s", g.GroupId, g.State))
			continue
		}
		held := map[string]map[int32]bool{}
		for _, m := range g.Members {
			a, err := m.GetMemberAssignment()
			if err != nil || a == nil {
				continue
			}
			for topic, ps := range a.Topics {
				if held[topic] == nil {
					held[topic] = map[int32]bool{}
				}
				for _, p := range ps {
					held[topic][p] = true
				}
			}
		}
		for _, topic := range ConsumerGroups[g.GroupId] {
			ps, err := c.Partitions(topic)
			if err != nil {
				k.resetLocked()
				return false, "", fmt.Errorf("partitions of %s: %w", topic, err)
			}
			n := 0
			for _, p := range ps {
				if held[topic][p] {
					n++
				}
			}
			if n < len(ps) {
				missing = append(missing, fmt.Sprintf("%s holds %d of %d partitions of %s", g.GroupId, n, len(ps), topic))
			}
		}
	}
	return len(missing) == 0, strings.Join(missing, "; "), nil
}
