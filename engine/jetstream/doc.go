// Package jetstream delivers an engine's chunks into NATS JetStream.
//
// A Publisher publishes chunks to JetStream asynchronously and releases
// each only when JetStream has stored every message made of it: Handle
// makes a chunk one message (it is an engine.Handler), Publish makes it
// the messages its caller cut from it, records or MQTT messages, each
// with its own subject, id and headers. While acknowledgements lag, chunks stay
// held, the source pool runs dry, and sources stop reading: JetStream's
// pace reaches the sources through the pool, and nothing is buffered
// twice.
//
// Every message carries a Nats-Msg-Id: Handle builds it from the
// publisher's prefix, the chunk's source id and its sequence number;
// Publish takes it from its caller, who derives it from what the source
// can replay, so that a record read again after a restart is sent under
// the id it had. A publish that failed or
// whose acknowledgement was lost (a reconnect, a server restart) is sent
// again with the same id, and JetStream's de-duplication window (the
// stream's Duplicates, two minutes by default) keeps it from being stored
// twice. Delivery is therefore exactly once within one Publisher's life
// and the window; a node that restarts and re-reads data (a tail resuming
// from its checkpoint) publishes it under new ids, at least once.
//
// Each source's messages are stored in their order, across failures
// too: a source's message is pipelined only behind its previous one with
// Nats-Expected-Last-Msg-Id, and a failed one goes again before anything
// later of its source (publisher.go says why).
package jetstream
