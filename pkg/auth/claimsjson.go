package auth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/usagebilling/billing/pkg/httpx"
)

// errClaimsJSON: the token's claims are not strict JSON, or a time claim
// is not a number.
var errClaimsJSON = errors.New("claims not strict JSON")

// checkClaimsJSON reads the payload of a compact JWS and refuses what
// encoding/json (and so the JWT library) would accept leniently: a claim
// named twice or in other letter case ("EXP" for exp), NUL or invalid UTF-8,
// and a time claim (exp, iat, nbf) that is not a JSON number — a string
// such as "1900000000" would be read as one. The signature is checked after,
// by the JWT library: nothing here trusts the payload.
func checkClaimsJSON(token string) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil // the JWT library says malformed
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil // ditto
	}
	if p := httpx.CheckJSON(payload, &Claims{}); p != nil {
		return fmt.Errorf("%w: %s", errClaimsJSON, p.Detail)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(payload, &members); err != nil {
		return nil // not an object: the JWT library says malformed
	}
	for _, name := range []string{"exp", "iat", "nbf"} {
		raw, ok := members[name]
		if !ok {
			continue
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
			return fmt.Errorf("%w: claim %q must be a JSON number (seconds since 1970), not %s", errClaimsJSON, name, clipJSON(raw))
		}
	}
	return nil
}

func clipJSON(raw []byte) string {
	if len(raw) > 24 {
		return string(raw[:24]) + "..."
	}
	return string(raw)
}
