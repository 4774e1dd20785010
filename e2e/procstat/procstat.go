// Package procstat reads CPU time from Linux's /proc: the busy time of the
// whole machine (/proc/stat) and the time of a process with its children
// (/proc/<pid>/stat), in clock ticks of USER_HZ, which Linux fixes at 100
// per second for these files on every architecture the system runs on.
//
// A process tree's time is its own utime+stime, plus cutime+cstime (the
// children it has waited for: a PostgreSQL backend that exited), plus the
// utime+stime of the children still running. The difference of two
// readings is the CPU the tree used in between, whether its children lived
// through the interval, started in it or exited in it.
package procstat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Tick is one clock tick of /proc (USER_HZ = 100 per second).
const Tick = 10 * time.Millisecond

// Stat is what this package reads of one /proc/<pid>/stat line.
type Stat struct {
	PID, PPID      int
	Comm           string
	UTime, STime   uint64 // the process's own ticks (all its threads)
	CUTime, CSTime uint64 // ticks of the children it waited for
}

// Own is the process's own ticks.
func (s Stat) Own() uint64 { return s.UTime + s.STime }

// ParseStat parses one /proc/<pid>/stat line. The command name is in
// parentheses and may hold spaces and parentheses itself, so the fields
// are counted from the last ')'.
func ParseStat(line string) (Stat, error) {
	open := strings.IndexByte(line, '(')
	closing := strings.LastIndexByte(line, ')')
	if open < 0 || closing < open {
		return Stat{}, fmt.Errorf("parse stat %q: no (comm)", clip(line))
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line[:open]))
	if err != nil {
		return Stat{}, fmt.Errorf("parse stat %q: pid: %w", clip(line), err)
	}
	// After ")": state(3) ppid(4) pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime(14) stime(15) cutime(16) cstime(17).
	f := strings.Fields(line[closing+1:])
	if len(f) < 15 {
		return Stat{}, fmt.Errorf("parse stat %q: %d fields after the command, want at least 15", clip(line), len(f))
	}
	s := Stat{PID: pid, Comm: line[open+1 : closing]}
	if s.PPID, err = strconv.Atoi(f[1]); err != nil {
		return Stat{}, fmt.Errorf("parse stat %q: ppid: %w", clip(line), err)
	}
	for i, dst := range []*uint64{&s.UTime, &s.STime, &s.CUTime, &s.CSTime} {
		// cutime and cstime are signed in the kernel; never negative in practice.
		v, err := strconv.ParseInt(f[11+i], 10, 64)
		if err != nil || v < 0 {
			return Stat{}, fmt.Errorf("parse stat %q: field %d: %q", clip(line), 14+i, f[11+i])
		}
		*dst = uint64(v)
	}
	return s, nil
}

// Machine is the first line of /proc/stat: the whole machine's ticks.
type Machine struct {
	Busy, Idle uint64 // idle counts idle and iowait; busy the rest but guest (already in user)
}

// ParseMachine parses /proc/stat (its "cpu " line).
func ParseMachine(text string) (Machine, error) {
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		// user nice system idle iowait irq softirq steal guest guest_nice
		if len(f) < 5 {
			return Machine{}, fmt.Errorf("parse /proc/stat: cpu line %q: too few fields", clip(line))
		}
		var v [8]uint64
		for i := 0; i < 8 && i+1 < len(f); i++ {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return Machine{}, fmt.Errorf("parse /proc/stat: cpu line field %d: %w", i+1, err)
			}
			v[i] = n
		}
		return Machine{Busy: v[0] + v[1] + v[2] + v[5] + v[6] + v[7], Idle: v[3] + v[4]}, nil
	}
	return Machine{}, errors.New("parse /proc/stat: no cpu line")
}

// ReadMachine reads the machine's ticks.
func ReadMachine() (Machine, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Machine{}, err
	}
	return ParseMachine(string(b))
}

// ReadStat reads /proc/<pid>/stat ("self" for pid 0).
func ReadStat(pid int) (Stat, error) {
	p := "/proc/self/stat"
	if pid > 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(strings.TrimSpace(string(b)))
}

// Children lists the pids of the running children of pid, from the
// children files of its threads.
func Children(pid int) []int {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		out = append(out, ParseChildren(string(b))...)
	}
	return out
}

// ParseChildren parses a /proc/<pid>/task/<tid>/children file.
func ParseChildren(text string) []int {
	var out []int
	for _, f := range strings.Fields(text) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// Tree is the ticks of pid with its children: own, waited-for children and
// running children (one level: what PostgreSQL and the services have).
func Tree(pid int) (uint64, error) {
	s, err := ReadStat(pid)
	if err != nil {
		return 0, err
	}
	return TreeTicks(s, childStats(s.PID)), nil
}

// TreeTicks adds up a process and its running children as Tree does.
func TreeTicks(parent Stat, children []Stat) uint64 {
	t := parent.Own() + parent.CUTime + parent.CSTime
	for _, c := range children {
		if c.PPID == parent.PID { // a pid reused between the two reads is not a child
			t += c.Own()
		}
	}
	return t
}

func childStats(pid int) []Stat {
	var out []Stat
	for _, c := range Children(pid) {
		if s, err := ReadStat(c); err == nil {
			out = append(out, s)
		}
	}
	return out
}

// PostmasterPID reads the postmaster's pid from the first line of
// <dataDir>/postmaster.pid (0 when there is none).
func PostmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	n, _ := strconv.Atoi(strings.TrimSpace(first))
	return n
}

// Millis converts ticks to milliseconds.
func Millis(ticks uint64) float64 { return float64(ticks) * float64(Tick) / float64(time.Millisecond) }

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
