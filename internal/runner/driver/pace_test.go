package driver

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/sluice-io/sluice/internal/contract"
)

// TestPace: a turn's budget is spent by what its reads may bring, and a
// yield falls due after TurnBytes read or YieldChunks emitted since the
// last one, whichever comes first.
func TestPace(t *testing.T) {
	type step struct {
		spend, read, emit int
		yield             bool // call Yield after the step
	}
	tests := []struct {
		name                string
		steps               []step
		spent, due, pending bool
	}{
		{name: "fresh turn", steps: nil},
		{name: "reads within the turn", steps: []step{{spend: 64 << 10, read: 64 << 10}}, pending: false},
		{name: "turn spent by estimates", steps: []step{{spend: TurnBytes / 2}, {spend: TurnBytes / 2}}, spent: true},
		{name: "turn one byte short", steps: []step{{spend: TurnBytes - 1}}},
		{name: "bytes read make a yield due", steps: []step{{read: TurnBytes/2 + 1}, {read: TurnBytes / 2}}, due: true},
		{name: "chunks make a yield due", steps: []step{{emit: YieldChunks - 1}, {emit: 1}}, due: true, pending: true},
		{name: "few chunks pending, none due", steps: []step{{emit: 3, read: 100}}, pending: true},
		{name: "a yield clears what was counted", steps: []step{{read: TurnBytes, emit: YieldChunks, yield: true}}},
		{name: "counting resumes after a yield", steps: []step{{emit: YieldChunks, yield: true}, {emit: 1}}, pending: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPace(contract.RunnerConfig{Inline: true})
			p.Turn()
			for _, s := range tt.steps {
				p.Spend(s.spend)
				p.Read(s.read)
				p.Emitted(s.emit)
				if s.yield {
					p.Yield()
				}
			}
			if got := p.Spent(); got != tt.spent {
				t.Errorf("Spent = %v, want %v", got, tt.spent)
			}
			if got := p.YieldDue(); got != tt.due {
				t.Errorf("YieldDue = %v, want %v", got, tt.due)
			}
			if got := p.Pending(); got != tt.pending {
				t.Errorf("Pending = %v, want %v", got, tt.pending)
			}
		})
	}
}

// TestPaceTurnRestarts: Turn gives a spent budget back whole.
func TestPaceTurnRestarts(t *testing.T) {
	p := NewPace(contract.RunnerConfig{})
	p.Turn()
	p.Spend(TurnBytes)
	if !p.Spent() {
		t.Fatal("a turn that spent TurnBytes is not spent")
	}
	p.Turn()
	if p.Spent() {
		t.Fatal("a new turn starts spent")
	}
}

// TestPaceYieldRunsProcessing: with one P, a Yield lets a goroutine that
// waits for it run (processing, which the worker's locked thread would
// otherwise keep from its P).
func TestPaceYieldRunsProcessing(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var ran atomic.Bool
	done := make(chan struct{})
	go func() {
		ran.Store(true)
		close(done)
	}()
	p := NewPace(contract.RunnerConfig{})
	p.Yield()
	if !ran.Load() {
		t.Fatal("Yield did not let a runnable goroutine run")
	}
	<-done
}

type recordHolder struct{ holds, releases int }

func (r *recordHolder) HoldWakeups()    { r.holds++ }
func (r *recordHolder) ReleaseWakeups() { r.releases++ }

// TestPaceHoldsWakeups: Hold and Release reach the runner's WakeupHolder,
// and do nothing without one.
func TestPaceHoldsWakeups(t *testing.T) {
	h := &recordHolder{}
	p := NewPace(contract.RunnerConfig{Wakeups: h})
	p.Hold()
	p.Release()
	p.Hold()
	p.Release()
	if h.holds != 2 || h.releases != 2 {
		t.Fatalf("holds %d releases %d, want 2 and 2", h.holds, h.releases)
	}
	var none Pace
	none.Hold()
	none.Release()
}
