package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ProcUsage reads the thread count and resident set size from
// /proc/self/status.
func ProcUsage() (threads int, rss int64) {
	threads, rss, _ = readStatus()
	return threads, rss
}

// peakRSS is VmHWM, the resident high-water mark since the last
// resetPeakRSS.
func peakRSS() int64 {
	_, _, hwm := readStatus()
	return hwm
}

func readStatus() (threads int, rss, hwm int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		key, val, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch string(key) {
		case "Threads":
			threads, _ = strconv.Atoi(string(bytes.TrimSpace(val)))
		case "VmRSS":
			rss = KBField(val)
		case "VmHWM":
			hwm = KBField(val)
		}
	}
	return threads, rss, hwm
}

func KBField(v []byte) int64 {
	v = bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))
	n, _ := strconv.ParseInt(string(v), 10, 64)
	return n << 10
}

// resetPeakRSS resets VmHWM to the current RSS (writing 5 to clear_refs,
// Linux 4.0), so that each runner's peak is its own.
func resetPeakRSS() { os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// AllowedCPUs returns the CPUs this process may run on.
func AllowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var cpus []int
	for i := range 1024 {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus
}

// PinProcess restricts every thread of this process to cpus. Threads
// created later inherit the mask of the thread that creates them, which is
// pinned by then. The walk is made twice to catch threads created during
// the first.
func PinProcess(cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("bench: pin: %w", err)
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			// A thread may exit meanwhile (ESRCH): nothing to pin.
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("bench: pin thread %d to cpus %v: %w", tid, cpus, err)
			}
		}
	}
	return nil
}

// StartOnCPUs starts cmd with its CPU affinity set to cpus from its first
// instruction: the child inherits the affinity of the thread that forks
// it, so the fork happens on a thread locked and pinned for the purpose,
// which gets its old mask back afterwards. Setting the mask after the
// start would leave the threads the child made meanwhile where they were
// (fio creates a thread per job at once). With no cpus it is cmd.Start.
func StartOnCPUs(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return fmt.Errorf("bench: pin: %w", err)
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("bench: pin to cpus %v: %w", cpus, err)
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &old); rerr != nil && err == nil {
		err = fmt.Errorf("bench: unpin: %w", rerr)
	}
	return err
}

// ProcCPU is the user plus system CPU time of process pid so far, from
// /proc/PID/stat (in clock ticks: 10 ms), and whether it could be read.
func ProcCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces; the fields after
	// it start with the state. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+s) * time.Second / ClockTicks, true
}

// threadCPU is the user plus system CPU time of the calling thread
// (getrusage RUSAGE_THREAD); the caller locks its goroutine to the thread.
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// SetTimerSlack sets the calling thread's timer slack, how late the
// kernel may wake it from a timed sleep to fold its wake-up into
// another's (PR_SET_TIMERSLACK; 50 µs by default).
func SetTimerSlack(ns int) { unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(ns), 0, 0, 0) }

// PollFds waits until one of fds is ready, or for at most d, with
// nanosecond resolution (ppoll).
func PollFds(fds []unix.PollFd, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	unix.Ppoll(fds, &ts, nil)
}

// RunqueueWait is the time this process's threads spent runnable but not
// running (the second field of /proc/self/task/*/schedstat, summed;
// threads that have exited are not counted): time the scheduler gave
// their CPU to something else.
func RunqueueWait() time.Duration {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	var total int64
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		f := bytes.Fields(b)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(string(f[1]), 10, 64)
		total += n
	}
	return time.Duration(total)
}

// rxBacklog is rxBacklogOf this process's network namespace.
func rxBacklog(port int) (queued int64, sockets int) { return rxBacklogOf(0, port) }

// rxBacklogOf returns the bytes waiting in the receive queues of the
// established TCP sockets whose local port is port, and how many such
// sockets there are: for a sink's accepted connections, what the engine
// has yet to read. It reads /proc/net/tcp and /proc/net/tcp6 (a text
// line per socket), so it is sampled a few times a run, not often: those
// of process pid's network namespace, or of this process's when pid is 0.
func rxBacklogOf(pid, port int) (queued int64, sockets int) {
	dir := "/proc/net"
	if pid > 0 {
		dir = "/proc/" + strconv.Itoa(pid) + "/net"
	}
	for _, name := range []string{dir + "/tcp", dir + "/tcp6"} {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue ...
			f := bytes.Fields(sc.Bytes())
			if len(f) < 5 || string(f[3]) != "01" { // ESTABLISHED
				continue
			}
			_, lport, ok := bytes.Cut(f[1], []byte(":"))
			if !ok {
				continue
			}
			if p, err := strconv.ParseUint(string(lport), 16, 16); err != nil || int(p) != port {
				continue
			}
			_, rx, ok := bytes.Cut(f[4], []byte(":"))
			if !ok {
				continue
			}
			if n, err := strconv.ParseInt(string(rx), 16, 64); err == nil {
				queued += n
				sockets++
			}
		}
	}
	return queued, sockets
}
