package engine_test

// The tests of listeners and clients with TLS or the PROXY protocol run
// with both linked, as a program that uses them links them.
import _ "github.com/sluice-io/sluice/srcs/trust"
