// Package contract is what the engine, the runners and the sources agree
// on below the API a user sees: the Runner interface the engine drives,
// the Lane a runner drives and the Emitter it hands chunks to, a runner's configuration and counters, the accept
// protocol between a listener and the event-loop runners, and the
// optional capabilities only runners call (a kernel descriptor, datagram
// receives, whole-record framing).
//
// Its interfaces are structural: srcs.Source and srcs.Framer have the
// method sets of Source and Framer here, so a user's source or framer is
// one without naming this package, and the concrete sources in srcs
// offer the capabilities declared here as exported methods.
//
// contract imports only pool, so that srcs, the driver, the runners and
// the engine can all build on it.
package contract
