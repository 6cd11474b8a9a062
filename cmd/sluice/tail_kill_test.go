package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
)

// TestTailExactlyOnce stops the ingest node while it tails a file that a
// writer keeps appending numbered lines to, and that the writer rotates
// (renames it and starts a new one) halfway, and restarts it from the
// tail's checkpoint, four times: twice with SIGKILL aimed at the moment
// JetStream has stored lines the node has not heard about (a proxy
// between node and server holds the acknowledgements back, so the
// checkpoint cannot have moved past them), once with SIGKILL at once, and
// once with a drain (SIGINT) while the file ends in half a line; at last
// it drains the node once the writer is done. The node runs as in
// production: the sluice binary, a tail framed by newline, a JetStream
// output whose message ids are the tail's stretch and offset.
//
// An independent client then reads the stream: every line is there once,
// whole (without its newline), in the order written: nothing lost,
// nothing repeated, nothing reordered.
func TestTailExactlyOnce(t *testing.T) {
	bin := sluiceBin(t)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not start")
	}
	proxy := startAckProxy(t, ns.Addr().(*net.TCPAddr).String())
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	stops := []string{"aimed", "drain", "kill", "aimed"}
	runs := len(stops) + 1

	const total = 12000
	text := func(i int) string { return fmt.Sprintf("line %06d %s\n", i, strings.Repeat("x", i*7%53)) }

	dir := t.TempDir()
	logPath, ckPath := filepath.Join(dir, "app.log"), filepath.Join(dir, "app.log.ckpt")
	srcstest.WriteFile(t, dir, "app.log", "")
	config := srcstest.WriteFile(t, dir, "node.yaml", fmt.Sprintf(`engine:
  buffers: 64
  buf_size: 4096
sources:
  - tail:
      path: %s
      checkpoint: %s
      from_start: true
      checkpoint_every: 20ms
    flush: 5ms
    framing: newline
output:
  jetstream:
    url: %s
    subject: tail.kill
    stream: TAILKILL
    storage: memory
    ack_timeout: 30s
drain_timeout: 20s
`, logPath, ckPath, proxy.URL()))

	// The writer appends the lines over about three seconds, in batches
	// of 20, each in two writes cut inside its middle line, so that the
	// tail also reads half lines; halfway it rotates the file. Handed a
	// channel on pause, it stops after such a half line until the
	// channel is closed.
	var written atomic.Int64 // whole lines written
	var werr error
	stop, wrote := make(chan struct{}), make(chan struct{})
	pause := make(chan chan struct{})
	defer func() { close(stop); <-wrote }()
	go func() {
		defer close(wrote)
		werr = func() error {
			f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer func() { f.Close() }()
			const batch = 20
			for i := 0; i < total; i += batch {
				if i == total/2 {
					f.Close()
					if err := os.Rename(logPath, logPath+".1"); err != nil {
						return err
					}
					if f, err = os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err != nil {
						return err
					}
				}
				end, mid := min(i+batch, total), min(i+batch/2, total-1)
				var b strings.Builder
				for j := i; j < end; j++ {
					b.WriteString(text(j))
				}
				s := b.String()
				cut := len(strings.Join(strings.SplitAfter(s, "\n")[:mid-i], "")) + len(text(mid))/2
				for k, piece := range []string{s[:cut], s[cut:]} {
					select {
					case <-stop:
						return errors.New("stopped")
					case <-time.After(2 * time.Millisecond):
					}
					if _, err := f.WriteString(piece); err != nil {
						return err
					}
					if k == 0 {
						written.Store(int64(mid))
						select {
						case resume := <-pause:
							select {
							case <-resume:
							case <-stop:
								return errors.New("stopped")
							}
						default:
						}
					}
				}
				written.Store(int64(end))
			}
			return nil
		}()
	}()

	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := njs.New(nc)
	stored := func() uint64 {
		s, err := js.Stream(ctx, "TAILKILL")
		if errors.Is(err, njs.ErrStreamNotFound) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}

	for run := range runs {
		cmd := exec.CommandContext(ctx, bin, "run", "-c", config)
		stderr := &srcstest.LockedBuffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		// await polls cond, the only view of another process, until
		// it holds.
		await := func(what string, cond func() bool) {
			t.Helper()
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for !cond() {
				select {
				case <-tick.C:
				case err := <-exited:
					t.Fatalf("run %d: node exited (%v) before %s:\n%s", run, err, what, stderr)
				case <-ctx.Done():
					t.Fatalf("run %d: no %s in time (%d stored, %d written):\n%s", run, what, stored(), written.Load(), stderr)
				}
			}
		}
		kill := func() {
			t.Helper()
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			var ee *exec.ExitError
			if err := <-exited; !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("run %d: node after SIGKILL: %v\n%s", run, err, stderr)
			}
		}
		drain := func() {
			t.Helper()
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			if err := <-exited; err != nil || !strings.Contains(stderr.String(), "msg=drained") {
				t.Fatalf("run %d: node after SIGINT: %v\n%s", run, err, stderr)
			}
		}
		if run == len(stops) {
			await("the end of the writes", func() bool { return written.Load() == total })
			await("every line stored", func() bool { return stored() >= total })
			drain()
			break
		}
		base := stored()
		await("progress", func() bool {
			return written.Load() >= int64((run+1)*total/runs) && stored() >= base+20
		})
		switch stops[run] {
		case "aimed":
			proxy.hold()
			held := stored()
			await("lines stored while their acknowledgements are held", func() bool { return stored() >= held+20 })
			kill()
			proxy.release(true)
			t.Logf("run %d: killed with %d lines stored and not acknowledged", run, stored()-held)
		case "kill":
			kill()
		case "drain":
			resume := make(chan struct{})
			select {
			case pause <- resume:
			case <-ctx.Done():
				t.Fatal("the writer did not pause")
			}
			whole := uint64(written.Load())
			await("every whole line stored", func() bool { return stored() >= whole })
			drain()
			close(resume)
		}
	}
	<-wrote
	if werr != nil {
		t.Fatal(werr)
	}
	lost, twice, reordered := checkLines(t, ctx, js, "TAILKILL", total, func(i int) string { return strings.TrimSuffix(text(i), "\n") })
	t.Logf("%d lines: %d lost, %d repeated, %d out of order", total, lost, twice, reordered)
	if lost+twice+reordered > 0 {
		t.Fatalf("%d lost, %d repeated, %d out of order", lost, twice, reordered)
	}
}

// checkLines reads the stream in order, as any consumer would, and counts
// against want(0), want(1), ... want(total-1): the lines lost, those
// stored more than once, and those stored after a later one.
func checkLines(t *testing.T, ctx context.Context, js njs.JetStream, stream string, total int, want func(int) string) (lost, twice, reordered int) {
	t.Helper()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	index := map[string]int{}
	for i := range total {
		index[want(i)] = i
	}
	seen := make([]int, total)
	last := -1
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		i, ok := index[string(m.Data)]
		if !ok {
			t.Fatalf("message %d: %q is no line written (id %s)", seq, m.Data, m.Header.Get(njs.MsgIDHeader))
		}
		if seen[i]++; seen[i] == 2 {
			twice++
		}
		if i < last && seen[i] == 1 {
			reordered++
		}
		last = max(last, i)
	}
	for _, n := range seen {
		if n == 0 {
			lost++
		}
	}
	return lost, twice, reordered
}
