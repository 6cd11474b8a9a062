package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/sluice-io/sluice/internal/srcstest"
)

// TestTailKillRestart stops the ingest node while it tails a file a
// writer keeps appending numbered lines to, and restarts it from the
// tail's checkpoint, four times: three with SIGKILL, and once with a drain
// (SIGINT) while the file ends in half a line; at last it drains the node
// once the writer is done. The node runs as in production: the
// sluice binary (sluice run -c), a tail source framed by newline, and a JetStream
// output that releases a chunk (and so lets the checkpoint advance) only
// once the stream has stored it. The stream, in a NATS server of the
// test's own that outlives the node, is what the node delivered; each run
// publishes under its own message id prefix.
//
// It asserts that every line reaches the stream whole and in order within
// each run (a drained run may end with the start of the unfinished line,
// its Truncated chunk); that the checkpoint each stop left lies on a line
// boundary no further than the whole lines that run delivered (nothing
// acknowledged that was not delivered); that each restart resumes exactly
// at that checkpoint, so that no line is lost and the only duplicates are
// the lines after it that the stopped run had delivered, each repeated
// once per such stop; and that after the last drain the checkpoint is the
// end of the file.
func TestTailKillRestart(t *testing.T) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// How each run but the last ends.
	stops := []string{"kill", "drain", "kill", "kill"}
	runs := len(stops) + 1

	// The lines, of varied lengths, and where each starts in the file.
	const total = 12000
	text := func(i int) string { return fmt.Sprintf("line %06d %s\n", i, strings.Repeat("x", i*7%53)) }
	start := make([]int64, total+1) // start[total] is the file's size
	lineAt := map[int64]int{}       // line boundary offset -> line number
	for i := range total {
		lineAt[start[i]] = i
		start[i+1] = start[i] + int64(len(text(i)))
	}
	lineAt[start[total]] = total

	dir := t.TempDir()
	logPath, ckPath := filepath.Join(dir, "app.log"), filepath.Join(dir, "app.log.ckpt")
	srcstest.WriteFile(t, dir, "app.log", "")
	config := func(run int) string {
		return srcstest.WriteFile(t, dir, "node.yaml", fmt.Sprintf(`engine:
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
    id_prefix: run%d
    ack_timeout: 30s      # no republish, which could reorder the stream
drain_timeout: 20s
`, logPath, ckPath, ns.ClientURL(), run))
	}

	// The writer appends the lines over about three seconds, in batches
	// of 20, each in two writes cut inside its middle line, so that the
	// tail also reads half lines. Handed a channel on pause, it stops
	// after such a half line until the channel is closed.
	var written atomic.Int64
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
			defer f.Close()
			const batch = 20
			for i := 0; i < total; i += batch {
				end, mid := min(i+batch, total), min(i+batch/2, total-1)
				cut := start[mid] + int64(len(text(mid))/2)
				for _, piece := range [][2]int64{{start[i], cut}, {cut, start[end]}} {
					select {
					case <-stop:
						return errors.New("stopped")
					case <-time.After(2 * time.Millisecond):
					}
					var b strings.Builder
					for j := i; j < end; j++ {
						b.WriteString(text(j))
					}
					s := b.String()[piece[0]-start[i] : piece[1]-start[i]]
					if _, err := f.WriteString(s); err != nil {
						return err
					}
					if piece[1] == cut {
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
	checkpoint := func() int64 {
		b, err := os.ReadFile(ckPath)
		if errors.Is(err, os.ErrNotExist) {
			return 0
		}
		var pos struct{ Offset int64 }
		if err == nil {
			err = json.Unmarshal(b, &pos)
		}
		if err != nil {
			t.Fatalf("checkpoint %q: %v", b, err)
		}
		return pos.Offset
	}

	stoppedAt := make([]int64, len(stops)) // the checkpoint each stop left
	for run := range runs {
		from := checkpoint()
		cmd := exec.CommandContext(ctx, bin, "run", "-c", config(run))
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
					t.Fatalf("run %d: no %s in time:\n%s", run, what, stderr)
				}
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
			// Let the writer finish and the node release everything.
			await("the end of the writes", func() bool { return written.Load() == total })
			await("a checkpoint at the end of the file", func() bool { return checkpoint() == start[total] })
			drain()
			break
		}
		// Stop while the writer is still writing, once this run has
		// published and moved the checkpoint on.
		base := stored()
		await("progress", func() bool {
			return written.Load() >= int64((run+1)*total/runs) && stored() >= base+20 && checkpoint() > from
		})
		switch stops[run] {
		case "kill":
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			var ee *exec.ExitError
			if err := <-exited; !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("run %d: node after SIGKILL: %v\n%s", run, err, stderr)
			}
		case "drain":
			// Drain once the node has delivered, and checkpointed, every
			// whole line of the file, which ends in half a line: the
			// write that ended in it carried whole lines too, so the
			// tail has read it.
			resume := make(chan struct{})
			select {
			case pause <- resume:
			case <-ctx.Done():
				t.Fatal("the writer did not pause")
			}
			fi, err := os.Stat(logPath)
			if err != nil {
				t.Fatal(err)
			}
			half := sort.Search(total, func(i int) bool { return start[i+1] > fi.Size() })
			if start[half] == fi.Size() {
				t.Fatalf("the writer paused at offset %d, a line boundary", fi.Size())
			}
			await("a checkpoint at the half line", func() bool { return checkpoint() == start[half] })
			drain()
			close(resume)
		}
		stoppedAt[run] = checkpoint()
	}
	<-wrote
	if werr != nil {
		t.Fatal(werr)
	}

	// What each run delivered, in stream order.
	s, err := js.Stream(ctx, "TAILKILL")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	delivered := make([][]byte, runs)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		id := m.Header.Get(njs.MsgIDHeader)
		run, err := strconv.Atoi(strings.TrimPrefix(strings.SplitN(id, ".", 2)[0], "run"))
		if err != nil || run < 0 || run >= runs {
			t.Fatalf("message %d has id %q, from no run", seq, id)
		}
		delivered[run] = append(delivered[run], m.Data...)
	}

	seen := make([]int, total) // how often each line reached the stream whole
	want := make([]int, total) // how often it should have
	for i := range want {
		want[i] = 1
	}
	first := 0 // the line each run must start at
	for run, data := range delivered {
		n, truncated := first, false
		rest := string(data)
		for rest != "" {
			line, after, whole := strings.Cut(rest, "\n")
			switch due := text(min(n, total-1)); {
			case !whole && run < len(stops) && stops[run] == "drain" && strings.HasPrefix(due, line):
				truncated = true // the drain delivered the unfinished line's start
			case n >= total || line+"\n" != due:
				t.Fatalf("run %d: %q where line %d was due, after %d lines of the run", run, line, n, n-first)
			default:
				seen[n]++
				n++
			}
			rest = after
		}
		if run == len(stops) {
			if n != total {
				t.Fatalf("the last run ended at line %d of %d", n, total)
			}
			break
		}
		ck := stoppedAt[run]
		at, ok := lineAt[ck]
		switch {
		case stops[run] == "drain" && !truncated:
			t.Fatalf("run %d: the drain did not deliver the start of the unfinished line", run)
		case !ok:
			t.Fatalf("run %d: the %s left a checkpoint at offset %d, inside a line", run, stops[run], ck)
		case at > n:
			t.Fatalf("run %d: the %s left a checkpoint at line %d, beyond the %d lines delivered whole: acknowledged what was not delivered", run, stops[run], at, n)
		case at < first:
			t.Fatalf("run %d: the checkpoint went back from line %d to %d", run, first, at)
		}
		// The next run starts at the checkpoint: the lines from there
		// to where this run got come twice.
		for i := at; i < n; i++ {
			want[i]++
		}
		t.Logf("run %d: lines %d..%d delivered whole; %s with the checkpoint at line %d: %d duplicates", run, first, n, stops[run], at, n-at)
		first = at
	}
	if i := slices.IndexFunc(seen, func(c int) bool { return c == 0 }); i >= 0 {
		t.Fatalf("line %d was lost", i)
	}
	for i := range seen {
		if seen[i] != want[i] {
			t.Fatalf("line %d reached the stream %d times, want %d", i, seen[i], want[i])
		}
	}
	if off := checkpoint(); off != start[total] {
		t.Errorf("checkpoint after the last drain at offset %d, want %d", off, start[total])
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("checkpoint temporary file %s left behind", e.Name())
		}
	}
}
