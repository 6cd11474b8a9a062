package ring

import (
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// errInjected is the ring failure the fault hook reports.
var errInjected = errors.New("injected ring failure")

// killer is a runnerOptions.fault hook: worker i fails at the top of its
// next loop turn once kill[i] is set.
type killer struct{ kill [2]atomic.Bool }

func (k *killer) hook(w *worker) error {
	if k.kill[w.id].Load() {
		return errInjected
	}
	return nil
}

// stop makes worker i fail and returns once it has stopped. The first sync
// wakes it, but may be served by a turn that began before kill was set; the
// second is served, if at all, by a later turn, which fails at its top (a
// failed worker closes the sync channels it had not served).
func (k *killer) stop(g *rig, i int) {
	k.kill[i].Store(true)
	g.run.sync()
	g.run.sync()
	if !g.run.workers[i].Stopped() {
		g.t.Fatalf("worker %d still running after its fault", i)
	}
}

// TestRunnerFaultEmitsInFlightReads fails a worker while a receive that has
// already taken bytes from its socket waits in the CQ: those bytes must be
// emitted, not thrown away with the ring, and every lane must finish once
// with the failure.
func TestRunnerFaultEmitsInFlightReads(t *testing.T) {
	var armed atomic.Bool
	// Fail at the top of the turn that would reap lane 1's receive.
	fault := func(w *worker) error {
		if !armed.Load() || w.ring.CQReady() == 0 {
			return nil
		}
		for _, ln := range w.slots {
			if ln != nil && ln.gen != 0 && ln.l.ID == 1 && ln.op == tagRead {
				return errInjected
			}
		}
		return nil
	}
	// One buffer: lane 1 holds it with partial data, lane 3 waits for it.
	g := newRig(t, 1, pool.Config{BufSize: 4 << 10, Buffers: 1}, runnerOptions{fault: fault})
	g.closeErr = errInjected
	g.rec.Keep = true
	clients, servers := tcpPairs(t, 3)
	g.add(1, servers[0], time.Hour)
	g.add(2, servers[1], time.Hour) // idle: only a poll in flight
	g.add(3, servers[2], time.Hour)

	rnd := rand.New(rand.NewPCG(21, 22))
	sent := randBytes(rnd, 300)
	clients[0].Write(sent[:100])
	waitFor(t, "lane 1 to read", func() bool { return g.run.Stats().Reads >= 1 })
	clients[2].Write([]byte("waits for the buffer lane 1 holds"))
	waitFor(t, "lane 3 to wait for a buffer", func() bool { return g.pool.Stats().Waiters == 1 })
	armed.Store(true)
	clients[0].Write(sent[100:])

	got, err := g.rec.WaitFinished(3, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for id, lr := range got {
		if !errors.Is(lr.Err, errInjected) {
			t.Errorf("lane %d: Finish(%v), want the worker's failure", id, lr.Err)
		}
	}
	if data := g.rec.Lane(1).Data; string(data) != string(sent) {
		t.Errorf("lane 1 emitted %d bytes, want the %d it had read (%d held, %d in the CQ at the failure)", len(data), len(sent), 100, 200)
	}
	for _, id := range []srcs.ID{2, 3} {
		if n := g.rec.Lane(id).Bytes; n != 0 {
			t.Errorf("lane %d emitted %d bytes, want none", id, n)
		}
	}
	if st := g.run.Stats(); st.Lanes != 0 {
		t.Errorf("Stats().Lanes = %d after the failure", st.Lanes)
	}
	if !strings.Contains(g.log.String(), "worker stopped") {
		t.Errorf("failure not logged: %q", g.log.String())
	}
}

// TestRunnerFaultLeaksBuffersInFlight forces the ring to close while a read
// still refers to a lane's buffer: the buffer must never go back to the pool
// or downstream (the kernel may still write into it), the leak is logged,
// and the lane finishes with an error.
func TestRunnerFaultLeaksBuffersInFlight(t *testing.T) {
	errStuck := errors.New("operations still in flight")
	k := new(killer)
	g := newRig(t, 1, pool.Config{BufSize: 4 << 10, Buffers: 4}, runnerOptions{
		fault:   k.hook,
		quiesce: -1, // close the ring at once
		closeRing: func(r *Ring) error {
			// Really close (the test must not leave the kernel writing),
			// but report what a drain that gave up reports.
			return errors.Join(r.Close(), errStuck)
		},
	})
	g.closeErr = errInjected
	g.leaked = 1

	// A File lane over an empty pipe: its read stays in flight, holding a
	// buffer, until the ring cancels it.
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	g.add(1, &fdSrc{fd: fds[0], kind: srcs.File}, time.Hour)
	// A socket lane holding partial data behind a poll, which does not
	// refer to the buffer: its data must still be emitted.
	clients, servers := tcpPairs(t, 1)
	g.add(2, servers[0], time.Hour)
	clients[0].Write(make([]byte, 100))
	waitFor(t, "both lanes to hold a buffer", func() bool { return g.pool.Stats().InUse == 2 })
	waitFor(t, "lane 2 to read", func() bool { return g.run.Stats().Reads >= 1 })
	g.run.sync()
	inFlight := 0
	for _, ln := range g.run.workers[0].slots { // the worker is asleep: sync is done
		if ln != nil && ln.gen != 0 && ln.op == tagRead {
			inFlight++
		}
	}
	if inFlight != 1 {
		t.Fatalf("%d reads in flight, want the pipe's", inFlight)
	}

	k.stop(g, 0)
	got, err := g.rec.WaitFinished(2, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for id, lr := range got {
		if !errors.Is(lr.Err, errInjected) {
			t.Errorf("lane %d: Finish(%v), want the worker's failure", id, lr.Err)
		}
	}
	if lr := got[1]; lr.Bytes != 0 || !strings.Contains(lr.Err.Error(), "abandoned") {
		t.Errorf("pipe lane: Finish(%v) after %d bytes, want its buffer abandoned", lr.Err, lr.Bytes)
	}
	if lr := got[2]; lr.Bytes != 100 {
		t.Errorf("socket lane emitted %d bytes, want the 100 it held", lr.Bytes)
	}
	if st := g.pool.Stats(); st.InUse < inFlight {
		t.Errorf("pool: %d buffers in use, want at least the %d under reads in flight", st.InUse, inFlight)
	}
	if err := g.run.Close(); !errors.Is(err, errStuck) {
		t.Errorf("Close: %v, want the ring's close error", err)
	}
	if log := g.log.String(); !strings.Contains(log, "buffers leaked") || !strings.Contains(log, "buffers=1") {
		t.Errorf("leak not logged: %q", log)
	}
}

// TestRunnerFaultSkipsDeadWorker fails one of two workers: new lanes must
// all go to the other one (the dead worker has the lowest load), and once
// both are dead Add must say so.
func TestRunnerFaultSkipsDeadWorker(t *testing.T) {
	k := new(killer)
	g := newRig(t, 2, pool.Config{BufSize: 4 << 10, Buffers: 32}, runnerOptions{fault: k.hook})
	g.closeErr = errInjected
	clients, servers := tcpPairs(t, 12)
	g.add(1, servers[0], 0) // worker 0
	g.add(2, servers[1], 0) // worker 1
	k.stop(g, 0)
	got, err := g.rec.WaitFinished(1, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if lr := got[1]; lr == nil || !errors.Is(lr.Err, errInjected) {
		t.Fatalf("lane 1 on the dead worker: %+v, want Finish with the failure", lr)
	}
	live := g.run.workers[1]
	for i := 2; i < 12; i++ {
		l := g.add(srcs.ID(i+1), servers[i], 0)
		ref, _ := g.run.front.Lookup(l)
		if ref.W != nil && ref.W != live {
			t.Errorf("lane %d went to worker %d, which has stopped", i+1, ref.W.id)
		}
	}
	data := randBytes(rand.New(rand.NewPCG(23, 24)), 10<<10)
	for _, c := range clients[1:] {
		c.Write(data)
		c.Close()
	}
	got, err = g.rec.WaitFinished(11, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for id, lr := range got {
		if lr.Err != io.EOF || lr.Bytes != int64(len(data)) || lr.CRC != crc(data) {
			t.Errorf("lane %d: Finish(%v) after %d of %d bytes", id, lr.Err, lr.Bytes, len(data))
		}
	}

	k.stop(g, 1)
	srcFile, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	defer srcFile.Close()
	l := &srcs.Lane{ID: 99, Src: &fileSrc{f: srcFile}, Account: g.pool.Join(99), Out: g.rec}
	err = g.run.Add(l)
	if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "all workers stopped") {
		t.Errorf("Add with every worker stopped: %v, want all workers stopped: the first failure", err)
	}
}

// TestRunnerPausedGrant makes a paused lane the first waiter for the only
// buffer: the grant must not stay with it for the whole pause but go on to
// the next waiter, and the lane must read after the resume.
func TestRunnerPausedGrant(t *testing.T) {
	g := newRig(t, 1, pool.Config{BufSize: 4 << 10, Buffers: 1}, runnerOptions{})
	clients, servers := tcpPairs(t, 2)
	holder := g.add(1, servers[0], time.Hour)
	waiter := g.add(2, servers[1], time.Hour)
	clients[0].Write(make([]byte, 100))
	waitFor(t, "lane 1 to read", func() bool { return g.run.Stats().Reads >= 1 })
	clients[1].Write(make([]byte, 50))
	waitFor(t, "lane 2 to wait for a buffer", func() bool { return g.pool.Stats().Waiters == 1 })

	g.run.SetPaused(true)
	g.run.sync()
	// A waiter that is not paused, queued behind lane 2.
	other := g.pool.Join(100)
	defer other.Leave()
	granted := make(chan struct{}, 1)
	if _, ok, err := other.Wait(func() { granted <- struct{}{} }); ok || err != nil {
		t.Fatalf("Wait: ok %v, err %v; want to queue", ok, err)
	}
	g.run.Remove(holder) // emits its 100 bytes; the recorder frees the buffer
	select {
	case <-granted:
	case <-time.After(5 * time.Second):
		t.Fatalf("paused lane kept the buffer: %+v, lane 2 holds %d", g.pool.Stats(), waiter.Account.Stats().Held)
	}
	b, ok := other.Claim()
	if !ok {
		t.Fatal("Claim after the grant: no buffer")
	}
	if held := waiter.Account.Stats().Held; held != 0 {
		t.Errorf("paused lane holds %d buffers", held)
	}
	b.Release()

	g.run.SetPaused(false)
	clients[1].Close()
	got, err := g.rec.WaitFinished(2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if lr := got[2]; lr.Err != io.EOF || lr.Bytes != 50 {
		t.Errorf("lane 2 after the resume: Finish(%v) after %d bytes, want io.EOF after 50", lr.Err, lr.Bytes)
	}
}
