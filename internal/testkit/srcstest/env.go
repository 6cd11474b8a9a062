package srcstest

import (
	"os"
	"os/exec"
	"testing"

	"github.com/sluice-io/sluice/internal/testkit/mosquitto"
)

// The switches that turn a skip into a failure. The Makefile sets both
// when CI=true: the CI machines have io_uring and mosquitto, so a skip
// there would hide a regression.
const (
	EnvRequireURing     = "SLUICE_REQUIRE_URING"
	EnvRequireMosquitto = "SLUICE_REQUIRE_MOSQUITTO"
	EnvRequireHAProxy   = "SLUICE_REQUIRE_HAPROXY"
)

// Required reports whether the switch env is set to "1".
func Required(env string) bool { return os.Getenv(env) == "1" }

// RequireURing skips tb when the io_uring probe found io_uring unusable
// (supported is false, and why is the probe's reason), or fails it instead
// under SLUICE_REQUIRE_URING=1. It takes the probe's answer rather than
// calling ring.Probe itself, so that ring's own tests can use it.
func RequireURing(tb testing.TB, supported bool, why string) {
	tb.Helper()
	if supported {
		return
	}
	if Required(EnvRequireURing) {
		tb.Fatalf("io_uring required (%s=1) but unsupported: %s", EnvRequireURing, why)
	}
	tb.Skipf("io_uring unsupported: %s; %s=1 fails instead", why, EnvRequireURing)
}

// RequireMosquitto returns the path of the mosquitto broker, or skips tb
// when it is not installed, failing it instead under
// SLUICE_REQUIRE_MOSQUITTO=1.
func RequireMosquitto(tb testing.TB) string {
	tb.Helper()
	bin, err := mosquitto.Bin()
	if err != nil {
		if Required(EnvRequireMosquitto) {
			tb.Fatalf("%v, and %s=1", err, EnvRequireMosquitto)
		}
		tb.Skipf("%v; set %s=1 to fail instead", err, EnvRequireMosquitto)
	}
	return bin
}

// RequireHAProxy returns the path of Debian's haproxy, or skips tb when it
// is not installed, failing it instead under SLUICE_REQUIRE_HAPROXY=1 or
// CI=true.
func RequireHAProxy(tb testing.TB) string {
	tb.Helper()
	for _, p := range []string{"/usr/sbin/haproxy"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p
	}
	const msg = "haproxy is not installed (/usr/sbin/haproxy or on PATH); apt-get install haproxy, or `make deps`"
	if Required(EnvRequireHAProxy) || os.Getenv("CI") == "true" {
		tb.Fatalf("%s, and %s=1 or CI=true", msg, EnvRequireHAProxy)
	}
	tb.Skipf("%s; set %s=1 to fail instead", msg, EnvRequireHAProxy)
	return ""
}
