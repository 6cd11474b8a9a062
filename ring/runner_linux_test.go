package ring

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/runner/uring"
	"github.com/sluice-io/sluice/internal/testkit/runnertest"
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

var _ runnertest.Syncer = syncRunner{}

// syncRunner is the uring runner with its barrier (sync) shown to the
// runner suite, which then counts reads exactly.
type syncRunner struct{ *Runner }

func (r syncRunner) Sync() { r.sync() }

// newRunnerWith returns the constructor the runner suite and the Rig take,
// for a runner with the test knobs opts.
func newRunnerWith(opts runnerOptions) runnertest.New {
	return func(cfg contract.RunnerConfig) (runnertest.Runner, error) {
		r, err := newRunner(cfg, opts)
		if err != nil {
			return nil, err
		}
		return syncRunner{r}, nil
	}
}

// newRig is a runnertest.Rig over a uring runner with the test knobs opts,
// returned with it; io_uring is required.
func newRig(t *testing.T, rc contract.RunnerConfig, pc pool.Config, opts runnerOptions) (*runnertest.Rig, *Runner) {
	t.Helper()
	requireURing(t)
	g := runnertest.NewRig(t, newRunnerWith(opts), runnertest.RigConfig{Pool: pc, Runner: rc})
	return g, g.R.(syncRunner).Runner
}

// TestRunnerStreams runs the runners' stream suite (runnertest) on the
// uring runner.
func TestRunnerStreams(t *testing.T) {
	requireURing(t)
	runnertest.TestStreams(t, newRunnerWith(runnerOptions{}), runnertest.Options{})
}

// TestRunnerFile reads a file from its start and from an offset that is
// not a multiple of the buffer size (the suite's File case reads files
// of every shape).
func TestRunnerFile(t *testing.T) {
	data := runnertest.RandomBytes(11, 32<<20)
	file := runnertest.TempFile(t, data)
	file.Close() // each case opens its own
	for _, off := range []int64{0, 123457} {
		t.Run(fmt.Sprintf("offset=%d", off), func(t *testing.T) {
			g, _ := newRig(t, contract.RunnerConfig{Workers: 2}, pool.Config{BufSize: 64 << 10, Buffers: 16}, runnerOptions{})
			f, err := os.Open(file.Name())
			if err != nil {
				t.Fatal(err)
			}
			l := g.Add(&runnertest.FileSource{F: f, Off: off}, time.Hour)
			want := data[off:]
			if lr := g.Finish(l); lr.Err != io.EOF || lr.Bytes != int64(len(want)) || lr.CRC != runnertest.CRC(want) {
				t.Errorf("Finish(%v) after %d bytes crc %08x; want io.EOF after %d crc %08x", lr.Err, lr.Bytes, lr.CRC, len(want), runnertest.CRC(want))
			}
		})
	}
}

// TestRunnerGrantNotHeldByBatchWait: a lane that waits for a pool buffer
// must get it as soon as processing releases one, not when a batched wait
// ends. The file lane may hold two buffers, which processing releases from
// another goroutine; with grants held back by a one-second batch wait the
// 64 chunks would take half a minute.
func TestRunnerGrantNotHeldByBatchWait(t *testing.T) {
	const size = 4 << 20
	data := runnertest.RandomBytes(13, size)
	g, _ := newRig(t, contract.RunnerConfig{Workers: 1, BatchWait: time.Second},
		pool.Config{BufSize: 64 << 10, Buffers: 4, MaxPerSource: 2}, runnerOptions{})
	g.Rec.Hold = true
	stop := make(chan struct{})
	released := make(chan struct{})
	go func() {
		defer close(released)
		for {
			select {
			case <-stop:
				return
			case <-g.Rec.Emitted():
				g.Rec.ReleaseAll()
			}
		}
	}()
	l := g.Add(&runnertest.FileSource{F: runnertest.TempFile(t, data)}, time.Hour)
	got, err := g.Rec.WaitFinished(1, 10*time.Second)
	close(stop)
	<-released
	if err != nil {
		t.Fatal(err)
	}
	if lr := got[l.ID]; lr.Err != io.EOF || lr.Bytes != size || lr.CRC != runnertest.CRC(data) {
		t.Errorf("Finish(%v) after %d bytes crc %08x; want io.EOF after %d crc %08x", lr.Err, lr.Bytes, lr.CRC, size, runnertest.CRC(data))
	}
}

// TestRunnerHoldLessBatchWait: a socket lane's partial data is delivered
// within its flush timeout of its arrival, although a batched wait may
// have held its read back by up to BatchWait: the lane holds the data for
// the timeout less BatchWait. A message after a quiet spell longer than
// BatchWait is read at once, so it comes out BatchWait before the
// timeout; holding it for the whole timeout from its read would take the
// timeout or more.
func TestRunnerHoldLessBatchWait(t *testing.T) {
	if requireURing(t).Features&uring.FeatMinTimeout == 0 {
		t.Skip("batched waits need IORING_FEAT_MIN_TIMEOUT (6.12)")
	}
	const flush, batch = 400 * time.Millisecond, 200 * time.Millisecond
	g, _ := newRig(t, contract.RunnerConfig{Workers: 1, BatchWait: batch},
		pool.Config{BufSize: 16 << 10, Buffers: 8}, runnerOptions{})
	c, l := g.Conn(flush)
	g.Conn(flush)             // a second lane polling, so that the worker batches its waits
	time.Sleep(batch * 3 / 2) // the quiet spell: the batch window has passed
	start := time.Now()
	if _, err := c.Write([]byte("one message")); err != nil {
		t.Fatal(err)
	}
	for g.Rec.Lane(l.ID).Bytes == 0 {
		select {
		case <-g.Rec.Emitted():
		case <-time.After(5 * time.Second):
			t.Fatal("the message was not delivered in 5s")
		}
	}
	// The flush heap may deliver a lane a quarter of its hold early,
	// together with others that are due.
	took := time.Since(start)
	if took >= flush || took < (flush-batch)*3/4 {
		t.Errorf("the message was delivered %v after it was written; want from %v to under the flush timeout, %v",
			took, (flush-batch)*3/4, flush)
	}
}

// TestRunnerAddErrors adds what only the uring runner refuses (the shared
// cases are the suite's).
func TestRunnerAddErrors(t *testing.T) {
	g, _ := newRig(t, contract.RunnerConfig{Workers: 1}, pool.Config{Buffers: 4}, runnerOptions{})
	a, b := runnertest.Socketpair(t, unix.SOCK_STREAM)
	defer unix.Close(b)
	stream := &runnertest.FDSource{FD: a, Kind: contract.Datagram}
	negative := g.Lane(stream, 0)
	negative.Flush = -1
	for _, tc := range []struct {
		name string
		lane *contract.Lane
		want error
	}{
		{"datagram on a stream socket", g.Lane(stream, 0), unix.EPROTOTYPE},
		{"no descriptor", g.Lane(runnertest.NoDesc{}, 0), srcs.ErrNoDescriptor},
		{"negative flush", negative, nil},
	} {
		err := g.R.Add(tc.lane)
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: Add = %v, want %v", tc.name, err, tc.want)
		}
	}
	if st := g.R.Stats(); st.Lanes != 0 {
		t.Errorf("Stats().Lanes = %d after failed adds", st.Lanes)
	}
}

func TestRunnerSupported(t *testing.T) {
	ok := Probe()
	requireURing(t)
	noCancel := ok
	noCancel.CancelFd = false
	noExtArg := ok
	noExtArg.Features &^= uring.FeatExtArg
	type testCase struct {
		name string
		p    ProbeResult
		want string
	}
	cases := []testCase{
		{"disabled", ProbeResult{Reason: "setup: io_uring is disabled by sysctl", Err: &uring.NotSupportedError{Op: "setup", Reason: "io_uring is disabled by sysctl kernel.io_uring_disabled=2"}}, "disabled"},
		{"setup failed", ProbeResult{Reason: "setup: cannot allocate memory", Err: unix.ENOMEM}, "unusable"},
		{"no cancel by fd", noCancel, "cancel by descriptor"},
		{"no timed waits", noExtArg, "EXT_ARG"},
	}
	for _, missing := range requiredOps() {
		p := ok
		p.ops = uring.OpSet{}
		for op := range uring.Op(255) {
			if op != missing && ok.hasOp(op) {
				p.ops.Add(op)
			}
		}
		cases = append(cases, testCase{"no " + missing.String(), p, missing.String()})
	}
	for _, tc := range cases {
		err := runnerSupported(tc.p)
		if !errors.Is(err, uring.ErrNotSupported) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "ring: runner: ") {
			t.Errorf("%s: %v, want ErrNotSupported saying %q", tc.name, err, tc.want)
		}
	}
	if err := runnerSupported(ok); err != nil {
		t.Errorf("supported kernel: %v", err)
	}
	// Files are read with plain READ: a kernel without READ_FIXED will do.
	noFixed := ok
	noFixed.ops = uring.OpSet{}
	for op := range uring.Op(255) {
		if op != uring.OpReadFixed && ok.hasOp(op) {
			noFixed.ops.Add(op)
		}
	}
	if err := runnerSupported(noFixed); err != nil || slices.Contains(requiredOps(), uring.OpReadFixed) {
		t.Errorf("a kernel without READ_FIXED: %v; required ops %v", err, requiredOps())
	}
}

func TestRunnerConfigErrors(t *testing.T) {
	requireURing(t)
	if _, err := NewRunner(contract.RunnerConfig{Workers: 1, BatchWait: time.Second}); err == nil {
		t.Error("NewRunner without a pool succeeded")
	}
	p, err := pool.New(pool.Config{BufSize: 4 << 10, Buffers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := NewRunner(contract.RunnerConfig{Workers: -1, Pool: p}); err == nil {
		t.Error("NewRunner with -1 workers succeeded")
	}
}

// allocRig is a uring runner with one worker and one lane over the first
// of a unix socketpair, emitting into a runnertest.Counter, for counting
// the allocations of the runner's steady state.
type allocRig struct {
	pool *pool.Pool
	run  *Runner
	src  srcs.Source
	lane *contract.Lane
	out  *runnertest.Counter
	wr   int // the socketpair's writing end
}

// newAllocRig builds an allocRig over a socketpair of type typ (whose
// reading end src makes a source of), with a flush timeout so that the
// flush heap is in play too.
func newAllocRig(t *testing.T, bufSize, typ int, src func(fd int) srcs.Source) *allocRig {
	t.Helper()
	requireURing(t)
	p, err := pool.New(pool.Config{BufSize: bufSize, Buffers: 16})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(contract.RunnerConfig{Workers: 1, Pool: p})
	if err != nil {
		t.Fatal(err)
	}
	rd, wr := runnertest.Socketpair(t, typ)
	a := &allocRig{pool: p, run: r, src: src(rd), out: runnertest.NewCounter(1), wr: wr}
	a.lane = &contract.Lane{ID: 1, Src: a.src, Account: p.Join(1), Flush: time.Millisecond, Out: a.out}
	if err := r.Add(a.lane); err != nil {
		t.Fatal(err)
	}
	return a
}

// write writes p, n times, in blocking writes; a signal (Go's
// preemption) can cut one short.
func (a *allocRig) write(t *testing.T, p []byte, n int) {
	for range n {
		for rest := p; len(rest) > 0; {
			k, err := unix.Write(a.wr, rest)
			if err != nil && err != unix.EINTR {
				t.Fatal(err)
			}
			rest = rest[max(k, 0):]
		}
	}
}

// close closes the runner, the source and the pool, once the lane has
// finished.
func (a *allocRig) close(t *testing.T) {
	if err := a.run.Close(); err != nil {
		t.Error(err)
	}
	a.src.Close()
	if err := a.pool.Close(); err != nil {
		t.Error(err)
	}
}

func TestRunnerSteadyStateAllocs(t *testing.T) {
	a := newAllocRig(t, 64<<10, unix.SOCK_STREAM, func(fd int) srcs.Source { return &runnertest.FDSource{FD: fd, Kind: contract.Stream} })
	buf := make([]byte, 48<<10) // not a divisor of the buffer size
	write := func() { a.write(t, buf, 32) }
	write() // grow the worker's slices
	allocs := testing.AllocsPerRun(20, write)
	unix.Close(a.wr)
	if err := <-a.out.Finished; err != io.EOF {
		t.Errorf("Finish(%v)", err)
	}
	a.close(t)
	// Our warm-up, AllocsPerRun's own, and 20 runs.
	if want := int64(22 * 32 * len(buf)); a.out.Bytes.Load() != want {
		t.Errorf("%d bytes emitted, want %d", a.out.Bytes.Load(), want)
	}
	// Each run moves 1.5 MiB through some 24 buffers and ~50 reads.
	if allocs > 1 {
		t.Errorf("%.1f allocations per 1.5 MiB in steady state, want 0", allocs)
	}
}

// TestNextStreamHold: a stream hold doubles from streamHoldMin to the
// batch wait while each wake-up brings little, halves to none while each
// brings much, and stays put in between.
func TestNextStreamHold(t *testing.T) {
	const buf, batch = 64 << 10, 2 * time.Millisecond
	for _, c := range []struct {
		name  string
		hold  time.Duration
		bytes int64
		want  time.Duration
	}{
		{"nothing yet: start", 0, 0, streamHoldMin},
		{"little: double", 100 * time.Microsecond, buf, 200 * time.Microsecond},
		{"little: at most the batch wait", 1500 * time.Microsecond, 1, batch},
		{"enough: keep", 300 * time.Microsecond, streamHoldLow * buf, 300 * time.Microsecond},
		{"enough, none held: keep none", 0, streamHoldHigh * buf, 0},
		{"much: halve", 400 * time.Microsecond, streamHoldHigh*buf + 1, 200 * time.Microsecond},
		{"much: below the least, none", 80 * time.Microsecond, streamHoldHigh*buf + 1, 0},
	} {
		if got := nextStreamHold(c.hold, c.bytes, buf, batch); got != c.want {
			t.Errorf("%s: nextStreamHold(%v, %d) = %v, want %v", c.name, c.hold, c.bytes, got, c.want)
		}
	}
	// From none, lanes that keep bringing little reach the batch wait,
	// and lanes that then bring much let go of it.
	hold := time.Duration(0)
	for range 16 {
		hold = nextStreamHold(hold, 1, buf, batch)
	}
	if hold != batch {
		t.Errorf("after 16 small wake-ups the hold is %v, want %v", hold, batch)
	}
	for range 16 {
		hold = nextStreamHold(hold, streamHoldHigh*buf+1, buf, batch)
	}
	if hold != 0 {
		t.Errorf("after 16 large wake-ups the hold is %v, want none", hold)
	}
}

// TestRunnerStreamHoldLessBatchWait: the hold of a worker's one stream,
// or of its two, grown to the whole batch wait by a trickle of small
// messages, still delivers every byte, in order, and within the flush
// timeout of its arrival.
func TestRunnerStreamHoldLessBatchWait(t *testing.T) {
	if requireURing(t).Features&uring.FeatMinTimeout == 0 {
		t.Skip("batched waits need IORING_FEAT_MIN_TIMEOUT (6.12)")
	}
	for _, lanes := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d lanes", lanes), func(t *testing.T) {
			const flush, batch = 400 * time.Millisecond, 100 * time.Millisecond
			g, _ := newRig(t, contract.RunnerConfig{Workers: 1, BatchWait: batch},
				pool.Config{BufSize: 16 << 10, Buffers: 8}, runnerOptions{})
			g.Rec.Keep = true
			conns := make([]*net.TCPConn, lanes)
			ids := make([]srcs.ID, lanes)
			sent := make([][]byte, lanes)
			for i := range lanes {
				c, l := g.Conn(flush) // the worker's only lanes
				conns[i], ids[i] = c, l.ID
			}
			write := func(i int, p string) {
				t.Helper()
				if _, err := conns[i].Write([]byte(p)); err != nil {
					t.Fatal(err)
				}
				sent[i] = append(sent[i], p...)
			}
			// Wake-ups that bring a few bytes each double the hold: from
			// 50µs, eleven of them pass 100ms.
			for k := range 24 {
				write(k%lanes, fmt.Sprintf("trickle %02d;", k))
				time.Sleep(5 * time.Millisecond)
			}
			start := time.Now()
			for i := range lanes {
				write(i, "last")
			}
			for i := range lanes {
				g.WaitUntil("every byte", func() bool { return g.Rec.Lane(ids[i]).Bytes == int64(len(sent[i])) })
			}
			if took := time.Since(start); took >= flush {
				t.Errorf("the last messages were delivered %v after they were written; want under the flush timeout, %v", took, flush)
			}
			for i := range lanes {
				lr := g.Rec.Lane(ids[i])
				if !bytes.Equal(lr.Data, sent[i]) {
					t.Errorf("lane %d: delivered %q, want %q", i, lr.Data, sent[i])
				}
				if lr.MaxHoldTime >= flush {
					t.Errorf("lane %d: a chunk was emitted %v after its first byte was read; want under the flush timeout, %v", i, lr.MaxHoldTime, flush)
				}
			}
		})
	}
}

// TestRunnerDescriptorAdmission runs the descriptor runners' admission
// cases (runnertest) on the uring runner.
func TestRunnerDescriptorAdmission(t *testing.T) {
	requireURing(t)
	runnertest.TestDescriptorAdmission(t, newRunnerWith(runnerOptions{}))
}
