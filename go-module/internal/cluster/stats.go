// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"encoding/json"
	"sort"
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

// procStats is one child in the snapshot.
type procStats struct {
	Process int `json:"process"`
	PID     int `json:"pid"`
	// running; restarting (dead, its replacement due); or not_answering (alive, but its
	// snapshot did not come in time: stopped or hung, and killed if it stays so).
	State    string `json:"state"`
	Requests int64  `json:"requests"`
}

// StatsJSON is the merged snapshot.
func (c *Cluster) StatsJSON() ([]byte, error) {
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	if c.debug != nil {
		procs = append(procs, c.debug) // its slot is one past the others'
	}
	c.mu.Unlock()
	raws := make([][]byte, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		if p == nil || !p.alive.Load() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if raw, err := p.call(call{Op: opStats}); err == nil {
				raws[i] = raw
			}
		}()
	}
	wg.Wait()
	return c.merge(procs, raws)
}

// SnapshotFields are the fields the cluster adds to one engine's snapshot, as paths
// (docs/reloads-and-admin-api.md lists them; a test keeps this list true). Each
// opcache_by_process[].opcache has the fields of opcache.
var SnapshotFields = []string{"threads[].process", "processes", "processes[].process", "processes[].pid",
	"processes[].state", "processes[].requests", "process_crashes", "opcache_by_process",
	"opcache_by_process[].process", "opcache_by_process[].opcache"}

// merge makes the cluster's snapshot of its children's, raws[i] being procs[i]'s (nil:
// not running).
func (c *Cluster) merge(procs []*proc, raws [][]byte) ([]byte, error) {
	merged := map[string]any{}
	var threads []any
	pools := map[float64]map[string]any{}
	var order []float64
	var list []procStats
	var opcaches []any
	for i, raw := range raws {
		p := procs[i]
		ps := procStats{Process: i, State: "restarting"}
		if p != nil && p.cmd.Process != nil {
			ps.PID = p.cmd.Process.Pid
		}
		if raw == nil {
			if p != nil && p.alive.Load() {
				ps.State = "not_answering"
			}
			list = append(list, ps)
			continue
		}
		ps.State, ps.Requests = "running", p.load.Load()
		list = append(list, ps)
		var s map[string]any
		if json.Unmarshal(raw, &s) != nil {
			continue
		}
		c.keepCounts(p, countsOf(s))
		for _, key := range []string{"max_threads", "stuck_threads", "expired_requests"} {
			merged[key] = num(merged[key]) + num(s[key])
		}
		for _, key := range []string{"histogram_bounds", "post_max_size"} {
			if _, ok := merged[key]; !ok {
				merged[key] = s[key]
			}
		}
		if _, ok := merged["opcache"]; !ok {
			// A copy: the sums below must not change the first child's own entry.
			merged["opcache"] = copyOpcache(s["opcache"])
		} else {
			mergeOpcacheGauges(merged, s)
		}
		opcaches = append(opcaches, map[string]any{"process": i, "opcache": s["opcache"]})
		ts, _ := s["threads"].([]any)
		for _, t := range ts {
			if tm, ok := t.(map[string]any); ok {
				tm["process"] = i
			}
			threads = append(threads, t)
		}
		ps2, _ := s["pools"].([]any)
		for _, x := range ps2 {
			pm, ok := x.(map[string]any)
			if !ok {
				continue
			}
			id := num(pm["id"])
			have, ok := pools[id]
			if !ok {
				pools[id] = pm
				order = append(order, id)
				continue
			}
			mergePool(have, pm)
		}
	}
	if threads == nil {
		threads = []any{}
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	poolList := make([]any, 0, len(order))
	for _, id := range order {
		poolList = append(poolList, pools[id])
	}
	merged["threads"], merged["pools"], merged["processes"] = threads, poolList, list
	c.countedTotal().apply(merged, pools)
	merged["process_crashes"] = c.crashes.Load()
	merged["opcache_by_process"] = opcaches
	return json.Marshal(merged)
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

// mergeOpcacheGauges adds a child's OPcache memory to the merged snapshot's (each
// child has its shared memory of its own), and keeps the most scripts any caches.
func mergeOpcacheGauges(merged, s map[string]any) {
	o, _ := merged["opcache"].(map[string]any)
	mu, _ := o["usage"].(map[string]any)
	so, _ := s["opcache"].(map[string]any)
	su, _ := so["usage"].(map[string]any)
	if mu == nil || su == nil {
		return
	}
	for _, k := range []string{"memory_used", "memory_free", "memory_wasted"} {
		mu[k] = num(mu[k]) + num(su[k])
	}
	mu["cached_scripts"] = max(num(mu["cached_scripts"]), num(su["cached_scripts"]))
}

// copyOpcache copies a snapshot's opcache object and its usage object.
func copyOpcache(v any) any {
	o, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(o))
	for k, x := range o {
		out[k] = x
	}
	if u, ok := o["usage"].(map[string]any); ok {
		cu := make(map[string]any, len(u))
		for k, x := range u {
			cu[k] = x
		}
		out["usage"] = cu
	}
	return out
}

// mergePool adds child pool o into have.
func mergePool(have, o map[string]any) {
	for _, key := range []string{"threads", "ready", "leaving", "failing", "busy", "idle", "base", "max_threads",
		"queued", "crashes", "restarts"} {
		have[key] = num(have[key]) + num(o[key])
	}
	if b, _ := o["restarting"].(bool); b {
		have["restarting"] = true
	}
	if num(o["generation"]) < num(have["generation"]) {
		have["generation"] = o["generation"]
	}
	if have["staged"] == nil {
		have["staged"] = o["staged"]
	}
	for _, key := range []string{"duration", "wait"} {
		have[key] = mergeHistogram(have[key], o[key])
	}
	if g, ok := o["memory_growth"].([]any); ok {
		h, _ := have["memory_growth"].([]any)
		have["memory_growth"] = append(h, g...)
	}
}

func mergeHistogram(a, b any) any {
	am, ok1 := a.(map[string]any)
	bm, ok2 := b.(map[string]any)
	if !ok1 || !ok2 {
		return a
	}
	ab, _ := am["buckets"].([]any)
	bb, _ := bm["buckets"].([]any)
	out := make([]any, max(len(ab), len(bb)))
	for i := range out {
		var x, y float64
		if i < len(ab) {
			x = num(ab[i])
		}
		if i < len(bb) {
			y = num(bb[i])
		}
		out[i] = x + y
	}
	return map[string]any{"buckets": out, "count": num(am["count"]) + num(bm["count"]), "sum": num(am["sum"]) + num(bm["sum"])}
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

// Stats is the merged snapshot, decoded.
func (c *Cluster) Stats() (*core.Stats, error) {
	raw, err := c.StatsJSON()
	if err != nil {
		return nil, err
	}
	return core.DecodeStats(raw)
}
