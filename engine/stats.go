package engine

import (
	"github.com/sluice-io/sluice/pool"
	"github.com/sluice-io/sluice/srcs"
)

// Stats is a snapshot of the engine.
type Stats struct {
	Runner  string
	Runners []RunnerStats
	Pool    pool.Stats
	// Queued is the number of chunks waiting for a consumer; Paused says
	// whether the watermarks have paused reading, and Pauses counts how
	// often they did.
	Queued  int64
	Paused  bool
	Pauses  uint64
	Sources []SourceStats
}

// Stats returns a snapshot of the engine, its runners, its pool and every
// live source. Its cost grows with the sources: a monitor that polls with
// many connections open uses Overview, CountSources and SourceStats.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	srcList := e.liveLocked()
	e.mu.Unlock()
	st := e.Overview()
	st.Sources = make([]SourceStats, 0, len(srcList))
	for _, s := range srcList {
		st.Sources = append(st.Sources, s.stats())
	}
	return st
}

// Overview returns Stats without Sources: the engine, its runners and its
// pool, at a cost that does not grow with the sources.
func (e *Engine) Overview() Stats {
	e.mu.Lock()
	side := e.side
	e.mu.Unlock()
	st := Stats{Runner: e.runner.Name(), Runners: []RunnerStats{RunnerStats(e.runner.Stats())}, Pool: e.pool.Stats()}
	if side != nil {
		st.Runners = append(st.Runners, RunnerStats(side.Stats()))
	}
	st.Queued, st.Paused, st.Pauses = e.flow.snapshot()
	return st
}

// SourceStats returns the figures of the live source with id, and false
// if no such source is live. Unlike Stats it costs the same with one
// source or a million, so it suits a health check that follows a few
// sources among many connections.
func (e *Engine) SourceStats(id srcs.ID) (SourceStats, bool) {
	e.mu.Lock()
	s := e.sources.get(id)
	e.mu.Unlock()
	if s == nil {
		return SourceStats{}, false
	}
	return s.stats(), true
}

// SourceCounts is how many live sources are in each state.
type SourceCounts [Failed + 1]int

// Live returns the number of live sources.
func (c SourceCounts) Live() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// CountSources counts the live sources by state. It allocates nothing:
// a monitor that polls it (a status line, a scrape, a health probe) makes
// no garbage per connection, where Stats copies every source's figures.
func (e *Engine) CountSources() SourceCounts {
	var c SourceCounts
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sources.each(func(s *source) {
		if st := State(s.state.Load()); int(st) < len(c) {
			c[st]++
		}
	})
	return c
}
