// Package fallback holds the three runners besides io_uring's, for hosts
// or sources where io_uring is missing or not wanted:
//
//   - Epoll, edge-triggered epoll on a few OS-thread-locked workers
//     (Linux; elsewhere NewEpoll fails with errors.ErrUnsupported);
//   - Goroutine, a goroutine per source reading through Go's netpoller
//     (every platform, and every source without a kernel descriptor);
//   - Thread, an OS thread per source blocked in read(2), asked for only
//     explicitly, as the baseline the others are measured against.
//
// The engine chooses among them (engine.Config.Runner). Each drives its
// lanes through internal/runner/driver's Lane, which holds the rules of a lane
// (fill, commit, framing, flush, emit, finish); the runners here only
// decide when to read and how to wait.
package fallback
