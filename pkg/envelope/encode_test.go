package envelope_test

import (
	"testing"

	"github.com/usagebilling/billing/pkg/envelope"
)

// An Object writes only what the canonical form keeps as it is, in its
// order; anything else makes End report false, for New to fall back to
// encoding/json (and to Canonical, which refuses what must be refused).
func TestObjectDeclinesWhatIsNotCanonical(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		write func(o *envelope.Object)
		ok    bool
		want  string
	}{
		"in order": {func(o *envelope.Object) { o.String("a", `x"<`); o.Int("b", -1); o.Bool("c", true) }, true,
			`{"a":"x\"<","b":-1,"c":true}`},
		"map sorted": {func(o *envelope.Object) { o.StringMap("m", map[string]string{"b": "2", "a": "1", "é": "\n"}) }, true,
			`{"m":{"a":"1","b":"2","é":"\n"}}`},
		"number verbatim":   {func(o *envelope.Object) { o.JSON("n", raw("1.50e3")) }, true, `{"n":1.50e3}`},
		"out of order":      {func(o *envelope.Object) { o.Int("b", 1); o.Int("a", 2) }, false, ""},
		"repeated key":      {func(o *envelope.Object) { o.Int("a", 1); o.Int("a", 2) }, false, ""},
		"NUL":               {func(o *envelope.Object) { o.String("a", "x\x00") }, false, ""},
		"invalid UTF-8 key": {func(o *envelope.Object) { o.StringMap("m", map[string]string{"\xff": "1"}) }, false, ""},
		"escaped string":    {func(o *envelope.Object) { o.JSON("s", raw(`"a\u0041"`)) }, false, ""},
		"not a scalar":      {func(o *envelope.Object) { o.JSON("s", raw(`{"a":1}`)) }, false, ""},
		"bad number":        {func(o *envelope.Object) { o.JSON("s", raw(`01`)) }, false, ""},
	} {
		o := envelope.StartObject([]byte("x"))
		c.write(&o)
		got, ok := o.End()
		if ok != c.ok || ok && string(got) != "x"+c.want {
			t.Errorf("%s: got %s, %v; want %s, %v", name, got, ok, c.want, c.ok)
		}
	}
}

// raw is a json.Marshaler that writes itself.
type raw string

func (r raw) MarshalJSON() ([]byte, error) { return []byte(r), nil }
