// Package jetstream is the jetstream command of sluice-bench
// (JetStream): TCP sources into NATS JetStream through the node's
// JetStream output, reporting throughput and the CPU per GiB of sluice
// and of the server, each in a process of its own (RunNatsd, RunJSGen
// behind the hidden natsd and jsgen subcommands). CheckStream reads a
// stream back and checks it against what senders sent (jetstream
// --check). It holds no package-level state.
package jetstream
