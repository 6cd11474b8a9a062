package ring

import (
	"reflect"
	"testing"

	"github.com/sluice-io/sluice/internal/runner/driver"
)

// TestLaneSize holds what a worker's lane state adds to the driver's lane
// (itself held to 64 bytes) to 64 bytes: a worker keeps one per connection
// it drives, most of them idle; what only some lanes use (a file's
// read-ahead, a grant notification, a datagram batch) lives elsewhere.
func TestLaneSize(t *testing.T) {
	if n := reflect.TypeFor[lane]().Size() - reflect.TypeFor[driver.Lane]().Size(); n > 64 {
		t.Errorf("a worker's lane adds %d bytes to the driver's, more than 64", n)
	}
}
