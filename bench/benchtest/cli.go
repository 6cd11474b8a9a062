// Package benchtest helps the bench's tests: it builds the sluice-bench
// command for a test and runs it as a user would. Only tests import it.
package benchtest

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// BuildCLI builds sluice-bench into the test's temporary directory.
func BuildCLI(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "sluice-bench")
	out, err := exec.Command(goBin, "build", "-o", bin, "github.com/sluice-io/sluice/cmd/sluice-bench").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// RunCLI runs the binary and returns stdout, stderr and the exit status.
func RunCLI(t *testing.T, bin string, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var o, e bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		status = ee.ExitCode()
	default:
		t.Fatalf("%v: %v", args, err)
	}
	return o.String(), e.String(), status
}
