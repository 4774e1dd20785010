// Package pgcodec makes pgx send the domain's decimals and ids to
// PostgreSQL in its binary formats. Without it, pgx encodes a
// decimal.Decimal or a uuid.UUID through driver.Valuer: the value's text,
// a failed attempt to encode that text in binary, a parse of the text, and
// only then the binary form, for every parameter and every element of an
// array parameter (a quarter of usage's CPU in its profiles).
//
// Register replaces the codecs of numeric, uuid and their arrays, and of
// text arrays, on one connection's type map (pgxpool's AfterConnect):
// decimal.Decimal, decimal.NullDecimal and uuid.UUID, and slices of
// decimal.Decimal, uuid.UUID, [16]byte and string, are written straight
// into the binary format (pgx's own array codec boxes each element in an
// interface and plans its encoding: 10-15% of a consumer's CPU in its
// profiles); every other value, and every scan, is left to pgx's own
// codecs. The decimals stay
// exact: a coefficient of at most 15 digits is split into base-10000 digits
// with integer arithmetic, a larger one goes through pgtype.Numeric's
// big.Int.
package pgcodec

import (
	"encoding/binary"
	"fmt"

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
	m.RegisterType(&pgtype.Type{Name: "_numeric", OID: pgtype.NumericArrayOID,
		Codec: &numericArrayCodec{pgtype.ArrayCodec{ElementType: numeric}}})
	m.RegisterType(&pgtype.Type{Name: "_uuid", OID: pgtype.UUIDArrayOID,
		Codec: &uuidArrayCodec{pgtype.ArrayCodec{ElementType: id}}})
	text, _ := m.TypeForOID(pgtype.TextOID)
	m.RegisterType(&pgtype.Type{Name: "_text", OID: pgtype.TextArrayOID,
		Codec: &textArrayCodec{pgtype.ArrayCodec{ElementType: text}}})
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

// numericArrayCodec encodes a []decimal.Decimal as a one-dimensional
// numeric[] without boxing or reflecting on its elements.
type numericArrayCodec struct{ pgtype.ArrayCodec }

func (c *numericArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.([]decimal.Decimal); ok && format == pgtype.BinaryFormatCode {
		return encodeDecimals{}
	}
	return c.ArrayCodec.PlanEncode(m, oid, format, value)
}

type encodeDecimals struct{}

func (encodeDecimals) Encode(value any, buf []byte) ([]byte, error) {
	ds := value.([]decimal.Decimal)
	if ds == nil {
		return nil, nil // NULL, as pgx encodes a nil slice
	}
	buf = appendArrayHeader(buf, len(ds), pgtype.NumericOID)
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

// uuidArrayCodec encodes a []uuid.UUID or a [][16]byte as a
// one-dimensional uuid[].
type uuidArrayCodec struct{ pgtype.ArrayCodec }

func (c *uuidArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if format == pgtype.BinaryFormatCode {
		switch value.(type) {
		case []uuid.UUID:
			return encodeUUIDs[uuid.UUID]{}
		case [][16]byte:
			return encodeUUIDs[[16]byte]{}
		}
	}
	return c.ArrayCodec.PlanEncode(m, oid, format, value)
}

type encodeUUIDs[T ~[16]byte] struct{}

func (encodeUUIDs[T]) Encode(value any, buf []byte) ([]byte, error) {
	ids := value.([]T)
	if ids == nil {
		return nil, nil
	}
	buf = appendArrayHeader(buf, len(ids), pgtype.UUIDOID)
	for _, id := range ids {
		buf = binary.BigEndian.AppendUint32(buf, 16)
		buf = append(buf, id[:]...)
	}
	return buf, nil
}

// textArrayCodec encodes a []string as a one-dimensional text[]: each
// element's bytes as they are, as pgx's text codec sends a string.
type textArrayCodec struct{ pgtype.ArrayCodec }

func (c *textArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.([]string); ok && format == pgtype.BinaryFormatCode {
		return encodeTexts{}
	}
	return c.ArrayCodec.PlanEncode(m, oid, format, value)
}

type encodeTexts struct{}

func (encodeTexts) Encode(value any, buf []byte) ([]byte, error) {
	ss := value.([]string)
	if ss == nil {
		return nil, nil
	}
	buf = appendArrayHeader(buf, len(ss), pgtype.TextOID)
	for _, s := range ss {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
		buf = append(buf, s...)
	}
	return buf, nil
}

// appendArrayHeader appends the header of a one-dimensional array of n
// elements without NULLs, lower bound 1; an empty array has no dimension,
// as PostgreSQL sends it.
func appendArrayHeader(buf []byte, n int, elementOID uint32) []byte {
	ndim := uint32(1)
	if n == 0 {
		ndim = 0
	}
	buf = binary.BigEndian.AppendUint32(buf, ndim)
	buf = binary.BigEndian.AppendUint32(buf, 0) // no NULL element
	buf = binary.BigEndian.AppendUint32(buf, elementOID)
	if n > 0 {
		buf = binary.BigEndian.AppendUint32(buf, uint32(n))
		buf = binary.BigEndian.AppendUint32(buf, 1)
	}
	return buf
}
