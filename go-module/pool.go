// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// workerPools holds the worker pools every loaded config uses, keyed by worker name, the
// way Caddy's reverse proxy keeps its upstream hosts: a config takes a reference in
// Provision and releases it in Cleanup, so a pool lives as long as some config uses it.
// On a reload the new config takes the pools of the workers it keeps before the old one
// releases them: their threads keep serving while the new config's scripts boot beside
// them (see runtime.go).
var workerPools = caddy.NewUsagePool()

// nextPoolID numbers pools; 0 is the classic pool, and ids are never reused, so a
// request never lands in a pool that replaced the one it was meant for.
var nextPoolID atomic.Uint32

// workerPool is a worker pool as configs see it: a stable id the core knows the pool by.
type workerPool struct {
	id  uint32
	key string
	// The last config using it is gone: a request still headed for it (an old
	// config's handler finishing its requests) is refused at once, not after engineWait.
	removed atomic.Bool
}

// acquirePool returns the pool of the worker key, creating it for the first config
// that uses it. Pair with releasePool.
func acquirePool(key string) *workerPool {
	v, _, _ := workerPools.LoadOrNew(key, func() (caddy.Destructor, error) {
		return &workerPool{id: nextPoolID.Add(1), key: key}, nil
	})
	return v.(*workerPool)
}

// releasePool drops a config's reference; the last one deletes the pool from the engine.
func releasePool(key string) {
	if _, err := workerPools.Delete(key); err != nil {
		appLogger().Error("releasing a worker pool", zap.String("worker", key), zap.Error(err))
	}
}

// Destruct removes the pool from the running engine: it serves what is queued, then
// its threads end.
func (p *workerPool) Destruct() error {
	p.removed.Store(true)
	php.removePool(p)
	return nil
}

// workerSpec is the JSON read by php_worker_pool_new (rust-core/src/config.rs).
type workerSpec struct {
	Name             string   `json:"name"`
	File             string   `json:"file"`
	Num              int      `json:"num"`
	MaxThreads       int      `json:"max_threads,omitempty"`
	MaxRequests      int      `json:"max_requests,omitempty"`
	MaxMemory        int64    `json:"max_memory,omitempty"`
	MaxBootBackoffMS int64    `json:"max_boot_backoff_ms,omitempty"`
	Boot             bootSpec `json:"boot"`
	// The env without placeholders, once for the pool (rust-core's WorkerSpec.env).
	Env           [][2]string `json:"env,omitempty"`
	Kind          workerKind  `json:"kind,omitempty"`
	StopTimeoutMS int64       `json:"stop_timeout_ms,omitempty"`
	Argv          []string    `json:"argv,omitempty"`
}

// spec is what the core boots the worker with.
func (w *WorkerConfig) spec() []byte {
	b, err := json.Marshal(workerSpec{
		Name: w.specName(), File: w.FileName, Num: w.Num, MaxThreads: w.MaxThreads, MaxRequests: w.MaxRequests,
		MaxMemory: w.MaxMemory, MaxBootBackoffMS: time.Duration(w.MaxBootBackoff).Milliseconds(),
		Boot: w.bootRequest(), Env: w.poolEnv, Kind: w.kind, StopTimeoutMS: w.stopTimeout.Milliseconds(), Argv: w.argv,
	})
	if err != nil {
		panic(err) // strings and numbers always marshal
	}
	return b
}

// specName is the worker's name for the core: its pool's key (unique in a config), or
// its own name for a scheduled job, which has no pool.
func (w *WorkerConfig) specName() string {
	if w.pool != nil {
		return w.pool.key
	}
	return w.Name
}

// Interface guards
var _ caddy.Destructor = (*workerPool)(nil)
