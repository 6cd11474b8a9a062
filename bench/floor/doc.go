// Package floor is the floor command of sluice-bench: the engine's own
// cost per chunk (Floor), with in-memory sources and no kernel I/O, so
// that what the runners add can be told from what the engine costs. It
// holds no package-level state.
package floor
