// Package digest is the order-independent digest of a set of event ids. A
// producer that closes a set (billing closing a period) publishes its count,
// its sum and this digest; a consumer that holds the same set computes the
// same three whatever order, duplicates or partitions the members came in,
// and knows its copy is complete only when all three match. No chain of
// versions, no lock shared by the members.
//
// The digest of a set is the sum, as an exact integer, of each member's
// term: the first 7 bytes of SHA-256 over the id's canonical text, read as a
// big-endian unsigned integer. Postgres computes the same with SQLTerm.
package digest

import (
	"crypto/sha256"
	"encoding/binary"
	"math/big"

	"github.com/google/uuid"
)

// SQLTerm is the SQL expression of one member's term, for an id column
// named col (uuid or text): sum(<SQLTerm>) over a set is its digest, as
// numeric (coalesce an empty set to 0).
//
//	('x' || encode(substr(sha256(convert_to(col::text, 'UTF8')), 1, 7), 'hex'))::bit(56)::bigint
const SQLTerm = `('x' || encode(substr(sha256(convert_to(col::text, 'UTF8')), 1, 7), 'hex'))::bit(56)::bigint`

// Term is one id's term.
func Term(id uuid.UUID) uint64 {
	h := sha256.Sum256([]byte(id.String()))
	var b [8]byte
	copy(b[1:], h[:7])
	return binary.BigEndian.Uint64(b[:])
}

// Set accumulates the digest of a set of ids. The zero value is empty.
type Set struct {
	sum big.Int
	n   int64
}

// Add adds one member.
func (s *Set) Add(id uuid.UUID) {
	var t big.Int
	t.SetUint64(Term(id))
	s.sum.Add(&s.sum, &t)
	s.n++
}

// Len is the number of members added.
func (s *Set) Len() int64 { return s.n }

// String is the digest: the decimal sum of the members' terms ("0" when
// empty).
func (s *Set) String() string { return s.sum.String() }
