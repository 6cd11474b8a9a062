package jetstream_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(clusterNodeEnv) != "" {
		// A child of TestClusterLeaderKill: a cluster node, not tests.
		os.Exit(runClusterNode())
	}
	goleak.VerifyTestMain(m)
}
