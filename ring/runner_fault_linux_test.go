package ring

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/uring"
	"github.com/sluice-io/sluice/internal/testkit/runnertest"
	"github.com/sluice-io/sluice/pool"
)

// errInjected is the ring failure the fault hooks report.
var errInjected = errors.New("injected ring failure")

// killer is a runnerOptions.fault hook: worker i fails at the top of its
// next loop turn with the error stored for it.
type killer struct{ kill [2]atomic.Pointer[error] }

func (k *killer) hook(w *worker) error {
	if err := k.kill[w.id].Load(); err != nil {
		return *err
	}
	return nil
}

// faultyRunner is the uring runner whose workers a killer fails, for the
// worker fault suite (runnertest.Faulty).
type faultyRunner struct {
	syncRunner
	k *killer
}

// FailWorker makes worker i fail at the top of its next loop turn; the
// suite's Sync wakes it for that turn.
func (r faultyRunner) FailWorker(i int, err error) bool {
	if r.workers[i].Stopped() {
		return false
	}
	r.k.kill[i].Store(&err)
	return true
}

func (r faultyRunner) WorkerStopped(i int) bool { return r.workers[i].Stopped() }

func (r faultyRunner) WorkerOf(l *contract.Lane) (int, bool) {
	ref, ok := r.front.Lookup(l)
	if !ok {
		return 0, false
	}
	return ref.W.id, true
}

// newFaultyRunner makes uring runners whose workers a killer fails; opts
// are the other test knobs.
func newFaultyRunner(opts runnerOptions) runnertest.NewFaulty {
	return func(cfg contract.RunnerConfig) (runnertest.Faulty, error) {
		k := new(killer)
		opts.fault = k.hook
		r, err := newRunner(cfg, opts)
		if err != nil {
			return nil, err
		}
		return faultyRunner{syncRunner{r}, k}, nil
	}
}

// TestRunnerWorkerFaults runs the runners' worker fault suite
// (runnertest) on the uring runner.
func TestRunnerWorkerFaults(t *testing.T) {
	requireURing(t)
	runnertest.TestWorkerFaults(t, newFaultyRunner(runnerOptions{}))
}

// TestRunnerFaultEmitsInFlightReads fails a worker while a receive that has
// already taken bytes from its socket waits in the CQ: those bytes must be
// emitted, not thrown away with the ring, as must the bytes the lane held
// before (the suite's EmitsHeldData covers those alone).
func TestRunnerFaultEmitsInFlightReads(t *testing.T) {
	var armed atomic.Bool
	var target atomic.Uint64
	// Fail at the top of the turn that would reap the lane's receive.
	fault := func(w *worker) error {
		if !armed.Load() || w.ring.CQReady() == 0 {
			return nil
		}
		for ln := range w.slots.All() {
			if ln.gen != 0 && uint64(ln.lane().ID) == target.Load() && ln.op == tagRead {
				return errInjected
			}
		}
		return nil
	}
	// One buffer: the lane holds it with partial data, another waits.
	g, run := newRig(t, contract.RunnerConfig{Workers: 1}, pool.Config{Buffers: 1}, runnerOptions{fault: fault})
	g.CloseErr = errInjected
	g.Rec.Keep = true
	client, l := g.Conn(time.Hour)
	target.Store(uint64(l.ID))
	sent := runnertest.RandomBytes(21, 300)
	client.Write(sent[:100])
	g.WaitUntil("the lane to read", func() bool { return run.Stats().Reads >= 1 })
	waiting, w := g.Conn(time.Hour)
	waiting.Write([]byte("waits for the buffer"))
	g.WaitUntil("a lane to wait for the buffer", func() bool { return g.Pool.Stats().Waiters == 1 })
	armed.Store(true)
	client.Write(sent[100:])
	for id, lr := range g.Finished(2) {
		if !errors.Is(lr.Err, errInjected) {
			t.Errorf("lane %d: finished with %v, want the worker's failure", id, lr.Err)
		}
	}
	if data := g.Rec.Lane(l.ID).Data; string(data) != string(sent) {
		t.Errorf("emitted %d bytes, want the %d it had read (%d held, %d in the CQ at the failure)", len(data), len(sent), 100, 200)
	}
	if n := g.Rec.Lane(w.ID).Bytes; n != 0 {
		t.Errorf("waiting lane emitted %d bytes, want none", n)
	}
}

// TestRunnerFaultLeaksBuffersInFlight forces the ring to close while a read
// still refers to a lane's buffer: the buffer must never go back to the pool
// or downstream (the kernel may still write into it), the leak is logged,
// and the lane finishes with an error.
func TestRunnerFaultLeaksBuffersInFlight(t *testing.T) {
	requireURing(t)
	errStuck := errors.New("operations still in flight")
	nr := newFaultyRunner(runnerOptions{
		quiesce: -1, // close the ring at once
		closeRing: func(r *uring.Ring) error {
			// Really close (the test must not leave the kernel writing),
			// but report what a drain that gave up reports.
			return errors.Join(r.Close(), errStuck)
		},
	})
	g := runnertest.NewRig(t, func(cfg contract.RunnerConfig) (runnertest.Runner, error) { return nr(cfg) },
		runnertest.RigConfig{Pool: pool.Config{Buffers: 4}, Runner: contract.RunnerConfig{Workers: 1}})
	run := g.R.(faultyRunner)
	g.CloseErr = errInjected
	g.Leaked = 1

	// A File lane over an empty pipe: its read stays in flight, holding a
	// buffer, until the ring cancels it.
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	pipe := g.Add(&runnertest.FDSource{FD: fds[0], Kind: contract.File}, time.Hour)
	// A socket lane holding partial data behind a poll, which does not
	// refer to the buffer: its data must still be emitted.
	client, sock := g.Conn(time.Hour)
	client.Write(make([]byte, 100))
	g.WaitUntil("both lanes to hold a buffer", func() bool { return g.Pool.Stats().InUse == 2 })
	g.WaitUntil("the socket lane to read", func() bool { return run.Stats().Reads >= 1 })
	run.sync()
	inFlight := 0
	for ln := range run.workers[0].slots.All() { // the worker is asleep: sync is done
		if ln.gen != 0 && ln.op == tagRead {
			inFlight++
		}
	}
	if inFlight != 1 {
		t.Fatalf("%d reads in flight, want the pipe's", inFlight)
	}

	g.FailWorker(0, errInjected)
	got := g.Finished(2)
	for id, lr := range got {
		if !errors.Is(lr.Err, errInjected) {
			t.Errorf("lane %d: Finish(%v), want the worker's failure", id, lr.Err)
		}
	}
	if lr := got[pipe.ID]; lr.Bytes != 0 || !strings.Contains(lr.Err.Error(), "abandoned") {
		t.Errorf("pipe lane: Finish(%v) after %d bytes, want its buffer abandoned", lr.Err, lr.Bytes)
	}
	if lr := got[sock.ID]; lr.Bytes != 100 {
		t.Errorf("socket lane emitted %d bytes, want the 100 it held", lr.Bytes)
	}
	if st := g.Pool.Stats(); st.InUse < inFlight {
		t.Errorf("pool: %d buffers in use, want at least the %d under reads in flight", st.InUse, inFlight)
	}
	if err := run.Close(); !errors.Is(err, errStuck) {
		t.Errorf("Close: %v, want the ring's close error", err)
	}
	if log := g.Logged(); !strings.Contains(log, "buffers leaked") || !strings.Contains(log, "buffers=1") {
		t.Errorf("leak not logged: %q", log)
	}
}
