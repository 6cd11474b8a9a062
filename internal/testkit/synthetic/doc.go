// Package synthetic is a seeded source for tests and benchmarks: a unix
// socket pair whose far end is fed deterministic pseudo-random bytes, so a
// reader can check what it received against Digest without keeping a copy.
// It behaves like a connection to every runner (a Descriptor, a Deadliner,
// and a syscall.Conn for waiting on readability), and imports only srcs.
//
// It is internal because nothing outside sluice's own tests and benchmarks
// needs it; the bench's load generators write real sockets instead.
package synthetic
