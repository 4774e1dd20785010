package money

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// defineCatalog defines the catalog meters (the same definitions every run,
// so a second run on the same stack replays them) and waits until usage
// knows each: a fact of a tenant without a price for it is then refused
// no_price_in_effect rather than unknown_meter. A redefinition with other
// content is refused meter_exists.
func (r *runner) defineCatalog(ctx context.Context) error {
	for _, m := range meters {
		if !m.Catalog {
			continue
		}
		body := map[string]any{"code": m.Code, "name": "money " + m.Code, "aggregation": m.Agg}
		if m.ValueProp != "" {
			body["valueProperty"] = m.ValueProp
		}
		if len(m.Dims) > 0 {
			body["dimensions"] = m.Dims
		}
		a, err := r.c.catalog(ctx, "POST", "/v1/meters", body, map[string]string{"Idempotency-Key": r.key("meter")})
		if err != nil {
			return err
		}
		r.note("#%d define meter %s %s -> %d %s", r.step, m.Code, m.Agg, a.Status, a.Code())
		if a.Status != 201 && a.Status != 200 {
			return fail("catalog", "define %s: want 201 (or 200, defined by an earlier run), got %d %s", m.Code, a.Status, clip(string(a.Body)))
		}
		other := map[string]any{"code": m.Code, "name": "money " + m.Code, "aggregation": "max"}
		if m.Agg == "max" {
			other["aggregation"] = "sum"
		}
		a, err = r.c.catalog(ctx, "POST", "/v1/meters", other, map[string]string{"Idempotency-Key": r.key("meter")})
		if err != nil {
			return err
		}
		if a.Status != 409 || a.Code() != "meter_exists" {
			return fail("catalog", "redefine %s as %v: want 409 meter_exists, got %d %s", m.Code, other["aggregation"], a.Status, clip(string(a.Body)))
		}
	}
	probe := fmt.Sprintf("%s-catalog", r.cfg.Prefix)
	for _, m := range meters {
		if !m.Catalog {
			continue
		}
		f := &Fact{SourceEventID: "probe", Meter: m.Code, Qty: dec("1"), At: instant(r.now().Add(-time.Second))}
		if m.ValueProp != "" {
			f.Props = map[string]string{m.ValueProp: "u1"}
		}
		deadline := time.Now().Add(r.cfg.Settle)
		for {
			a, err := r.c.do(ctx, "usage", "POST", probe, "/usage", f.body(), nil)
			if err != nil {
				return err
			}
			if a.Status == 422 && a.Code() == "no_price_in_effect" {
				break
			}
			if a.Status != 422 || a.Code() != "unknown_meter" {
				return fail("usage", "a fact of catalog meter %s for a tenant without its price: want 422 no_price_in_effect (or unknown_meter until usage learns the meter), got %d %s",
					m.Code, a.Status, clip(string(a.Body)))
			}
			if time.Now().After(deadline) {
				return fail("settle", "usage did not learn catalog meter %s within %s", m.Code, r.cfg.Settle)
			}
			// polled: usage learns the meter from meter's event
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// properties are a new fact's properties for meter m: its dimensions
// (each mostly present), a unique_count meter's value property (rarely
// missing), sometimes a property nothing prices.
func (r *runner) properties(m meterDefinition) map[string]string {
	p := map[string]string{}
	for _, d := range m.Dims {
		if r.rng.IntN(8) > 0 {
			p[d] = pickString(r.rng, propertyValues[d])
		}
	}
	if m.ValueProp != "" && r.rng.IntN(30) > 0 {
		p[m.ValueProp] = pickString(r.rng, propertyValues[m.ValueProp])
	}
	if r.rng.IntN(10) == 0 {
		p["trace.id"] = fmt.Sprintf("t%d", r.rng.IntN(1000))
	}
	if len(p) == 0 {
		return nil
	}
	return p
}

// priceDimensions picks the dimensions of a new price of meter m: none for
// a meter without any, otherwise mostly none, else one or two of its
// dimensions with a value facts take.
func (r *runner) priceDimensions(m meterDefinition) map[string]string {
	if len(m.Dims) == 0 || r.rng.IntN(5) < 3 {
		return nil
	}
	d := map[string]string{}
	for _, name := range m.Dims {
		if r.rng.IntN(2) == 0 {
			d[name] = pickString(r.rng, propertyValues[name])
		}
	}
	if len(d) == 0 {
		d[m.Dims[0]] = pickString(r.rng, propertyValues[m.Dims[0]])
	}
	return d
}

func pickString(rng *rand.Rand, xs []string) string { return xs[rng.IntN(len(xs))] }

func sameProps(a, b map[string]string) bool { return dimsKey(a) == dimsKey(b) && len(a) == len(b) }
