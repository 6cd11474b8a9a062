// Package engine ties sluice together: configuration, runner selection at
// start-up, source lifecycle, delivery of chunks to processing, backpressure,
// errors and statistics. It is the only package that knows several runners
// exist.
package engine
