// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

// Package phpruntime is the PHP of the process as configs come and go: it starts and
// stops the engine, stages and commits each config's workers across reloads, keeps
// the worker pools configs share, restarts workers whose files change, and hands
// requests to the running engine.
package phpruntime

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/php-worker/php_worker/go-module/internal/cluster"
	"github.com/php-worker/php_worker/go-module/internal/core"
)

// Engine is PHP as the runtime drives it: an engine in this process (core.Engine), or
// engines in supervised child processes (cluster.Cluster, for processes above 1). It has
// two sides: the request path, which every request takes, and the control, which
// reloads, the admin API, probes and metrics use.
type Engine interface {
	RequestPath
	Control
}

// RequestPath is what a request needs of the engine: called on every request, from
// handler goroutines, it takes no lock a control call holds for long.
type RequestPath interface {
	// Stopping says the engine takes no new requests.
	Stopping() bool
	PostMaxSize() int64
	Submit(pool uint32, b *core.RequestBuffer, flags uint32, handle uintptr) (core.Submitted, core.Code)
	PoolWaiting(pool uint32) int
}

// Control changes the engine and reads its state: what it runs (its pools, threads,
// limits and stores, given whole as one core.State), its snapshot and profile, its jobs
// and its end.
type Control interface {
	MarkStopping()
	Shutdown(grace time.Duration)
	// Apply brings the engine to a state: it makes the changes from the one it runs,
	// and returns those that failed (core.PoolError names a pool's).
	Apply(s core.State) error
	StatsJSON() ([]byte, error)
	Stats() (*core.Stats, error)
	ProfileStart(hz int, cpu bool) error
	ProfileStop() ([]byte, error)
	RunJob(spec []byte) (core.JobOutcome, error)
}

var (
	_ Engine = (*core.Engine)(nil)
	_ Engine = (*cluster.Cluster)(nil)
)

// Runtime is the PHP of this process as configs change it: one engine, the config that
// owns it (current) and, during a reload, the config taking over (pending). A config
// is known by its Plan.
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
//     old config releases them (Runtime.ReleasePool, pool.go).
//   - The classic pool is resized in place at commit.
type Runtime struct {
	mu       sync.Mutex // serialises everything below but engine, changed and logger
	engine   atomic.Pointer[engineRef]
	changed  atomic.Pointer[chan struct{}] // closed whenever the engine or its pools change
	settings Settings                      // of the running engine
	procs    int                           // the running engine's processes (1: this one)
	pinCPUs  bool                          // whether its children run on CPUs of their own
	current  *Plan
	pending  *Plan
	pools    map[uint32]*poolState // the worker pools of the running engine
	maxStuck atomic.Int64          // the running config's max_stuck_threads, for readiness
	logger   atomic.Pointer[zap.Logger]

	workerPools *caddy.UsagePool // see pool.go
	nextPoolID  atomic.Uint32

	version, coreID string // for the log lines at start and stop
}

// New is a runtime with no PHP running, one per process: php_worker's version and the
// build of the core linked in name it in the log.
func New(version, coreID string) *Runtime {
	rt := &Runtime{pools: map[uint32]*poolState{}, workerPools: caddy.NewUsagePool(), version: version, coreID: coreID}
	ch := make(chan struct{})
	rt.changed.Store(&ch)
	return rt
}

// Settings are what an engine starts with and keeps until it restarts (the JSON of
// php_worker_engine_new).
type Settings interface {
	JSON() ([]byte, error)
	// Equal tells whether an engine started with these runs as one started with o.
	Equal(o Settings) bool
	// ChangedKeys names the settings that differ from o, for the log.
	ChangedKeys(o Settings) []string
}

// poolState is what the runtime knows of a worker pool in the running engine: its part
// of the engine's desired state (desired), and its generations, which the runtime
// numbers for every process alike.
type poolState struct {
	key       string
	committed []byte // the spec of the current config; nil when only the pending one has it
	// spec is the spec of the generation that takes requests, generation its number.
	spec       []byte
	generation uint32
	staged     *core.StagedGeneration // the pending config's, booting until it commits
	last       uint32                 // the last number given to a generation of the pool
}

// next is the number of the pool's next generation: never one given before, even to a
// generation that failed to start.
func (st *poolState) next() uint32 {
	st.last++
	return st.last
}

// desired is the state the engine should run: p's threads and limits, and the pools.
func (rt *Runtime) desired(p *Plan) core.State {
	s := core.State{Classic: p.Classic, MaxThreads: p.MaxThreads, MaxIdle: p.MaxIdle, TimeoutGrace: p.TimeoutGrace,
		MaxStuck: p.MaxStuck, SharedStore: p.SharedStore, LocalStore: p.LocalStore}
	for id, st := range rt.pools {
		s.Pools = append(s.Pools, core.PoolState{ID: id, Spec: st.spec, Generation: st.generation, Staged: st.staged})
	}
	sort.Slice(s.Pools, func(i, j int) bool { return s.Pools[i].ID < s.Pools[j].ID })
	return s
}

// applyTo brings engine e to the desired state with p's limits; a failure of a pool's
// change names its worker.
func (rt *Runtime) applyTo(e Engine, p *Plan) error {
	err := e.Apply(rt.desired(p))
	if err == nil {
		return nil
	}
	var each []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		each = j.Unwrap()
	} else {
		each = []error{err}
	}
	for i, one := range each {
		var pe *core.PoolError
		if errors.As(one, &pe) {
			if st := rt.pools[pe.Pool]; st != nil {
				each[i] = fmt.Errorf("worker %s: %w", st.key, pe.Err)
			}
		}
	}
	return errors.Join(each...)
}

// Plan is what a config asks of PHP, computed in its Start.
type Plan struct {
	Settings Settings // a change needs a new engine
	// Processes runs PHP in this many supervised child processes (1: in this one); a
	// change needs a new engine.
	Processes int
	// PinCPUs runs each child on CPUs of its own (cluster.Options.PinCPUs); a change
	// needs a new engine.
	PinCPUs bool
	Classic int
	Workers []PoolPlan
	Grace   time.Duration
	// Autoscaling: the most PHP threads (0: none added) and how long an extra thread
	// may stay idle.
	MaxThreads int
	MaxIdle    time.Duration
	// Store capacities in bytes (the stores belong to the process, not to the engine).
	SharedStore, LocalStore int64
	// The hard deadline past PHP's time limit (negative: none), and how many stuck
	// threads get a replacement.
	TimeoutGrace time.Duration
	MaxStuck     int
}

// PoolPlan is a worker of a plan: its pool and the spec the core boots it with (the
// JSON of php_worker_pool_new).
type PoolPlan struct {
	Pool *Pool
	Spec []byte
}

// SetLogger makes l the logger of lines outside a request: the latest config's.
func (rt *Runtime) SetLogger(l *zap.Logger) {
	rt.logger.Store(l)
}

// Logger is php_worker's logger for messages outside a request.
func (rt *Runtime) Logger() *zap.Logger {
	if l := rt.logger.Load(); l != nil {
		return l
	}
	return zap.NewNop()
}

// engineRef holds the running Engine for the atomic pointer.
type engineRef struct{ Engine }

// Engine is the running engine, or nil.
func (rt *Runtime) Engine() Engine {
	return rt.engine.Load().get()
}

func (r *engineRef) get() Engine {
	if r == nil {
		return nil
	}
	return r.Engine
}

// requestPath is the running engine's request path, or nil: what Submit, PoolWaiting
// and PostMaxSize use, on every request.
func (rt *Runtime) requestPath() RequestPath {
	if e := rt.engine.Load().get(); e != nil {
		return e
	}
	return nil
}

// sameEngine tells whether an engine started for the running one's plan would run
// as p asks, or can be brought to by a rolling restart of its processes.
func (rt *Runtime) sameEngine(p *Plan) bool {
	return max(1, p.Processes) == rt.procs && (rt.procs == 1 || p.PinCPUs == rt.pinCPUs) &&
		(p.Settings.Equal(rt.settings) || rt.rolls())
}

// roller is an engine of several processes that restarts them one at a time with new
// settings (cluster.Cluster).
type roller interface {
	Roll(settings []byte, grace time.Duration) error
}

// rolls tells whether the running engine takes new settings by a rolling restart.
func (rt *Runtime) rolls() bool {
	_, ok := rt.engine.Load().get().(roller)
	return ok
}

// MaxStuck is the running config's max_stuck_threads (0 when the deadline is off).
func (rt *Runtime) MaxStuck() int {
	return int(rt.maxStuck.Load())
}

// notify wakes the requests waiting for an engine or a pool.
func (rt *Runtime) notify() {
	ch := make(chan struct{})
	close(*rt.changed.Swap(&ch))
}

// changes is closed at the next change: read it before looking at the state.
func (rt *Runtime) changes() <-chan struct{} {
	return *rt.changed.Load()
}

// Start runs a config's Start: it starts PHP for p, or prepares the running PHP to take
// p over when the running config stops.
func (rt *Runtime) Start(p *Plan) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	defer rt.notify()
	if rt.pending != nil {
		rt.abandonPending() // cannot happen with Caddy's one load at a time; be safe
	}
	e := rt.engine.Load().get()
	if e == nil {
		// Nothing runs: this config owns PHP from now on.
		if err := rt.boot(p); err != nil {
			return err
		}
		rt.commitSpecs(p)
		rt.current = p
		return nil
	}
	if !rt.sameEngine(p) {
		// PHP restarts with the new php_ini when this config is committed; until then
		// the running PHP serves both configs.
		rt.pending = p
		return nil
	}
	var added []uint32
	for _, w := range p.Workers {
		if st := rt.pools[w.Pool.id]; st != nil {
			st.staged = &core.StagedGeneration{Generation: st.next(), Spec: w.Spec}
			continue
		}
		// A worker new in this config: nothing to keep serving meanwhile.
		rt.pools[w.Pool.id] = &poolState{key: w.Pool.key, spec: w.Spec, generation: 1, last: 1}
		added = append(added, w.Pool.id)
	}
	if err := rt.applyTo(e, rt.current); err != nil {
		for _, id := range added {
			delete(rt.pools, id)
		}
		rt.dropStaged(p)
		if err := rt.applyTo(e, rt.current); err != nil {
			rt.Logger().Error("undoing what the new config started", zap.Error(err))
		}
		return fmt.Errorf("starting the new config's workers: %w", err)
	}
	rt.pending = p
	rt.Logger().Info("new config staged: its workers boot beside the running ones until it takes over",
		zap.Int("workers", len(p.Workers)))
	return nil
}

// Stop runs a config's Stop: it commits the config taking over, or undoes a config
// whose load failed, or stops PHP when no config needs it any more.
func (rt *Runtime) Stop(p *Plan) {
	if p == nil {
		return // a config that never started
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	defer rt.notify()
	switch {
	case p == rt.pending:
		rt.Logger().Info("the new config did not load: the running one keeps PHP as it was")
		rt.abandonPending()
	case p == rt.current && rt.pending != nil:
		rt.commit()
	case p == rt.current:
		rt.shutdownEngine(p.Grace)
		rt.current = nil
		rt.pools = map[uint32]*poolState{}
	}
}

// commit makes the pending config the current one.
func (rt *Runtime) commit() {
	p, e := rt.pending, rt.engine.Load().get()
	rt.current, rt.pending = p, nil
	if !rt.sameEngine(p) {
		msg := "php_ini changed: restarting PHP; requests wait for it"
		if max(1, p.Processes) != rt.procs {
			msg = "processes changed: restarting PHP; requests wait for it"
		} else if p.PinCPUs != rt.pinCPUs {
			msg = "cpu_affinity changed: restarting PHP; requests wait for it"
		}
		rt.Logger().Info(msg, zap.Strings("changed", rt.settings.ChangedKeys(p.Settings)), zap.Int("processes", max(1, p.Processes)))
		rt.shutdownEngine(p.Grace)
		if err := rt.boot(p); err != nil {
			rt.Logger().Error("PHP does not start with the new php_ini; starting it with the previous one", zap.Error(err))
			fallback := *p
			fallback.Settings, fallback.Processes, fallback.PinCPUs = rt.settings, rt.procs, rt.pinCPUs
			if err := rt.boot(&fallback); err != nil {
				rt.Logger().Error("PHP does not start", zap.Error(err))
			}
		}
		rt.commitSpecs(p)
		return
	}
	for _, w := range p.Workers {
		if st := rt.pools[w.Pool.id]; st != nil && st.staged != nil {
			st.spec, st.generation, st.staged = st.staged.Spec, st.staged.Generation, nil
		}
	}
	rt.commitSpecs(p)
	if err := rt.applyTo(e, p); err != nil {
		rt.Logger().Error("applying the new config", zap.Error(err))
	}
	rt.setMaxStuck(p)
	if !p.Settings.Equal(rt.settings) {
		rt.roll(e.(roller), p)
	}
	rt.Logger().Info("new config active", zap.Int("classic_threads", p.Classic), zap.Int("max_threads", p.MaxThreads),
		zap.Int("workers", len(p.Workers)))
}

// roll restarts PHP's processes one at a time with p's php_ini; the workers the plan
// activated boot in each new process.
func (rt *Runtime) roll(r roller, p *Plan) {
	settings, err := p.Settings.JSON()
	if err == nil {
		rt.Logger().Info("php_ini changed: restarting PHP's processes one at a time",
			zap.Strings("changed", rt.settings.ChangedKeys(p.Settings)))
		err = r.Roll(settings, p.Grace)
	}
	if err != nil {
		rt.Logger().Error("PHP does not start with the new php_ini; its processes keep the previous one", zap.Error(err))
		return
	}
	rt.settings = p.Settings
}

func (rt *Runtime) commitSpecs(p *Plan) {
	for _, w := range p.Workers {
		if st := rt.pools[w.Pool.id]; st != nil {
			st.committed = w.Spec
		}
	}
}

// abandonPending undoes what the pending config's Start did, but for the pools only it
// uses, which its Cleanup deletes.
func (rt *Runtime) abandonPending() {
	p := rt.pending
	rt.pending = nil
	rt.dropStaged(p)
	if e := rt.engine.Load().get(); e != nil && rt.current != nil {
		if err := rt.applyTo(e, rt.current); err != nil {
			rt.Logger().Error("discarding new workers", zap.Error(err))
		}
	}
}

// dropStaged forgets the generations a plan staged; the next Apply discards them.
func (rt *Runtime) dropStaged(p *Plan) {
	for _, w := range p.Workers {
		if st := rt.pools[w.Pool.id]; st != nil {
			st.staged = nil
		}
	}
}

// boot starts an engine for a plan: its settings, its classic threads and workers, and
// the workers of the running config it does not have (their configs still use them).
func (rt *Runtime) boot(p *Plan) error {
	settings, err := p.Settings.JSON()
	if err != nil {
		return err
	}
	var e Engine
	procs := max(1, p.Processes)
	if procs > 1 {
		// A child that starts taking requests wakes those that found none running.
		e, err = cluster.New(cluster.Options{Processes: procs, PinCPUs: p.PinCPUs, Settings: settings, Logger: rt.Logger, Installed: rt.notify})
	} else {
		e, err = core.NewEngine(settings)
	}
	if err != nil {
		return err
	}
	// The new engine's pools: the plan's, and the running config's it does not have.
	// Their generations go on from the last numbers, so a generation seen before the
	// restart is never taken for one after it.
	pools := map[uint32]*poolState{}
	add := func(id uint32, key string, spec []byte) {
		st := &poolState{key: key, spec: spec}
		if old := rt.pools[id]; old != nil {
			st.committed, st.last = old.committed, old.last
		}
		st.generation = st.next()
		pools[id] = st
	}
	for _, w := range p.Workers {
		add(w.Pool.id, w.Pool.key, w.Spec)
	}
	for id, st := range rt.pools {
		if _, ok := pools[id]; !ok && st.committed != nil {
			add(id, st.key, st.committed)
		}
	}
	running := rt.pools
	rt.pools = pools
	if err := rt.applyTo(e, p); err != nil {
		rt.pools = running
		e.Shutdown(0)
		return err
	}
	rt.settings, rt.procs, rt.pinCPUs = p.Settings, procs, p.PinCPUs
	rt.setMaxStuck(p)
	rt.engine.Store(&engineRef{e})
	rt.Logger().Info("PHP engine started", zap.String("version", rt.version), zap.String("core", rt.coreID),
		zap.String("php_version", core.PHPVersion()), zap.String("php_build", core.PHPBuild()),
		zap.Any("settings", p.Settings), zap.Int("classic_threads", p.Classic), zap.Int("workers", len(pools)),
		zap.Int("max_threads", p.MaxThreads), zap.Int("processes", procs))
	return nil
}

// PostMaxSize is the running PHP's post_max_size in bytes (0: none, or no PHP).
func (rt *Runtime) PostMaxSize() int64 {
	if e := rt.requestPath(); e != nil {
		return e.PostMaxSize()
	}
	return 0
}

// setMaxStuck keeps the limit readiness compares stuck threads with (none when the
// deadline is off).
func (rt *Runtime) setMaxStuck(p *Plan) {
	if p.TimeoutGrace < 0 {
		rt.maxStuck.Store(0)
	} else {
		rt.maxStuck.Store(int64(p.MaxStuck))
	}
}

// shutdownEngine stops the running engine: requests arriving meanwhile wait for the
// next one; queued and running ones finish (up to grace).
func (rt *Runtime) shutdownEngine(grace time.Duration) {
	e := rt.engine.Load().get()
	if e == nil {
		return
	}
	e.MarkStopping()
	rt.notify()
	e.Shutdown(grace)
	rt.engine.Store(nil)
	fields := []zap.Field{zap.String("core", rt.coreID)}
	if in, out, ok := core.Crossings(); ok {
		fields = append(fields, zap.Int64("calls_into_core", in), zap.Int64("callbacks_from_core", out))
	}
	rt.Logger().Info("PHP engine stopped", fields...)
}

// removePool deletes a pool no config uses any more.
func (rt *Runtime) removePool(p *Pool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.pools[p.id]; !ok {
		return
	}
	delete(rt.pools, p.id)
	if e := rt.engine.Load().get(); e != nil && rt.current != nil {
		if err := rt.applyTo(e, rt.current); err != nil {
			rt.Logger().Error("deleting a worker pool", zap.String("worker", p.key), zap.Error(err))
		}
	}
	rt.notify() // requests waiting for this pool learn it is gone
	rt.Logger().Info("worker removed: its threads finish their requests and stop", zap.String("worker", p.key))
}

// RestartWatched restarts one worker's scripts because files it watches changed: a new
// generation boots beside the running one and takes over as it is ready. A worker
// that a config load is restarting already is left to it.
func (rt *Runtime) RestartWatched(p *Pool, files []string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	st, e := rt.pools[p.id], rt.engine.Load().get()
	if st == nil || e == nil || st.staged != nil || rt.current == nil {
		return
	}
	st.generation = st.next()
	rt.Logger().Info("files changed: restarting worker", zap.String("worker", p.key), zap.Strings("files", files),
		zap.Uint32("generation", st.generation))
	// A child process that failed to restart it is asked again at the next change.
	if err := rt.applyTo(e, rt.current); err != nil {
		rt.Logger().Error("restarting a worker after file changes", zap.String("worker", p.key), zap.Error(err))
	}
}

// RestartWorkers starts a new, active generation in every worker pool; it returns the
// generation of each pool.
func (rt *Runtime) RestartWorkers() (map[uint32]uint32, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	e := rt.engine.Load().get()
	if e == nil || rt.current == nil {
		return nil, errors.New("PHP is not running")
	}
	generations := map[uint32]uint32{}
	for id, st := range rt.pools {
		if st.staged != nil {
			continue // a config load restarts it already
		}
		st.generation = st.next()
		generations[id] = st.generation
	}
	rt.Logger().Info("restarting workers", zap.Int("workers", len(generations)))
	if err := rt.applyTo(e, rt.current); err != nil {
		return generations, fmt.Errorf("restarting workers: %w", err)
	}
	return generations, nil
}

// WaitForGenerations waits until every pool runs only the threads of its generation
// (or a later one, or the pool is gone), or has threads that fail to boot; it returns
// the names of those.
func (rt *Runtime) WaitForGenerations(generations map[uint32]uint32, deadline time.Time) ([]string, error) {
	for {
		stats, err := rt.Stats()
		if err != nil {
			return nil, err
		}
		if stats == nil {
			return nil, errors.New("PHP stopped")
		}
		var waiting, failed []string
		for _, p := range stats.Pools {
			want, ok := generations[p.ID]
			switch {
			case !ok || p.Generation > want:
			case p.Failing > 0:
				failed = append(failed, string(p.Worker))
			case p.Ready < p.Threads || p.Threads == 0:
				waiting = append(waiting, string(p.Worker))
			}
		}
		if len(waiting) == 0 {
			return failed, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the new scripts of %s are still booting", strings.Join(waiting, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stats is the running engine's snapshot, or nil when PHP is not running.
func (rt *Runtime) Stats() (*core.Stats, error) {
	e := rt.engine.Load().get()
	if e == nil {
		return nil, nil
	}
	return e.Stats()
}

// Submit hands a request to a pool of the running engine (nil: the classic pool),
// waiting for an engine (the php_worker app may start after the http app, and php_ini
// changes restart PHP), for the pool (a new worker exists once its config has started)
// and, with processes above 1, for a child process when none runs (each that starts
// taking requests wakes the wait). It gives up when ctx is done, after wait, or at once
// when the pool was deleted for good. It returns when the core took the request, the start of its wait
// for a PHP thread (the core counts that wait from there).
func (rt *Runtime) Submit(ctx context.Context, wait time.Duration, pool *Pool, b *core.RequestBuffer,
	flags uint32, handle uintptr) (core.Submitted, core.Code, time.Time) {
	id := core.ClassicPool
	if pool != nil {
		id = pool.id
	}
	var timeout <-chan time.Time
	for {
		changes := rt.changes()
		if e := rt.requestPath(); e != nil && !e.Stopping() {
			at := time.Now()
			req, rc := e.Submit(id, b, flags, handle)
			if rc != core.ErrStopped && rc != core.ErrUnknownPool {
				return req, rc, at
			}
			if rc == core.ErrUnknownPool && pool != nil && pool.removed.Load() {
				return nil, core.ErrUnknownPool, at
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
			return nil, core.ErrStopped, time.Time{}
		case <-timeout:
			return nil, core.ErrStopped, time.Time{}
		}
	}
}

// PoolWaiting is how many threads of a pool (nil: the classic pool) wait for a request
// now.
func (rt *Runtime) PoolWaiting(pool *Pool) int {
	e := rt.requestPath()
	if e == nil {
		return 0
	}
	id := core.ClassicPool
	if pool != nil {
		id = pool.id
	}
	return e.PoolWaiting(id)
}

// Plans are the config that owns PHP and the one taking over during a reload (nil
// when none).
func (rt *Runtime) Plans() (current, pending *Plan) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.current, rt.pending
}

// CommittedSpec is the spec the current config runs pool with; false when the running
// engine has no such pool.
func (rt *Runtime) CommittedSpec(p *Pool) ([]byte, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	st, ok := rt.pools[p.id]
	if !ok {
		return nil, false
	}
	return st.committed, true
}
