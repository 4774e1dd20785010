package billingctl

// The request and response types billingctl needs, as DESIGN.md section 7
// gives them. TO BE REPLACED by the types generated from the services'
// OpenAPI documents (package pkg/api, issue 14 item 1) once it exists; the
// rest of this package reads answers generically (tables of fields) and
// needs no more types than these. Amounts and quantities are decimal
// strings, sent as given.

// PriceRequest is POST /v1/tenants/{tenantId}/prices.
type PriceRequest struct {
	MeterCode    string `json:"meterCode"`
	Currency     string `json:"currency"`
	Model        string `json:"model,omitempty"`
	UnitPrice    string `json:"unitPrice,omitempty"`
	Tiers        []Tier `json:"tiers,omitempty"`
	PackageSize  string `json:"packageSize,omitempty"`
	PackagePrice string `json:"packagePrice,omitempty"`
	EffectiveAt  string `json:"effectiveAt,omitempty"`
}

// Tier is one tier of a graduated or volume price; UpTo is empty on the
// last, unbounded tier.
type Tier struct {
	UpTo      *string `json:"upTo"`
	UnitPrice string  `json:"unitPrice"`
	FlatFee   string  `json:"flatFee,omitempty"`
}

// UsageEvent is one usage fact, as POST .../usage and .../usage:batch take it.
type UsageEvent struct {
	SourceSystem  string `json:"sourceSystem"`
	SourceEventID string `json:"sourceEventId"`
	MeterCode     string `json:"meterCode"`
	Quantity      string `json:"quantity"`
	OccurredAt    string `json:"occurredAt"`
	Currency      string `json:"currency,omitempty"`
}

// UsageBatchRequest is POST /v1/tenants/{tenantId}/usage:batch.
type UsageBatchRequest struct {
	Events []UsageEvent `json:"events"`
}

// UsageBatchResult is the decision on one event of a batch: Status is the
// status it would have had alone (201 accepted, 200 replayed, else refused
// with Code).
type UsageBatchResult struct {
	Status  int    `json:"status"`
	UsageID string `json:"usageId,omitempty"`
	EventID string `json:"eventId,omitempty"`
	Code    string `json:"code,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// UsageBatchResponse is the answer of .../usage:batch, in request order.
type UsageBatchResponse struct {
	Results []UsageBatchResult `json:"results"`
}

// AdjustmentRequest is POST /v1/tenants/{tenantId}/adjustments (a negative
// amount is a credit).
type AdjustmentRequest struct {
	CorrectionOf string `json:"correctionOf,omitempty"`
	Amount       string `json:"amount"`
	Currency     string `json:"currency"`
	Reason       string `json:"reason"`
}

// SettingsRequest is PUT /v1/tenants/{tenantId}/settings.
type SettingsRequest struct {
	TimeZone    *string `json:"timeZone,omitempty"`
	GracePeriod *string `json:"gracePeriod,omitempty"`
}

// WebhookEndpointRequest is POST /v1/tenants/{tenantId}/webhook-endpoints.
type WebhookEndpointRequest struct {
	URL string `json:"url"`
}

// RedriveRequest is POST /v1/operator/redrives and
// /v1/operator/dead-letters/release.
type RedriveRequest struct {
	Service string `json:"service"`
	EventID string `json:"eventId"`
	Reason  string `json:"reason"`
}

// ReasonRequest is POST /v1/operator/webhook-intents/{intentId}/retry.
type ReasonRequest struct {
	Reason string `json:"reason"`
}
