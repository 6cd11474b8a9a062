// Package fallback holds the runners used when io_uring is missing or not
// wanted: an edge-triggered epoll runner (Linux), a goroutine-per-source
// runner on the Go netpoller (portable), and a thread-per-source runner doing
// blocking reads (the NebulaStream baseline).
package fallback
