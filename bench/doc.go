// Package bench is the benchmark harness behind the sluice-bench CLI: load
// generators, measurement and reports. It holds no global state; the CLI in
// bench/cmd/sluice-bench is a thin driver.
package bench
