//go:build !linux

package main

import (
	"errors"
	"runtime"
)

// epollServer is Linux's alone: epoll is a Linux interface.
type epollServer struct{}

func serveEpoll(*sink, string) (*epollServer, error) {
	return nil, errors.New("-net epoll: epoll is Linux only (this is " + runtime.GOOS + "); use -net gnet or -net std")
}

func (*epollServer) addr() string         { return "" }
func (*epollServer) String() string       { return "" }
func (*epollServer) stop() error          { return nil }
func (*epollServer) runErr() <-chan error { return nil }
