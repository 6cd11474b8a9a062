package engine_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// limitRig is an engine in pull mode whose consumer records, per source,
// when each chunk's bytes were delivered, and the errors in order.
type limitRig struct {
	t    *testing.T
	e    *engine.Engine
	done chan struct{}

	mu    sync.Mutex
	names map[srcs.ID]string // the listener each source came from
	got   map[string][]arrival
	errs  map[string][]error
	ended map[string]bool
}

type arrival struct {
	at time.Time
	n  int
}

func newLimitRig(t *testing.T, runner string) *limitRig {
	t.Helper()
	t.Setenv(engine.EnvRunner, "")
	r := &limitRig{t: t, done: make(chan struct{}), names: map[srcs.ID]string{},
		got: map[string][]arrival{}, errs: map[string][]error{}, ended: map[string]bool{}}
	e, err := engine.New(engine.Config{Runner: runner, Buffers: 64}, engine.WithErrorHandler(func(err error) {
		var se *srcs.SourceError
		if errors.As(err, &se) {
			r.mu.Lock()
			r.errs[r.names[se.ID]] = append(r.errs[r.names[se.ID]], err)
			r.mu.Unlock()
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	r.e = e
	go func() {
		defer close(r.done)
		for c, err := range e.Chunks(context.Background()) {
			if err != nil {
				return
			}
			r.mu.Lock()
			name := r.names[c.Source]
			if c.Flags&srcs.EndOfStream != 0 {
				r.ended[name] = true
			} else {
				r.got[name] = append(r.got[name], arrival{time.Now(), len(c.Data)})
			}
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-r.done
	})
	return r
}

// listen adds a listener whose connections are filed under name.
func (r *limitRig) listen(name string, opts ...engine.SourceOption) string {
	r.t.Helper()
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
	if err != nil {
		r.t.Fatal(err)
	}
	opts = append(opts, engine.WithAdded(func(id srcs.ID, _ srcs.Source) {
		r.mu.Lock()
		r.names[id] = name
		r.mu.Unlock()
	}))
	if err := r.e.AddListener(ln, opts...); err != nil {
		r.t.Fatal(err)
	}
	return ln.Addr().String()
}

// bytesBetween returns what name delivered in [from, to).
func (r *limitRig) bytesBetween(name string, from, to time.Time) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, a := range r.got[name] {
		if !a.at.Before(from) && a.at.Before(to) {
			n += int64(a.n)
		}
	}
	return n
}

// blast writes to addr as fast as it can until stop closes.
func blast(t *testing.T, addr string, stop <-chan struct{}, wg *sync.WaitGroup) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer c.Close()
		buf := make([]byte, 32<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
			if _, err := c.Write(buf); err != nil && !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
				return
			}
		}
	}()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestRateLimit: on every runner, a sender held to a rate by
// WithRateLimit delivers at that rate (within 5% over a steady stretch),
// while a sender beside it with no limit is not slowed to it, and the
// limited source's stats say it was held.
func TestRateLimit(t *testing.T) {
	const rate = 4 << 20
	forEachRunner(t, func(t *testing.T, runner string) {
		r := newLimitRig(t, runner)
		limited := r.listen("limited", engine.WithRateLimit(rate, 0))
		free := r.listen("free")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		blast(t, limited, stop, &wg)
		blast(t, free, stop, &wg)
		// Past the burst and the first buffers, over a steady stretch.
		time.Sleep(500 * time.Millisecond)
		from := time.Now()
		time.Sleep(1500 * time.Millisecond)
		to := time.Now()
		close(stop)
		wg.Wait()
		secs := to.Sub(from).Seconds()
		got := float64(r.bytesBetween("limited", from, to)) / secs
		if got < rate*0.95 || got > rate*1.05 {
			t.Errorf("the limited sender delivered %.2f MiB/s, want %.2f MiB/s within 5%%", got/(1<<20), float64(rate)/(1<<20))
		}
		if unl := float64(r.bytesBetween("free", from, to)) / secs; unl < 4*rate {
			t.Errorf("the sender without a limit delivered %.2f MiB/s beside it, want well above %.2f", unl/(1<<20), float64(rate)/(1<<20))
		}
		var held time.Duration
		for _, s := range r.e.Stats().Sources {
			if r.name(s.ID) == "limited" {
				held = s.RateHeld
			}
		}
		if held < 500*time.Millisecond {
			t.Errorf("the limited source was held %v, want most of the time", held)
		}
		t.Logf("limited %.2f MiB/s, held %v", got/(1<<20), held)
	})
}

func (r *limitRig) name(id srcs.ID) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.names[id]
}

// TestIdleTimeout: on every runner, a connection that sends nothing for
// its listener's idle timeout is closed, after ErrIdleTimeout reaches the
// error handler, and counted; one that keeps sending beside it is not.
func TestIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	forEachRunner(t, func(t *testing.T, runner string) {
		r := newLimitRig(t, runner)
		quietAddr := r.listen("quiet", engine.WithIdleTimeout(idle))
		busyAddr := r.listen("busy", engine.WithIdleTimeout(idle))
		quiet, err := net.Dial("tcp", quietAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer quiet.Close()
		busy, err := net.Dial("tcp", busyAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Close()
		quiet.Write([]byte("one line and then nothing\n"))
		start := time.Now()
		// The quiet one is closed: its reads see the end.
		closed := make(chan time.Duration, 1)
		go func() {
			io.Copy(io.Discard, quiet)
			closed <- time.Since(start)
		}()
		var after time.Duration
		for after == 0 {
			select {
			case after = <-closed:
			case <-time.After(idle / 4):
				if _, err := busy.Write([]byte("still here\n")); err != nil {
					t.Fatalf("the busy connection failed: %v", err)
				}
				if time.Since(start) > 20*idle {
					t.Fatal("the quiet connection was never closed")
				}
			}
		}
		if after < idle {
			t.Errorf("the quiet connection was closed after %v, before its idle timeout of %v", after, idle)
		}
		// The busy one lives on well past the timeout.
		for range 6 {
			time.Sleep(idle / 3)
			if _, err := busy.Write([]byte("still here\n")); err != nil {
				t.Fatalf("the busy connection failed: %v", err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			r.mu.Lock()
			ended, errs, busyEnded := r.ended["quiet"], r.errs["quiet"], r.ended["busy"]
			r.mu.Unlock()
			if ended {
				if len(errs) != 1 || !errors.Is(errs[0], engine.ErrIdleTimeout) || !errors.Is(errs[0], srcs.ErrTimeout) {
					t.Errorf("errors of the quiet source: %v, want one ErrIdleTimeout", errs)
				}
				if busyEnded {
					t.Error("the busy source ended too")
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the quiet source never ended")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if tot := r.e.Totals(); tot.IdleTimeouts != 1 || tot.Errors[engine.ErrorTimeout] != 1 {
			t.Errorf("totals: %d idle timeouts, %d timeouts; want 1 and 1", tot.IdleTimeouts, tot.Errors[engine.ErrorTimeout])
		}
	})
}

// TestLimitOptionErrors: negative limits fail, naming the option.
func TestLimitOptionErrors(t *testing.T) {
	e, err := engine.New(engine.Config{Runner: engine.RunnerGoroutine})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown(context.Background())
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		opt  engine.SourceOption
		want string
	}{
		{engine.WithRateLimit(-1, 0), "WithRateLimit"},
		{engine.WithRateLimit(1<<20, -1), "WithRateLimit"},
		{engine.WithIdleTimeout(-time.Second), "WithIdleTimeout"},
	} {
		var ce *engine.ConfigError
		if err := e.AddListener(ln, tc.opt); !errors.As(err, &ce) || ce.Field != tc.want {
			t.Errorf("AddListener with a bad %s: %v", tc.want, err)
		}
	}
}

// TestErrClosed: an engine's ErrClosed matches net.ErrClosed and says only
// that the engine is closed, not that a network connection was used.
func TestErrClosed(t *testing.T) {
	if !errors.Is(engine.ErrClosed, net.ErrClosed) || engine.ErrClosed.Error() != "engine: closed" {
		t.Errorf("ErrClosed: %q, matches net.ErrClosed: %v", engine.ErrClosed, errors.Is(engine.ErrClosed, net.ErrClosed))
	}
	e, err := engine.New(engine.Config{Runner: engine.RunnerGoroutine, Buffers: 8})
	if err != nil {
		t.Fatal(err)
	}
	e.Shutdown(context.Background())
	if _, err := e.Next(context.Background()); !errors.Is(err, engine.ErrClosed) || !errors.Is(err, net.ErrClosed) {
		t.Errorf("Next after Shutdown: %v", err)
	}
}

// TestIdleTimeoutSparesHeldSources: a sender that writes all the time but
// is held by its rate limit for longer than its idle timeout (a buffer's
// worth at the rate takes 2 s here) is held back, not idle: the timeout
// does not end it.
func TestIdleTimeoutSparesHeldSources(t *testing.T) {
	forEachRunner(t, func(t *testing.T, runner string) {
		r := newLimitRig(t, runner)
		addr := r.listen("held", engine.WithRateLimit(32<<10, 0), engine.WithIdleTimeout(600*time.Millisecond))
		stop := make(chan struct{})
		var wg sync.WaitGroup
		blast(t, addr, stop, &wg)
		time.Sleep(2500 * time.Millisecond)
		close(stop)
		wg.Wait()
		r.mu.Lock()
		defer r.mu.Unlock()
		if errs := r.errs["held"]; len(errs) > 0 || r.ended["held"] {
			t.Errorf("a sender held by its rate limit was ended: %v", errs)
		}
		if tot := r.e.Totals(); tot.IdleTimeouts != 0 {
			t.Errorf("%d idle timeouts, want none", tot.IdleTimeouts)
		}
	})
}
