//go:build !linux

package idle

import (
	"context"
	"errors"
)

var errIdleLinux = errors.New("bench: idle: needs Linux (all of 127.0.0.0/8 on loopback, IP_BIND_ADDRESS_NO_PORT, /proc)")

// idleSupported says whether `idle` can run here: not outside Linux.
func idleSupported() error { return errIdleLinux }

func raiseNoFile(need uint64) (NoFileLimit, error) { return NoFileLimit{Need: need}, errIdleLinux }

func noFileHard() (uint64, error) { return 0, errIdleLinux }

func countFDs() int { return -1 }

func rssAnon() int64 { return 0 }

func readKernelMem() (KernelMem, error) { return KernelMem{}, errIdleLinux }

// idleConns is the idle client, which needs Linux.
type idleConns struct{}

func newIdleConns(idleClientSpec) (*idleConns, idleReady, error) {
	return nil, idleReady{}, errIdleLinux
}

func (*idleConns) handle(context.Context, idleReq) (*idleResp, error) { return nil, errIdleLinux }

func (*idleConns) close() {}
