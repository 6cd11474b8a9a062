// Package arrivals is the arrivals command of sluice-bench
// (ArrivalsStudy): how a paced load's messages reach a sink, from the
// built-in generator and from fio, compared with a Poisson reference
// (gaps, back-to-back arrivals and dispersion per connection and merged),
// with plots. Its package-level values are tables that are never written.
package arrivals
