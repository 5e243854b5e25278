// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"errors"

	"github.com/caddyserver/caddy/v2"
	"github.com/php-worker/php_worker/go-module/internal/core"
	"github.com/php-worker/php_worker/go-module/internal/phpruntime"
	"github.com/php-worker/php_worker/go-module/internal/request"
	"github.com/prometheus/client_golang/prometheus"
)

// collector exposes php_worker's metrics. It reads one snapshot of the engine per
// scrape (one call into the core), so serving requests costs nothing extra.
type collector struct {
	phpInfo                                                       *prometheus.Desc
	threads, busy, idle, maxThreads, queueDepth, queueWait        *prometheus.Desc
	classicRequests, classicDuration                              *prometheus.Desc
	workerThreads, workerReady, workerBusy, workerQueue           *prometheus.Desc
	workerRequests, workerDuration, workerCrashes, workerRestarts *prometheus.Desc
	responseBuffered, responseSpillFiles, responseSpills          *prometheus.Desc
	requestBuffered, requestSpillFiles, requestSpills             *prometheus.Desc
	opcacheRestarts, opcachePending, opcacheHoldsTimedOut         *prometheus.Desc
	opcacheMemory, opcacheHits, opcacheMisses, opcacheScripts     *prometheus.Desc
	stuckThreads, expiredRequests                                 *prometheus.Desc
	scheduleRuns, scheduleSeconds                                 *prometheus.Desc
	processes, processCrashes                                     *prometheus.Desc
	requestsWithdrawn                                             *prometheus.Desc

	rt *phpruntime.Runtime // whose engine each scrape reads
}

func newCollector(rt *phpruntime.Runtime) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("php_worker_"+name, help, labels, nil)
	}
	return &collector{
		rt:                 rt,
		threads:            d("threads", "PHP threads running, workers included."),
		busy:               d("busy_threads", "PHP threads running a request."),
		idle:               d("idle_threads", "PHP threads waiting for a request."),
		maxThreads:         d("max_threads", "The autoscaling limit on PHP threads (0: autoscaling off)."),
		queueDepth:         d("queue_depth", "Requests waiting for a PHP thread, in all pools."),
		queueWait:          d("queue_wait_seconds", "Time requests waited for a PHP thread, in all pools."),
		classicRequests:    d("classic_requests_total", "Requests served by classic (non-worker) threads."),
		classicDuration:    d("classic_request_duration_seconds", "Time classic threads took per request."),
		workerThreads:      d("worker_threads", "Threads of the worker.", "worker"),
		workerReady:        d("worker_ready_threads", "Threads whose current worker script is booted.", "worker"),
		workerBusy:         d("worker_busy_threads", "Threads of the worker running a request.", "worker"),
		workerQueue:        d("worker_queue_depth", "Requests waiting for a thread of the worker.", "worker"),
		workerRequests:     d("worker_requests_total", "Requests served by the worker.", "worker"),
		workerDuration:     d("worker_request_duration_seconds", "Time the worker took per request.", "worker"),
		workerCrashes:      d("worker_crashes_total", "Worker scripts that ended on an error or failed to boot.", "worker"),
		workerRestarts:     d("worker_restarts_total", "Worker scripts restarted on purpose (max_requests, max_memory, reloads, the admin API, file changes).", "worker"),
		responseBuffered:   d("response_buffered_bytes", "Response bytes in memory waiting for clients slower than PHP."),
		responseSpillFiles: d("response_spill_files", "Responses whose rest waits in a temporary file now."),
		responseSpills:     d("response_spills_total", "Responses that went past the memory bounds into a temporary file."),
		requestBuffered:    d("request_buffered_bytes", "Memory holding request bodies read before PHP runs (whole 64KiB chunks)."),
		requestSpillFiles:  d("request_spill_files", "Request bodies whose rest waits in a temporary file now."),
		requestSpills:      d("request_spills_total", "Request bodies that went past the memory bounds into a temporary file."),
		opcacheRestarts:    d("opcache_restarts_total", "OPcache restarts, by reason: opcache_reset, out_of_memory, key_table_full.", "reason"),
		opcachePending:     d("opcache_restart_pending", "1 while an OPcache restart waits for PHP threads to finish their requests."),
		opcacheMemory:      d("opcache_memory_bytes", "OPcache's shared memory, by state: used, free, wasted (sampled once a second).", "state"),
		opcacheHits:        d("opcache_hits_total", "Scripts OPcache served from its cache (since its last restart)."),
		opcacheMisses:      d("opcache_misses_total", "Scripts OPcache had to compile (since its last restart)."),
		opcacheScripts:     d("opcache_cached_scripts", "Scripts in OPcache's cache."),
		phpInfo: d("php_info", "The linked PHP (1): its version, the newest release of its branch Debian listed when the binary was built, "+
			"whether that is this one (unknown: not checked), the branch's last day of security support and whether that has passed.",
			"version", "newest_listed", "current", "eol", "supported"),
		stuckThreads: d("stuck_threads",
			"PHP threads whose request ran past its time limit plus timeout_grace and that are still blocked in a call."),
		expiredRequests: d("expired_requests_total",
			"Requests answered 504 (or cut off) because they ran past their time limit plus timeout_grace."),
		scheduleRuns: d("schedule_runs_total",
			"Runs of scheduled jobs, by result: ok (exit status 0), failed, skipped (the previous run had not ended), or elsewhere (another instance took the time's lease).",
			"job", "result"),
		scheduleSeconds: d("schedule_run_seconds", "Time the runs of a scheduled job took.", "job"),
		processes: d("processes",
			"PHP's child processes (the processes option above 1), by state: running, or restarting (died; its replacement is due).",
			"state"),
		processCrashes: d("process_crashes_total",
			"PHP child processes that died unasked (a fatal signal, a kill from outside, an exit); each was replaced."),
		requestsWithdrawn: d("requests_withdrawn_total",
			"Requests taken off a queue before any script ran for them, by reason: client_gone (the client closed the connection while the request waited for a PHP thread), max_wait_time.",
			"reason"),
		opcacheHoldsTimedOut: d("opcache_holds_timed_out_total",
			"Times requests stopped waiting for an OPcache restart because a PHP thread stayed in a request; they ran uncached until it restarted."),
	}
}

// Describe sends every metric's description.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.phpInfo, c.threads, c.busy, c.idle, c.maxThreads, c.queueDepth, c.queueWait,
		c.classicRequests, c.classicDuration, c.workerThreads, c.workerReady, c.workerBusy, c.workerQueue,
		c.workerRequests, c.workerDuration, c.workerCrashes, c.workerRestarts,
		c.responseBuffered, c.responseSpillFiles, c.responseSpills, c.requestBuffered, c.requestSpillFiles, c.requestSpills,
		c.opcacheRestarts, c.opcachePending, c.opcacheHoldsTimedOut, c.stuckThreads, c.expiredRequests,
		c.opcacheMemory, c.opcacheHits, c.opcacheMisses, c.opcacheScripts,
		c.scheduleRuns, c.scheduleSeconds, c.processes, c.processCrashes, c.requestsWithdrawn} {
		ch <- d
	}
}

// Collect reads one snapshot and sends the metrics. Without a running engine it sends
// only the gauges, at zero.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.phpInfo, prometheus.GaugeValue, 1, phpInfoLabels(currentPHP())...)
	s, err := c.rt.Stats()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.threads, err)
		return
	}
	if s == nil {
		s = &core.Stats{}
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	hist := func(d *prometheus.Desc, h core.Histogram, labels ...string) {
		buckets := make(map[float64]uint64, len(s.HistogramBounds))
		for i, bound := range s.HistogramBounds {
			if i < len(h.Buckets) {
				buckets[bound] = h.Buckets[i]
			}
		}
		ch <- prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets, labels...)
	}

	var busy, idle int
	for _, t := range s.Threads {
		switch t.State {
		case core.ThreadBusy:
			busy++
		case core.ThreadReady:
			idle++
		}
	}
	gauge(c.threads, float64(len(s.Threads)))
	gauge(c.busy, float64(busy))
	gauge(c.idle, float64(idle))
	gauge(c.maxThreads, float64(s.MaxThreads))
	gauge(c.responseBuffered, float64(request.ResponseBytesBuffered()))
	gauge(c.responseSpillFiles, float64(request.ResponseSpillFiles()))
	counter(c.responseSpills, request.ResponseSpills())
	gauge(c.requestBuffered, float64(request.BodyBytesBuffered()))
	gauge(c.requestSpillFiles, float64(request.BodySpillFiles()))
	counter(c.requestSpills, request.BodySpills())
	clientGone, maxWait := request.WithdrawnRequests()
	counter(c.requestsWithdrawn, clientGone, "client_gone")
	counter(c.requestsWithdrawn, maxWait, "max_wait_time")
	counter(c.opcacheRestarts, s.Opcache.RestartsReset, "opcache_reset")
	counter(c.opcacheRestarts, s.Opcache.RestartsOutOfMemory, "out_of_memory")
	counter(c.opcacheRestarts, s.Opcache.RestartsKeyTableFull, "key_table_full")
	pending := 0.0
	if s.Opcache.RestartPending {
		pending = 1
	}
	gauge(c.opcachePending, pending)
	counter(c.opcacheHoldsTimedOut, s.Opcache.HoldsTimedOut)
	if u := s.Opcache.Usage; u != nil {
		gauge(c.opcacheMemory, float64(u.MemoryUsed), "used")
		gauge(c.opcacheMemory, float64(u.MemoryFree), "free")
		gauge(c.opcacheMemory, float64(u.MemoryWasted), "wasted")
		counter(c.opcacheHits, u.Hits)
		counter(c.opcacheMisses, u.Misses)
		gauge(c.opcacheScripts, float64(u.CachedScripts))
	}
	if len(s.Processes) > 0 {
		states := map[string]int{"running": 0, "restarting": 0, "not_answering": 0}
		for _, p := range s.Processes {
			states[p.State]++
		}
		for state, n := range states {
			gauge(c.processes, float64(n), state)
		}
		if s.ProcessCrashes != nil {
			counter(c.processCrashes, *s.ProcessCrashes)
		}
	}
	gauge(c.stuckThreads, float64(s.StuckThreads))
	counter(c.expiredRequests, s.ExpiredRequests)
	jobStats.each(func(name string, j jobCount) {
		counter(c.scheduleRuns, j.ok, name, "ok")
		counter(c.scheduleRuns, j.failed, name, "failed")
		counter(c.scheduleRuns, j.skipped, name, "skipped")
		counter(c.scheduleRuns, j.elsewhere, name, "elsewhere")
		buckets := make(map[float64]uint64, len(jobBounds))
		for i, bound := range jobBounds {
			buckets[bound] = j.seconds.Buckets[i]
		}
		ch <- prometheus.MustNewConstHistogram(c.scheduleSeconds, j.seconds.Count, j.seconds.Sum, buckets, name)
	})

	// Pools of one worker (a removed one still draining beside its successor) are
	// summed: a label set appears once per scrape.
	workers := map[string]*core.PoolStats{}
	var order []string
	var classic core.PoolStats
	var queued int
	var wait core.Histogram
	for i := range s.Pools {
		p := &s.Pools[i]
		queued += p.Queued
		wait.Add(p.Wait)
		if p.ID == 0 {
			classic = *p
			continue
		}
		w := workers[string(p.Worker)]
		if w == nil {
			w = &core.PoolStats{Worker: p.Worker}
			workers[string(p.Worker)] = w
			order = append(order, string(p.Worker))
		}
		w.Threads += p.Threads
		w.Ready += p.Ready
		w.Busy += p.Busy
		w.Queued += p.Queued
		w.Crashes += p.Crashes
		w.Restarts += p.Restarts
		w.Duration.Add(p.Duration)
	}
	gauge(c.queueDepth, float64(queued))
	if s.HistogramBounds != nil {
		hist(c.queueWait, wait)
		counter(c.classicRequests, classic.Duration.Count)
		hist(c.classicDuration, classic.Duration)
	}
	for _, name := range order {
		w := workers[name]
		gauge(c.workerThreads, float64(w.Threads), name)
		gauge(c.workerReady, float64(w.Ready), name)
		gauge(c.workerBusy, float64(w.Busy), name)
		gauge(c.workerQueue, float64(w.Queued), name)
		counter(c.workerRequests, w.Duration.Count, name)
		hist(c.workerDuration, w.Duration, name)
		counter(c.workerCrashes, w.Crashes, name)
		counter(c.workerRestarts, w.Restarts, name)
	}
}

// registerMetrics adds php_worker's metrics of rt to the config's registry (each config
// has its own; the admin API's /metrics serves the running config's).
func registerMetrics(ctx caddy.Context, rt *phpruntime.Runtime) error {
	registry := ctx.GetMetricsRegistry()
	if registry == nil {
		return nil
	}
	if err := registry.Register(newCollector(rt)); err != nil {
		var already prometheus.AlreadyRegisteredError
		if !errors.As(err, &already) {
			return err
		}
	}
	return nil
}

// Interface guards
var _ prometheus.Collector = (*collector)(nil)
