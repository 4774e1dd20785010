package migrations

import (
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The files are numbered 0001 to 0003, then from 0005 without a gap (see
// the package comment for 0004), each number with one up and one down.
func TestNumbering(t *testing.T) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	ups, downs := map[int]bool{}, map[int]bool{}
	for _, name := range names {
		num, rest, ok := strings.Cut(name, "_")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || len(num) != 4 {
			t.Fatalf("%s: want NNNN_name.up.sql or NNNN_name.down.sql", name)
		}
		switch {
		case strings.HasSuffix(rest, ".up.sql"):
			ups[n] = true
		case strings.HasSuffix(rest, ".down.sql"):
			downs[n] = true
		default:
			t.Fatalf("%s: neither up nor down", name)
		}
	}
	var got []int
	for n := range ups {
		got = append(got, n)
		if !downs[n] {
			t.Errorf("%04d has no down migration", n)
		}
	}
	slices.Sort(got)
	want := []int{1, 2, 3}
	for n := 5; n <= got[len(got)-1]; n++ {
		want = append(want, n)
	}
	if !slices.Equal(got, want) || len(downs) != len(ups) {
		t.Fatalf("migrations %v (downs %d), want %v", got, len(downs), fmt.Sprint(want))
	}
}
