// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"encoding/json"
	"slices"
	"sync"

	"github.com/php-worker/php_worker/go-module/internal/core"
)

// The cluster's snapshot is its children's, merged into the shape of one engine's
// (php_worker_engine_stats), so probes, metrics, the status page and
// /php_worker/threads read it unchanged:
//   - threads: every child's, each with "process" (its child's slot);
//   - pools: summed per pool, with the lowest generation any child runs (the runtime
//     numbers generations for every child alike), so a restart is done when every
//     child's is;
//   - opcache: the first child's gate, its counters and memory summed over the
//     children, with each child's own under "opcache_by_process";
//   - counters summed over every child the cluster ran, those that died or did not
//     answer included (counters.go), so none goes back;
//   - "processes" lists each child: slot, pid, state, requests held, and the crashes
//     of the cluster.

// StatsJSON is the merged snapshot, in the JSON of one engine's.
func (c *Cluster) StatsJSON() ([]byte, error) {
	s, err := c.Stats()
	if err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

// Stats is the merged snapshot of the children that answered in time.
func (c *Cluster) Stats() (*core.Stats, error) {
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	if c.debug != nil {
		procs = append(procs, c.debug) // its slot is one past the others'
	}
	c.mu.Unlock()
	snapshots := make([]*core.Stats, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		if p == nil || !p.alive.Load() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if raw, err := p.call(call{Op: opStats}); err == nil {
				snapshots[i], _ = core.DecodeStats(raw)
			}
		}()
	}
	wg.Wait()
	return c.merge(procs, snapshots), nil
}

// SnapshotFields are the fields the cluster adds to one engine's snapshot, as paths
// (docs/reloads-and-admin-api.md lists them; a test keeps this list true). Each
// opcache_by_process[].opcache has the fields of opcache.
var SnapshotFields = []string{"threads[].process", "processes", "processes[].process", "processes[].pid",
	"processes[].state", "processes[].requests", "process_crashes", "opcache_by_process",
	"opcache_by_process[].process", "opcache_by_process[].opcache"}

// merge makes the cluster's snapshot of its children's, snapshots[i] being procs[i]'s
// (nil: not running, or no answer in time).
func (c *Cluster) merge(procs []*proc, snapshots []*core.Stats) *core.Stats {
	merged := &core.Stats{Threads: []core.ThreadStats{}, Pools: []core.PoolStats{}}
	first := true
	for i, s := range snapshots {
		p := procs[i]
		ps := core.ProcessStats{Process: i, State: "restarting"}
		if p != nil && p.cmd.Process != nil {
			ps.PID = p.cmd.Process.Pid
		}
		if s == nil {
			if p != nil && p.alive.Load() {
				ps.State = "not_answering"
			}
			merged.Processes = append(merged.Processes, ps)
			continue
		}
		ps.State, ps.Requests = "running", p.load.Load()
		merged.Processes = append(merged.Processes, ps)
		c.keepCounts(p, countsOf(s))
		merged.MaxThreads += s.MaxThreads
		merged.StuckThreads += s.StuckThreads
		if first {
			merged.HistogramBounds, merged.PostMaxSize = s.HistogramBounds, s.PostMaxSize
			merged.Opcache = copyOpcache(s.Opcache) // the sums must not change this child's own
			first = false
		} else {
			addOpcacheGauges(&merged.Opcache, s.Opcache)
		}
		merged.OpcacheByProcess = append(merged.OpcacheByProcess, core.ProcessOpcache{Process: i, Opcache: s.Opcache})
		for _, t := range s.Threads {
			t.Process = &i
			merged.Threads = append(merged.Threads, t)
		}
		for _, pl := range s.Pools {
			if have := poolOf(merged, pl.ID); have != nil {
				addPool(have, pl)
			} else {
				pl.Duration.Buckets = slices.Clone(pl.Duration.Buckets)
				pl.Wait.Buckets = slices.Clone(pl.Wait.Buckets)
				merged.Pools = append(merged.Pools, pl)
			}
		}
	}
	slices.SortFunc(merged.Pools, func(a, b core.PoolStats) int { return int(a.ID) - int(b.ID) })
	c.countedTotal().write(merged)
	crashes := c.crashes.Load()
	merged.ProcessCrashes = &crashes
	if merged.OpcacheByProcess == nil {
		merged.OpcacheByProcess = []core.ProcessOpcache{}
	}
	return merged
}

// poolOf is pool id of a snapshot, or nil.
func poolOf(s *core.Stats, id uint32) *core.PoolStats {
	for i := range s.Pools {
		if s.Pools[i].ID == id {
			return &s.Pools[i]
		}
	}
	return nil
}

// keepCounts records what child p counted as of a snapshot it answered, unless its
// counts already went to the retired ones (it died meanwhile).
func (c *Cluster) keepCounts(p *proc, n *counts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.countsRetired {
		return
	}
	if p.counts == nil {
		if c.counted == nil {
			c.counted = map[*proc]struct{}{}
		}
		p.counts = newCounts()
		c.counted[p] = struct{}{}
	}
	p.counts.combine(n, most)
}

// retireCounts moves what a dead child counted to the cluster's retired counts.
func (c *Cluster) retireCounts(p *proc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retired == nil {
		c.retired = newCounts()
	}
	c.retired.combine(p.counts, sum)
	p.counts, p.countsRetired = nil, true
	delete(c.counted, p)
}

// countedTotal is the sum of what every child the cluster ran counted.
func (c *Cluster) countedTotal() *counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	total := newCounts()
	total.combine(c.retired, sum)
	for p := range c.counted {
		total.combine(p.counts, sum)
	}
	return total
}

// addOpcacheGauges adds a child's OPcache memory to the merged snapshot's (each child
// has its shared memory of its own), and keeps the most scripts any caches.
func addOpcacheGauges(merged *core.OpcacheStats, o core.OpcacheStats) {
	mu, su := merged.Usage, o.Usage
	if mu == nil || su == nil {
		return
	}
	mu.MemoryUsed += su.MemoryUsed
	mu.MemoryFree += su.MemoryFree
	mu.MemoryWasted += su.MemoryWasted
	mu.CachedScripts = max(mu.CachedScripts, su.CachedScripts)
}

// copyOpcache copies a snapshot's opcache object and its usage object.
func copyOpcache(o core.OpcacheStats) core.OpcacheStats {
	if o.Usage != nil {
		u := *o.Usage
		o.Usage = &u
	}
	return o
}

// addPool adds a child's pool o into have: its threads and requests summed, the lowest
// generation any child runs (the runtime numbers generations for every child alike, so
// a restart is done when every child's is), and each child's routes.
func addPool(have *core.PoolStats, o core.PoolStats) {
	have.Threads += o.Threads
	have.Ready += o.Ready
	have.Leaving += o.Leaving
	have.Failing += o.Failing
	have.Busy += o.Busy
	have.Idle += o.Idle
	have.Base += o.Base
	have.MaxThreads += o.MaxThreads
	have.Queued += o.Queued
	have.Crashes += o.Crashes
	have.Restarts += o.Restarts
	have.Restarting = have.Restarting || o.Restarting
	have.Generation = min(have.Generation, o.Generation)
	if have.Staged == nil {
		have.Staged = o.Staged
	}
	have.Duration.Add(o.Duration)
	have.Wait.Add(o.Wait)
	have.MemoryGrowth = append(have.MemoryGrowth, o.MemoryGrowth...)
}
