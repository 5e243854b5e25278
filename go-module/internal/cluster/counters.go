// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

// The cluster's counters never go back. Prometheus reads a counter that drops as a
// reset and counts its whole value again, so a child that dies, is rolled, or misses one
// snapshot must not take its counts out of the sum. Each child keeps what it counted as
// of its last snapshot (the highest value seen of each counter: concurrent snapshots may
// come back out of order); the cluster's snapshot sums those of every child, the ones
// that did not answer included, plus what the dead ones had counted (retired).

// counts is what one child counted, or the sum of several.
type counts struct {
	expired float64
	opcache map[string]float64 // restarts_*, holds_timed_out, and usage's hits and misses
	pools   map[float64]*poolCounts
}

// poolCounts is a pool's counters and histograms.
type poolCounts struct {
	crashes, restarts float64
	duration, wait    histogramCounts
}

type histogramCounts struct {
	buckets     []float64
	count, sum  float64
	initialized bool
}

// opcacheCounterKeys are the counters of a snapshot's opcache object.
var opcacheCounterKeys = []string{"restarts_out_of_memory", "restarts_key_table_full", "restarts_opcache_reset",
	"holds_timed_out"}

// opcacheUsageCounterKeys are the counters of its usage object.
var opcacheUsageCounterKeys = []string{"hits", "misses"}

// countsOf reads the counters of one child's snapshot.
func countsOf(s map[string]any) *counts {
	c := &counts{expired: num(s["expired_requests"]), opcache: map[string]float64{}, pools: map[float64]*poolCounts{}}
	if o, ok := s["opcache"].(map[string]any); ok {
		for _, k := range opcacheCounterKeys {
			c.opcache[k] = num(o[k])
		}
		if u, ok := o["usage"].(map[string]any); ok {
			for _, k := range opcacheUsageCounterKeys {
				c.opcache[k] = num(u[k])
			}
		}
	}
	pools, _ := s["pools"].([]any)
	for _, x := range pools {
		pm, ok := x.(map[string]any)
		if !ok {
			continue
		}
		c.pools[num(pm["id"])] = &poolCounts{crashes: num(pm["crashes"]), restarts: num(pm["restarts"]),
			duration: histogramOf(pm["duration"]), wait: histogramOf(pm["wait"])}
	}
	return c
}

func histogramOf(v any) histogramCounts {
	m, ok := v.(map[string]any)
	if !ok {
		return histogramCounts{}
	}
	h := histogramCounts{count: num(m["count"]), sum: num(m["sum"]), initialized: true}
	bs, _ := m["buckets"].([]any)
	for _, b := range bs {
		h.buckets = append(h.buckets, num(b))
	}
	return h
}

// combine folds o into c: each counter becomes f of the two (max to keep a child's
// highest, sum to add children up).
func (c *counts) combine(o *counts, f func(a, b float64) float64) {
	if o == nil {
		return
	}
	c.expired = f(c.expired, o.expired)
	for k, v := range o.opcache {
		c.opcache[k] = f(c.opcache[k], v)
	}
	for id, op := range o.pools {
		cp := c.pools[id]
		if cp == nil {
			cp = &poolCounts{}
			c.pools[id] = cp
		}
		cp.crashes, cp.restarts = f(cp.crashes, op.crashes), f(cp.restarts, op.restarts)
		cp.duration.combine(op.duration, f)
		cp.wait.combine(op.wait, f)
	}
}

func (h *histogramCounts) combine(o histogramCounts, f func(a, b float64) float64) {
	if !o.initialized {
		return
	}
	h.initialized = true
	h.count, h.sum = f(h.count, o.count), f(h.sum, o.sum)
	for i, b := range o.buckets {
		if i < len(h.buckets) {
			h.buckets[i] = f(h.buckets[i], b)
		} else {
			h.buckets = append(h.buckets, b)
		}
	}
}

func newCounts() *counts {
	return &counts{opcache: map[string]float64{}, pools: map[float64]*poolCounts{}}
}

func sum(a, b float64) float64 { return a + b }

func most(a, b float64) float64 { return max(a, b) }

// apply writes the counters into a merged snapshot: the top level's, the opcache
// object's (its usage too, when it has one), and those of each pool the snapshot lists.
// A pool no child runs any more is not brought back by its old counts: it is gone from
// the snapshot as it would be from one process's.
func (c *counts) apply(merged map[string]any, pools map[float64]map[string]any) {
	merged["expired_requests"] = c.expired
	if o, ok := merged["opcache"].(map[string]any); ok {
		for _, k := range opcacheCounterKeys {
			o[k] = c.opcache[k]
		}
		if u, ok := o["usage"].(map[string]any); ok {
			for _, k := range opcacheUsageCounterKeys {
				u[k] = c.opcache[k]
			}
		}
	}
	for id, pm := range pools {
		pc := c.pools[id]
		if pc == nil {
			continue
		}
		pm["crashes"], pm["restarts"] = pc.crashes, pc.restarts
		pm["duration"] = pc.duration.value(pm["duration"])
		pm["wait"] = pc.wait.value(pm["wait"])
	}
}

// value is the histogram in a snapshot's shape, or was when it has no counts.
func (h histogramCounts) value(was any) any {
	if !h.initialized {
		return was
	}
	buckets := make([]any, len(h.buckets))
	for i, b := range h.buckets {
		buckets[i] = b
	}
	return map[string]any{"buckets": buckets, "count": h.count, "sum": h.sum}
}
