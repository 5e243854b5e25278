// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package core

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// TestStatsGoldenSnapshot decodes the core's snapshot as rust-core writes it
// (rust-core/tests/golden/stats.json, checked by its stats_match_the_golden_snapshot
// test): every field the metrics, probes and sizing read has the golden's value, so a
// field renamed on one side fails here instead of reading as zero.
func TestStatsGoldenSnapshot(t *testing.T) {
	raw, err := os.ReadFile("../../../rust-core/tests/golden/stats.json")
	if err != nil {
		t.Fatal(err)
	}
	var got Stats
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	hist := func(n uint64) Histogram {
		b := make([]uint64, 14)
		for i := range b {
			b[i] = n
		}
		return Histogram{Buckets: b, Count: n, Sum: float64(n) / 4}
	}
	staged := uint32(3)
	want := Stats{
		MaxThreads:      12,
		HistogramBounds: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		Threads: []ThreadStats{{Index: 3, Name: "php-3", State: "busy", Pool: 7, Worker: "app", Generation: 2, Method: "GET",
			URI: "/orders?page=2", RunningMS: 1250, Requests: 41, Memory: 2097152, RealMemory: 4194304}},
		Pools: []PoolStats{{
			ID: 7, Kind: "task", Worker: "app", Generation: 2, Staged: &staged, Threads: 4, Ready: 3, Leaving: 21, Restarting: true,
			Failing: 1, Busy: 2, Idle: 5, Base: 4, MaxThreads: 8, Queued: 6, Duration: hist(9), Wait: hist(10), Crashes: 11, Restarts: 13,
			MemoryGrowth: []RouteGrowth{{Path: "/orders", Bytes: 65536, Requests: 14}},
		}},
		Opcache: OpcacheStats{
			Guarded: true, RestartPending: true, RestartsOutOfMemory: 15, RestartsKeyTableFull: 16,
			RestartsReset: 17, HoldsTimedOut: 18,
			Usage: &OpcacheUsage{MemoryUsed: 22, MemoryFree: 23, MemoryWasted: 24, Hits: 25, Misses: 26, CachedScripts: 27},
		},
		StuckThreads:    19,
		ExpiredRequests: 20,
		PostMaxSize:     8388608,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the snapshot as Go reads it:\n got %+v\nwant %+v", got, want)
	}
	// Written again, it is the core's, field for field: a field Go lacks would be lost
	// from the cluster's merged snapshot.
	again, err := json.Marshal(&got)
	if err != nil {
		t.Fatal(err)
	}
	var before, after any
	_ = json.Unmarshal(raw, &before)
	_ = json.Unmarshal(again, &after)
	if !reflect.DeepEqual(before, after) {
		t.Errorf("the snapshot written again differs:\n%s\n%s", raw, again)
	}
}

// A classic thread's or pool's worker is null in the snapshot, read as "" and written
// back as null.
func TestAClassicWorkerNameIsNull(t *testing.T) {
	var p PoolStats
	if err := json.Unmarshal([]byte(`{"worker":null}`), &p); err != nil || p.Worker != "" {
		t.Fatalf("null read as %q (%v)", p.Worker, err)
	}
	out, _ := json.Marshal(ThreadStats{})
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	if w, ok := m["worker"]; !ok || w != nil {
		t.Errorf("an empty name written as %v", w)
	}
}

// TestThreadStatesMatchTheCore checks Go's thread-state constants against the states
// rust-core can show (rust-core/tests/golden/thread_states.json, written by its
// thread_states_match_the_golden_list test).
func TestThreadStatesMatchTheCore(t *testing.T) {
	raw, err := os.ReadFile("../../../rust-core/tests/golden/thread_states.json")
	if err != nil {
		t.Fatal(err)
	}
	var core []string
	if err := json.Unmarshal(raw, &core); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(core, ThreadStates) {
		t.Errorf("the core's thread states are %q; internal/core's constants are %q", core, ThreadStates)
	}
}
