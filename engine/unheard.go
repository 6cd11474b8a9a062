package engine

import (
	"errors"
	"fmt"
	"sync"
)

// Errors that reach no error handler. Without WithErrorHandler, a source's
// errors are logged, and the default logger discards: an engine whose
// sources failed would then say nothing. So the engine keeps them, and
// Shutdown returns them: the first few whole, and how many there were.

// unheardKept is how many unheard errors Shutdown's result quotes.
const unheardKept = 3

// unheard collects the errors that reached no error handler. Safe for
// concurrent use.
type unheard struct {
	mu    sync.Mutex
	first []error
	n     int
}

func (u *unheard) add(err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.n++
	if len(u.first) < unheardKept {
		u.first = append(u.first, err)
	}
}

// err returns what Shutdown reports of them, or nil.
func (u *unheard) err() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n == 0 {
		return nil
	}
	what := fmt.Sprintf("%d source errors", u.n)
	if u.n == 1 {
		what = "a source error"
	}
	if u.n > len(u.first) {
		what += fmt.Sprintf(" (the first %d below)", len(u.first))
	}
	return fmt.Errorf("engine: %s reached no error handler (WithErrorHandler hears them as they happen):\n%w",
		what, errors.Join(u.first...))
}
