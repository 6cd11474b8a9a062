package node

import (
	"os"

	"golang.org/x/sys/unix"
)

// stdinIsTerminal says whether standard input is a terminal, where a
// person can press Ctrl-C twice on purpose.
func stdinIsTerminal() bool {
	_, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), unix.TCGETS)
	return err == nil
}
