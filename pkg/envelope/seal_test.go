package envelope_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/usagebilling/billing/pkg/envelope"
)

// An envelope from New or Decode is marshalled without canonicalising its
// payload again; one whose payload or digest was replaced is checked in
// full, and a decoded envelope marshals to bytes that decode to it.
func TestMarshalTrustsOnlyTheSealedPayload(t *testing.T) {
	e := newEnvelope(t, testMeta(), usageV2{Quantity: "1"})
	raw := marshal(t, e)
	d, err := newRegistry().Decode(raw)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	again := marshal(t, d.Envelope)
	if !bytes.Equal(again, raw) {
		t.Errorf("a decoded envelope marshals to\n%s\nnot\n%s", again, raw)
	}

	tests := []struct {
		name string
		edit func(e *envelope.Envelope)
		want string // "" when Marshal must succeed
	}{
		{"same payload copied", func(e *envelope.Envelope) { e.Payload = append(json.RawMessage(nil), e.Payload...) }, ""},
		{"payload replaced", func(e *envelope.Envelope) { e.Payload = json.RawMessage(`{"quantity":"2"}`) }, envelope.ReasonDigestMismatch},
		{"payload shortened in place", func(e *envelope.Envelope) { e.Payload = e.Payload[:len(e.Payload)-1] }, envelope.InvalidField("payload")},
		{"digest replaced", func(e *envelope.Envelope) { e.PayloadDigest = string(bytes.Repeat([]byte("0"), 64)) }, envelope.ReasonDigestMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, from := range []envelope.Envelope{e, d.Envelope} {
				tt.edit(&from)
				_, err := from.Marshal()
				if got, _ := envelope.ReasonOf(err); got != tt.want {
					t.Errorf("reason = %q, want %q (%v)", got, tt.want, err)
				}
			}
		})
	}
}
