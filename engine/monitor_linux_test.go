package engine_test

import (
	"net"
	"testing"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/enginetest"
	"github.com/sluice-io/sluice/srcs"
)

// TestWatchingSources checks the figures a monitor polls against Stats:
// CountSources counts the live sources by state and allocates nothing,
// SourceStats finds one source by id, and Overview is Stats without the
// sources.
func TestWatchingSources(t *testing.T) {
	forEachRunner(t, func(t *testing.T, runner string) {
		e, addr := enginetest.Listen(t, engine.Config{Runner: runner, Workers: 1, Buffers: 16}, srcs.ListenerConfig{}, nil)
		const n = 40
		for range n {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
		}
		waitCount(t, runner+": connections not yet sources", 0, func() int { return n - e.CountSources()[engine.Running] })
		counts := e.CountSources()
		if counts.Live() != n || counts[engine.Running] != n {
			t.Fatalf("%s: CountSources %v, live %d; want %d running", runner, counts, counts.Live(), n)
		}
		if a := testing.AllocsPerRun(10, func() { e.CountSources() }); a != 0 {
			t.Errorf("%s: CountSources allocates %.0f times; want none", runner, a)
		}
		st := e.Stats()
		if len(st.Sources) != n {
			t.Fatalf("%s: Stats has %d sources, want %d", runner, len(st.Sources), n)
		}
		for _, s := range st.Sources {
			got, ok := e.SourceStats(s.ID)
			if !ok || got.ID != s.ID || got.Name != s.Name || got.State != engine.Running {
				t.Fatalf("%s: SourceStats(%d) = %+v, %v; Stats has %+v", runner, s.ID, got, ok, s)
			}
		}
		if _, ok := e.SourceStats(srcs.ID(1 << 60)); ok {
			t.Errorf("%s: SourceStats found a source that was never added", runner)
		}
		ov := e.Overview()
		if ov.Sources != nil || ov.Runner != st.Runner || len(ov.Runners) != len(st.Runners) || ov.Pool.Buffers != st.Pool.Buffers {
			t.Errorf("%s: Overview %+v does not match Stats %+v without its sources", runner, ov, st)
		}
	})
}
