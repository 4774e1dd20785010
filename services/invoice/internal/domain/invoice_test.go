package domain

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
)

func d(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func TestIssueRoundsOnceHalfEven(t *testing.T) {
	tests := []struct {
		subtotal, currency, total, rounding string
	}{
		{"1234.5", "KRW", "1234", "-0.5"}, // tie, to even (down)
		{"1235.5", "KRW", "1236", "0.5"},  // tie, to even (up)
		{"1234.51", "KRW", "1235", "0.49"},
		{"1000", "KRW", "1000", "0"},
		{"10.125", "USD", "10.12", "-0.005"}, // tie, to even (down)
		{"10.135", "USD", "10.14", "0.005"},  // tie, to even (up)
		{"10.1251", "USD", "10.13", "0.0049"},
		{"-10.125", "USD", "-10.12", "0.005"},
		{"3.50", "USD", "3.5", "0"},
		{"0.0001", "JPY", "0", "-0.0001"},
		{"1.0005", "BHD", "1", "-0.0005"}, // 3 decimals, tie to even
	}
	for _, tt := range tests {
		t.Run(tt.currency+" "+tt.subtotal, func(t *testing.T) {
			a, err := Issue(d(tt.subtotal), tt.currency)
			if err != nil {
				t.Fatal(err)
			}
			if !a.Total.Equal(d(tt.total)) || !a.Rounding.Equal(d(tt.rounding)) || !a.Subtotal.Equal(d(tt.subtotal)) {
				t.Fatalf("Issue(%s %s) = total %s rounding %s, want %s and %s",
					tt.subtotal, tt.currency, a.Total, a.Rounding, tt.total, tt.rounding)
			}
			if !a.Subtotal.Add(a.Rounding).Equal(a.Total) {
				t.Fatalf("subtotal + rounding != total")
			}
		})
	}
	if _, err := Issue(d("1"), "XYZ"); err == nil {
		t.Fatal("Issue with an unknown currency: want an error")
	}
}

func TestCheckClose(t *testing.T) {
	usd := Tally{InvoiceID: uuid.New(), Currency: "USD", Charges: 2, Adjustments: 1, Subtotal: d("10.005")}
	krw := Tally{InvoiceID: uuid.New(), Currency: "KRW", Charges: 1, Subtotal: d("100.5")}
	both := []Tally{usd, krw}
	totals := map[string]decimal.Decimal{"USD": d("10.005"), "KRW": d("100.5")}
	tests := []struct {
		name    string
		close   Close
		tallies []Tally
		want    any // nil, or a pointer to the wanted error type
	}{
		{"complete", Close{Charges: 3, Adjustments: 1, Totals: totals}, both, nil},
		{"equal totals written differently", Close{Charges: 3, Adjustments: 1,
			Totals: map[string]decimal.Decimal{"USD": d("10.0050"), "KRW": d("100.50")}}, both, nil},
		{"nothing to issue", Close{Totals: map[string]decimal.Decimal{}}, nil, nil},
		{"zero total without invoice", Close{Charges: 3, Adjustments: 1,
			Totals: map[string]decimal.Decimal{"USD": d("10.005"), "KRW": d("100.5"), "EUR": d("0")}}, both, nil},
		{"charge missing", Close{Charges: 4, Adjustments: 1, Totals: totals}, both, new(*IncompleteError)},
		{"adjustment missing", Close{Charges: 3, Adjustments: 2, Totals: totals}, both, new(*IncompleteError)},
		{"no invoice yet", Close{Charges: 1, Totals: totals}, nil, new(*IncompleteError)},
		{"more charges than counted", Close{Charges: 2, Adjustments: 1, Totals: totals}, both, new(*CountsMismatchError)},
		{"one more, one less", Close{Charges: 4, Adjustments: 0, Totals: totals}, both, new(*CountsMismatchError)},
		{"total differs", Close{Charges: 3, Adjustments: 1,
			Totals: map[string]decimal.Decimal{"USD": d("10.01"), "KRW": d("100.5")}}, both, new(*TotalsMismatchError)},
		{"currency missing from totals", Close{Charges: 3, Adjustments: 1,
			Totals: map[string]decimal.Decimal{"USD": d("10.005")}}, both, new(*TotalsMismatchError)},
		{"total without invoice", Close{Charges: 3, Adjustments: 1,
			Totals: map[string]decimal.Decimal{"USD": d("10.005"), "KRW": d("100.5"), "EUR": d("1")}}, both, new(*TotalsMismatchError)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckClose(tt.close, tt.tallies)
			switch want := tt.want.(type) {
			case nil:
				if err != nil {
					t.Fatalf("CheckClose: %v, want nil", err)
				}
			case **IncompleteError:
				if !errors.As(err, want) {
					t.Fatalf("CheckClose: %v, want *IncompleteError", err)
				}
			case **CountsMismatchError:
				if !errors.As(err, want) {
					t.Fatalf("CheckClose: %v, want *CountsMismatchError", err)
				}
			case **TotalsMismatchError:
				if !errors.As(err, want) {
					t.Fatalf("CheckClose: %v, want *TotalsMismatchError", err)
				}
			}
		})
	}
}
