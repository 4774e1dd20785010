// Package pgcodec makes pgx send the domain's decimals and ids, and the
// arrays the batch statements send their columns as, to PostgreSQL in its
// binary formats. Without it, pgx encodes a decimal.Decimal or a uuid.UUID
// through driver.Valuer: the value's text, a failed attempt to encode that
// text in binary, a parse of the text, and only then the binary form, for
// every parameter and every element of an array parameter (a quarter of
// usage's CPU in its profiles); and its array codec boxes every element of
// any array in an interface and plans its encoding (10-15% of a consumer's
// CPU in its profiles).
//
// Register replaces, on one connection's type map (pgxpool's
// AfterConnect), the encoders of decimal.Decimal, decimal.NullDecimal and
// uuid.UUID, and of one-dimensional arrays from slices: []decimal.Decimal
// (numeric[]), []uuid.UUID and [][16]byte (uuid[]), []string (text[]),
// []int16, []int32 and []int64 (int2[], int4[], int8[]), []bool,
// []time.Time (timestamptz[]) and [][]byte (bytea[], jsonb[]). Each writes
// the bytes pgx's own codecs write (the tests hold them to it), but for an
// empty array, written without a dimension as PostgreSQL sends one. Every
// other value, and every scan, is left to pgx's own codecs. The decimals
// stay exact: a coefficient of at most 15 digits is split into base-10000
// digits with integer arithmetic, a larger one goes through
// pgtype.Numeric's big.Int.
package pgcodec

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"
)

// Register installs the binary encoders on m. Call it once per connection,
// before the connection runs a statement (pgxpool.Config.AfterConnect).
func Register(m *pgtype.Map) {
	numeric := &pgtype.Type{Name: "numeric", OID: pgtype.NumericOID, Codec: numericCodec{}}
	id := &pgtype.Type{Name: "uuid", OID: pgtype.UUIDOID, Codec: uuidCodec{}}
	m.RegisterType(numeric)
	m.RegisterType(id)
	array := func(name string, oid, elementOID uint32, plan func(value any) pgtype.EncodePlan) {
		element, _ := m.TypeForOID(elementOID)
		m.RegisterType(&pgtype.Type{Name: name, OID: oid,
			Codec: &arrayCodec{ArrayCodec: pgtype.ArrayCodec{ElementType: element}, plan: plan}})
	}
	array("_numeric", pgtype.NumericArrayOID, pgtype.NumericOID, func(v any) pgtype.EncodePlan {
		if _, ok := v.([]decimal.Decimal); ok {
			return encodeDecimals{}
		}
		return nil
	})
	array("_uuid", pgtype.UUIDArrayOID, pgtype.UUIDOID, func(v any) pgtype.EncodePlan {
		switch v.(type) {
		case []uuid.UUID:
			return encodeUUIDs[uuid.UUID]{}
		case [][16]byte:
			return encodeUUIDs[[16]byte]{}
		}
		return nil
	})
	array("_text", pgtype.TextArrayOID, pgtype.TextOID, planFor[[]string](encodeTexts{}))
	array("_int2", pgtype.Int2ArrayOID, pgtype.Int2OID, planFor[[]int16](encodeFixed[int16]{pgtype.Int2OID, 2,
		func(b []byte, v int16) []byte { return binary.BigEndian.AppendUint16(b, uint16(v)) }}))
	array("_int4", pgtype.Int4ArrayOID, pgtype.Int4OID, planFor[[]int32](encodeFixed[int32]{pgtype.Int4OID, 4,
		func(b []byte, v int32) []byte { return binary.BigEndian.AppendUint32(b, uint32(v)) }}))
	array("_int8", pgtype.Int8ArrayOID, pgtype.Int8OID, planFor[[]int64](encodeFixed[int64]{pgtype.Int8OID, 8,
		func(b []byte, v int64) []byte { return binary.BigEndian.AppendUint64(b, uint64(v)) }}))
	array("_bool", pgtype.BoolArrayOID, pgtype.BoolOID, planFor[[]bool](encodeFixed[bool]{pgtype.BoolOID, 1,
		func(b []byte, v bool) []byte {
			if v {
				return append(b, 1)
			}
			return append(b, 0)
		}}))
	array("_timestamptz", pgtype.TimestamptzArrayOID, pgtype.TimestamptzOID, planFor[[]time.Time](
		encodeFixed[time.Time]{pgtype.TimestamptzOID, 8, appendTimestamptz}))
	array("_bytea", pgtype.ByteaArrayOID, pgtype.ByteaOID, planFor[[][]byte](encodeByteSlices{elementOID: pgtype.ByteaOID}))
	array("_jsonb", pgtype.JSONBArrayOID, pgtype.JSONBOID, planFor[[][]byte](
		encodeByteSlices{elementOID: pgtype.JSONBOID, prefix: []byte{1}})) // jsonb's binary format: version 1, then the text
}

// arrayCodec is pgx's ArrayCodec with the binary encoder plan gives for a
// value (nil: pgx's own).
type arrayCodec struct {
	pgtype.ArrayCodec
	plan func(value any) pgtype.EncodePlan
}

func (c *arrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		if p := c.plan(value); p != nil {
			return p
		}
	}
	return c.ArrayCodec.PlanEncode(m, oid, format, value)
}

// planFor returns a plan function that gives p for a value of type S.
func planFor[S any](p pgtype.EncodePlan) func(value any) pgtype.EncodePlan {
	return func(value any) pgtype.EncodePlan {
		if _, ok := value.(S); ok {
			return p
		}
		return nil
	}
}

// numericCodec is pgx's NumericCodec with binary encoders for shopspring's
// decimals.
type numericCodec struct{ pgtype.NumericCodec }

func (c numericCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		switch value.(type) {
		case decimal.Decimal:
			return encodeDecimal{}
		case decimal.NullDecimal:
			return encodeNullDecimal{}
		}
	}
	return c.NumericCodec.PlanEncode(m, oid, format, value)
}

type encodeDecimal struct{}

func (encodeDecimal) Encode(value any, buf []byte) ([]byte, error) {
	return appendNumeric(buf, value.(decimal.Decimal))
}

type encodeNullDecimal struct{}

func (encodeNullDecimal) Encode(value any, buf []byte) ([]byte, error) {
	n := value.(decimal.NullDecimal)
	if !n.Valid {
		return nil, nil // NULL
	}
	return appendNumeric(buf, n.Decimal)
}

var pow10 = [...]uint64{1, 10, 100, 1000}

// appendNumeric appends d in PostgreSQL's binary numeric format: ndigits,
// weight, sign and dscale (int16 each), then ndigits base-10000 digits, the
// first of weight 10000^weight.
func appendNumeric(buf []byte, d decimal.Decimal) ([]byte, error) {
	exp := d.Exponent()
	if d.NumDigits() > 15 || exp < -4000 || exp > 4000 {
		return appendBigNumeric(buf, d)
	}
	c := d.CoefficientInt64()
	var sign uint16
	u := uint64(c)
	if c < 0 {
		sign, u = 0x4000, uint64(-c)
	}
	dscale := int16(0)
	if exp < 0 {
		dscale = int16(-exp)
	}
	// Align the exponent on a base-10000 digit: u * 10^exp = u' * 10000^e4,
	// u' = u * 10^(exp - 4*e4) below 10^18.
	e4 := exp / 4
	if exp%4 < 0 {
		e4--
	}
	u *= pow10[exp-4*e4]
	var digits [5]uint16 // least significant first; 10^18 < 10000^5
	n := 0
	for ; u > 0; u /= 10000 {
		digits[n] = uint16(u % 10000)
		n++
	}
	// Drop the zero digits at the end (PostgreSQL's own form); dscale keeps
	// the scale.
	low := 0
	for low < n && digits[low] == 0 {
		low++
	}
	if low == n { // zero
		return append(buf, 0, 0, 0, 0, 0, 0, byte(uint16(dscale)>>8), byte(dscale)), nil
	}
	weight := int16(int(e4) + n - 1)
	buf = binary.BigEndian.AppendUint16(buf, uint16(n-low))
	buf = binary.BigEndian.AppendUint16(buf, uint16(weight))
	buf = binary.BigEndian.AppendUint16(buf, sign)
	buf = binary.BigEndian.AppendUint16(buf, uint16(dscale))
	for i := n - 1; i >= low; i-- {
		buf = binary.BigEndian.AppendUint16(buf, digits[i])
	}
	return buf, nil
}

// appendBigNumeric encodes a decimal of more than 15 digits through
// pgtype.Numeric.
func appendBigNumeric(buf []byte, d decimal.Decimal) ([]byte, error) {
	m := pgtype.NewMap()
	out, err := m.Encode(pgtype.NumericOID, pgtype.BinaryFormatCode,
		pgtype.Numeric{Int: d.Coefficient(), Exp: d.Exponent(), Valid: true}, buf)
	if err != nil {
		return nil, fmt.Errorf("encode numeric %s: %w", d, err)
	}
	return out, nil
}

// uuidCodec is pgx's UUIDCodec with a binary encoder for uuid.UUID.
type uuidCodec struct{ pgtype.UUIDCodec }

func (c uuidCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(uuid.UUID); ok && format == pgtype.BinaryFormatCode {
		return encodeUUID{}
	}
	return c.UUIDCodec.PlanEncode(m, oid, format, value)
}

type encodeUUID struct{}

func (encodeUUID) Encode(value any, buf []byte) ([]byte, error) {
	id := value.(uuid.UUID)
	return append(buf, id[:]...), nil
}

// encodeDecimals writes a []decimal.Decimal as numeric[].
type encodeDecimals struct{}

func (encodeDecimals) Encode(value any, buf []byte) ([]byte, error) {
	ds := value.([]decimal.Decimal)
	if ds == nil {
		return nil, nil // NULL, as pgx encodes a nil slice
	}
	buf = appendArrayHeader(buf, len(ds), pgtype.NumericOID, false)
	for _, d := range ds {
		at := len(buf)
		buf = append(buf, 0, 0, 0, 0)
		var err error
		if buf, err = appendNumeric(buf, d); err != nil {
			return nil, err
		}
		binary.BigEndian.PutUint32(buf[at:], uint32(len(buf)-at-4))
	}
	return buf, nil
}

// encodeUUIDs writes a []uuid.UUID or a [][16]byte as uuid[].
type encodeUUIDs[T ~[16]byte] struct{}

func (encodeUUIDs[T]) Encode(value any, buf []byte) ([]byte, error) {
	ids := value.([]T)
	if ids == nil {
		return nil, nil
	}
	buf = slices.Grow(buf, arrayHeaderLen+len(ids)*(4+16))
	buf = appendArrayHeader(buf, len(ids), pgtype.UUIDOID, false)
	for _, id := range ids {
		buf = binary.BigEndian.AppendUint32(buf, 16)
		buf = append(buf, id[:]...)
	}
	return buf, nil
}

// encodeTexts writes a []string as text[]: each element's bytes as they
// are, as pgx's text codec sends a string.
type encodeTexts struct{}

func (encodeTexts) Encode(value any, buf []byte) ([]byte, error) {
	ss := value.([]string)
	if ss == nil {
		return nil, nil
	}
	n := arrayHeaderLen + 4*len(ss)
	for _, s := range ss {
		n += len(s)
	}
	buf = slices.Grow(buf, n)
	buf = appendArrayHeader(buf, len(ss), pgtype.TextOID, false)
	for _, s := range ss {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
		buf = append(buf, s...)
	}
	return buf, nil
}

// encodeFixed writes a slice of fixed-width values (int2, int4, int8,
// bool, timestamptz): each element's width, then put's bytes.
type encodeFixed[T any] struct {
	elementOID uint32
	width      uint32
	put        func(buf []byte, v T) []byte
}

func (e encodeFixed[T]) Encode(value any, buf []byte) ([]byte, error) {
	vs := value.([]T)
	if vs == nil {
		return nil, nil
	}
	buf = slices.Grow(buf, arrayHeaderLen+len(vs)*(4+int(e.width)))
	buf = appendArrayHeader(buf, len(vs), e.elementOID, false)
	for _, v := range vs {
		buf = binary.BigEndian.AppendUint32(buf, e.width)
		buf = e.put(buf, v)
	}
	return buf, nil
}

// microsecondsToY2K is the Unix time of 2000-01-01 00:00 UTC, PostgreSQL's
// epoch, in microseconds.
const microsecondsToY2K = 946_684_800 * 1_000_000

// appendTimestamptz appends t as PostgreSQL's timestamptz: microseconds
// since 2000-01-01 UTC, truncated as pgx truncates them.
func appendTimestamptz(buf []byte, t time.Time) []byte {
	us := t.Unix()*1_000_000 + int64(t.Nanosecond())/1000 - microsecondsToY2K
	return binary.BigEndian.AppendUint64(buf, uint64(us))
}

// encodeByteSlices writes a [][]byte as bytea[] or, with jsonb's version
// byte as prefix, jsonb[]; a nil element is NULL, as pgx writes it.
type encodeByteSlices struct {
	elementOID uint32
	prefix     []byte
}

func (e encodeByteSlices) Encode(value any, buf []byte) ([]byte, error) {
	bs := value.([][]byte)
	if bs == nil {
		return nil, nil
	}
	nulls := false
	n := arrayHeaderLen + 4*len(bs)
	for _, b := range bs {
		if b == nil {
			nulls = true
			continue
		}
		n += len(e.prefix) + len(b)
	}
	buf = slices.Grow(buf, n)
	buf = appendArrayHeader(buf, len(bs), e.elementOID, nulls)
	for _, b := range bs {
		if b == nil {
			buf = binary.BigEndian.AppendUint32(buf, 0xFFFFFFFF) // -1: NULL
			continue
		}
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(e.prefix)+len(b)))
		buf = append(buf, e.prefix...)
		buf = append(buf, b...)
	}
	return buf, nil
}

// arrayHeaderLen is the length of appendArrayHeader's header of a
// non-empty array. The encoders grow the buffer once to the array's whole
// length before writing it: pgx hands each statement's parameters a buffer
// of 256 bytes (its ExtendedQueryBuilder shrinks back to that after every
// statement), which a batch's array of 500 envelopes would otherwise
// outgrow about twenty times, each time copied whole.
const arrayHeaderLen = 20

// appendArrayHeader appends the header of a one-dimensional array of n
// elements, lower bound 1, saying whether any is NULL; an empty array has
// no dimension, as PostgreSQL sends it.
func appendArrayHeader(buf []byte, n int, elementOID uint32, nulls bool) []byte {
	ndim := uint32(1)
	if n == 0 {
		ndim = 0
	}
	var hasNull uint32
	if nulls {
		hasNull = 1
	}
	buf = binary.BigEndian.AppendUint32(buf, ndim)
	buf = binary.BigEndian.AppendUint32(buf, hasNull)
	buf = binary.BigEndian.AppendUint32(buf, elementOID)
	if n > 0 {
		buf = binary.BigEndian.AppendUint32(buf, uint32(n))
		buf = binary.BigEndian.AppendUint32(buf, 1)
	}
	return buf
}
