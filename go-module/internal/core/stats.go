// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package core

import "encoding/json"

// The states a thread of the snapshot shows (rust-core's ThreadState names and "stuck",
// listed in rust-core/tests/golden/thread_states.json).
const (
	ThreadStarting = "starting" // creating its PHP context
	ThreadBooting  = "booting"  // running a worker script up to its first handle_request
	ThreadStandby  = "standby"  // booted, its generation not taking requests yet
	ThreadReady    = "ready"    // waiting for a request
	ThreadBusy     = "busy"     // running a request
	ThreadBackoff  = "backoff"  // a worker script failed to boot; waiting to try again
	ThreadStopping = "stopping" // finishing its script before it leaves its pool
	ThreadDone     = "done"     // gone
	ThreadStuck    = "stuck"    // the watchdog gave up on its request
)

// ThreadStates is every thread state, in the core's order.
var ThreadStates = []string{ThreadStarting, ThreadBooting, ThreadStandby, ThreadReady, ThreadBusy, ThreadBackoff,
	ThreadStopping, ThreadDone, ThreadStuck}

// Stats is the engine's snapshot (php_worker_engine_stats), as rust-core/src/supervisor/stats.rs
// writes it, field for field (rust-core/tests/golden/stats.json has each; the cluster's
// test checks that a snapshot read and written again loses none). With processes above
// 1 the cluster merges its children's into one of this type and adds the fields below
// the line.
type Stats struct {
	// The autoscaling limit on PHP threads (0: autoscaling off).
	MaxThreads int `json:"max_threads"`
	// The upper bounds (seconds) of the buckets of every histogram.
	HistogramBounds []float64     `json:"histogram_bounds"`
	Threads         []ThreadStats `json:"threads"`
	Pools           []PoolStats   `json:"pools"`
	Opcache         OpcacheStats  `json:"opcache"`
	// Threads whose request ran past its deadline and that have not come back, and
	// the requests answered that way.
	StuckThreads    int    `json:"stuck_threads"`
	ExpiredRequests uint64 `json:"expired_requests"`
	// PHP's post_max_size in bytes (0: no limit).
	PostMaxSize int64 `json:"post_max_size"`

	// With processes above 1 (internal/cluster): each child process, how many died
	// unasked since the start, and each one's OPcache.
	Processes        []ProcessStats   `json:"processes,omitempty"`
	ProcessCrashes   *uint64          `json:"process_crashes,omitempty"`
	OpcacheByProcess []ProcessOpcache `json:"opcache_by_process,omitempty"`
}

// ThreadStats is a PHP thread in the snapshot.
type ThreadStats struct {
	Index int `json:"index"`
	// The OS thread's name: php-<index>.
	Name string `json:"name"`
	// One of ThreadStates.
	State string `json:"state"`
	Pool  uint32 `json:"pool"`
	// The worker it runs ("": a classic thread) and the generation it belongs to (0 for
	// a classic thread).
	Worker     Name   `json:"worker"`
	Generation uint32 `json:"generation"`
	// The request it runs, if any, and for how long it has run.
	Method    string `json:"method"`
	URI       string `json:"uri"`
	RunningMS uint64 `json:"running_ms"`
	// Requests served since the thread started.
	Requests uint64 `json:"requests"`
	// PHP's memory usage at the end of its last request, and a worker's memory from the
	// system when its script last asked for a request (what max_memory compares), in bytes.
	Memory     uint64 `json:"memory"`
	RealMemory uint64 `json:"real_memory"`
	// The child process it runs in (processes above 1).
	Process *int `json:"process,omitempty"`
}

// Name is a worker's name in the snapshot, where a classic thread or pool has null.
type Name string

// MarshalJSON writes "" as null.
func (n Name) MarshalJSON() ([]byte, error) {
	if n == "" {
		return []byte("null"), nil
	}
	return json.Marshal(string(n))
}

// UnmarshalJSON reads null as "".
func (n *Name) UnmarshalJSON(b []byte) error {
	var s *string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*n = ""
	if s != nil {
		*n = Name(*s)
	}
	return nil
}

// ProcessStats is a child process in the snapshot of a cluster.
type ProcessStats struct {
	Process int `json:"process"`
	PID     int `json:"pid"`
	// running; restarting (dead, its replacement due); or not_answering (alive, but its
	// snapshot did not come in time: stopped or hung, and killed if it stays so).
	State string `json:"state"`
	// The requests it holds.
	Requests int64 `json:"requests"`
}

// ProcessOpcache is one child's OPcache in the snapshot of a cluster.
type ProcessOpcache struct {
	Process int          `json:"process"`
	Opcache OpcacheStats `json:"opcache"`
}

// OpcacheStats is the OPcache gate in the engine's snapshot (rust-core/src/runtime/opcache.rs).
type OpcacheStats struct {
	Guarded              bool   `json:"guarded"`
	RestartPending       bool   `json:"restart_pending"`
	RestartsOutOfMemory  uint64 `json:"restarts_out_of_memory"`
	RestartsKeyTableFull uint64 `json:"restarts_key_table_full"`
	RestartsReset        uint64 `json:"restarts_opcache_reset"`
	HoldsTimedOut        uint64 `json:"holds_timed_out"`
	// OPcache's own numbers, sampled by a PHP thread at most once a second; nil until
	// one was taken.
	Usage *OpcacheUsage `json:"usage"`
}

// OpcacheUsage is OPcache's shared memory and hit counters, as opcache_get_status() reports them.
type OpcacheUsage struct {
	MemoryUsed    uint64 `json:"memory_used"`
	MemoryFree    uint64 `json:"memory_free"`
	MemoryWasted  uint64 `json:"memory_wasted"`
	Hits          uint64 `json:"hits"`
	Misses        uint64 `json:"misses"`
	CachedScripts uint64 `json:"cached_scripts"`
}

// PoolStats is a pool in the engine's snapshot.
type PoolStats struct {
	ID   uint32 `json:"id"`
	Kind string `json:"kind"` // http (the classic pool too), task or background
	// The worker's name ("" for the classic pool).
	Worker Name `json:"worker"`
	// The current generation (0 for the classic pool), and one booted but not taking
	// requests yet.
	Generation uint32  `json:"generation"`
	Staged     *uint32 `json:"staged"`
	// Threads, leaving ones excluded; those of the current generation that booted; those
	// told to stop that have not ended yet.
	Threads int `json:"threads"`
	Ready   int `json:"ready"`
	Leaving int `json:"leaving"`
	// A restart is under way (the probes do not fail on it).
	Restarting bool `json:"restarting"`
	// Threads whose worker script fails to boot, running a request, waiting for one.
	Failing int `json:"failing"`
	Busy    int `json:"busy"`
	Idle    int `json:"idle"`
	// The configured threads, and the most the pool may have (0: the engine's limit).
	Base       int `json:"base"`
	MaxThreads int `json:"max_threads"`
	// Requests waiting for a thread.
	Queued   int       `json:"queued"`
	Duration Histogram `json:"duration"`
	Wait     Histogram `json:"wait"`
	// Worker scripts that ended on an error, and those ended on purpose and started again.
	Crashes  uint64 `json:"crashes"`
	Restarts uint64 `json:"restarts"`
	// The routes whose requests left the worker's scripts using more memory, most first.
	MemoryGrowth []RouteGrowth `json:"memory_growth"`
}

// RouteGrowth is a route whose requests left a worker's memory larger.
type RouteGrowth struct {
	Path     string `json:"path"`
	Bytes    uint64 `json:"bytes"`
	Requests uint64 `json:"requests"`
}

// Histogram is a Histogram of the snapshot: cumulative counts per bound, count and sum
// in seconds.
type Histogram struct {
	Buckets []uint64 `json:"buckets"`
	Count   uint64   `json:"count"`
	Sum     float64  `json:"sum"`
}

// Add adds o's counts to h's.
func (h *Histogram) Add(o Histogram) {
	if len(h.Buckets) < len(o.Buckets) {
		h.Buckets = append(h.Buckets, make([]uint64, len(o.Buckets)-len(h.Buckets))...)
	}
	for i, b := range o.Buckets {
		h.Buckets[i] += b
	}
	h.Count += o.Count
	h.Sum += o.Sum
}

// Stats is the engine's snapshot, decoded.
func (e *Engine) Stats() (*Stats, error) {
	raw, err := e.StatsJSON()
	if err != nil {
		return nil, err
	}
	return DecodeStats(raw)
}

// DecodeStats decodes a snapshot in the JSON of php_worker_engine_stats.
func DecodeStats(raw []byte) (*Stats, error) {
	var s Stats
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return &s, nil
}
