package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cpuSample is the CPU time used so far, in clock ticks: by the whole
// machine (busy, of total), by one process (the orchestrator) and by every
// PostgreSQL process with the children they reaped.
type cpuSample struct {
	busy, total    uint64
	orchestrator   uint64
	postgres       uint64
	orchestratorOK bool
}

// sampleCPU reads /proc: the machine's counters, the process pid's, and
// the postgres processes' (every cluster's on the machine: the bench's
// alone when nothing else runs). A process that ends between two samples
// has its time counted in its parent's reaped children's.
func sampleCPU(pid int) (cpuSample, error) {
	var s cpuSample
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(fields) < 9 || fields[0] != "cpu" {
		return s, fmt.Errorf("unexpected /proc/stat: %q", line)
	}
	for i, f := range fields[1:9] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return s, err
		}
		s.total += n
		if i != 3 && i != 4 { // idle, iowait
			s.busy += n
		}
	}
	if t, _, err := procCPU(pid); err == nil {
		s.orchestrator, s.orchestratorOK = t, true
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		if t, comm, err := procCPU(pid); err == nil && comm == "postgres" {
			s.postgres += t
		}
	}
	return s, nil
}

// procCPU is a process's user and system time, with its reaped
// children's, and its command name.
func procCPU(pid int) (uint64, string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", err
	}
	s := string(data)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return 0, "", fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	fields := strings.Fields(s[closing+1:]) // state ppid ... utime(12) stime cutime cstime
	if len(fields) < 15 {
		return 0, "", fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	var t uint64
	for _, f := range fields[11:15] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, "", err
		}
		t += uint64(max(n, 0))
	}
	return t, s[open+1 : closing], nil
}

// cpuUse is what a stretch of time between two samples used: the
// machine's busy share, and the orchestrator's and PostgreSQL's shares of
// the busy time.
type cpuUse struct {
	busy, orchestrator, postgres float64
}

func (a cpuSample) to(b cpuSample) cpuUse {
	busy, total := since(a.busy, b.busy), since(a.total, b.total)
	if busy <= 0 || total <= 0 {
		return cpuUse{}
	}
	u := cpuUse{busy: busy / total, postgres: since(a.postgres, b.postgres) / busy}
	if a.orchestratorOK && b.orchestratorOK {
		u.orchestrator = since(a.orchestrator, b.orchestrator) / busy
	}
	return u
}

// since is b - a, or 0 where a counter went back (a process that ended
// unreaped between the samples).
func since(a, b uint64) float64 {
	if b < a {
		return 0
	}
	return float64(b - a)
}
