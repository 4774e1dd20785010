package procstat

import (
	"slices"
	"testing"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    Stat
		wantErr bool
	}{
		{
			name: "postmaster",
			line: "4321 (postgres) S 1 4321 4321 0 -1 4194560 5120 88012 0 3 1534 602 20511 7340 20 0 1 0 32132 220000256 4000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0",
			want: Stat{PID: 4321, PPID: 1, Comm: "postgres", UTime: 1534, STime: 602, CUTime: 20511, CSTime: 7340},
		},
		{
			name: "command with spaces and parentheses",
			line: "77 (a (b) c) R 76 77 10655 0 -1 4194304 99 0 0 0 12 3 0 0 20 0 1 0 32132 3133440 387",
			want: Stat{PID: 77, PPID: 76, Comm: "a (b) c", UTime: 12, STime: 3},
		},
		{name: "no command", line: "77 R 76 77", wantErr: true},
		{name: "too short", line: "77 (x) R 76 77 0 0 0 0 0 0", wantErr: true},
		{name: "negative cutime", line: "77 (x) R 76 77 10655 0 -1 4194304 99 0 0 0 12 3 -1 0 20 0 1 0", wantErr: true},
		{name: "pid not a number", line: "x (x) R 76 77 10655 0 -1 4194304 99 0 0 0 12 3 0 0 20 0", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat(tt.line)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseStat = %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ParseStat = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseMachine(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    Machine
		wantErr bool
	}{
		{
			name: "ten fields",
			text: "cpu  29909 3716 8925 20616 474 10 184 138 55 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1 2\n",
			// user+nice+system+irq+softirq+steal; guest is part of user already.
			want: Machine{Busy: 29909 + 3716 + 8925 + 10 + 184 + 138, Idle: 20616 + 474},
		},
		{
			name: "old kernel, four fields",
			text: "cpu 100 0 50 900\n",
			want: Machine{Busy: 150, Idle: 900},
		},
		{name: "no cpu line", text: "cpu0 1 2 3 4\nintr 5\n", wantErr: true},
		{name: "bad number", text: "cpu 1 2 x 4 5\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMachine(tt.text)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseMachine = %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ParseMachine = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestTreeTicks(t *testing.T) {
	parent := Stat{PID: 10, UTime: 100, STime: 50, CUTime: 1000, CSTime: 300}
	children := []Stat{
		{PID: 11, PPID: 10, UTime: 7, STime: 3},
		{PID: 12, PPID: 10, UTime: 20},
		{PID: 13, PPID: 99, UTime: 500}, // its pid was reused by another process's child
	}
	if got, want := TreeTicks(parent, children), uint64(100+50+1000+300+7+3+20); got != want {
		t.Errorf("TreeTicks = %d, want %d", got, want)
	}
}

func TestParseChildren(t *testing.T) {
	if got, want := ParseChildren("4322 4323 4400 "), []int{4322, 4323, 4400}; !slices.Equal(got, want) {
		t.Errorf("ParseChildren = %v, want %v", got, want)
	}
	if got := ParseChildren(""); len(got) != 0 {
		t.Errorf("ParseChildren(\"\") = %v, want none", got)
	}
}

func TestReadSelf(t *testing.T) {
	s, err := ReadStat(0)
	if err != nil {
		t.Fatal(err)
	}
	if s.PID <= 0 || s.PPID <= 0 {
		t.Errorf("ReadStat(self) = %+v, want a pid and a parent", s)
	}
	if _, err := ReadMachine(); err != nil {
		t.Fatal(err)
	}
}
