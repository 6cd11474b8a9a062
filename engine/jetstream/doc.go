// Package jetstream delivers an engine's chunks into NATS JetStream.
//
// A Publisher is an engine.Handler: it publishes each chunk's bytes to a
// JetStream subject asynchronously and releases the chunk only when
// JetStream has acknowledged it. While acknowledgements lag, chunks stay
// held, the source pool runs dry, and sources stop reading: JetStream's
// pace reaches the sources through the pool, and nothing is buffered
// twice.
//
// Every message carries a Nats-Msg-Id built from the publisher's prefix,
// the chunk's source id and its sequence number. A publish that failed or
// whose acknowledgement was lost (a reconnect, a server restart) is sent
// again with the same id, and JetStream's de-duplication window (the
// stream's Duplicates, two minutes by default) keeps it from being stored
// twice. Delivery is therefore exactly once within one Publisher's life
// and the window; a node that restarts and re-reads data (a tail resuming
// from its checkpoint) publishes it under new ids, at least once.
//
// Each source's chunks are stored in their order, across failures too: a
// source has at most one publish awaiting its acknowledgement, and a
// failed one goes again before anything later of its source (publisher.go
// says why pipelining a source's chunks could not promise that).
package jetstream
