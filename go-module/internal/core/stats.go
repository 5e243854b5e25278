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
// writes it.
type Stats struct {
	MaxThreads      int       `json:"max_threads"`
	HistogramBounds []float64 `json:"histogram_bounds"`
	Threads         []struct {
		State string `json:"state"`
	} `json:"threads"`
	Pools   []PoolStats  `json:"pools"`
	Opcache OpcacheStats `json:"opcache"`
	// Threads whose request ran past its deadline and that have not come back, and
	// the requests answered that way.
	StuckThreads    int    `json:"stuck_threads"`
	ExpiredRequests uint64 `json:"expired_requests"`
	// PHP's post_max_size in bytes (0: no limit).
	PostMaxSize int64 `json:"post_max_size"`
	// With processes above 1 (internal/cluster): each child process, and how many
	// died unasked since the start.
	Processes []struct {
		State string `json:"state"`
	} `json:"processes,omitempty"`
	ProcessCrashes uint64 `json:"process_crashes,omitempty"`
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
	ID         uint32    `json:"id"`
	Kind       string    `json:"kind"` // http, task or background
	Worker     string    `json:"worker"`
	Generation uint32    `json:"generation"`
	Threads    int       `json:"threads"`
	Ready      int       `json:"ready"`
	Leaving    int       `json:"leaving"`
	Restarting bool      `json:"restarting"`
	Failing    int       `json:"failing"`
	Busy       int       `json:"busy"`
	Idle       int       `json:"idle"`
	Queued     int       `json:"queued"`
	Duration   Histogram `json:"duration"`
	Wait       Histogram `json:"wait"`
	Crashes    uint64    `json:"crashes"`
	Restarts   uint64    `json:"restarts"`
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
