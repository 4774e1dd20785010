package domain

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // IANA zones even where the host has none (scratch images)
	"unicode/utf8"

	"github.com/shopspring/decimal"

	"github.com/usagebilling/billing/pkg/events"
	"github.com/usagebilling/billing/pkg/money"
	"github.com/usagebilling/billing/pkg/rule"
)

// Period lifecycle (decision 0014). A tenant's periods are calendar months
// in its time zone; a period ends at the start of the next month in the
// zone of that period, and closes by itself at its end plus its grace
// period, unless closed earlier. A tenant's settings apply from a period on
// (EffectiveFrom); a period takes the settings with the latest EffectiveFrom
// at or before it, DefaultSettings before any.

// StatusGrace is the status of a period that has ended but is not closed
// yet: its usage is still rated into it and its invoices are draft.
const StatusGrace = "grace"

// DefaultGrace is the grace period of a tenant that set none.
const DefaultGrace = time.Hour

// MaxGrace is the longest grace period a tenant may set.
const MaxGrace = 7 * 24 * time.Hour

// SettingsLead is how far ahead of now the periods a settings change may
// apply to begin: more than usage's MaxFutureSkew (5 minutes), so no fact
// already rated can belong to a period whose settings change.
const SettingsLead = 10 * time.Minute

// Settings are a tenant's period settings from EffectiveFrom on.
type Settings struct {
	EffectiveFrom string // a period; "" for the defaults
	TimeZone      string // IANA name
	Grace         time.Duration
	// TaxRates are added to each invoice of the period, in this order
	// (DESIGN.md section 3a); none by default.
	TaxRates []events.TaxRate
	loc      *time.Location
}

// DefaultSettings are the settings of a tenant that set none: UTC, PT1H.
func DefaultSettings() Settings {
	return Settings{TimeZone: "UTC", Grace: DefaultGrace, loc: time.UTC}
}

// Location is the settings' time zone.
func (s Settings) Location() *time.Location {
	if s.loc == nil {
		if loc, err := time.LoadLocation(s.TimeZone); err == nil {
			return loc
		}
		return time.UTC
	}
	return s.loc
}

// NewSettings checks a stored settings row (zone known, grace in range,
// tax rates as ParseTaxRates takes them).
func NewSettings(effectiveFrom, timeZone string, grace time.Duration, taxRates []events.TaxRate) (Settings, error) {
	loc, err := loadZone(timeZone)
	if err != nil {
		return Settings{}, err
	}
	if grace < 0 || grace > MaxGrace {
		return Settings{}, errorf(rule.Unprocessable, "grace_period_out_of_range", "gracePeriod must be between PT0S and P7D")
	}
	if err := checkTaxRates(taxRates); err != nil {
		return Settings{}, err
	}
	return Settings{EffectiveFrom: effectiveFrom, TimeZone: timeZone, Grace: grace, TaxRates: taxRates, loc: loc}, nil
}

func loadZone(name string) (*time.Location, error) {
	// "Local" and "" name no zone a tenant means; LoadLocation takes both.
	if name == "" || name == "Local" || strings.HasPrefix(name, "/") || strings.Contains(name, "..") {
		return nil, errorf(rule.Invalid, "invalid_time_zone", "timeZone must be an IANA time zone name such as \"Asia/Seoul\", got %q", clip(name))
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, errorf(rule.Invalid, "invalid_time_zone", "timeZone must be an IANA time zone name such as \"Asia/Seoul\", got %q", clip(name))
	}
	return loc, nil
}

// SettingsRequest is PUT .../settings as a client sends it; an absent field
// takes its default (the request replaces the settings).
type SettingsRequest struct {
	TimeZone    *string
	GracePeriod *string
	TaxRates    []TaxRateRequest
}

// TaxRateRequest is one tax rate of a settings request as a client sends it.
type TaxRateRequest struct {
	Code, Name, Rate string
}

// ParseSettings checks a settings request: a known IANA zone
// (invalid_time_zone), an ISO 8601 duration in days, hours, minutes and
// seconds (invalid_grace_period) from PT0S to P7D
// (grace_period_out_of_range).
func ParseSettings(r SettingsRequest) (Settings, error) {
	s := DefaultSettings()
	if r.TimeZone != nil {
		loc, err := loadZone(*r.TimeZone)
		if err != nil {
			return Settings{}, err
		}
		s.TimeZone, s.loc = *r.TimeZone, loc
	}
	if r.GracePeriod != nil {
		g, err := ParseDuration(*r.GracePeriod)
		if err != nil {
			return Settings{}, errorf(rule.Invalid, "invalid_grace_period",
				"gracePeriod must be an ISO 8601 duration such as \"PT1H\" or \"P2D\" (days, hours, minutes, seconds), got %q", clip(*r.GracePeriod))
		}
		if g < 0 || g > MaxGrace {
			return Settings{}, errorf(rule.Unprocessable, "grace_period_out_of_range", "gracePeriod must be between PT0S and P7D, got %s", *r.GracePeriod)
		}
		s.Grace = g
	}
	rates, err := ParseTaxRates(r.TaxRates)
	if err != nil {
		return Settings{}, err
	}
	s.TaxRates = rates
	return s, nil
}

// Tax rate problems of a settings request.
const (
	CodeInvalidTaxRate    = "invalid_tax_rate"
	CodeTaxRateOutOfRange = "tax_rate_out_of_range"
	CodeDuplicateTaxCode  = "duplicate_tax_code"
	CodeTooManyTaxRates   = "too_many_tax_rates"
	maxTaxRateScale       = 6
	maxTaxNameLength      = 100
)

var taxCodeRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,32}$`)

// ParseTaxRates checks a settings request's tax rates: at most
// events.MaxTaxRates (too_many_tax_rates); each a code of 1-32 characters
// of A-Z a-z 0-9 _ . - unique among them (duplicate_tax_code), a name of
// 1-100 characters of free text and a plain decimal rate
// (invalid_tax_rate, 400) from 0 to below 1 with at most 6 decimal places
// (tax_rate_out_of_range, 422).
func ParseTaxRates(rs []TaxRateRequest) ([]events.TaxRate, error) {
	if len(rs) > events.MaxTaxRates {
		return nil, errorf(rule.Unprocessable, CodeTooManyTaxRates, "at most %d tax rates, got %d", events.MaxTaxRates, len(rs))
	}
	out := make([]events.TaxRate, 0, len(rs))
	for i, r := range rs {
		if !taxCodeRE.MatchString(r.Code) {
			return nil, errorf(rule.Invalid, CodeInvalidTaxRate,
				"taxRates[%d].code must be 1-32 characters of A-Z a-z 0-9 _ . -, got %q", i, clip(r.Code))
		}
		if n := utf8.RuneCountInString(r.Name); n == 0 || n > maxTaxNameLength {
			return nil, errorf(rule.Invalid, CodeInvalidTaxRate, "taxRates[%d].name must be 1-%d characters, got %d", i, maxTaxNameLength, n)
		}
		if e := rule.FreeText(fmt.Sprintf("taxRates[%d].name", i), r.Name); e != nil {
			return nil, e
		}
		rate, err := money.Parse(r.Rate)
		if err != nil {
			return nil, errorf(rule.Invalid, CodeInvalidTaxRate, "taxRates[%d].rate must be a decimal such as \"0.2\": %v", i, err)
		}
		t := events.TaxRate{Code: r.Code, Name: r.Name, Rate: rate}
		out = append(out, t)
	}
	if err := checkTaxRates(out); err != nil {
		return nil, err
	}
	return out, nil
}

// checkTaxRates checks the rules tax rates keep whatever their source.
func checkTaxRates(rs []events.TaxRate) error {
	codes := make(map[string]bool, len(rs))
	for i, r := range rs {
		if r.Rate.IsNegative() || !r.Rate.LessThan(decimal.NewFromInt(1)) || r.Rate.Exponent() < -maxTaxRateScale {
			return errorf(rule.Unprocessable, CodeTaxRateOutOfRange,
				"taxRates[%d].rate must be from 0 to below 1 with at most %d decimal places, got %s", i, maxTaxRateScale, r.Rate)
		}
		if codes[r.Code] {
			return errorf(rule.Unprocessable, CodeDuplicateTaxCode, "taxRates[%d].code %q is given twice", i, r.Code)
		}
		codes[r.Code] = true
	}
	return nil
}

var isoDuration = regexp.MustCompile(`^P(?:(\d{1,4})W)?(?:(\d{1,4})D)?(?:T(?:(\d{1,6})H)?(?:(\d{1,8})M)?(?:(\d{1,10})(?:\.(\d{1,9}))?S)?)?$`)

const maxDuration = time.Duration(1<<63 - 1 - 1e9) // room for the fraction of a second

// ParseDuration parses an ISO 8601 duration of weeks, days, hours, minutes
// and seconds ("PT1H", "P1DT12H", "PT90M", "PT0S"). Years and months are
// refused: their length depends on the calendar.
func ParseDuration(s string) (time.Duration, error) {
	m := isoDuration.FindStringSubmatch(s)
	if m == nil || s == "P" || strings.HasSuffix(s, "T") {
		return 0, fmt.Errorf("not an ISO 8601 duration of days, hours, minutes and seconds: %q", s)
	}
	var d time.Duration
	for i, unit := range []time.Duration{7 * 24 * time.Hour, 24 * time.Hour, time.Hour, time.Minute, time.Second} {
		if m[i+1] == "" {
			continue
		}
		n, _ := strconv.ParseInt(m[i+1], 10, 64)
		// Each part is at most 10 digits; refuse what time.Duration cannot
		// hold rather than wrap around into a small duration.
		if n > int64(maxDuration/unit) || time.Duration(n)*unit > maxDuration-d {
			return 0, fmt.Errorf("duration %q is too long", clip(s))
		}
		d += time.Duration(n) * unit
	}
	if m[6] != "" {
		frac := m[6] + strings.Repeat("0", 9-len(m[6]))
		n, _ := strconv.ParseInt(frac, 10, 64)
		d += time.Duration(n)
	}
	return d, nil
}

// FormatDuration is d as an ISO 8601 duration ("PT1H", "P1DT30M", "PT0S").
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return "PT0S"
	}
	var b strings.Builder
	b.WriteString("P")
	if days := d / (24 * time.Hour); days > 0 {
		fmt.Fprintf(&b, "%dD", days)
		d -= days * 24 * time.Hour
	}
	if d == 0 {
		return b.String()
	}
	b.WriteString("T")
	if h := d / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dH", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		fmt.Fprintf(&b, "%dM", m)
		d -= m * time.Minute
	}
	if d > 0 {
		// Exact, from whole nanoseconds: a float's seconds print 1.2227s as
		// 1.2227000000000001.
		sec, ns := d/time.Second, d%time.Second
		b.WriteString(strconv.FormatInt(int64(sec), 10))
		if ns > 0 {
			b.WriteString("." + strings.TrimRight(fmt.Sprintf("%09d", ns), "0"))
		}
		b.WriteString("S")
	}
	return b.String()
}

// Calendar is one tenant's periods: its settings rows by EffectiveFrom.
type Calendar struct {
	rows []Settings // ascending EffectiveFrom
}

// NewCalendar returns the calendar of a tenant's settings rows (any order).
func NewCalendar(rows []Settings) Calendar {
	rows = slices.Clone(rows)
	slices.SortFunc(rows, func(a, b Settings) int { return strings.Compare(a.EffectiveFrom, b.EffectiveFrom) })
	return Calendar{rows: rows}
}

// Settings are the settings of period.
func (c Calendar) Settings(period string) Settings {
	s := DefaultSettings()
	for _, r := range c.rows {
		if r.EffectiveFrom > period {
			break
		}
		s = r
	}
	return s
}

// End is when period ends: the first instant of the next month in the
// period's zone.
func (c Calendar) End(period string) time.Time {
	return monthStart(NextPeriod(period), c.Settings(period).Location())
}

// Start is when period begins: the end of the period before it (in that
// period's zone, so a zone change moves the boundary once, at the start of
// the first period of the new zone).
func (c Calendar) Start(period string) time.Time { return c.End(PrevPeriod(period)) }

// ClosesAt is when period closes by itself: its end plus its grace period.
func (c Calendar) ClosesAt(period string) time.Time {
	return c.End(period).Add(c.Settings(period).Grace)
}

// PeriodOf is the period instant t belongs to: the one with Start <= t <
// End. Those intervals follow each other without gap or overlap (a zone
// change moves a boundary by at most a day; months are longer), and the
// period is the month of t in its own zone or in the zone of the period
// before it, so it is among the months of t in the zones the calendar uses.
func (c Calendar) PeriodOf(t time.Time) string {
	zones := []*time.Location{time.UTC}
	for _, r := range c.rows {
		zones = append(zones, r.Location())
	}
	for _, z := range zones {
		p := t.In(z).Format("2006-01")
		if !t.Before(c.Start(p)) && t.Before(c.End(p)) {
			return p
		}
	}
	return events.Period(t) // unreachable: see above
}

// Status is a period's status at now given what billing stores of it
// (open, closing or closed): an open period that has ended is in grace.
func (c Calendar) Status(period, stored string, now time.Time) string {
	if stored == StatusOpen && !now.Before(c.End(period)) {
		return StatusGrace
	}
	return stored
}

// FirstChangeable is the first period a settings change made at now applies
// to: the period after the one in progress SettingsLead from now.
func (c Calendar) FirstChangeable(now time.Time) string {
	return NextPeriod(c.PeriodOf(now.Add(SettingsLead)))
}

// PrevPeriod returns the calendar month before period. period must be valid.
func PrevPeriod(period string) string {
	t, err := events.ParsePeriod(period)
	if err != nil {
		panic(fmt.Sprintf("previous period of %q: %v", period, err))
	}
	return events.Period(t.AddDate(0, -1, 0))
}

func monthStart(period string, loc *time.Location) time.Time {
	t, err := events.ParsePeriod(period)
	if err != nil {
		panic(fmt.Sprintf("start of %q: %v", period, err))
	}
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, loc).UTC()
}
