package node

import (
	"os"
	"syscall"
	"time"
)

// ForceAfter is how long after the first stop signal a second one must
// come to force the node out of its drain. `timeout`, a process manager
// that signals the whole process group, or a shell passing one signal on
// to its children can deliver the same signal twice within milliseconds;
// that is one request to stop, and forcing on it would skip the drain.
const ForceAfter = time.Second

// signalPolicy decides whether a signal during the drain forces exit. It
// is deterministic: time is passed in. Not safe for concurrent use.
type signalPolicy struct {
	first    os.Signal
	at       time.Time
	terminal bool // standard input is a terminal: a person pressed Ctrl-C
}

func newSignalPolicy(first os.Signal, at time.Time, terminal bool) *signalPolicy {
	return &signalPolicy{first: first, at: at, terminal: terminal}
}

// next says whether sig, arriving at now during the drain, forces exit,
// and why (or why not).
func (p *signalPolicy) next(sig os.Signal, now time.Time) (force bool, why string) {
	switch {
	case isHangup(sig):
		return false, "a reload is not possible during the drain"
	case now.Sub(p.at) >= ForceAfter:
		if p.first == nil {
			return true, "a stop signal during the drain"
		}
		return true, "a second stop signal, " + now.Sub(p.at).Round(time.Millisecond).String() + " after the first"
	case sig == os.Interrupt && p.first == syscall.SIGTERM:
		return true, "SIGINT after SIGTERM"
	case sig == os.Interrupt && p.first == os.Interrupt && p.terminal:
		return true, "SIGINT twice from a terminal"
	}
	if p.first == nil {
		// The drain began because the context ended, and a program that
		// ends that context on SIGINT or SIGTERM (signal.NotifyContext)
		// sees the same signal the node does: which of the two arrives
		// first is a race, and the signal is the request that ended it.
		return false, "a stop signal within " + ForceAfter.String() + " of the drain's start, which it may have begun (send it again later to force)"
	}
	return false, "the same request to stop again, within " + ForceAfter.String() + " of the first (send it again later, or SIGINT, to force)"
}

func isHangup(sig os.Signal) bool { return sig == syscall.SIGHUP }

// Signals lists the signals Run acts on, for signal.Notify.
func Signals() []os.Signal { return []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP} }

func sigName(sig os.Signal) string {
	switch sig {
	case nil:
		return "none"
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return sig.String()
}
