// Package certs serves the TLS material of sluice's sources from files
// and reads them again when they change on disk: a listener's or a
// client's certificate and key (KeyPair) and a listener's client CAs
// (ClientCAs), each looked at most once per CheckEvery, from whichever
// handshake comes first, so a renewed certificate or CA bundle is in use
// from the next handshake on without a restart or a stat per handshake.
// srcs.TLSConfig is the configuration users write; this package is what
// it builds on.
package certs
