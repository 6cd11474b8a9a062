// Package node is sluice's ingest node: a long-running process configured
// by a YAML file (Config) that ingests from the sources the file lists,
// hands every chunk to one output (NATS JetStream, stdout, a file, or
// none), serves Prometheus metrics and a health check, logs through slog,
// and drains on SIGINT or SIGTERM. The `sluice` command (cmd/sluice) is a
// thin driver over it; `sluice-bench sink --config` starts the same node.
//
// Load reads a node file and checks it without opening anything; its
// errors are *ConfigError values that name the file, the line and the key
// in the file's own terms. New opens what the file names and fails if a
// source cannot open (a tail may wait for its file instead: wait_for_file);
// Run serves until its context ends or a signal arrives, then drains.
//
// The keys of a node file are listed, generated from this package's types
// and the engine's and sources' configurations, in
// examples/node-reference.md (TestReference keeps it in step).
package node
