package money

// The ISO 4217 table: every code of List One (the active codes), with its
// numeric code, its minor unit (the exponent: 2 = hundredths) and its kind.
// It is kept here, in the code, so that a currency's exponent is the
// standard's and not a display rule (CLDR rounds IQD to 0 digits and IDR and
// COP to 0, and knows nothing of MRU, VES, SLE or ZWG).
//
// Source: ISO 4217 List One as published by the maintenance agency (SIX),
// list of 2026-01-01. Withdrawn codes (ANG, CUC, HRK, SLL, ZWL, ...) are
// absent: a price or invoice in them is refused as unknown.

// Kind says what an ISO 4217 code stands for.
type Kind int

// The kinds of ISO 4217 codes. Only Tender is a currency an invoice can be
// in; the others are refused (ErrNotInvoiceable).
const (
	// Tender is a circulating currency.
	Tender Kind = iota + 1
	// Fund is a fund or indexed unit code (BOV, CHE, CHW, CLF, COU, MXV,
	// USN, UYI, UYW): a unit of account beside its currency.
	Fund
	// UnitOfAccount is a supranational unit (XDR, XSU, XUA, XAD and the
	// bond market units XBA to XBD).
	UnitOfAccount
	// PreciousMetal is a metal traded by the troy ounce (XAU, XAG, XPD,
	// XPT).
	PreciousMetal
	// Testing is XTS, reserved for testing.
	Testing
	// NoCurrency is XXX, for transactions where no currency is involved.
	NoCurrency
)

func (k Kind) String() string {
	switch k {
	case Tender:
		return "currency"
	case Fund:
		return "fund code"
	case UnitOfAccount:
		return "unit of account"
	case PreciousMetal:
		return "precious metal"
	case Testing:
		return "code reserved for testing"
	case NoCurrency:
		return "code for no currency"
	default:
		return "unknown"
	}
}

// NoMinorUnit is the minor unit of the codes ISO 4217 gives none ("N.A."):
// the metals, the units of account, XTS and XXX.
const NoMinorUnit = -1

// ISOCurrency is one row of ISO 4217 List One.
type ISOCurrency struct {
	Code       string // alphabetic code, "USD"
	Numeric    int    // numeric code, 840
	MinorUnits int32  // exponent: 2 for USD, 0 for JPY, 3 for BHD; NoMinorUnit when none
	Kind       Kind
	Name       string
}

// iso4217 is List One, one row per alphabetic code, in code order.
var iso4217 = []ISOCurrency{
	{"AED", 784, 2, Tender, "UAE Dirham"},
	{"AFN", 971, 2, Tender, "Afghani"},
	{"ALL", 8, 2, Tender, "Lek"},
	{"AMD", 51, 2, Tender, "Armenian Dram"},
	{"AOA", 973, 2, Tender, "Kwanza"},
	{"ARS", 32, 2, Tender, "Argentine Peso"},
	{"AUD", 36, 2, Tender, "Australian Dollar"},
	{"AWG", 533, 2, Tender, "Aruban Florin"},
	{"AZN", 944, 2, Tender, "Azerbaijan Manat"},
	{"BAM", 977, 2, Tender, "Convertible Mark"},
	{"BBD", 52, 2, Tender, "Barbados Dollar"},
	{"BDT", 50, 2, Tender, "Taka"},
	{"BHD", 48, 3, Tender, "Bahraini Dinar"},
	{"BIF", 108, 0, Tender, "Burundi Franc"},
	{"BMD", 60, 2, Tender, "Bermudian Dollar"},
	{"BND", 96, 2, Tender, "Brunei Dollar"},
	{"BOB", 68, 2, Tender, "Boliviano"},
	{"BOV", 984, 2, Fund, "Mvdol"},
	{"BRL", 986, 2, Tender, "Brazilian Real"},
	{"BSD", 44, 2, Tender, "Bahamian Dollar"},
	{"BTN", 64, 2, Tender, "Ngultrum"},
	{"BWP", 72, 2, Tender, "Pula"},
	{"BYN", 933, 2, Tender, "Belarusian Ruble"},
	{"BZD", 84, 2, Tender, "Belize Dollar"},
	{"CAD", 124, 2, Tender, "Canadian Dollar"},
	{"CDF", 976, 2, Tender, "Congolese Franc"},
	{"CHE", 947, 2, Fund, "WIR Euro"},
	{"CHF", 756, 2, Tender, "Swiss Franc"},
	{"CHW", 948, 2, Fund, "WIR Franc"},
	{"CLF", 990, 4, Fund, "Unidad de Fomento"},
	{"CLP", 152, 0, Tender, "Chilean Peso"},
	{"CNY", 156, 2, Tender, "Yuan Renminbi"},
	{"COP", 170, 2, Tender, "Colombian Peso"},
	{"COU", 970, 2, Fund, "Unidad de Valor Real"},
	{"CRC", 188, 2, Tender, "Costa Rican Colon"},
	{"CUP", 192, 2, Tender, "Cuban Peso"},
	{"CVE", 132, 2, Tender, "Cabo Verde Escudo"},
	{"CZK", 203, 2, Tender, "Czech Koruna"},
	{"DJF", 262, 0, Tender, "Djibouti Franc"},
	{"DKK", 208, 2, Tender, "Danish Krone"},
	{"DOP", 214, 2, Tender, "Dominican Peso"},
	{"DZD", 12, 2, Tender, "Algerian Dinar"},
	{"EGP", 818, 2, Tender, "Egyptian Pound"},
	{"ERN", 232, 2, Tender, "Nakfa"},
	{"ETB", 230, 2, Tender, "Ethiopian Birr"},
	{"EUR", 978, 2, Tender, "Euro"},
	{"FJD", 242, 2, Tender, "Fiji Dollar"},
	{"FKP", 238, 2, Tender, "Falkland Islands Pound"},
	{"GBP", 826, 2, Tender, "Pound Sterling"},
	{"GEL", 981, 2, Tender, "Lari"},
	{"GHS", 936, 2, Tender, "Ghana Cedi"},
	{"GIP", 292, 2, Tender, "Gibraltar Pound"},
	{"GMD", 270, 2, Tender, "Dalasi"},
	{"GNF", 324, 0, Tender, "Guinean Franc"},
	{"GTQ", 320, 2, Tender, "Quetzal"},
	{"GYD", 328, 2, Tender, "Guyana Dollar"},
	{"HKD", 344, 2, Tender, "Hong Kong Dollar"},
	{"HNL", 340, 2, Tender, "Lempira"},
	{"HTG", 332, 2, Tender, "Gourde"},
	{"HUF", 348, 2, Tender, "Forint"},
	{"IDR", 360, 2, Tender, "Rupiah"},
	{"ILS", 376, 2, Tender, "New Israeli Sheqel"},
	{"INR", 356, 2, Tender, "Indian Rupee"},
	{"IQD", 368, 3, Tender, "Iraqi Dinar"},
	{"IRR", 364, 2, Tender, "Iranian Rial"},
	{"ISK", 352, 0, Tender, "Iceland Krona"},
	{"JMD", 388, 2, Tender, "Jamaican Dollar"},
	{"JOD", 400, 3, Tender, "Jordanian Dinar"},
	{"JPY", 392, 0, Tender, "Yen"},
	{"KES", 404, 2, Tender, "Kenyan Shilling"},
	{"KGS", 417, 2, Tender, "Som"},
	{"KHR", 116, 2, Tender, "Riel"},
	{"KMF", 174, 0, Tender, "Comorian Franc"},
	{"KPW", 408, 2, Tender, "North Korean Won"},
	{"KRW", 410, 0, Tender, "Won"},
	{"KWD", 414, 3, Tender, "Kuwaiti Dinar"},
	{"KYD", 136, 2, Tender, "Cayman Islands Dollar"},
	{"KZT", 398, 2, Tender, "Tenge"},
	{"LAK", 418, 2, Tender, "Lao Kip"},
	{"LBP", 422, 2, Tender, "Lebanese Pound"},
	{"LKR", 144, 2, Tender, "Sri Lanka Rupee"},
	{"LRD", 430, 2, Tender, "Liberian Dollar"},
	{"LSL", 426, 2, Tender, "Loti"},
	{"LYD", 434, 3, Tender, "Libyan Dinar"},
	{"MAD", 504, 2, Tender, "Moroccan Dirham"},
	{"MDL", 498, 2, Tender, "Moldovan Leu"},
	{"MGA", 969, 2, Tender, "Malagasy Ariary"},
	{"MKD", 807, 2, Tender, "Denar"},
	{"MMK", 104, 2, Tender, "Kyat"},
	{"MNT", 496, 2, Tender, "Tugrik"},
	{"MOP", 446, 2, Tender, "Pataca"},
	{"MRU", 929, 2, Tender, "Ouguiya"},
	{"MUR", 480, 2, Tender, "Mauritius Rupee"},
	{"MVR", 462, 2, Tender, "Rufiyaa"},
	{"MWK", 454, 2, Tender, "Malawi Kwacha"},
	{"MXN", 484, 2, Tender, "Mexican Peso"},
	{"MXV", 979, 2, Fund, "Mexican Unidad de Inversion (UDI)"},
	{"MYR", 458, 2, Tender, "Malaysian Ringgit"},
	{"MZN", 943, 2, Tender, "Mozambique Metical"},
	{"NAD", 516, 2, Tender, "Namibia Dollar"},
	{"NGN", 566, 2, Tender, "Naira"},
	{"NIO", 558, 2, Tender, "Cordoba Oro"},
	{"NOK", 578, 2, Tender, "Norwegian Krone"},
	{"NPR", 524, 2, Tender, "Nepalese Rupee"},
	{"NZD", 554, 2, Tender, "New Zealand Dollar"},
	{"OMR", 512, 3, Tender, "Rial Omani"},
	{"PAB", 590, 2, Tender, "Balboa"},
	{"PEN", 604, 2, Tender, "Sol"},
	{"PGK", 598, 2, Tender, "Kina"},
	{"PHP", 608, 2, Tender, "Philippine Peso"},
	{"PKR", 586, 2, Tender, "Pakistan Rupee"},
	{"PLN", 985, 2, Tender, "Zloty"},
	{"PYG", 600, 0, Tender, "Guarani"},
	{"QAR", 634, 2, Tender, "Qatari Rial"},
	{"RON", 946, 2, Tender, "Romanian Leu"},
	{"RSD", 941, 2, Tender, "Serbian Dinar"},
	{"RUB", 643, 2, Tender, "Russian Ruble"},
	{"RWF", 646, 0, Tender, "Rwanda Franc"},
	{"SAR", 682, 2, Tender, "Saudi Riyal"},
	{"SBD", 90, 2, Tender, "Solomon Islands Dollar"},
	{"SCR", 690, 2, Tender, "Seychelles Rupee"},
	{"SDG", 938, 2, Tender, "Sudanese Pound"},
	{"SEK", 752, 2, Tender, "Swedish Krona"},
	{"SGD", 702, 2, Tender, "Singapore Dollar"},
	{"SHP", 654, 2, Tender, "Saint Helena Pound"},
	{"SLE", 925, 2, Tender, "Leone"},
	{"SOS", 706, 2, Tender, "Somali Shilling"},
	{"SRD", 968, 2, Tender, "Surinam Dollar"},
	{"SSP", 728, 2, Tender, "South Sudanese Pound"},
	{"STN", 930, 2, Tender, "Dobra"},
	{"SVC", 222, 2, Tender, "El Salvador Colon"},
	{"SYP", 760, 2, Tender, "Syrian Pound"},
	{"SZL", 748, 2, Tender, "Lilangeni"},
	{"THB", 764, 2, Tender, "Baht"},
	{"TJS", 972, 2, Tender, "Somoni"},
	{"TMT", 934, 2, Tender, "Turkmenistan New Manat"},
	{"TND", 788, 3, Tender, "Tunisian Dinar"},
	{"TOP", 776, 2, Tender, "Pa'anga"},
	{"TRY", 949, 2, Tender, "Turkish Lira"},
	{"TTD", 780, 2, Tender, "Trinidad and Tobago Dollar"},
	{"TWD", 901, 2, Tender, "New Taiwan Dollar"},
	{"TZS", 834, 2, Tender, "Tanzanian Shilling"},
	{"UAH", 980, 2, Tender, "Hryvnia"},
	{"UGX", 800, 0, Tender, "Uganda Shilling"},
	{"USD", 840, 2, Tender, "US Dollar"},
	{"USN", 997, 2, Fund, "US Dollar (Next day)"},
	{"UYI", 940, 0, Fund, "Uruguay Peso en Unidades Indexadas (UI)"},
	{"UYU", 858, 2, Tender, "Peso Uruguayo"},
	{"UYW", 927, 4, Fund, "Unidad Previsional"},
	{"UZS", 860, 2, Tender, "Uzbekistan Sum"},
	{"VED", 926, 2, Tender, "Bolivar Soberano (digital)"},
	{"VES", 928, 2, Tender, "Bolivar Soberano"},
	{"VND", 704, 0, Tender, "Dong"},
	{"VUV", 548, 0, Tender, "Vatu"},
	{"WST", 882, 2, Tender, "Tala"},
	{"XAD", 396, 2, UnitOfAccount, "Arab Accounting Dinar"},
	{"XAF", 950, 0, Tender, "CFA Franc BEAC"},
	{"XAG", 961, NoMinorUnit, PreciousMetal, "Silver"},
	{"XAU", 959, NoMinorUnit, PreciousMetal, "Gold"},
	{"XBA", 955, NoMinorUnit, UnitOfAccount, "Bond Markets Unit European Composite Unit (EURCO)"},
	{"XBB", 956, NoMinorUnit, UnitOfAccount, "Bond Markets Unit European Monetary Unit (E.M.U.-6)"},
	{"XBC", 957, NoMinorUnit, UnitOfAccount, "Bond Markets Unit European Unit of Account 9 (E.U.A.-9)"},
	{"XBD", 958, NoMinorUnit, UnitOfAccount, "Bond Markets Unit European Unit of Account 17 (E.U.A.-17)"},
	{"XCD", 951, 2, Tender, "East Caribbean Dollar"},
	{"XCG", 532, 2, Tender, "Caribbean Guilder"},
	{"XDR", 960, NoMinorUnit, UnitOfAccount, "SDR (Special Drawing Right)"},
	{"XOF", 952, 0, Tender, "CFA Franc BCEAO"},
	{"XPD", 964, NoMinorUnit, PreciousMetal, "Palladium"},
	{"XPF", 953, 0, Tender, "CFP Franc"},
	{"XPT", 962, NoMinorUnit, PreciousMetal, "Platinum"},
	{"XSU", 994, NoMinorUnit, UnitOfAccount, "Sucre"},
	{"XTS", 963, NoMinorUnit, Testing, "Codes specifically reserved for testing purposes"},
	{"XUA", 965, NoMinorUnit, UnitOfAccount, "ADB Unit of Account"},
	{"XXX", 999, NoMinorUnit, NoCurrency, "No currency"},
	{"YER", 886, 2, Tender, "Yemeni Rial"},
	{"ZAR", 710, 2, Tender, "Rand"},
	{"ZMW", 967, 2, Tender, "Zambian Kwacha"},
	{"ZWG", 924, 2, Tender, "Zimbabwe Gold"},
}

var byCode = func() map[string]ISOCurrency {
	m := make(map[string]ISOCurrency, len(iso4217))
	for _, c := range iso4217 {
		m[c.Code] = c
	}
	return m
}()

// Lookup returns the ISO 4217 row of an alphabetic code, of any kind.
func Lookup(code string) (ISOCurrency, bool) {
	c, ok := byCode[code]
	return c, ok
}

// Table returns a copy of the whole table, in code order.
func Table() []ISOCurrency {
	return append([]ISOCurrency(nil), iso4217...)
}
