// Package soak is sluice's reliability test: every kind of source on one
// engine for a long time, then exact delivery and no leaks. It is not a
// benchmark; cmd/sluice-soak drives it, TestSoak runs it under the race
// detector, and docs/reliability.md says what it guarantees.
//
// sluice-soak (Run) runs one engine, in one process, under every
// kind of source at once for --duration (60s), and fails (exit status 1,
// MISMATCH and LEAK lines) when a stream was not delivered exactly or a
// resource did not come back after the load. Linux only.
//
//   - Stream connections, TCP and unix (--unix-share 0.25), in a wave
//     between --low-conns (a fifth of the peak) and --peak-conns (5,000)
//     concurrent connections, with period --cycle (20s): up over 35% of
//     it, held at the top until the peak is reached on both sides
//     (client connections established, live engine sources) and 15% more,
//     down over 35%, held at the bottom for 15%. On top, --churn (2,000)
//     connections a second are told to end and replaced. Each connection
//     binds an address of its own (127.x.y.z, or an abstract unix name),
//     which is the name of its engine source; writes up to --conn-bytes
//     (256KiB, log-uniform, a tenth nothing) of a seeded stream in random
//     write sizes; and ends by close, half-close (shutdown, then waits for
//     the engine to close), reset after the engine's kernel acknowledged
//     every byte (SIOCOUTQ 0, then SO_LINGER 0), or abort (SO_LINGER 0 right
//     after writing). The engine must deliver exactly what was written,
//     checked by bytes and CRC-32C, except that an abort may lose the
//     bytes its peer's kernel had not acknowledged: its delivery must be a
//     prefix, at least as long as what was acknowledged (soak_conns.go
//     says why). RLIMIT_NOFILE is raised, within the hard limit, to two
//     descriptors per connection and 512 more.
//   - UDP (--udp-rate 10,000 datagrams/s, 4 senders): every datagram
//     delivered must be whole (length and CRC-32C) and one that was sent,
//     and sent = received + dropped by the kernel (the socket's drop
//     count) + dropped as too large.
//   - A tailed file (--tail-rate 2,000 lines/s), rotated every --rotate
//     (5s), alternately by rename and by copytruncate, while it is
//     written: every line must arrive, whole, in order, once.
//   - MQTT (--mqtt, Debian's mosquitto): --mqtt-publishers (2) publish
//     --mqtt-rate (200) numbered messages a second at QoS 1 into a QoS 1
//     subscriber with a kept session; the broker is killed (SIGKILL) and
//     restarted every --mqtt-restart (20s). Every message must arrive at
//     least once, first arrivals in order per publisher, except those the
//     broker lost with a restart, which it had acknowledged but not yet
//     delivered or received before the subscriber subscribed again
//     (soak_mqtt.go); duplicates are counted.
//   - Trust (--trust-rate 40 hostile peers a second): a TLS listener
//     (client certificates verified when given) and a PROXY listener
//     (one trusted proxy address) take plaintext and garbage instead of a
//     ClientHello, silent handshakes (and every 10s a flood of 100, more
//     than the listener's 64 handshakes at once), handshakes a byte every
//     100ms, client certificates from another CA and PROXY headers from
//     an untrusted address, beside well-behaved TLS and proxied streams
//     at half that rate. Each listener must count every hostile peer by
//     its reason exactly as sent, and the well-behaved streams are checked
//     like the stream load's (soak_trust.go).
//
// Before the load, a warm-up opens connections up to the peak and ends
// them all. Every second a progress line on stderr gives the open
// descriptors, goroutines, OS threads, resident set (and the live Go heap
// and stacks), pool buffers in use, live sources and lanes, and the
// connections opened and closed. After the load stops and every stream
// has been checked (within --settle, 60s), descriptors, goroutines, pool
// buffers in use, sources and lanes must be back at their level before
// any load, OS threads within 32 of it (the runtime parks the threads it
// started for blocking system calls and never ends them), and the
// resident set within 10% of its level after the warm-up (which sized
// every table to the peak; the pool is mapped populated, so buffers first
// written under the load do not count). Under the race detector, whose shadow memory
// is never returned, the live Go heap and stacks stand in for the
// resident set, within 10% and 4 MiB. --seed (random by default, printed) makes every choice
// repeatable, timing aside. --json writes Report: the connections
// (opened, closed, ends, verified, rates, peaks), udp, tail, mqtt, the
// engine's totals, the levels at the start, after the warm-up, at their
// highest and at the end, the leaks, the mismatches, and every sample.
//
// TestSoak runs the soak in `go test` (and so under -race in `make
// test`): uring and epoll, 30s each, with fewer connections replaced per
// second under the race detector but the same 5,000 peak. SLUICE_SOAK=10m
// gives it ten minutes (SLUICE_SOAK_RUNNERS=all for every runner); `make
// soak` runs cmd/sluice-soak for ten minutes without the race detector.
package soak
