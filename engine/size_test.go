package engine

import (
	"reflect"
	"testing"
)

// TestSourceSize holds the engine's source record to its size class: a
// node keeps one per connection, most of them idle
// (docs/decisions/0013-accept-on-the-rings.md). What an idle source never touches lives in sourceCold.
func TestSourceSize(t *testing.T) {
	if n := reflect.TypeFor[source]().Size(); n > 160 {
		t.Errorf("the source record is %d bytes, more than 160", n)
	}
}
