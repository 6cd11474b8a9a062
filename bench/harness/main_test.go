package harness

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	if done := os.Getenv(envSpin); done != "" {
		spin(done) // the test binary as a process that burns CPU (others_linux_test.go)
		return
	}
	goleak.VerifyTestMain(m)
}

// envSpin makes the test binary burn spinCPU of CPU time, then create the
// file the variable names, and exit.
const envSpin = "SLUICE_HARNESS_SPIN"

const spinCPU = 400 * time.Millisecond

func spin(done string) {
	for {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
			os.Exit(2)
		}
		if time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) >= spinCPU {
			break
		}
		for range 1 << 20 {
		}
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		os.Exit(2)
	}
}
