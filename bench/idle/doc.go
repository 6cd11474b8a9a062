// Package idle is the idle command of sluice-bench (Idle): many idle
// connections beside a few active ones, and per runner the memory,
// threads and accept time each idle connection costs. The sink and the
// idle clients run as children of the command (RunIdleChild, behind the
// hidden idle subcommands). Linux only; elsewhere Idle says so. Its
// package-level values are tables that are never written.
package idle
