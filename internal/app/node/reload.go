package node

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/sluice-io/sluice/srcs"
)

// Reload reads the node file again and applies what can change while the
// node runs: a source entry that is new is opened, one that is gone is
// stopped (a listener stops accepting, and its connections deliver what
// they read and end; a tail saves its checkpoint), and one that changed
// is both. The other sections (engine, output, metrics, log,
// drain_timeout) need a restart: Reload logs that they changed and keeps
// them as they were. A file with errors changes nothing. Run calls
// Reload on SIGHUP. The error is the file's, or the first source that
// could not open (the others are still applied).
func (n *Node) Reload() error {
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	cfg, err := Load(n.path)
	if err != nil {
		n.log.Error("reload: the node file has errors; nothing changed", "err", err)
		return err
	}
	var fixed []string
	for _, s := range []struct {
		name     string
		old, new any
	}{
		{"engine", n.cfg.Engine, cfg.Engine}, {"output", n.cfg.Output, cfg.Output},
		{"metrics", n.cfg.Metrics, cfg.Metrics}, {"log", n.cfg.Log, cfg.Log},
		{"drain_timeout", n.cfg.DrainTimeout, cfg.DrainTimeout},
	} {
		if !reflect.DeepEqual(s.old, s.new) {
			fixed = append(fixed, s.name)
		}
	}
	if len(fixed) > 0 {
		n.log.Warn("reload: these sections changed but need a restart; the running ones are kept",
			"sections", strings.Join(fixed, ", "))
	}
	n.mu.Lock()
	if n.draining {
		n.mu.Unlock()
		return nil
	}
	running := map[string][]*entry{}
	for _, en := range n.entries {
		running[en.key] = append(running[en.key], en)
	}
	n.mu.Unlock()
	var add []int
	for i, s := range cfg.Sources {
		k := entryKey(s)
		if ens := running[k]; len(ens) > 0 {
			running[k] = ens[1:]
			ens[0].index = i
			continue
		}
		add = append(add, i)
	}
	var stop []*entry
	for _, ens := range running {
		stop = append(stop, ens...)
	}
	for _, en := range stop {
		n.stopEntry(en)
	}
	var first error
	for _, i := range add {
		if err := n.add(i, cfg.Sources[i]); err != nil {
			n.log.Error("reload: source failed", "err", err)
			if first == nil {
				first = err
			}
		}
	}
	n.cfg.Sources = cfg.Sources
	n.log.Info("reloaded", "added", len(add), "stopped", len(stop), "sources", len(cfg.Sources))
	if first != nil {
		return fmt.Errorf("node: reload: %w", first)
	}
	return nil
}

// stopEntry stops a source the node file no longer lists and forgets it.
func (n *Node) stopEntry(en *entry) {
	n.mu.Lock()
	for i, e := range n.entries {
		if e == en {
			n.entries = append(n.entries[:i:i], n.entries[i+1:]...)
			break
		}
	}
	n.mu.Unlock()
	en.mu.Lock()
	en.stopped = true
	id, hasID, cancel := en.id, en.hasID, en.cancel
	en.mu.Unlock()
	var conns []srcs.ID
	if en.ln != nil {
		n.idMu.RLock()
		for c, owner := range n.byID {
			if owner == en {
				conns = append(conns, c)
			}
		}
		n.idMu.RUnlock()
	}
	n.log.Info("reload: stopping a source no longer in the node file", "source", en.name)
	if en.ln != nil {
		en.ln.Close()
	}
	if cancel != nil {
		cancel()
	}
	if hasID {
		n.e.StopSource(id)
	}
	for _, c := range conns {
		n.e.StopSource(c)
	}
}
