package runnertest

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// Faulty is a runner whose workers a test can make fail, as a failure of
// a worker's ring or epoll instance would: the event-loop runners, through
// hooks their own tests reach.
type Faulty interface {
	Runner
	// FailWorker makes worker i fail with err, once it next looks, and
	// reports false if it has stopped already. A Faulty that is a Syncer
	// has the worker look on its next Sync.
	FailWorker(i int, err error) bool
	// WorkerStopped reports whether worker i has stopped.
	WorkerStopped(i int) bool
	// WorkerOf returns the index of the worker that drives l, and false
	// when none does.
	WorkerOf(l *contract.Lane) (int, bool)
}

// NewFaulty makes a Faulty runner under test from cfg.
type NewFaulty func(cfg contract.RunnerConfig) (Faulty, error)

// errInjected is the failure the suite gives a worker.
var errInjected = errors.New("runnertest: injected worker failure")

// TestWorkerFaults runs the worker failure cases against the runners
// newRunner makes: a failed worker emits what its lanes hold, finishes
// them with its failure and says so in the log; Add passes it over, and
// fails with the first failure once every worker has failed.
func TestWorkerFaults(t *testing.T, newRunner NewFaulty) {
	nr := func(cfg contract.RunnerConfig) (Runner, error) { return newRunner(cfg) }
	rig := func(t *testing.T, workers int, pc pool.Config) (*Rig, Faulty) {
		g := NewRig(t, nr, RigConfig{Pool: pc, Runner: contract.RunnerConfig{Workers: workers}})
		g.CloseErr = errInjected
		return g, g.R.(Faulty)
	}
	t.Run("EmitsHeldData", func(t *testing.T) {
		// One buffer: the first lane holds it with partial data, the
		// third waits for it, the second is idle.
		g, _ := rig(t, 1, pool.Config{Buffers: 1})
		g.Rec.Keep = true
		c1, l1 := g.Conn(time.Hour)
		_, l2 := g.Conn(time.Hour)
		c3, l3 := g.Conn(time.Hour)
		sent := RandomBytes(21, 100)
		c1.Write(sent)
		g.WaitUntil("the first lane to read", func() bool { return g.R.Stats().Reads >= 1 && g.Pool.Stats().InUse == 1 })
		c3.Write([]byte("waits for the buffer the first lane holds"))
		g.WaitUntil("the third lane to wait for a buffer", func() bool { return g.Pool.Stats().Waiters == 1 })
		g.FailWorker(0, errInjected)
		for id, lr := range g.Finished(3) {
			if !errors.Is(lr.Err, errInjected) {
				t.Errorf("lane %d: finished with %v, want the worker's failure", id, lr.Err)
			}
		}
		if data := g.Rec.Lane(l1.ID).Data; string(data) != string(sent) {
			t.Errorf("lane %d emitted %d bytes, want the %d it held", l1.ID, len(data), len(sent))
		}
		for _, l := range []*contract.Lane{l2, l3} {
			if n := g.Rec.Lane(l.ID).Bytes; n != 0 {
				t.Errorf("lane %d emitted %d bytes, want none", l.ID, n)
			}
		}
		if st := g.R.Stats(); st.Lanes != 0 {
			t.Errorf("after the failure: %d lanes", st.Lanes)
		}
		if !strings.Contains(g.Logged(), "worker stopped") {
			t.Errorf("failure not logged: %q", g.Logged())
		}
	})

	t.Run("SkipsDeadWorker", func(t *testing.T) {
		// New lanes must all go to the live worker: the dead one has the
		// lowest load.
		g, f := rig(t, 2, pool.Config{Buffers: 32})
		clients := make([]io.WriteCloser, 12)
		lanes := make([]*contract.Lane, 12)
		for i := range 2 {
			clients[i], lanes[i] = g.Conn(0)
			if w, ok := f.WorkerOf(lanes[i]); !ok || w != i {
				t.Fatalf("lane %d on worker %d (%v), want %d", lanes[i].ID, w, ok, i)
			}
		}
		g.FailWorker(0, errInjected)
		if lr := g.Finish(lanes[0]); !errors.Is(lr.Err, errInjected) {
			t.Fatalf("lane on the dead worker: finished with %v, want the failure", lr.Err)
		}
		if !strings.Contains(g.Logged(), "worker stopped") {
			t.Errorf("failure not logged: %q", g.Logged())
		}
		for i := 2; i < len(lanes); i++ {
			clients[i], lanes[i] = g.Conn(0)
			if w, ok := f.WorkerOf(lanes[i]); ok && w != 1 {
				t.Errorf("lane %d went to worker %d, which has stopped", lanes[i].ID, w)
			}
		}
		data := RandomBytes(23, 10<<10)
		for _, c := range clients[1:] {
			c.Write(data)
			c.Close()
		}
		for id, lr := range g.Finished(len(lanes) - 1) {
			if lr.Err != io.EOF || lr.Bytes != int64(len(data)) || lr.CRC != CRC(data) {
				t.Errorf("lane %d: finished with %v after %d of %d bytes", id, lr.Err, lr.Bytes, len(data))
			}
		}

		g.FailWorker(1, errInjected)
		_, server := g.Dial()
		l := g.Lane(srcs.NewConn(server), 0)
		err := g.R.Add(l)
		if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), fmt.Sprintf("add lane %d: all workers stopped", l.ID)) {
			t.Errorf("Add with every worker stopped: %v, want all workers stopped: the first failure", err)
		}
	})
}

// FailWorker makes worker i of the rig's runner, which must be Faulty,
// fail with err, and returns once it has stopped.
func (g *Rig) FailWorker(i int, err error) {
	g.t.Helper()
	f := g.R.(Faulty)
	if !f.FailWorker(i, err) {
		g.t.Fatalf("worker %d had stopped already", i)
	}
	// The first barrier wakes the worker, but may be served by a turn that
	// began before the failure was set; the second is served, if at all,
	// by a later turn, which fails first.
	barrier(f)
	barrier(f)
	g.WaitUntil(fmt.Sprintf("worker %d to stop", i), func() bool { return f.WorkerStopped(i) })
}
