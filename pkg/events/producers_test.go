package events_test

import (
	"bytes"
	"crypto/ed25519"
	"slices"
	"testing"

	"github.com/usagebilling/billing/pkg/events"
)

// TestAuthorized checks the rule every consumer applies to who produced an
// event: its type's own topic, written by a service allowed to write it.
func TestAuthorized(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                       string
		eventType, producer, topic string
		want                       bool
	}{
		{"charge from billing", events.TypeChargeRated, "billing", events.TopicBilling, true},
		{"charge claiming billing on usage's topic", events.TypeChargeRated, "billing", events.TopicUsage, false},
		{"charge from usage on billing's topic", events.TypeChargeRated, "usage", events.TopicBilling, false},
		{"charge from usage on usage's topic", events.TypeChargeRated, "usage", events.TopicUsage, false},
		{"usage from usage", events.TypeUsageAccepted, "usage", events.TopicUsage, true},
		{"usage from meter", events.TypeUsageAccepted, "meter", events.TopicUsage, false},
		{"price from meter", events.TypePriceActivated, "meter", events.TopicMeter, true},
		{"invoice from invoice", events.TypeInvoiceIssued, "invoice", events.TopicInvoice, true},
		{"invoice from billing", events.TypeInvoiceIssued, "billing", events.TopicInvoice, false},
		{"quarantine from any service", events.TypeEventQuarantined, "usage", events.TopicOps, true},
		{"quarantine from a stranger", events.TypeEventQuarantined, "mallory", events.TopicOps, false},
		{"redrive request from query", events.TypeRedriveRequested, "query", events.TopicOpsCommands, true},
		{"redrive request from billing", events.TypeRedriveRequested, "billing", events.TopicOpsCommands, false},
		{"type outside the contract", "Forged", "billing", events.TopicBilling, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := events.Authorized(tc.eventType, tc.producer, tc.topic); got != tc.want {
				t.Fatalf("Authorized(%s, %s, %s) = %v, want %v", tc.eventType, tc.producer, tc.topic, got, tc.want)
			}
		})
	}
}

// TestEveryTopicHasWriters: a topic nobody may write would quarantine every
// event of its types, and a type whose owner is not its topic's writer could
// never be consumed.
func TestEveryTopicHasWriters(t *testing.T) {
	t.Parallel()
	for _, topic := range events.AllTopics {
		if len(events.Writers(topic)) == 0 {
			t.Errorf("topic %s has no writer", topic)
		}
	}
	for _, typ := range events.Types() {
		topic := events.Topic(typ)
		if owner := events.Owner(typ); owner != "" && !slices.Equal(events.Writers(topic), []string{owner}) {
			t.Errorf("%s: owner %q, writers of %s %q", typ, owner, topic, events.Writers(topic))
		}
		for _, w := range events.Writers(topic) {
			if !events.Authorized(typ, w, topic) {
				t.Errorf("%s from %s on %s refused", typ, w, topic)
			}
		}
	}
	if got := events.Owner(events.TypeChargeRated); got != events.ServiceBilling {
		t.Errorf("owner of ChargeRated %q", got)
	}
}

// BenchmarkAuthorized is the consumer's check of who produced an event, per
// event (decision 0023), beside what a signature over the envelope would cost
// instead: BenchmarkEnvelopeSignatureVerify verifies an Ed25519 signature over
// an envelope of a ChargeRated's size.
func BenchmarkAuthorized(b *testing.B) {
	for b.Loop() {
		if !events.Authorized(events.TypeChargeRated, events.ServiceBilling, events.TopicBilling) {
			b.Fatal("refused")
		}
	}
}

func BenchmarkEnvelopeSignatureVerify(b *testing.B) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		b.Fatal(err)
	}
	msg := bytes.Repeat([]byte("x"), 900) // a ChargeRated envelope is about 900 bytes
	sig := ed25519.Sign(priv, msg)
	for b.Loop() {
		if !ed25519.Verify(pub, msg, sig) {
			b.Fatal("bad signature")
		}
	}
}
