// Package fallback holds the runners used when io_uring is missing or not
// wanted: an edge-triggered epoll runner (Linux), a goroutine-per-source
// runner on the Go netpoller (portable), and a thread-per-source runner doing
// blocking reads (the NebulaStream baseline). Each drives its lanes through
// internal/driver's Lane, which holds the rules of a lane (fill, commit,
// framing, flush, emit, finish); the runners here only decide when to read
// and how to wait.
package fallback
