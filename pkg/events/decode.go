package events

import (
	"strconv"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/envelope"
)

// The payloads that come once per fact decode their common shape themselves
// (envelope.CanonicalDecoder): each member through the method encoding/json
// would call for it, or as encoding/json reads a string, a number or a
// boolean, and false, for encoding/json to decode it, at anything else: an
// unknown key, a null, a string with escapes, a nested pricing. Fuzzed
// against encoding/json by FuzzDecodeCanonical.

// DecodeCanonical implements envelope.CanonicalDecoder.
func (p *UsageAccepted) DecodeCanonical(payload []byte) bool {
	return envelope.Members(payload, func(key, v []byte) bool {
		switch string(key) {
		case "currency":
			return str(v, &p.Currency)
		case "meterCode":
			return str(v, &p.MeterCode)
		case "occurredAt":
			return p.OccurredAt.UnmarshalJSON(v) == nil
		case "priceVersion":
			return integer(v, &p.PriceVersion)
		case "properties":
			return strMap(v, &p.Properties)
		case "quantity":
			return dec(v, &p.Quantity)
		case "sourceEventId":
			return str(v, &p.SourceEventID)
		case "sourceSystem":
			return str(v, &p.SourceSystem)
		case "usageId":
			return id(v, &p.UsageID)
		}
		return false
	})
}

// DecodeCanonical implements envelope.CanonicalDecoder.
func (p *ChargeRated) DecodeCanonical(payload []byte) bool {
	return envelope.Members(payload, func(key, v []byte) bool {
		switch string(key) {
		case "aggregation":
			return str(v, &p.Aggregation)
		case "amount":
			return dec(v, &p.Amount)
		case "chargeId":
			return id(v, &p.ChargeID)
		case "currency":
			return str(v, &p.Currency)
		case "dimensions":
			return strMap(v, &p.Dimensions)
		case "late":
			return boolean(v, &p.Late)
		case "meterCode":
			return str(v, &p.MeterCode)
		case "model":
			return str(v, &p.Model)
		case "occurredAt":
			return p.OccurredAt.UnmarshalJSON(v) == nil
		case "period":
			return str(v, &p.Period)
		case "planCode":
			return str(v, &p.PlanCode)
		case "priceVersion":
			return integer(v, &p.PriceVersion)
		case "properties":
			return strMap(v, &p.Properties)
		case "quantity":
			return dec(v, &p.Quantity)
		case "sourceEventId":
			return str(v, &p.SourceEventID)
		case "sourceSystem":
			return str(v, &p.SourceSystem)
		case "unitPrice":
			return dec(v, &p.UnitPrice)
		case "unpriced":
			return boolean(v, &p.Unpriced)
		case "usageEventId":
			return id(v, &p.UsageEventID)
		case "usageId":
			return id(v, &p.UsageID)
		case "value":
			return str(v, &p.Value)
		}
		return false // pricing among them: encoding/json's
	})
}

func str(v []byte, dst *string) bool {
	s, ok := envelope.PlainString(v)
	*dst = s
	return ok
}

// id is a string encoding/json gives to the UUID's UnmarshalText.
func id(v []byte, dst *uuid.UUID) bool {
	b, ok := envelope.PlainBytes(v)
	return ok && dst.UnmarshalText(b) == nil
}

// dec is a string or number encoding/json gives to the decimal's
// UnmarshalJSON as it is.
func dec(v []byte, dst *decimal.Decimal) bool {
	if len(v) == 0 || v[0] != '"' && v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		return false
	}
	return dst.UnmarshalJSON(v) == nil
}

// integer is a number encoding/json reads into an int64 (with UseNumber,
// the literal through strconv.ParseInt).
func integer(v []byte, dst *int64) bool {
	if len(v) == 0 || v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		return false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	*dst = n
	return err == nil
}

func boolean(v []byte, dst *bool) bool {
	switch string(v) {
	case "true":
		*dst = true
	case "false":
		*dst = false
	default:
		return false
	}
	return true
}

// strMap is an object of strings; encoding/json makes the map even for {}.
func strMap(v []byte, dst *map[string]string) bool {
	m := map[string]string{}
	*dst = m
	return envelope.Members(v, func(key, v []byte) bool {
		s, ok := envelope.PlainString(v)
		m[string(key)] = s
		return ok
	})
}

// The same payloads encode their common shape themselves
// (envelope.CanonicalEncoder), member by member in the canonical order,
// each through the method encoding/json would call for it, and leave the
// rest to encoding/json: a nested pricing, a string New would refuse or
// encoding/json would alter. TestAppendCanonicalIsEncodingJSONs holds
// them to Canonical of encoding/json's bytes.

// AppendCanonical implements envelope.CanonicalEncoder.
func (p UsageAccepted) AppendCanonical(dst []byte) ([]byte, bool) {
	o := envelope.StartObject(dst)
	o.String("currency", p.Currency)
	o.String("meterCode", p.MeterCode)
	o.JSON("occurredAt", p.OccurredAt)
	if p.PriceVersion != 0 {
		o.Int("priceVersion", p.PriceVersion)
	}
	if len(p.Properties) > 0 {
		o.StringMap("properties", p.Properties)
	}
	o.JSON("quantity", p.Quantity)
	o.String("sourceEventId", p.SourceEventID)
	o.String("sourceSystem", p.SourceSystem)
	o.Text("usageId", p.UsageID)
	return o.End()
}

// AppendCanonical implements envelope.CanonicalEncoder.
func (p ChargeRated) AppendCanonical(dst []byte) ([]byte, bool) {
	if p.Pricing != nil {
		return dst, false // encoding/json's
	}
	o := envelope.StartObject(dst)
	if p.Aggregation != "" {
		o.String("aggregation", p.Aggregation)
	}
	o.JSON("amount", p.Amount)
	o.Text("chargeId", p.ChargeID)
	o.String("currency", p.Currency)
	if len(p.Dimensions) > 0 {
		o.StringMap("dimensions", p.Dimensions)
	}
	o.Bool("late", p.Late)
	o.String("meterCode", p.MeterCode)
	if p.Model != "" {
		o.String("model", p.Model)
	}
	o.JSON("occurredAt", p.OccurredAt)
	o.String("period", p.Period)
	if p.PlanCode != "" {
		o.String("planCode", p.PlanCode)
	}
	o.Int("priceVersion", p.PriceVersion)
	if len(p.Properties) > 0 {
		o.StringMap("properties", p.Properties)
	}
	o.JSON("quantity", p.Quantity)
	if p.SourceEventID != "" {
		o.String("sourceEventId", p.SourceEventID)
	}
	if p.SourceSystem != "" {
		o.String("sourceSystem", p.SourceSystem)
	}
	o.JSON("unitPrice", p.UnitPrice)
	if p.Unpriced {
		o.Bool("unpriced", p.Unpriced)
	}
	o.Text("usageEventId", p.UsageEventID)
	o.Text("usageId", p.UsageID)
	if p.Value != "" {
		o.String("value", p.Value)
	}
	return o.End()
}
