// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"slices"

	"github.com/php-worker/php_worker/go-module/internal/core"
)

// The cluster's counters never go back. Prometheus reads a counter that drops as a
// reset and counts its whole value again, so a child that dies, is rolled, or misses one
// snapshot must not take its counts out of the sum. Each child keeps what it counted as
// of its last snapshot (the highest value seen of each counter: concurrent snapshots may
// come back out of order); the cluster's snapshot sums those of every child, the ones
// that did not answer included, plus what the dead ones had counted (retired).

// counts is what one child counted, or the sum of several.
type counts struct {
	expired uint64
	opcache opcacheCounts
	pools   map[uint32]*poolCounts
}

// opcacheCounts are the counters of a snapshot's opcache object and of its usage.
type opcacheCounts struct {
	restartsOutOfMemory, restartsKeyTableFull, restartsReset, holdsTimedOut uint64
	hits, misses                                                            uint64
}

// poolCounts is a pool's counters and histograms.
type poolCounts struct {
	crashes, restarts uint64
	duration, wait    histogramCounts
}

// histogramCounts is a histogram, once a snapshot had it.
type histogramCounts struct {
	h           core.Histogram
	initialized bool
}

// countsOf reads the counters of one child's snapshot.
func countsOf(s *core.Stats) *counts {
	o := s.Opcache
	c := &counts{expired: s.ExpiredRequests, pools: map[uint32]*poolCounts{}, opcache: opcacheCounts{
		restartsOutOfMemory: o.RestartsOutOfMemory, restartsKeyTableFull: o.RestartsKeyTableFull,
		restartsReset: o.RestartsReset, holdsTimedOut: o.HoldsTimedOut}}
	if o.Usage != nil {
		c.opcache.hits, c.opcache.misses = o.Usage.Hits, o.Usage.Misses
	}
	for _, p := range s.Pools {
		c.pools[p.ID] = &poolCounts{crashes: p.Crashes, restarts: p.Restarts,
			duration: histogramCounts{h: p.Duration, initialized: true}, wait: histogramCounts{h: p.Wait, initialized: true}}
	}
	return c
}

// fold is how two counts of one counter become one: most, to keep a child's highest,
// or sum, to add children up.
type fold bool

const (
	most fold = false
	sum  fold = true
)

func apply[T uint64 | float64](f fold, a, b T) T {
	if f == sum {
		return a + b
	}
	return max(a, b)
}

// combine folds o into c.
func (c *counts) combine(o *counts, f fold) {
	if o == nil {
		return
	}
	c.expired = apply(f, c.expired, o.expired)
	co, oo := &c.opcache, o.opcache
	co.restartsOutOfMemory = apply(f, co.restartsOutOfMemory, oo.restartsOutOfMemory)
	co.restartsKeyTableFull = apply(f, co.restartsKeyTableFull, oo.restartsKeyTableFull)
	co.restartsReset = apply(f, co.restartsReset, oo.restartsReset)
	co.holdsTimedOut = apply(f, co.holdsTimedOut, oo.holdsTimedOut)
	co.hits, co.misses = apply(f, co.hits, oo.hits), apply(f, co.misses, oo.misses)
	for id, op := range o.pools {
		cp := c.pools[id]
		if cp == nil {
			cp = &poolCounts{}
			c.pools[id] = cp
		}
		cp.crashes, cp.restarts = apply(f, cp.crashes, op.crashes), apply(f, cp.restarts, op.restarts)
		cp.duration.combine(op.duration, f)
		cp.wait.combine(op.wait, f)
	}
}

func (h *histogramCounts) combine(o histogramCounts, f fold) {
	if !o.initialized {
		return
	}
	if !h.initialized {
		h.initialized = true
		h.h = core.Histogram{Buckets: slices.Clone(o.h.Buckets), Count: o.h.Count, Sum: o.h.Sum}
		return
	}
	h.h.Count, h.h.Sum = apply(f, h.h.Count, o.h.Count), apply(f, h.h.Sum, o.h.Sum)
	for i, b := range o.h.Buckets {
		if i < len(h.h.Buckets) {
			h.h.Buckets[i] = apply(f, h.h.Buckets[i], b)
		} else {
			h.h.Buckets = append(h.h.Buckets, b)
		}
	}
}

func newCounts() *counts {
	return &counts{pools: map[uint32]*poolCounts{}}
}

// write puts the counters into a merged snapshot: the top level's, the opcache object's
// (its usage too, when it has one), and those of each pool the snapshot lists. A pool no
// child runs any more is not brought back by its old counts: it is gone from the
// snapshot as it would be from one process's.
func (c *counts) write(merged *core.Stats) {
	merged.ExpiredRequests = c.expired
	o := &merged.Opcache
	o.RestartsOutOfMemory, o.RestartsKeyTableFull = c.opcache.restartsOutOfMemory, c.opcache.restartsKeyTableFull
	o.RestartsReset, o.HoldsTimedOut = c.opcache.restartsReset, c.opcache.holdsTimedOut
	if o.Usage != nil {
		o.Usage.Hits, o.Usage.Misses = c.opcache.hits, c.opcache.misses
	}
	for i := range merged.Pools {
		p := &merged.Pools[i]
		pc := c.pools[p.ID]
		if pc == nil {
			continue
		}
		p.Crashes, p.Restarts = pc.crashes, pc.restarts
		if pc.duration.initialized {
			p.Duration = pc.duration.h
		}
		if pc.wait.initialized {
			p.Wait = pc.wait.h
		}
	}
}
