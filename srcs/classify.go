package srcs

import "github.com/sluice-io/sluice/internal/contract"

// classify types err as the runners do (contract.Classify): resets match
// ErrReset, deadlines and timeouts ErrTimeout.
func classify(err error) error { return contract.Classify(err, ErrReset, ErrTimeout) }
