// Package srcs is the vocabulary shared by the engine and its runners: the
// small [Source] interface, the optional capabilities a source may offer
// (a kernel descriptor, framing), and the concrete sources.
package srcs
