package harness

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// MarkCPU reads every process's CPU time from /proc/PID/stat.
func MarkCPU() CPUMark {
	m := CPUMark{at: time.Now(), self: os.Getpid()}
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		return m
	}
	m.procs = make(map[int]procCPU, len(stats))
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // ended meanwhile
		}
		if pid, pc, ok := parsePIDStat(b); ok {
			m.procs[pid] = pc
		}
	}
	m.ok = len(m.procs) > 0
	return m
}

// parsePIDStat reads a /proc/PID/stat line. The command name, in
// parentheses, may hold spaces and parentheses itself: the fields after
// it are counted from the last ')'.
func parsePIDStat(b []byte) (pid int, pc procCPU, ok bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return 0, pc, false
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return 0, pc, false
	}
	// After the name, from 0: state, ppid (1), ..., utime (11), stime,
	// cutime, cstime (14), ..., starttime (19).
	f := bytes.Fields(b[end+1:])
	if len(f) < 20 {
		return 0, pc, false
	}
	if pc.ppid, err = strconv.Atoi(string(f[1])); err != nil {
		return 0, pc, false
	}
	for _, s := range f[11:15] {
		// cutime and cstime are signed in the kernel's format, never
		// negative in practice.
		n, err := strconv.ParseUint(string(s), 10, 64)
		if err != nil {
			return 0, pc, false
		}
		pc.ticks += n
	}
	if pc.started, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return 0, pc, false
	}
	return pid, pc, true
}
