// Package trust gives the listeners and clients of package srcs TLS and
// the PROXY protocol. A program that configures either
// (srcs.ListenerConfig's TLS or ProxyProtocol, a client's TLS) imports
// it, for its side effect if for nothing else:
//
//	import _ "github.com/sluice-io/sluice/srcs/trust"
//
// Without it, such a listener or client is refused where it is made,
// with an error that says to import it; a program that serves neither
// links neither crypto/tls nor a PROXY header parser.
//
// TLS is crypto/tls's, with the certificates and client CAs of a
// srcs.TLSConfig read from files and read again when they change on disk;
// PROXY headers are parsed by github.com/pires/go-proxyproto, after the
// listener has read exactly their bytes. ClientConfig turns a
// srcs.TLSConfig into a crypto/tls configuration for other clients (a
// NATS connection). See docs/trust.md.
package trust
