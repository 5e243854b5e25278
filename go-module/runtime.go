// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

// #include "php_worker.h"
import "C"

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// php is the PHP of this process as configs change it: one engine, the config that
// owns it (current) and, during a reload, the config taking over (pending).
//
// Caddy loads a config by provisioning it, starting its apps while the old config still
// runs, then stopping and cleaning up the old one; any failure on the way stops the new
// config instead, and the old one goes on. So the new config's Start prepares what it
// can without taking anything from the running config, and the old config's Stop
// commits it:
//   - php_ini is the only setting that needs a new engine. When it changes, the commit
//     restarts PHP with the new settings (requests wait meanwhile, never fail); until
//     then the running PHP serves both configs, and a load that fails changes nothing.
//   - Every worker the new config keeps gets a new generation of threads, booted beside
//     the running one but staged (taking no requests); commit activates it, and its
//     threads take over as they boot (rust-core/src/supervisor/pool.rs). A load that fails discards
//     it. So every reload serves new PHP code, and a worker that cannot boot never takes
//     traffic from the one that can.
//   - Workers new in this config start at once; workers it drops are deleted when the
//     old config releases them (workerPools, pool.go).
//   - The classic pool is resized in place at commit.
var php = &phpRuntime{pools: map[uint32]*poolState{}}

type phpRuntime struct {
	mu       sync.Mutex // serialises everything below but engine and changed
	engine   atomic.Pointer[engine]
	changed  atomic.Pointer[chan struct{}] // closed whenever the engine or its pools change
	settings engineSettings                // of the running engine
	current  *App
	pending  *App
	pools    map[uint32]*poolState // the worker pools of the running engine
	maxStuck atomic.Int64          // the running config's max_stuck_threads, for readiness
}

// poolState is what the runtime knows of a worker pool in the running engine.
type poolState struct {
	key       string
	committed []byte // the spec of the current config; nil when only the pending one has it
	staged    uint32 // the generation the pending config staged, or 0
}

// plan is what a config asks of PHP, computed in Start.
type plan struct {
	settings engineSettings // a change needs a new engine
	classic  int
	workers  []*WorkerConfig
	grace    time.Duration
	// Autoscaling: the most PHP threads (0: none added) and how long an extra thread
	// may stay idle.
	maxThreads    int
	maxThreadsWhy string // how "auto" chose maxThreads
	maxIdle       time.Duration
	// Store capacities in bytes (the stores belong to the process, not to the engine).
	sharedStore, localStore int64
	// The hard deadline past PHP's time limit (negative: none), and how many stuck
	// threads get a replacement.
	timeoutGrace time.Duration
	maxStuck     int
}

func init() {
	ch := make(chan struct{})
	php.changed.Store(&ch)
}

// logger is php_worker's logger for messages outside a request: the latest config's.
var logger atomic.Pointer[zap.Logger]

func appLogger() *zap.Logger {
	if l := logger.Load(); l != nil {
		return l
	}
	return zap.NewNop()
}

// notify wakes the requests waiting for an engine or a pool.
func (rt *phpRuntime) notify() {
	ch := make(chan struct{})
	close(*rt.changed.Swap(&ch))
}

// changes is closed at the next change: read it before looking at the state.
func (rt *phpRuntime) changes() <-chan struct{} {
	return *rt.changed.Load()
}

// start runs a config's Start.
func (rt *phpRuntime) start(a *App, p *plan) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	defer rt.notify()
	if rt.pending != nil {
		rt.abandonPending() // cannot happen with Caddy's one load at a time; be safe
	}
	e := rt.engine.Load()
	if e == nil {
		// Nothing runs: this config owns PHP from now on.
		if err := rt.boot(p); err != nil {
			return err
		}
		rt.commitSpecs(p)
		rt.current = a
		return nil
	}
	if !p.settings.equal(rt.settings) {
		// PHP restarts with the new php_ini when this config is committed; until then
		// the running PHP serves both configs.
		rt.pending = a
		return nil
	}
	for _, w := range p.workers {
		st := rt.pools[w.pool.id]
		if st == nil {
			// A worker new in this config: nothing to keep serving meanwhile.
			if err := e.newPool(w.pool.id, w.spec()); err != nil {
				rt.abandonStaged(p)
				return fmt.Errorf("starting worker %s: %w", w.pool.key, err)
			}
			rt.pools[w.pool.id] = &poolState{key: w.pool.key}
			continue
		}
		generation, err := e.restartPool(w.pool.id, w.spec(), false)
		if err != nil {
			rt.abandonStaged(p)
			return fmt.Errorf("restarting worker %s: %w", w.pool.key, err)
		}
		st.staged = generation
	}
	rt.pending = a
	appLogger().Info("new config staged: its workers boot beside the running ones until it takes over",
		zap.Int("workers", len(p.workers)))
	return nil
}

// stop runs a config's Stop: it commits the config taking over, or undoes a config
// whose load failed, or stops PHP when no config needs it any more.
func (rt *phpRuntime) stop(a *App) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	defer rt.notify()
	switch {
	case a == rt.pending:
		appLogger().Info("the new config did not load: the running one keeps PHP as it was")
		rt.abandonPending()
	case a == rt.current && rt.pending != nil:
		rt.commit()
	case a == rt.current:
		rt.shutdownEngine(a.plan.grace)
		rt.current = nil
		rt.pools = map[uint32]*poolState{}
	}
}

// commit makes the pending config the current one.
func (rt *phpRuntime) commit() {
	p, e := rt.pending, rt.engine.Load()
	rt.current, rt.pending = p, nil
	if !p.plan.settings.equal(rt.settings) {
		appLogger().Info("php_ini changed: restarting PHP; requests wait for it",
			zap.Strings("changed", rt.settings.changedKeys(p.plan.settings)))
		rt.shutdownEngine(p.plan.grace)
		if err := rt.boot(p.plan); err != nil {
			appLogger().Error("PHP does not start with the new php_ini; starting it with the previous one", zap.Error(err))
			fallback := *p.plan
			fallback.settings = rt.settings
			if err := rt.boot(&fallback); err != nil {
				appLogger().Error("PHP does not start", zap.Error(err))
			}
		}
		rt.commitSpecs(p.plan)
		return
	}
	for _, w := range p.plan.workers {
		st := rt.pools[w.pool.id]
		if st != nil && st.staged != 0 {
			if err := e.activatePool(w.pool.id, st.staged); err != nil {
				appLogger().Error("activating the new workers", zap.String("worker", w.pool.key), zap.Error(err))
			}
			st.staged = 0
		}
	}
	rt.commitSpecs(p.plan)
	configureStores(p.plan.sharedStore, p.plan.localStore)
	if err := e.autoscale(p.plan.maxThreads, p.plan.maxIdle); err != nil {
		appLogger().Error("setting autoscaling", zap.Error(err))
	}
	if err := e.setDeadlines(p.plan.timeoutGrace, p.plan.maxStuck); err != nil {
		appLogger().Error("setting request deadlines", zap.Error(err))
	}
	rt.setMaxStuck(p.plan)
	if err := e.resizeClassic(p.plan.classic); err != nil {
		appLogger().Error("resizing the classic pool", zap.Error(err))
	}
	appLogger().Info("new config active", zap.Int("classic_threads", p.plan.classic), zap.Int("max_threads", p.plan.maxThreads),
		zap.Int("workers", len(p.plan.workers)))
}

func (rt *phpRuntime) commitSpecs(p *plan) {
	for _, w := range p.workers {
		if st := rt.pools[w.pool.id]; st != nil {
			st.committed = w.spec()
		}
	}
}

// abandonPending undoes what the pending config's Start did, but for the pools only it
// uses, which its Cleanup deletes.
func (rt *phpRuntime) abandonPending() {
	a := rt.pending
	rt.pending = nil
	rt.abandonStaged(a.plan)
}

// abandonStaged discards the generations a plan staged.
func (rt *phpRuntime) abandonStaged(p *plan) {
	e := rt.engine.Load()
	for _, w := range p.workers {
		if st := rt.pools[w.pool.id]; st != nil && st.staged != 0 {
			if err := e.discardPool(w.pool.id, st.staged); err != nil {
				appLogger().Error("discarding new workers", zap.String("worker", w.pool.key), zap.Error(err))
			}
			st.staged = 0
		}
	}
}

// boot starts an engine for a plan: its settings, its classic threads and workers, and
// the workers of the running config it does not have (their configs still use them).
func (rt *phpRuntime) boot(p *plan) error {
	e, err := newEngine(p.settings)
	if err != nil {
		return err
	}
	pools := map[uint32]*poolState{}
	create := func(id uint32, key string, spec []byte) error {
		if err := e.newPool(id, spec); err != nil {
			return fmt.Errorf("starting worker %s: %w", key, err)
		}
		st := rt.pools[id]
		if st == nil {
			st = &poolState{key: key}
		}
		st.staged = 0
		pools[id] = st
		return nil
	}
	configureStores(p.sharedStore, p.localStore)
	err = e.autoscale(p.maxThreads, p.maxIdle)
	if err == nil {
		err = e.setDeadlines(p.timeoutGrace, p.maxStuck)
	}
	if err == nil {
		err = e.resizeClassic(p.classic)
	}
	for _, w := range p.workers {
		if err == nil {
			err = create(w.pool.id, w.pool.key, w.spec())
		}
	}
	for id, st := range rt.pools {
		if _, ok := pools[id]; !ok && st.committed != nil && err == nil {
			err = create(id, st.key, st.committed)
		}
	}
	if err != nil {
		e.shutdown(0)
		return err
	}
	rt.pools, rt.settings = pools, p.settings
	rt.setMaxStuck(p)
	if raw, err := e.stats(); err == nil {
		var s engineStats
		if json.Unmarshal(raw, &s) == nil {
			e.postMaxSize = s.PostMaxSize
		}
	}
	rt.engine.Store(e)
	reserveCallbackP(true)
	appLogger().Info("PHP engine started", zap.String("version", moduleVersion()), zap.String("core", coreBuildID),
		zap.String("php_version", phpVersion()), zap.String("php_build", phpBuild()),
		zap.Any("settings", p.settings), zap.Int("classic_threads", p.classic), zap.Int("workers", len(pools)),
		zap.Int("max_threads", p.maxThreads))
	return nil
}

// postMaxSize is the running PHP's post_max_size in bytes (0: none, or no PHP).
func (rt *phpRuntime) postMaxSize() int64 {
	if e := rt.engine.Load(); e != nil {
		return e.postMaxSize
	}
	return 0
}

// setMaxStuck keeps the limit readiness compares stuck threads with (none when the
// deadline is off).
func (rt *phpRuntime) setMaxStuck(p *plan) {
	if p.timeoutGrace < 0 {
		rt.maxStuck.Store(0)
	} else {
		rt.maxStuck.Store(int64(p.maxStuck))
	}
}

// shutdownEngine stops the running engine: requests arriving meanwhile wait for the
// next one; queued and running ones finish (up to grace).
func (rt *phpRuntime) shutdownEngine(grace time.Duration) {
	e := rt.engine.Load()
	if e == nil {
		return
	}
	e.stopping.Store(true)
	rt.notify()
	e.shutdown(grace)
	rt.engine.Store(nil)
	reserveCallbackP(false)
	fields := []zap.Field{zap.String("core", coreBuildID)}
	if crossings.enabled {
		fields = append(fields, zap.Int64("calls_into_core", crossings.in.Load()),
			zap.Int64("callbacks_from_core", crossings.out.Load()))
	}
	appLogger().Info("PHP engine stopped", fields...)
}

// removePool deletes a pool no config uses any more.
func (rt *phpRuntime) removePool(p *workerPool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.pools[p.id]; !ok {
		return
	}
	delete(rt.pools, p.id)
	if e := rt.engine.Load(); e != nil {
		if err := e.deletePool(p.id); err != nil {
			appLogger().Error("deleting a worker pool", zap.String("worker", p.key), zap.Error(err))
		}
	}
	rt.notify() // requests waiting for this pool learn it is gone
	appLogger().Info("worker removed: its threads finish their requests and stop", zap.String("worker", p.key))
}

// restartWatched restarts one worker's scripts because files it watches changed: a new
// generation boots beside the running one and takes over as it is ready. A worker
// that a config load is restarting already is left to it.
func (rt *phpRuntime) restartWatched(p *workerPool, files []string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	st, e := rt.pools[p.id], rt.engine.Load()
	if st == nil || e == nil || st.staged != 0 {
		return
	}
	generation, err := e.restartPool(p.id, nil, true)
	if err != nil {
		appLogger().Error("restarting a worker after file changes", zap.String("worker", p.key), zap.Error(err))
		return
	}
	appLogger().Info("files changed: restarting worker", zap.String("worker", p.key), zap.Strings("files", files),
		zap.Uint32("generation", generation))
}

// submit hands a request to a pool of the running engine, waiting for an engine (the
// php_worker app may start after the http app, and php_ini changes restart PHP) and for
// the pool (a new worker exists once its config has started). It gives up when ctx is
// done, after wait, or at once when removed says the pool was deleted for good.
func (rt *phpRuntime) submit(ctx context.Context, wait time.Duration, pool uint32, removed *atomic.Bool, b *requestBuffer,
	flags uint32, handle uintptr) (*C.php_worker_request_t, C.int32_t) {
	var timeout <-chan time.Time
	for {
		changes := rt.changes()
		if e := rt.engine.Load(); e != nil && !e.stopping.Load() {
			core, rc := e.submit(pool, b, flags, handle)
			if rc != C.PHP_WORKER_ERR_STOPPED && rc != C.PHP_WORKER_ERR_UNKNOWN_POOL {
				return core, rc
			}
			if rc == C.PHP_WORKER_ERR_UNKNOWN_POOL && removed != nil && removed.Load() {
				return nil, C.PHP_WORKER_ERR_UNKNOWN_POOL
			}
		}
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-changes:
		case <-ctx.Done():
			return nil, C.PHP_WORKER_ERR_STOPPED
		case <-timeout:
			return nil, C.PHP_WORKER_ERR_STOPPED
		}
	}
}
