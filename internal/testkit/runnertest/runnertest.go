// Package runnertest is the runner contract suite, the test suite every
// runner passes, in the manner of testing/fstest.TestFS: each runner's own
// package tests (ring, fallback) call its functions with the runner's
// constructor, and the cases are written once. TestStreams drives stream
// lanes (streams, flushes, ends, resets, slow consumers, files, pause and
// resume, shutdown), TestDatagrams datagram sockets, and TestWorkerFaults
// the failure of a worker of the event-loop runners. Rig is the one
// harness they share, and that runner tests of their own build on. Only
// tests import it.
//
// This is where what a runner does with a lane is tested. The engine's
// conformance table (TestConformance in package engine) runs over every
// runner too, but covers only what the engine adds on top: chunk
// numbering and delivery, error ordering, the sources users have, its
// queue's pauses and Shutdown, with one end-to-end case per runner.
package runnertest

import (
	"net"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/srcs"
)

// Runner is what the suite drives.
type Runner = contract.Runner

// New makes a runner under test from cfg. An error matching
// errors.ErrUnsupported skips the test: the runner cannot work here. A
// caller that requires the runner checks for it before.
type New func(cfg contract.RunnerConfig) (Runner, error)

// Options says how the runner under test differs from the others where
// the runner contract leaves it room. The zero value describes a runner
// with a fixed set of workers that waits for readiness before it takes a
// buffer: the uring and epoll runners.
type Options struct {
	// Source makes a stream lane's source from an accepted TCP
	// connection; nil means srcs.NewConn.
	Source func(c net.Conn) srcs.Source
	// LaneWorkers says every lane has a goroutine or thread of its own
	// (the goroutine and thread runners): Stats().Workers counts lanes,
	// and Stats().Waits counts each lane's waits for readiness.
	LaneWorkers bool
	// ReadsInFlight says a lane may be waiting for data when a pause
	// begins in a way the pause does not interrupt, so that the wait ends
	// in one more read during the pause: the goroutine runner inside its
	// source's Read, the thread runner in poll(2) while the lane holds
	// data.
	ReadsInFlight bool
	// IdleHoldsBuffer says a lane waiting for data holds a buffer (the
	// goroutine runner over a source that cannot report readiness).
	IdleHoldsBuffer bool
	// DropLowerBound says the runner learns only a lower bound of a
	// dropped datagram's length (it reads through Go's netpoller).
	DropLowerBound bool
}

// source makes the source of an accepted connection as o says.
func (o Options) source(c net.Conn) srcs.Source {
	if o.Source != nil {
		return o.Source(c)
	}
	return srcs.NewConn(c)
}

// Syncer is a Runner with a barrier: Sync returns once every worker has
// handled what was posted to it before the call, and submitted what that
// led to. Where the runner under test is one, the suite counts its reads
// exactly instead of allowing for reads under way.
type Syncer interface {
	Sync()
}

// barrier waits on r's barrier, if it has one, and reports whether it did.
func barrier(r Runner) bool {
	s, ok := r.(Syncer)
	if ok {
		s.Sync()
	}
	return ok
}
