package envelope

import "bytes"

// traceparentKey and traceparentTail are how Marshal's encoding of an envelope with a
// traceparent ends: the field is the struct's last, and a traceparent has a
// fixed length.
var traceparentKey = []byte(`,"traceparent":"`)

const traceparentTail = len(`,"traceparent":"`) + 55 + len(`"}`)

// TraceparentOf returns the traceparent of an envelope encoded by Marshal
// without decoding it: the outbox relay reads it so, for every row it sends.
// It returns "" when raw does not end the way Marshal ends an envelope with a
// valid traceparent (none, or bytes written another way).
func TraceparentOf(raw []byte) string {
	n := len(raw)
	if n < traceparentTail || raw[n-1] != '}' || raw[n-2] != '"' {
		return ""
	}
	tail := raw[n-traceparentTail:]
	if !bytes.HasPrefix(tail, traceparentKey) {
		return ""
	}
	tp := string(tail[len(traceparentKey) : len(traceparentKey)+55])
	if !ValidTraceparent(tp) {
		return ""
	}
	return tp
}
