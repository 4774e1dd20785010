package httpapi

import (
	"strconv"
	"strings"
)

// mediaRange is one element of an Accept header (RFC 9110 section 12.5.1).
type mediaRange struct {
	typ, sub string
	q        float64
}

// matches reports whether r covers offer ("type/subtype"), and how
// specifically: 3 for type/subtype, 2 for type/*, 1 for */*, 0 not at all.
func (r mediaRange) matches(offer string) int {
	typ, sub, _ := strings.Cut(offer, "/")
	switch {
	case r.typ == "*" && r.sub == "*":
		return 1
	case r.typ != typ:
		return 0
	case r.sub == "*":
		return 2
	case r.sub == sub:
		return 3
	}
	return 0
}

// parseAccept reads the media ranges of Accept header values, skipping
// malformed elements. A range's parameters other than q are not matched
// (no offer of this API has any).
func parseAccept(values []string) []mediaRange {
	var out []mediaRange
	for _, v := range values {
		for elem := range strings.SplitSeq(v, ",") {
			parts := strings.Split(elem, ";")
			typ, sub, ok := strings.Cut(strings.ToLower(strings.TrimSpace(parts[0])), "/")
			if !ok || !token(typ) || !token(sub) || (typ == "*" && sub != "*") {
				continue
			}
			r := mediaRange{typ: typ, sub: sub, q: 1}
			for _, p := range parts[1:] {
				name, value, _ := strings.Cut(strings.TrimSpace(p), "=")
				if !strings.EqualFold(strings.TrimSpace(name), "q") {
					continue
				}
				q, ok := qvalue(strings.TrimSpace(value))
				if !ok {
					r.q = -1 // malformed: the element is skipped
				} else {
					r.q = q
				}
				break // what follows q is accept-ext
			}
			if r.q >= 0 {
				out = append(out, r)
			}
		}
	}
	return out
}

// qvalue parses a weight: 0 to 1 with at most three decimals.
func qvalue(s string) (float64, bool) {
	if s == "" || len(s) > 5 || (s[0] != '0' && s[0] != '1') {
		return 0, false
	}
	if len(s) > 1 && (s[1] != '.' || strings.ContainsFunc(s[2:], func(r rune) bool { return r < '0' || r > '9' })) {
		return 0, false
	}
	q, err := strconv.ParseFloat(s, 64)
	if err != nil || q > 1 {
		return 0, false
	}
	return q, true
}

func token(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c) {
			return false
		}
	}
	return true
}

// negotiate picks the offer (a "type/subtype") the Accept header values
// prefer: each offer weighs the q of the most specific range covering it
// (q=0 refuses it); the heaviest wins, ties to the earlier offer. Without
// an Accept header, or with none of its elements well-formed, it is the
// first offer. ok is false when the header refuses every offer (406).
func negotiate(values []string, offers []string) (offer string, ok bool) {
	ranges := parseAccept(values)
	if len(ranges) == 0 {
		return offers[0], true
	}
	best, bestQ := "", 0.0
	for _, o := range offers {
		q, spec := 0.0, 0
		for _, r := range ranges {
			if s := r.matches(o); s > spec {
				q, spec = r.q, s
			}
		}
		if q > bestQ {
			best, bestQ = o, q
		}
	}
	return best, best != ""
}
