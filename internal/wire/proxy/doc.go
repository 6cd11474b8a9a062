// Package proxy reads the PROXY protocol (v1 and v2, haproxy.org's
// proxy-protocol.txt) for srcs's listeners: a header read exactly, not a
// byte past it, so that the rest of the stream stays on the socket for a
// runner; a connection's first bytes looked at without consuming them, to
// refuse a header from an untrusted peer; and the address lists that say
// which peers are trusted or allowed. Which peer is trusted, and what a
// listener does with the answer, is srcs's; what a header says (its
// parsing, by go-proxyproto) is srcs/trust's, so that a program without
// the PROXY protocol links no parser.
package proxy
