//go:build !invariants && !race

package pool

const invariants = false
