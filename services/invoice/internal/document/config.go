package document

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/usagebilling/billing/pkg/service"
)

// DefaultSellerName is INVOICE_SELLER_NAME's default.
const DefaultSellerName = "Usage Billing"

// EnvNames are the variables LoadSeller reads.
var EnvNames = []string{"INVOICE_SELLER_NAME", "INVOICE_SELLER_ADDRESS"}

const (
	maxSellerText    = 200 // characters of the name and of each address line
	maxAddressLines  = 6
	addressSeparator = ";"
)

// LoadSeller reads the seller the documents name: INVOICE_SELLER_NAME
// (DefaultSellerName) and INVOICE_SELLER_ADDRESS (none), its lines
// separated by ";" ("1 Main Street; 10115 Berlin; Germany").
func LoadSeller(e *service.Env) (Seller, error) {
	s := Seller{Name: e.String("INVOICE_SELLER_NAME", DefaultSellerName)}
	for line := range strings.SplitSeq(e.String("INVOICE_SELLER_ADDRESS", ""), addressSeparator) {
		if line = strings.TrimSpace(line); line != "" {
			s.Address = append(s.Address, line)
		}
	}
	if err := e.Err(); err != nil {
		return Seller{}, err
	}
	return s, s.Check()
}

// Check reports what is wrong with the seller's settings.
func (s Seller) Check() error {
	var errs []error
	if p := textProblem(s.Name); p != "" {
		errs = append(errs, fmt.Errorf("INVOICE_SELLER_NAME: %s", p))
	}
	if len(s.Address) > maxAddressLines {
		errs = append(errs, fmt.Errorf("INVOICE_SELLER_ADDRESS: %d lines, at most %d", len(s.Address), maxAddressLines))
	}
	for i, line := range s.Address {
		if p := textProblem(line); p != "" {
			errs = append(errs, fmt.Errorf("INVOICE_SELLER_ADDRESS line %d: %s", i+1, p))
		}
	}
	return errors.Join(errs...)
}

func textProblem(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case !utf8.ValidString(s):
		return "must be UTF-8"
	case utf8.RuneCountInString(s) > maxSellerText:
		return fmt.Sprintf("at most %d characters", maxSellerText)
	case strings.ContainsFunc(s, unicode.IsControl):
		return "must not hold control characters"
	}
	return ""
}
