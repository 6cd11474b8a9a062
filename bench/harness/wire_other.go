//go:build !linux

package harness

import (
	"context"
	"fmt"
)

// BuildWire cannot build a veth wire here: network namespaces are Linux's.
func BuildWire(context.Context, WireSpec) (*WireTopo, error) {
	return nil, fmt.Errorf("%w: network namespaces need Linux", ErrWireUnavailable)
}

// Close has nothing to remove here.
func (t *WireTopo) Close() error { return nil }
