package metrics

import (
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-io/sluice/engine"
)

// Options shape the collector.
type Options struct {
	// Namespace prefixes every metric name. Default "sluice".
	Namespace string
	// PerSource exports per-source series (bytes, chunks, errors, held
	// buffers, pool waits, rate-limit holds, kernel drops) labelled by
	// source id and name, for at most
	// this many live sources, those with the lowest ids. Zero, the
	// default, exports none. The gauge <ns>_sources_omitted says how many
	// were left out.
	PerSource int
	// ConstLabels are added to every series (for example a node name).
	ConstLabels prometheus.Labels
}

// Collector is a prometheus.Collector over one engine. It holds no state
// of its own: each Collect reads the engine, so it is safe for concurrent
// use and for concurrent scrapes.
type Collector struct {
	e    *engine.Engine
	opts Options

	bytes, chunks, partials, delivered, errs, skipped *prometheus.Desc
	latency                                           *prometheus.Desc
	queued, paused, pauses                            *prometheus.Desc
	poolBuffers, poolInUse, poolWaiters, poolWaits    *prometheus.Desc
	poolAcquired, poolWaitSeconds, sources            *prometheus.Desc
	poolResident                                      *prometheus.Desc
	runWorkers, runThreads, runLanes, runReads        *prometheus.Desc
	runWaits, runWakeups, runEnters, runCompl, runSys *prometheus.Desc
	runDirect, runAccepted                            *prometheus.Desc
	srcBytes, srcChunks, srcErrs, srcHeld, srcWaits   *prometheus.Desc
	srcOmitted, srcRateHeld, srcRateHolds             *prometheus.Desc
	srcKernelDrops                                    *prometheus.Desc
	rateHeld, rateHolds, rateHeldSeconds, idleTimeout *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector over e. It registers nothing; pass it
// to a registry's Register.
func NewCollector(e *engine.Engine, opts Options) *Collector {
	if opts.Namespace == "" {
		opts.Namespace = "sluice"
	}
	c := &Collector{e: e, opts: opts}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(opts.Namespace, "", name), help, labels, opts.ConstLabels)
	}
	c.bytes = d("bytes_received_total", "Bytes read from sources and emitted into delivery.")
	c.chunks = d("chunks_emitted_total", "Chunks the runners emitted into delivery.")
	c.partials = d("chunks_partial_total", "Chunks a flush timeout emitted before their buffer was full.")
	c.delivered = d("chunks_delivered_total", "Data chunks handed to a consumer (handler or Next).")
	c.errs = d("source_errors_total", "Source errors by kind.", "kind")
	c.skipped = d("records_skipped_total", "Records of framed sources skipped for being too long, every one.")
	c.latency = d("delivery_latency_seconds", "Time from a chunk's first byte to a consumer taking it: flush hold plus queueing.")
	c.queued = d("delivery_queued_chunks", "Chunks waiting for a consumer.")
	c.paused = d("delivery_paused", "1 while the delivery watermarks pause reading.")
	c.pauses = d("delivery_pauses_total", "Times the delivery watermarks paused reading.")
	c.poolBuffers = d("pool_buffers", "Buffers in the source pool.")
	c.poolInUse = d("pool_buffers_in_use", "Source pool buffers held by sources or unreleased chunks.")
	c.poolResident = d("pool_buffers_resident", "Source pool buffers whose pages may be resident: lent out since their pages last went back to the kernel (pool_return_after).")
	c.poolWaiters = d("pool_waiters", "Sources queued for a buffer now; those their rate limit holds are not (rate_limited_sources).")
	c.poolWaits = d("pool_waits_total", "Buffer acquires that had to queue for a buffer; a rate limit's holds are not (rate_limit_holds_total).")
	c.poolAcquired = d("pool_acquired_total", "Buffers acquired from the source pool.")
	c.poolWaitSeconds = d("pool_wait_seconds_total", "Total time granted acquires spent queued.")
	c.sources = d("sources", "Live sources by state.", "state")
	c.rateHeld = d("rate_limited_sources", "Sources their rate limit holds now (not read until they are back within it).")
	c.rateHolds = d("rate_limit_holds_total", "Times a rate limit held a source.")
	c.rateHeldSeconds = d("rate_limit_held_seconds_total", "Time sources spent held by their rate limit, in holds that ended.")
	c.idleTimeout = d("idle_timeouts_total", "Sources ended for delivering nothing for their idle timeout.")
	rl := []string{"runner"}
	c.runWorkers = d("runner_workers", "Event-loop workers of the runner.", rl...)
	c.runThreads = d("runner_threads", "OS threads the runner holds locked.", rl...)
	c.runLanes = d("runner_lanes", "Sources the runner drives now.", rl...)
	c.runReads = d("runner_reads_total", "Completed read operations (syscalls or io_uring CQEs).", rl...)
	c.runWaits = d("runner_waits_total", "Times a worker blocked in the kernel waiting for work.", rl...)
	c.runWakeups = d("runner_wakeups_total", "Cross-thread wake-ups of a worker.", rl...)
	c.runEnters = d("runner_io_uring_enter_total", "Kernel entries to submit or wait: io_uring_enter (uring), epoll_wait (epoll), poll (thread).", rl...)
	c.runCompl = d("runner_completions_total", "CQEs reaped or readiness events returned by those entries.", rl...)
	c.runSys = d("runner_syscalls_total", "System calls the runner made on its own behalf.", rl...)
	c.runDirect = d("runner_direct_files", "Connections held in the workers' registered file tables, outside the process's descriptors.", rl...)
	c.runAccepted = d("runner_accepted_total", "Connections the runner accepted on its own loops.", rl...)
	sl := []string{"source", "name"}
	c.srcBytes = d("source_bytes_received_total", "Bytes read by one source.", sl...)
	c.srcChunks = d("source_chunks_emitted_total", "Chunks emitted by one source.", sl...)
	c.srcErrs = d("source_source_errors_total", "Errors of one source.", sl...)
	c.srcHeld = d("source_buffers_held", "Pool buffers charged to one source.", sl...)
	c.srcWaits = d("source_pool_waits_total", "Times one source queued for a buffer.", sl...)
	c.srcOmitted = d("sources_omitted", "Live sources left out of the per-source series by the cap.")
	c.srcRateHeld = d("source_rate_limit_held_seconds_total", "Time one source spent held by its rate limit.", sl...)
	c.srcRateHolds = d("source_rate_limit_holds_total", "Times its rate limit held one source.", sl...)
	c.srcKernelDrops = d("source_kernel_drops_total", "Datagrams the kernel dropped for one source before it could be read.", sl...)
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.bytes, c.chunks, c.partials, c.delivered, c.errs, c.skipped, c.latency, c.queued, c.paused, c.pauses,
		c.poolBuffers, c.poolInUse, c.poolResident, c.poolWaiters, c.poolWaits, c.poolAcquired, c.poolWaitSeconds, c.sources,
		c.rateHeld, c.rateHolds, c.rateHeldSeconds, c.idleTimeout,
		c.runWorkers, c.runThreads, c.runLanes, c.runReads, c.runWaits, c.runWakeups, c.runEnters, c.runCompl, c.runSys, c.runDirect, c.runAccepted,
	} {
		ch <- d
	}
	if c.opts.PerSource > 0 {
		for _, d := range []*prometheus.Desc{c.srcBytes, c.srcChunks, c.srcErrs, c.srcHeld, c.srcWaits, c.srcOmitted, c.srcRateHeld, c.srcRateHolds, c.srcKernelDrops} {
			ch <- d
		}
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.e.Overview()
	tot := c.e.Totals()
	counter := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, lv...)
	}
	gauge := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	counter(c.bytes, float64(tot.Bytes))
	counter(c.chunks, float64(tot.Chunks))
	counter(c.partials, float64(tot.Partials))
	counter(c.delivered, float64(tot.Delivered))
	counter(c.skipped, float64(tot.RecordsSkipped))
	for k, n := range tot.Errors {
		counter(c.errs, float64(n), engine.ErrorKinds[k])
	}
	buckets := make(map[float64]uint64, len(engine.LatencyBounds))
	var cum uint64
	for i, b := range engine.LatencyBounds {
		cum += tot.Latency.Counts[i]
		buckets[b.Seconds()] = cum
	}
	ch <- prometheus.MustNewConstHistogram(c.latency, tot.Latency.Count, tot.Latency.Sum.Seconds(), buckets)

	gauge(c.queued, float64(st.Queued))
	gauge(c.paused, b2f(st.Paused))
	counter(c.pauses, float64(st.Pauses))

	p := st.Pool
	gauge(c.poolBuffers, float64(p.Buffers))
	gauge(c.poolInUse, float64(p.InUse))
	gauge(c.poolResident, float64(p.Resident))
	gauge(c.poolWaiters, float64(p.Waiters))
	counter(c.poolWaits, float64(p.Waits))
	counter(c.poolAcquired, float64(p.Acquired))
	counter(c.poolWaitSeconds, p.WaitTime.Seconds())
	gauge(c.rateHeld, float64(p.RateHeld))
	counter(c.rateHolds, float64(p.RateHolds))
	counter(c.rateHeldSeconds, p.RateHeldTime.Seconds())
	counter(c.idleTimeout, float64(tot.IdleTimeouts))

	for _, r := range st.Runners {
		counter(c.runReads, float64(r.Reads), r.Runner)
		gauge(c.runWorkers, float64(r.Workers), r.Runner)
		gauge(c.runThreads, float64(r.Threads), r.Runner)
		gauge(c.runLanes, float64(r.Lanes), r.Runner)
		counter(c.runWaits, float64(r.Waits), r.Runner)
		counter(c.runWakeups, float64(r.Wakeups), r.Runner)
		counter(c.runEnters, float64(r.Enters), r.Runner)
		counter(c.runCompl, float64(r.Completions), r.Runner)
		counter(c.runSys, float64(r.Syscalls), r.Runner)
		gauge(c.runDirect, float64(r.DirectFiles), r.Runner)
		counter(c.runAccepted, float64(r.Accepted), r.Runner)
	}

	for state, n := range c.e.CountSources() {
		if n > 0 {
			gauge(c.sources, float64(n), engine.State(state).String())
		}
	}

	if c.opts.PerSource <= 0 {
		return
	}
	ss := c.e.Stats().Sources
	sort.Slice(ss, func(i, j int) bool { return ss[i].ID < ss[j].ID })
	omitted := 0
	if len(ss) > c.opts.PerSource {
		omitted = len(ss) - c.opts.PerSource
		ss = ss[:c.opts.PerSource]
	}
	gauge(c.srcOmitted, float64(omitted))
	for _, s := range ss {
		id := strconv.FormatUint(uint64(s.ID), 10)
		counter(c.srcBytes, float64(s.Bytes), id, s.Name)
		counter(c.srcChunks, float64(s.Chunks), id, s.Name)
		counter(c.srcErrs, float64(s.Errors), id, s.Name)
		gauge(c.srcHeld, float64(s.Held), id, s.Name)
		counter(c.srcWaits, float64(s.PoolWaits), id, s.Name)
		counter(c.srcRateHeld, s.RateHeld.Seconds(), id, s.Name)
		counter(c.srcRateHolds, float64(s.RateHolds), id, s.Name)
		counter(c.srcKernelDrops, float64(s.KernelDrops), id, s.Name)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
