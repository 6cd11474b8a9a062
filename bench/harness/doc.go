// Package harness is what the benchmarks run on: the processes and the
// machine. It pins processes to CPUs, starts children on given CPUs,
// reads what the kernel says about a process and its cores (/proc,
// getrusage, /proc/stat, /proc/net/snmp), samples a child's resource use
// over time, and builds the veth wire between two network namespaces that
// lets a benchmark measure like two hosts (see package bench's doc, "The
// wire"). EngineFlags are the settings of the engine under test that
// every command exposes, TLSFiles the throwaway CA and certificates of the
// TLS rows, and IO where a command's output and progress go.
//
// It holds no package-level mutable state. Samplers are owned by the
// goroutine that started them until Finish; a WireTopo is closed by
// whoever built it.
package harness
