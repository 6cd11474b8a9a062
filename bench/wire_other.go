//go:build !linux

package bench

import (
	"context"
	"fmt"
)

// buildWire cannot build a veth wire here: network namespaces are Linux's.
func buildWire(context.Context, wireSpec) (*wireTopo, error) {
	return nil, fmt.Errorf("%w: network namespaces need Linux", ErrWireUnavailable)
}

// Close has nothing to remove here.
func (t *wireTopo) Close() error { return nil }
