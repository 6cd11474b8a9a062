// Package sluice is an io_uring-first ingestion engine: it moves raw bytes
// from thousands of concurrent sources (TCP, UDP, unix sockets, files, MQTT)
// into one fixed, shared buffer pool using a handful of OS threads, and
// pushes the filled buffers to processing.
//
// The root package holds no code; it carries the repository-wide lint rules
// (lint_test.go). The pieces live in sub-packages, and imports point one way:
//
//	pool/      the off-heap source buffer pool, its fairness policy and accounting
//	srcs/      the source vocabulary and the concrete sources
//	ring/      io_uring on golang.org/x/sys and the io_uring runner
//	fallback/  the epoll, goroutine and thread-per-source runners
//	engine/    configuration, runner selection, delivery, backpressure, errors, stats
//	internal/  what runners and the tests share but users do not see, and the soak
//	bench/     the benchmarks, in rooms: harness, load, peers, report, one per scenario
//	cmd/       the sluice, sluice-bench and sluice-soak commands
//
// Only ring/ and the slab allocator in pool/ may use unsafe or raw system
// calls, and only tests may import internal/testkit/srcstest.
package sluice
