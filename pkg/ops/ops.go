// Package ops is the operator machinery every service runs, so that Query
// can be the one operator surface without reading another service's
// database:
//
//   - PublishQuarantine is the inbox's OnQuarantine hook: each newly
//     quarantined message is announced as EventQuarantined on ops.events.v1,
//     through the service's outbox, in the deciding transaction.
//   - Redriver consumes RedriveRequested from ops.commands.v1: a request
//     addressed to the service redrives the retained envelope through
//     today's decoders (inbox.Redrive), or a dead letter of its outbox
//     back to its relay (outbox.RedriveDeadLetter), and answers RedriveCompleted on ops.events.v1 through the
//     outbox, all in the transaction that decides the request. The inbox
//     decides a request once, so redelivered requests act once; a second
//     request for the same event reports what it finds then (a duplicate).
//   - API serves the read-only internal endpoints (/internal/v1/...): the
//     service's recovery counts, its quarantined messages, its dead letters
//     and its reconciliation rows. Client calls them with a service token.
package ops

import "time"

// Recovery is a service's backlog (GET /internal/v1/recovery).
type Recovery struct {
	OutboxPending            int64   `json:"outboxPending"`
	OutboxOldestAgeSeconds   float64 `json:"outboxOldestAgeSeconds"`
	DeadLetters              int64   `json:"deadLetters"`
	Deferred                 int64   `json:"deferred"`
	DeferredOldestAgeSeconds float64 `json:"deferredOldestAgeSeconds"`
	Quarantined              int64   `json:"quarantined"`
}

// QuarantineItem is one quarantined message (GET /internal/v1/quarantine).
type QuarantineItem struct {
	ID         int64      `json:"id"`
	EventID    string     `json:"eventId"` // empty when the message is not an envelope
	EventType  string     `json:"eventType"`
	TenantID   string     `json:"tenantId"`
	Reason     string     `json:"reason"`
	Detail     string     `json:"detail,omitempty"` // the handler's error, or its panic and stack; at most 8 KiB
	RawSHA256  string     `json:"rawSha256"`
	Topic      string     `json:"topic"`
	Partition  int32      `json:"partition"`
	Offset     int64      `json:"offset"`
	FirstSeen  time.Time  `json:"firstSeen"`
	LastSeen   time.Time  `json:"lastSeen"`
	Attempts   int        `json:"attempts"`
	State      string     `json:"state"`
	RedrivenAt *time.Time `json:"redrivenAt"`
}

// QuarantinePage is a page of quarantined messages; Next is the cursor of
// the next page (the "after" parameter), nil on the last page.
type QuarantinePage struct {
	Items []QuarantineItem `json:"items"`
	Next  *string          `json:"next"`
}

// DeadLetter is one outbox dead letter (GET /internal/v1/dead-letters).
type DeadLetter struct {
	ID        int64     `json:"id"`
	EventID   string    `json:"eventId"`
	EventType string    `json:"eventType"`
	Topic     string    `json:"topic"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"lastError"`
	CreatedAt time.Time `json:"createdAt"`
	DeadAt    time.Time `json:"deadAt"`
}

// DeadLetterPage is a page of dead letters; Next as in QuarantinePage.
type DeadLetterPage struct {
	Items []DeadLetter `json:"items"`
	Next  *string      `json:"next"`
}
