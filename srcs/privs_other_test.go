//go:build !linux

package srcs_test

import (
	"errors"
	"os"
)

// asUnprivileged runs f; off Linux a root test cannot drop file access for
// one thread, so it reports that instead.
func asUnprivileged(f func() error) error {
	if os.Geteuid() == 0 {
		return errors.ErrUnsupported
	}
	return f()
}
