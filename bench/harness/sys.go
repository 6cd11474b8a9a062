package harness

import (
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/engine"
	"golang.org/x/sys/unix"
)

// CPUTime is the user plus system CPU time this process has used
// (getrusage RUSAGE_SELF): the engine's cost, since the load generator
// runs in a process of its own.
func CPUTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Preemptions is the number of times this process was switched out
// involuntarily (ru_nivcsw): high when another process competed for its
// CPUs, which makes its CPU utilisation understate how busy it was.
func Preemptions() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Nivcsw)
}

// Host describes the machine a report was made on.
type Host struct {
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
	OS     string `json:"os"`
	Arch   string `json:"arch"`
	CPUs   int    `json:"cpus"`
}

func HostInfo() Host {
	_, kernel := engine.ProbeURing()
	return Host{
		Kernel: kernel, Go: runtime.Version(),
		OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(),
	}
}

// Sampler polls the process's OS thread count and resident set while a
// measurement runs, keeping the maxima. Each poll opens and reads
// /proc/self/status, which costs the sink about half a millisecond of CPU
// on the 2-core VMs, so it polls twice a second: every 50 ms came to a
// tenth of a uring or gnet sink's CPU in the paced row. The resident
// set's peak between polls is the kernel's (VmHWM, read at the end), and
// the thread count seldom falls during a run.
type Sampler struct {
	stop chan struct{}
	done chan struct{}

	mu         sync.Mutex
	threadsMax int
	rssMax     int64
}

const samplePeriod = 500 * time.Millisecond

// StartSampler resets the kernel's peak-RSS mark where it can, so that
// each measurement sees its own peak, and starts polling.
func StartSampler() *Sampler {
	resetPeakRSS()
	s := &Sampler{stop: make(chan struct{}), done: make(chan struct{})}
	s.Sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(samplePeriod)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.Sample()
			case <-s.stop:
				return
			}
		}
	}()
	return s
}

func (s *Sampler) Sample() {
	threads, rss := ProcUsage()
	s.mu.Lock()
	s.threadsMax = max(s.threadsMax, threads)
	s.rssMax = max(s.rssMax, rss)
	s.mu.Unlock()
}

// Finish stops polling and returns the maxima: threads, and resident bytes
// (the larger of the polled maximum and the kernel's peak mark).
func (s *Sampler) Finish() (threads int, rss int64) {
	close(s.stop)
	<-s.done
	s.Sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.threadsMax, max(s.rssMax, peakRSS())
}

// backlogSampler samples rxBacklog for a listener three times over a run.
// Reading /proc/net/tcp costs the kernel time in proportion to every TCP
// socket on the machine (a tenth of a second with a few thousand), which
// is not the engine's: the sampler runs on a thread of its own and keeps
// that thread's CPU time (cpu) for measure to leave out.
type backlogSampler struct {
	stop chan struct{}
	done chan struct{}
	sum  int64
	n    int64
	CPU  time.Duration // the samples' own CPU time; read after finish
}

// SampleBacklog starts sampling the receive queues of the connections
// accepted on addr a quarter, half and three quarters into a run of d, in
// the network namespace of process pid (0: this process's).
func SampleBacklog(addr string, d time.Duration, pid int) *backlogSampler {
	b := &backlogSampler{stop: make(chan struct{}), done: make(chan struct{})}
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	go func() {
		defer close(b.done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for range 3 {
			select {
			case <-time.After(d / 4):
			case <-b.stop:
				return
			}
			t0 := threadCPU()
			q, _ := rxBacklogOf(pid, port)
			b.CPU += threadCPU() - t0
			b.sum += q
			b.n++
		}
	}()
	return b
}

// Finish stops sampling and returns the mean backlog, 0 without samples.
func (b *backlogSampler) Finish() int64 {
	close(b.stop)
	<-b.done
	if b.n == 0 {
		return 0
	}
	return b.sum / b.n
}

// JoinInts joins xs with commas, as CPU lists are written.
func JoinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
