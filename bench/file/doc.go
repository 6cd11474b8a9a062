// Package file is the file command of sluice-bench: it ingests files
// through each runner (File) and compares them with a plain read loop and
// with fio reading the same files. It holds no package-level state.
package file
