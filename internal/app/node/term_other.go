//go:build !linux

package node

// stdinIsTerminal reports false off Linux: a second SIGINT forces exit
// there only after ForceAfter, or after a SIGTERM.
func stdinIsTerminal() bool { return false }
