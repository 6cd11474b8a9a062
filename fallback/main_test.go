package fallback_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// runner must stop all of its goroutines in Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
