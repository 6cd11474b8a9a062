package mqtt

import (
	"syscall"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/internal/wire/tlsread"
	"github.com/sluice-io/sluice/srcs"
)

// What the MQTT source shares with package srcs, by the names it had
// there.

// tlsReader reads a TLS session's plaintext; tlsWait waits for it.
type (
	tlsReader = tlsread.Reader
	tlsWait   = tlsread.Wait
)

// classify types err as the runners do (contract.Classify): resets match
// srcs.ErrReset, deadlines and timeouts srcs.ErrTimeout.
func classify(err error) error { return contract.Classify(err, srcs.ErrReset, srcs.ErrTimeout) }

// The source's runner may wait for readability before taking a buffer.
var _ syscall.Conn = (*MQTT)(nil)
