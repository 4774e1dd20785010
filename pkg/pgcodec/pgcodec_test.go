package pgcodec

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"
)

// decodeNumeric reads PostgreSQL's binary numeric with pgx's own codec.
func decodeNumeric(t *testing.T, m *pgtype.Map, b []byte) decimal.Decimal {
	t.Helper()
	var n pgtype.Numeric
	if err := m.Scan(pgtype.NumericOID, pgtype.BinaryFormatCode, b, &n); err != nil {
		t.Fatalf("scan %x: %v", b, err)
	}
	return decimal.NewFromBigInt(n.Int, n.Exp)
}

func TestDecimalRoundTrip(t *testing.T) {
	values := []string{
		"0", "0.00", "1", "-1", "1.5", "1.50", "12.345", "-0.0001", "0.00001", "10000", "12345678",
		"100.00", "99999999.9999999", "123456789012345", "-123456789012345", "0.000000000001",
		"1234567890.12345", "123456789012345678", "-999999999999999999.999999999999",
		"123456789012345678901234567890.123456789", "1e20", "5e-30", "7e3",
	}
	m := pgtype.NewMap()
	Register(m)
	plain := pgtype.NewMap()
	for _, s := range values {
		d := decimal.RequireFromString(s)
		b, err := m.Encode(pgtype.NumericOID, pgtype.BinaryFormatCode, d, nil)
		if err != nil {
			t.Fatalf("encode %s: %v", s, err)
		}
		if got := decodeNumeric(t, plain, b); !got.Equal(d) {
			t.Errorf("%s: decoded %s (%x)", s, got, b)
		}
		// The same bytes as PostgreSQL's: pgx's encoding of the text.
		want, err := plain.Encode(pgtype.NumericOID, pgtype.BinaryFormatCode, pgtype.Numeric{Int: d.Coefficient(), Exp: d.Exponent(), Valid: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := decodeNumeric(t, plain, want); !got.Equal(d) {
			t.Fatalf("%s: pgx's own encoding decodes to %s", s, got)
		}
		if dscale(b) != dscale(want) && d.Exponent() < 0 {
			t.Errorf("%s: dscale %d, pgx %d", s, dscale(b), dscale(want))
		}
	}
}

func dscale(b []byte) int { return int(b[6])<<8 | int(b[7]) }

// TestDecimalBytes pins the encoding of a few values to PostgreSQL's
// numeric_send output.
func TestDecimalBytes(t *testing.T) {
	m := pgtype.NewMap()
	Register(m)
	for _, tc := range []struct {
		in   string
		want []byte
	}{
		{"0", []byte{0, 0, 0, 0, 0, 0, 0, 0}},
		{"0.00", []byte{0, 0, 0, 0, 0, 0, 0, 2}},
		{"1.50", []byte{0, 2, 0, 0, 0, 0, 0, 2, 0, 1, 0x13, 0x88}},                    // 1 . 5000
		{"-12345.6", []byte{0, 3, 0, 1, 0x40, 0, 0, 1, 0, 1, 0x09, 0x29, 0x17, 0x70}}, // 1 2345 . 6000
		{"20000", []byte{0, 1, 0, 1, 0, 0, 0, 0, 0, 2}},                               // 2 0000
		{"0.0001", []byte{0, 1, 0xff, 0xff, 0, 0, 0, 4, 0, 1}},
	} {
		got, err := m.Encode(pgtype.NumericOID, pgtype.BinaryFormatCode, decimal.RequireFromString(tc.in), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, tc.want) {
			t.Errorf("%s: got %x, want %x", tc.in, got, tc.want)
		}
	}
}

func TestArraysAndNulls(t *testing.T) {
	m := pgtype.NewMap()
	Register(m)
	plain := pgtype.NewMap()
	ds := []decimal.Decimal{decimal.RequireFromString("1.25"), decimal.RequireFromString("-7"), decimal.RequireFromString("123456789012345678901.5")}
	b, err := m.Encode(pgtype.NumericArrayOID, pgtype.BinaryFormatCode, ds, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []pgtype.Numeric
	if err := plain.Scan(pgtype.NumericArrayOID, pgtype.BinaryFormatCode, b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ds) {
		t.Fatalf("%d elements, want %d", len(got), len(ds))
	}
	for i := range ds {
		if g := decimal.NewFromBigInt(got[i].Int, got[i].Exp); !g.Equal(ds[i]) {
			t.Errorf("element %d: %s, want %s", i, g, ds[i])
		}
	}

	ids := []uuid.UUID{uuid.New(), uuid.New()}
	b, err = m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	var gotIDs []uuid.UUID
	if err := plain.Scan(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, b, &gotIDs); err != nil {
		t.Fatal(err)
	}
	if len(gotIDs) != 2 || gotIDs[0] != ids[0] || gotIDs[1] != ids[1] {
		t.Errorf("uuids %v, want %v", gotIDs, ids)
	}
	for _, empty := range []any{[]decimal.Decimal{}, []uuid.UUID{}} {
		oid := uint32(pgtype.NumericArrayOID)
		if _, ok := empty.([]uuid.UUID); ok {
			oid = pgtype.UUIDArrayOID
		}
		b, err := m.Encode(oid, pgtype.BinaryFormatCode, empty, nil)
		if err != nil || b == nil {
			t.Errorf("empty %T: %x, %v", empty, b, err)
		}
	}
	for _, null := range []any{[]decimal.Decimal(nil), decimal.NullDecimal{}} {
		oid := uint32(pgtype.NumericArrayOID)
		if _, ok := null.(decimal.NullDecimal); ok {
			oid = pgtype.NumericOID
		}
		if b, err := m.Encode(oid, pgtype.BinaryFormatCode, null, nil); err != nil || b != nil {
			t.Errorf("%T: %x, %v, want NULL", null, b, err)
		}
	}
}

// TestArraysAreWhatPgxWrites: the text and uuid arrays Register encodes are
// byte for byte what pgx's own codecs write for the same values, over
// 2,000 drawn slices (nil, empty and multi-byte strings, 1 to 600
// elements), so PostgreSQL reads the same parameters.
func TestArraysAreWhatPgxWrites(t *testing.T) {
	m := pgtype.NewMap()
	Register(m)
	plain := pgtype.NewMap()
	same := func(oid uint32, v any) {
		t.Helper()
		got, err := m.Encode(oid, pgtype.BinaryFormatCode, v, nil)
		if err != nil {
			t.Fatalf("encode %T: %v", v, err)
		}
		want, err := plain.Encode(oid, pgtype.BinaryFormatCode, v, nil)
		if err != nil {
			t.Fatalf("pgx encode %T: %v", v, err)
		}
		if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
			t.Fatalf("%T %v:\n got  %x\n pgx  %x", v, v, got, want)
		}
	}
	same(pgtype.TextArrayOID, []string(nil))
	same(pgtype.UUIDArrayOID, [][16]byte(nil))
	same(pgtype.Int8ArrayOID, []int64(nil))
	same(pgtype.BoolArrayOID, []bool(nil))
	same(pgtype.TimestamptzArrayOID, []time.Time(nil))
	same(pgtype.ByteaArrayOID, [][]byte(nil))
	same(pgtype.JSONBArrayOID, [][]byte{nil, nil})
	// An empty array is written without a dimension, as PostgreSQL sends
	// one (pgx writes one dimension of length 0); both read as empty.
	for oid, empty := range map[uint32]any{pgtype.TextArrayOID: []string{}, pgtype.UUIDArrayOID: [][16]byte{}} {
		b, err := m.Encode(oid, pgtype.BinaryFormatCode, empty, nil)
		var got []string
		if oid == pgtype.UUIDArrayOID {
			var ids []uuid.UUID
			err = errors.Join(err, plain.Scan(oid, pgtype.BinaryFormatCode, b, &ids))
			if ids != nil {
				got = make([]string, len(ids))
			}
		} else {
			err = errors.Join(err, plain.Scan(oid, pgtype.BinaryFormatCode, b, &got))
		}
		if err != nil || b == nil || got == nil || len(got) != 0 {
			t.Errorf("empty %T: %x reads as %v, %v", empty, b, got, err)
		}
	}
	// The same for the other arrays: each reads back as an empty slice.
	for oid, c := range map[uint32]struct{ empty, into any }{
		pgtype.Int2ArrayOID: {[]int16{}, new([]int16)}, pgtype.Int4ArrayOID: {[]int32{}, new([]int32)},
		pgtype.Int8ArrayOID: {[]int64{}, new([]int64)}, pgtype.BoolArrayOID: {[]bool{}, new([]bool)},
		pgtype.TimestamptzArrayOID: {[]time.Time{}, new([]time.Time)},
		pgtype.ByteaArrayOID:       {[][]byte{}, new([][]byte)}, pgtype.JSONBArrayOID: {[][]byte{}, new([][]byte)},
	} {
		b, err := m.Encode(oid, pgtype.BinaryFormatCode, c.empty, nil)
		if err == nil {
			err = plain.Scan(oid, pgtype.BinaryFormatCode, b, c.into)
		}
		if n := reflect.ValueOf(c.into).Elem(); err != nil || b == nil || n.IsNil() || n.Len() != 0 {
			t.Errorf("empty %T: %x reads as %v, %v", c.empty, b, n, err)
		}
	}
	rng := rand.New(rand.NewPCG(6, 12))
	pieces := []string{"", "a", "usage", "é", "日本", "tenant-07", "|", "\"", "\\", " "}
	for range 2000 {
		n := 1 + rng.IntN(600)
		ss, ids := make([]string, n), make([][16]byte, n)
		for i := range ss {
			for k := rng.IntN(4); k > 0; k-- {
				ss[i] += pieces[rng.IntN(len(pieces))]
			}
			for j := range ids[i] {
				ids[i][j] = byte(rng.Uint32())
			}
		}
		same(pgtype.TextArrayOID, ss)
		same(pgtype.UUIDArrayOID, ids)
		uids := make([]uuid.UUID, n)
		for i := range ids {
			uids[i] = ids[i]
		}
		same(pgtype.UUIDArrayOID, uids)
		i16, i32, i64 := make([]int16, n), make([]int32, n), make([]int64, n)
		bs, ts, raws, docs := make([]bool, n), make([]time.Time, n), make([][]byte, n), make([][]byte, n)
		for i := range n {
			u := rng.Uint64()
			i16[i], i32[i], i64[i], bs[i] = int16(u), int32(u), int64(u), u&1 == 1
			// From 1900 to 2100, at nanoseconds, in several zones: pgx
			// truncates to microseconds towards zero, before 1970 too.
			sec := -2_208_988_800 + rng.Int64N(6_311_433_600)
			ts[i] = time.Unix(sec, rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))])
			if rng.IntN(20) > 0 { // about one NULL element in twenty
				raws[i] = []byte(ss[i])
				docs[i] = []byte(`{"k":"` + strings.ReplaceAll(ss[i], `\`, `/`) + `"}`)
			}
		}
		same(pgtype.Int2ArrayOID, i16)
		same(pgtype.Int4ArrayOID, i32)
		same(pgtype.Int8ArrayOID, i64)
		same(pgtype.BoolArrayOID, bs)
		same(pgtype.TimestamptzArrayOID, ts)
		same(pgtype.ByteaArrayOID, raws)
		same(pgtype.JSONBArrayOID, docs)
	}
}

// TestArraysGrowTheBufferOnce checks that each array encoder takes the
// memory of a batch's array in one allocation from the 256-byte buffer pgx
// hands a statement's parameters, not by growing it element by element.
func TestArraysGrowTheBufferOnce(t *testing.T) {
	const n = 500
	ss, ids, i64s, envs := make([]string, n), make([][16]byte, n), make([]int64, n), make([][]byte, n)
	for i := range n {
		ss[i] = strings.Repeat("s", 40+i%7)
		ids[i] = uuid.New()
		i64s[i] = int64(i)
		if i%50 > 0 {
			envs[i] = bytes.Repeat([]byte{'e'}, 1000+i%100)
		}
	}
	m := pgtype.NewMap()
	Register(m)
	for name, k := range map[string]struct {
		oid uint32
		v   any
	}{
		"text[]": {pgtype.TextArrayOID, ss}, "uuid[]": {pgtype.UUIDArrayOID, ids},
		"int8[]": {pgtype.Int8ArrayOID, i64s}, "bytea[]": {pgtype.ByteaArrayOID, envs},
		"jsonb[]": {pgtype.JSONBArrayOID, envs},
	} {
		buf := make([]byte, 0, 256)
		if _, err := m.Encode(k.oid, pgtype.BinaryFormatCode, k.v, buf); err != nil { // plans it once
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(20, func() {
			if _, err := m.Encode(k.oid, pgtype.BinaryFormatCode, k.v, buf); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 1 {
			t.Errorf("%s of %d elements: %v allocations, want 1", name, n, allocs)
		}
	}
}

// zones are the locations TestArraysAreWhatPgxWrites draws times in.
var zones = []*time.Location{time.UTC, time.FixedZone("plus", 9*3600), time.FixedZone("minus", -(3*3600 + 1800))}

// BenchmarkArrays encodes the arrays of a batch of 500 events, one of each
// kind the batch statements send, with Register's encoders and with pgx's
// own, each into a buffer of 256 bytes, as pgx hands a statement's
// parameters one (its ExtendedQueryBuilder shrinks back to that after a
// statement whose parameters outgrew it). The envelope kind is a batch of
// the outbox's: 500 envelopes of about a kilobyte as bytea[].
func BenchmarkArrays(b *testing.B) {
	const n = 500
	ss, ids, i64s, i16s := make([]string, n), make([][16]byte, n), make([]int64, n), make([]int16, n)
	bools, times, docs := make([]bool, n), make([]time.Time, n), make([][]byte, n)
	start := time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)
	for i := range n {
		ss[i] = "tenant-0" + string(rune('a'+i%26))
		ids[i] = uuid.New()
		i64s[i], i16s[i], bools[i] = int64(i), int16(i%16), i%3 == 0
		times[i] = start.Add(time.Duration(i) * time.Millisecond)
		docs[i] = []byte(`{"meterCode":"api_calls","quantity":"1","region":"eu-west-1"}`)
	}
	envelopes := make([][]byte, n)
	for i := range n {
		envelopes[i] = bytes.Repeat([]byte{'e'}, 1000+i%100)
	}
	kinds := []struct {
		name string
		oid  uint32
		v    any
	}{
		{"text", pgtype.TextArrayOID, ss}, {"uuid", pgtype.UUIDArrayOID, ids},
		{"int8", pgtype.Int8ArrayOID, i64s}, {"int2", pgtype.Int2ArrayOID, i16s},
		{"bool", pgtype.BoolArrayOID, bools}, {"timestamptz", pgtype.TimestamptzArrayOID, times},
		{"jsonb", pgtype.JSONBArrayOID, docs}, {"envelope", pgtype.ByteaArrayOID, envelopes},
	}
	mine := pgtype.NewMap()
	Register(mine)
	for name, m := range map[string]*pgtype.Map{"register": mine, "pgx": pgtype.NewMap()} {
		for _, k := range kinds {
			b.Run(k.name+"/"+name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := m.Encode(k.oid, pgtype.BinaryFormatCode, k.v, make([]byte, 0, 256)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
