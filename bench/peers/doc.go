// Package peers runs the bench's reference sinks: the gnet sink (a module
// of its own in bench/gnetsink, so that gnet stays out of sluice's module
// graph), the same program on Go's net package alone, and the same
// program as a bare edge-triggered epoll loop (Linux), each as a child
// process pinned like the engine, driven over a line protocol on its
// stdin and stdout. BuildGnet builds the sink on first use; StartGnet
// starts one and GnetProc talks to it. The rows they measure are named by
// Gnet, Go, GoTLS and EpollRow. It holds no package-level mutable state.
package peers
