package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestCPUShare: a process that this one does not start or reap, burning
// CPU while a measurement runs, counts as another's work. (Everything
// else on the machine may add to it; the test asks only for the spin.)
func TestCPUShare(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	done := filepath.Join(t.TempDir(), "done")
	mark := MarkCPU()
	// Started through a shell that exits at once: the spinner is
	// orphaned, and another process reaps it.
	cmd := exec.Command("sh", "-c", `"$0" >/dev/null 2>&1 &`, exe)
	cmd.Env = append(os.Environ(), envSpin+"="+done)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd, err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(done); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the spinning process never finished")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s, ok := CPUShareSince(mark)
	if !ok {
		t.Fatal("no CPU counters")
	}
	// The kernel's counters advance at clock ticks: allow a tenth of the
	// spin to go uncounted.
	if least := (spinCPU * 9 / 10).Seconds(); s.Others < least {
		t.Errorf("%+v: an orphan's spin of %v is not another process's", s, spinCPU)
	}
}

// TestOthersBetween: what counts as another process's CPU time between
// two readings.
func TestOthersBetween(t *testing.T) {
	const self = 100
	a := map[int]procCPU{
		1:   {ppid: 0, started: 1, ticks: 50},
		2:   {ppid: 0, started: 1, ticks: 10},   // kthreadd
		9:   {ppid: 2, started: 2, ticks: 500},  // ksoftirqd
		50:  {ppid: 1, started: 5, ticks: 1000}, // a shell
		100: {ppid: 50, started: 9, ticks: 30},  // self
		300: {ppid: 1, started: 3, ticks: 70},   // a process that ends
	}
	b := map[int]procCPU{
		1:   {ppid: 0, started: 1, ticks: 50 + 7}, // reaped an orphan of 7 ticks
		2:   {ppid: 0, started: 1, ticks: 10 + 1},
		9:   {ppid: 2, started: 2, ticks: 500 + 40},
		50:  {ppid: 1, started: 5, ticks: 1000 + 200}, // a build it ran and reaped
		100: {ppid: 50, started: 9, ticks: 30 + 300},  // self and its reaped children
		101: {ppid: 100, started: 10, ticks: 80},      // a child of self
		102: {ppid: 101, started: 11, ticks: 20},      // and its child
		200: {ppid: 50, started: 12, ticks: 25},       // started after the first reading
		// 300 ended and nobody alive reaped it: lost. Its PID, taken
		// again by a new process, counts whole.
		300: {ppid: 50, started: 13, ticks: 4},
	}
	if got, want := othersBetween(a, b, self), uint64(7+200+25+4); got != want {
		t.Errorf("others: %d ticks, want %d", got, want)
	}
}

func TestParsePIDStat(t *testing.T) {
	tail := " 20 0 1 0 1234 0 0" // priority, nice, threads, itrealvalue, starttime, ...
	for _, tc := range []struct {
		line string
		pid  int
		pc   procCPU
		ok   bool
	}{
		{"2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 3 41 0 0" + tail, 2, procCPU{ppid: 0, ticks: 44, started: 1234}, true},
		// A name with spaces and a parenthesis, and reaped children.
		{"4242 (a b) c) R 2 0 0 0 -1 0 0 0 0 0 100 7 5 6" + tail, 4242, procCPU{ppid: 2, ticks: 118, started: 1234}, true},
		{"17 (short) S 2 0 0", 0, procCPU{}, false},
		{"x (bad) S 2 0 0 0 -1 0 0 0 0 0 1 1 0 0" + tail, 0, procCPU{}, false},
	} {
		pid, pc, ok := parsePIDStat([]byte(tc.line))
		if pid != tc.pid || pc != tc.pc || ok != tc.ok {
			t.Errorf("%q: %d %+v %v, want %d %+v %v", tc.line, pid, pc, ok, tc.pid, tc.pc, tc.ok)
		}
	}
}
