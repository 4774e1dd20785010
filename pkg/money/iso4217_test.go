package money

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

// listOne is ISO 4217 List One (2026-01-01) written out independently of the
// table in iso4217.go: code, numeric code, minor unit ("-" for N.A.) and kind
// (C circulating currency, F fund, U unit of account, M precious metal,
// T testing, N no currency). The table must be exactly this.
const listOne = `
AED 784 2 C
AFN 971 2 C
ALL 008 2 C
AMD 051 2 C
AOA 973 2 C
ARS 032 2 C
AUD 036 2 C
AWG 533 2 C
AZN 944 2 C
BAM 977 2 C
BBD 052 2 C
BDT 050 2 C
BHD 048 3 C
BIF 108 0 C
BMD 060 2 C
BND 096 2 C
BOB 068 2 C
BOV 984 2 F
BRL 986 2 C
BSD 044 2 C
BTN 064 2 C
BWP 072 2 C
BYN 933 2 C
BZD 084 2 C
CAD 124 2 C
CDF 976 2 C
CHE 947 2 F
CHF 756 2 C
CHW 948 2 F
CLF 990 4 F
CLP 152 0 C
CNY 156 2 C
COP 170 2 C
COU 970 2 F
CRC 188 2 C
CUP 192 2 C
CVE 132 2 C
CZK 203 2 C
DJF 262 0 C
DKK 208 2 C
DOP 214 2 C
DZD 012 2 C
EGP 818 2 C
ERN 232 2 C
ETB 230 2 C
EUR 978 2 C
FJD 242 2 C
FKP 238 2 C
GBP 826 2 C
GEL 981 2 C
GHS 936 2 C
GIP 292 2 C
GMD 270 2 C
GNF 324 0 C
GTQ 320 2 C
GYD 328 2 C
HKD 344 2 C
HNL 340 2 C
HTG 332 2 C
HUF 348 2 C
IDR 360 2 C
ILS 376 2 C
INR 356 2 C
IQD 368 3 C
IRR 364 2 C
ISK 352 0 C
JMD 388 2 C
JOD 400 3 C
JPY 392 0 C
KES 404 2 C
KGS 417 2 C
KHR 116 2 C
KMF 174 0 C
KPW 408 2 C
KRW 410 0 C
KWD 414 3 C
KYD 136 2 C
KZT 398 2 C
LAK 418 2 C
LBP 422 2 C
LKR 144 2 C
LRD 430 2 C
LSL 426 2 C
LYD 434 3 C
MAD 504 2 C
MDL 498 2 C
MGA 969 2 C
MKD 807 2 C
MMK 104 2 C
MNT 496 2 C
MOP 446 2 C
MRU 929 2 C
MUR 480 2 C
MVR 462 2 C
MWK 454 2 C
MXN 484 2 C
MXV 979 2 F
MYR 458 2 C
MZN 943 2 C
NAD 516 2 C
NGN 566 2 C
NIO 558 2 C
NOK 578 2 C
NPR 524 2 C
NZD 554 2 C
OMR 512 3 C
PAB 590 2 C
PEN 604 2 C
PGK 598 2 C
PHP 608 2 C
PKR 586 2 C
PLN 985 2 C
PYG 600 0 C
QAR 634 2 C
RON 946 2 C
RSD 941 2 C
RUB 643 2 C
RWF 646 0 C
SAR 682 2 C
SBD 090 2 C
SCR 690 2 C
SDG 938 2 C
SEK 752 2 C
SGD 702 2 C
SHP 654 2 C
SLE 925 2 C
SOS 706 2 C
SRD 968 2 C
SSP 728 2 C
STN 930 2 C
SVC 222 2 C
SYP 760 2 C
SZL 748 2 C
THB 764 2 C
TJS 972 2 C
TMT 934 2 C
TND 788 3 C
TOP 776 2 C
TRY 949 2 C
TTD 780 2 C
TWD 901 2 C
TZS 834 2 C
UAH 980 2 C
UGX 800 0 C
USD 840 2 C
USN 997 2 F
UYI 940 0 F
UYU 858 2 C
UYW 927 4 F
UZS 860 2 C
VED 926 2 C
VES 928 2 C
VND 704 0 C
VUV 548 0 C
WST 882 2 C
XAD 396 2 U
XAF 950 0 C
XAG 961 - M
XAU 959 - M
XBA 955 - U
XBB 956 - U
XBC 957 - U
XBD 958 - U
XCD 951 2 C
XCG 532 2 C
XDR 960 - U
XOF 952 0 C
XPD 964 - M
XPF 953 0 C
XPT 962 - M
XSU 994 - U
XTS 963 - T
XUA 965 - U
XXX 999 - N
YER 886 2 C
ZAR 710 2 C
ZMW 967 2 C
ZWG 924 2 C
`

func TestTableIsListOne(t *testing.T) {
	kinds := map[string]Kind{"C": Tender, "F": Fund, "U": UnitOfAccount, "M": PreciousMetal, "T": Testing, "N": NoCurrency}
	var want []string
	for _, line := range strings.Split(strings.TrimSpace(listOne), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("bad list line %q", line)
		}
		want = append(want, fmt.Sprintf("%s %s %s %v", f[0], f[1], f[2], kinds[f[3]]))
	}
	var got []string
	for _, c := range Table() {
		minor := fmt.Sprint(c.MinorUnits)
		if c.MinorUnits == NoMinorUnit {
			minor = "-"
		}
		got = append(got, fmt.Sprintf("%s %03d %s %v", c.Code, c.Numeric, minor, c.Kind))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		for i := 0; i < max(len(got), len(want)); i++ {
			var g, w string
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Errorf("row %d: table has %q, ISO 4217 List One %q", i, g, w)
			}
		}
	}
}

func TestTableShape(t *testing.T) {
	code := regexp.MustCompile(`^[A-Z]{3}$`)
	codes, numerics := map[string]bool{}, map[int]string{}
	prev := ""
	for _, c := range Table() {
		if !code.MatchString(c.Code) || c.Code <= prev {
			t.Errorf("%q: not an upper-case code in order after %q", c.Code, prev)
		}
		prev = c.Code
		if codes[c.Code] {
			t.Errorf("%s twice", c.Code)
		}
		codes[c.Code] = true
		if other, ok := numerics[c.Numeric]; ok || c.Numeric < 1 || c.Numeric > 999 {
			t.Errorf("%s: numeric %d out of range or also %s's", c.Code, c.Numeric, other)
		}
		numerics[c.Numeric] = c.Code
		if c.Name == "" {
			t.Errorf("%s has no name", c.Code)
		}
		// A circulating currency always has a minor unit; only X codes are
		// not circulating currencies, but for the fund codes.
		if c.Kind == Tender && (c.MinorUnits < 0 || c.MinorUnits > 4) {
			t.Errorf("%s: minor unit %d", c.Code, c.MinorUnits)
		}
		if c.Kind != Tender && c.Kind != Fund && c.Code[0] != 'X' {
			t.Errorf("%s is a %v but not an X code", c.Code, c.Kind)
		}
	}
}

func TestCurrencyExponents(t *testing.T) {
	for code, want := range map[string]int32{
		"JPY": 0, "KRW": 0, "CLP": 0, "ISK": 0, "VND": 0, "XOF": 0,
		"USD": 2, "EUR": 2, "GBP": 2, "IDR": 2, "COP": 2, "MRU": 2, "VES": 2, "VED": 2, "SLE": 2, "ZWG": 2, "XCG": 2, "STN": 2,
		"BHD": 3, "IQD": 3, "KWD": 3, "JOD": 3, "LYD": 3, "OMR": 3, "TND": 3,
	} {
		got, err := Currency(code)
		if err != nil || got != want {
			t.Errorf("Currency(%s) = %d, %v; want %d", code, got, err, want)
		}
	}
	for code, want := range map[string]int32{"CLF": 4, "UYW": 4, "UYI": 0, "BOV": 2} {
		if c, ok := Lookup(code); !ok || c.MinorUnits != want || c.Kind != Fund {
			t.Errorf("Lookup(%s) = %+v, %v; want a fund code of minor unit %d", code, c, ok, want)
		}
	}
}

func TestCurrencyRefusals(t *testing.T) {
	for _, tc := range []struct {
		code, want string
	}{
		// Not circulating currencies: refused as invoice currencies.
		{"XXX", CodeNotInvoiceable}, {"XTS", CodeNotInvoiceable}, {"XAU", CodeNotInvoiceable},
		{"XAG", CodeNotInvoiceable}, {"XPD", CodeNotInvoiceable}, {"XPT", CodeNotInvoiceable},
		{"XDR", CodeNotInvoiceable}, {"XSU", CodeNotInvoiceable}, {"XUA", CodeNotInvoiceable},
		{"XBA", CodeNotInvoiceable}, {"XAD", CodeNotInvoiceable},
		{"CLF", CodeNotInvoiceable}, {"UYW", CodeNotInvoiceable}, {"USN", CodeNotInvoiceable}, {"CHE", CodeNotInvoiceable},
		// Withdrawn, never assigned, or not a code at all.
		{"ANG", CodeUnknownCurrency}, {"HRK", CodeUnknownCurrency}, {"SLL", CodeUnknownCurrency},
		{"ZWL", CodeUnknownCurrency}, {"CUC", CodeUnknownCurrency}, {"VEF", CodeUnknownCurrency},
		{"ZZZ", CodeUnknownCurrency}, {"usd", CodeUnknownCurrency}, {"XXXX", CodeUnknownCurrency},
		{"", CodeUnknownCurrency}, {"US", CodeUnknownCurrency},
	} {
		_, err := Currency(tc.code)
		if got := ProblemCode(err); got != tc.want {
			t.Errorf("Currency(%q): %v (code %q), want code %q", tc.code, err, got, tc.want)
		}
		if _, err := Round(decimal.NewFromInt(1), tc.code); err == nil {
			t.Errorf("Round in %q accepted", tc.code)
		}
	}
}

func TestCheckMinorUnits(t *testing.T) {
	for _, tc := range []struct {
		amount, code string
		ok           bool
	}{
		{"-0.01", "USD", true}, {"-1.50", "USD", true}, {"12", "USD", true}, {"-10.00", "JPY", true},
		{"-0.005", "USD", false}, {"0.001", "EUR", false}, {"-0.5", "JPY", false}, {"-0.5", "KRW", false},
		{"-0.001", "BHD", true}, {"-0.0005", "BHD", false}, {"1.234", "IQD", true}, {"0.0001", "KWD", false},
		{"-1.25", "IDR", true}, {"-1.25", "COP", true},
	} {
		err := CheckMinorUnits(decimal.RequireFromString(tc.amount), tc.code)
		if (err == nil) != tc.ok {
			t.Errorf("CheckMinorUnits(%s %s) = %v, want ok=%v", tc.amount, tc.code, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrAmountPrecision) {
			t.Errorf("CheckMinorUnits(%s %s) = %v, not ErrAmountPrecision", tc.amount, tc.code, err)
		}
	}
	if err := CheckMinorUnits(decimal.NewFromInt(1), "XAU"); ProblemCode(err) != CodeNotInvoiceable {
		t.Errorf("CheckMinorUnits in XAU = %v", err)
	}
}
