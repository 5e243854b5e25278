// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

// Package cluster runs PHP in supervised child processes (the php_worker option
// `processes N`): the Caddy process stays the one HTTP server and hands each request
// to a child over a Unix socket (wire.go); each child runs an engine with its share of
// the PHP threads (child.go). A child that dies costs only the requests it held: they
// are answered 502, and the child is replaced, with a growing pause when it dies over
// and over. Cluster has the methods of core.Engine, so the runtime drives either.
package cluster

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/php-worker/php_worker/go-module/internal/core"
	"github.com/php-worker/php_worker/go-module/internal/phpprofile"
)

// Options are a cluster's fixed settings.
type Options struct {
	Processes int
	// Settings are the engine settings of every child (php_worker_engine_new's JSON).
	Settings []byte
	// Logger takes the lines outside a request.
	Logger func() *zap.Logger
	// Command is the child's command line; by default the running image's (selfExe)
	// php-worker-child.
	Command []string
	// PingTimeout is how long a child may leave its pings unanswered before it is
	// killed as hung and replaced; 0: DefaultPingTimeout.
	PingTimeout time.Duration
	// Installed, if set, is called when a child starts taking requests (the cluster's
	// mutex held: it must not call the cluster): requests that found no child running
	// wait for it.
	Installed func()
}

// ChildCommand is the name of the command a child runs.
const ChildCommand = "php-worker-child"

// The pause before a child that died is replaced: doubled while children die within
// stableAfter of their start, up to maxBackoff.
const (
	minBackoff  = 100 * time.Millisecond
	maxBackoff  = 30 * time.Second
	stableAfter = 10 * time.Second
)

// Cluster is PHP in child processes.
type Cluster struct {
	opts     Options
	stopping atomic.Bool
	postMax  atomic.Int64 // the children's post_max_size, read again after a Roll

	mu    sync.Mutex // guards the fields below and each proc's pools and version
	procs []*proc    // a slot per child; a dead child's slot holds it until replaced
	// state is what the children run, each its share (shareOf); version counts its
	// changes, so a child that read an older one is brought to this one.
	state   core.State
	version uint64
	// debug is the child of debugged requests (debug triggers), started at the first
	// one and again after it ends: a debugger or profiler extension that crashes takes
	// only the debugged request with it. Guarded by mu; debugStart serializes starts.
	debug      *proc
	debugStart sync.Mutex
	// debugBackoff is the pause after the child of debugged requests died, doubled
	// while it dies within stableAfter of its start (a debugger extension that crashes
	// at every request); its next start waits until debugNotBefore. Guarded by mu.
	debugBackoff   time.Duration
	debugNotBefore time.Time
	crashes        atomic.Uint64
	// counted holds the children whose counts the snapshot sums, retired what the dead
	// ones had counted (counters.go); both made at first use.
	counted map[*proc]struct{}
	retired *counts
	// replacing counts the replacements under way; stopped ends their pauses.
	replacing sync.WaitGroup
	stopped   chan struct{}
	stopOnce  sync.Once
	next      atomic.Uint64 // round robin among equally loaded children
	// bootFailing holds, for a child and a worker pool, until when the worker's script
	// cannot boot in that child (the pause before its next attempt, which the child's
	// refusals tell): leastLoaded passes the child by while another can take the pool's
	// requests. Guarded by mu.
	bootFailing map[procPool]time.Time
	// parked are the requests that dead children held and no PHP thread had taken, while
	// no other child ran: the next child that takes requests gets them (install), and
	// those still there after parkWait, or at Shutdown, are refused (they never ran).
	// Guarded by mu; parkTimer tells whether expireParked is due.
	parked    []parkedRequest
	parkTimer bool
}

// parkedRequest is a request waiting for a child to take requests, until a time.
type parkedRequest struct {
	h     held
	until time.Time
}

// parkWait bounds the wait of a request whose child died while no other ran: as long
// as a request waits for PHP to start.
const parkWait = 30 * time.Second

// procPool is a worker pool in one child.
type procPool struct {
	p    *proc
	pool uint32
}

// New starts the children and waits until each runs PHP, with nothing to run until
// the first Apply.
func New(opts Options) (*Cluster, error) {
	if opts.Processes < 2 {
		return nil, errors.New("a cluster has at least 2 processes")
	}
	if len(opts.Command) == 0 {
		// The running image, not the binary's path, which an upgrade may have replaced.
		opts.Command = []string{selfExe, ChildCommand}
	}
	c := &Cluster{opts: opts, stopped: make(chan struct{})}
	c.procs = make([]*proc, opts.Processes)
	var first error
	for i := range c.procs {
		if _, err := c.spawnInstalled(i, minBackoff); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		c.Shutdown(0)
		return nil, first
	}
	c.readPostMaxSize()
	return c, nil
}

func (c *Cluster) logger() *zap.Logger {
	if c.opts.Logger != nil {
		return c.opts.Logger()
	}
	return zap.NewNop()
}

// evenShare is what child i of n gets of count: an even split, the first children
// taking the remainder.
func evenShare(count, i, n int) int {
	if count <= 0 {
		return 0
	}
	s := count / n
	if i < count%n {
		s++
	}
	return s
}

// share is what child i of n gets of count threads: an even split, at least one when
// count is not 0, so every child serves every pool.
func share(count, i, n int) int {
	if count <= 0 {
		return 0
	}
	return max(evenShare(count, i, n), 1)
}

// specFields are the fields of a worker spec the division reads.
type specFields struct {
	Kind string `json:"kind"`
	Num  int    `json:"num"`
}

// runs tells whether child i runs a worker pool. A background worker's num copies are
// divided, not multiplied: with num 1 one child runs it. HTTP and task workers run in
// every child, so each can serve and dispatch.
func (c *Cluster) runs(spec []byte, i int) bool {
	var f specFields
	if json.Unmarshal(spec, &f) != nil || f.Kind != "background" {
		return true
	}
	return evenShare(f.Num, i, c.opts.Processes) > 0
}

// isBackground tells whether a worker spec is a background worker's.
func isBackground(spec []byte) bool {
	var f specFields
	return json.Unmarshal(spec, &f) == nil && f.Kind == "background"
}

// stopBackground ends the background workers the child of a slot runs and waits for
// their scripts to end, before a roll starts the slot's new child with its own copies:
// never more than num copies run at once, as in one process, where a restarted
// background worker's new copy starts once the old one ended. It returns the child,
// for resumeBackground.
func (c *Cluster) stopBackground(slot int, grace time.Duration) *proc {
	c.mu.Lock()
	p := c.procs[slot]
	if p != nil {
		p.noBackground = true // what is applied to it from now on has none
	}
	c.mu.Unlock()
	if p == nil || !p.alive.Load() {
		return p
	}
	// The scripts have their stop_timeout to end, within the roll's grace.
	if err := p.apply(grace + 5*time.Second); err != nil {
		c.logger().Warn("a background worker did not stop before its process was replaced",
			zap.Int("process", slot), zap.Error(err))
	}
	return p
}

// resumeBackground starts again, in a child that keeps its slot because its
// replacement did not start, the background workers stopBackground ended.
func (c *Cluster) resumeBackground(slot int, p *proc) {
	c.mu.Lock()
	keeps := p != nil && c.procs[slot] == p && p.alive.Load()
	if p != nil {
		p.noBackground = false
	}
	c.mu.Unlock()
	if !keeps {
		return
	}
	if err := p.apply(0); err != nil {
		c.logger().Error("a background worker could not start again in its process", zap.Int("process", slot), zap.Error(err))
	}
}

// shareOf is child p's share of state s: its part of the threads, and the pools it
// runs with their num and max_threads divided. The child of debugged requests runs
// classic threads alone, as many as the server has (at least one), without
// autoscaling: a debugged request runs its worker script in a request of its own.
// The cluster's mu is held.
func (c *Cluster) shareOf(s core.State, p *proc) core.State {
	out := s
	out.Pools = nil
	i, n := p.slot, c.opts.Processes
	if i == c.debugSlot() {
		out.Classic, out.MaxThreads = max(s.Classic, 1), 0
		return out
	}
	out.Classic, out.MaxThreads = share(s.Classic, i, n), share(s.MaxThreads, i, n)
	for _, pl := range s.Pools {
		if isBackground(pl.Spec) && (p.noBackground || !c.runs(pl.Spec, i)) {
			continue
		}
		pl.Spec = c.specShare(pl.Spec, i)
		if pl.Staged != nil {
			pl.Staged = &core.StagedGeneration{Generation: pl.Staged.Generation, Spec: c.specShare(pl.Staged.Spec, i)}
		}
		out.Pools = append(out.Pools, pl)
	}
	return out
}

// specShare is a worker spec with its num and max_threads divided for child i.
func (c *Cluster) specShare(spec []byte, i int) []byte {
	var m map[string]any
	if json.Unmarshal(spec, &m) != nil {
		return spec
	}
	for _, key := range []string{"num", "max_threads"} {
		if v, ok := m[key].(float64); ok && v > 0 {
			m[key] = share(int(v), i, c.opts.Processes)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return spec
	}
	return out
}

// Stopping tells whether the cluster is shutting down.
func (c *Cluster) Stopping() bool { return c.stopping.Load() }

// MarkStopping makes Stopping true ahead of Shutdown.
func (c *Cluster) MarkStopping() { c.stopping.Store(true) }

// PostMaxSize is PHP's post_max_size in bytes (0: no limit).
func (c *Cluster) PostMaxSize() int64 { return c.postMax.Load() }

// readPostMaxSize asks the children their post_max_size, which their settings (php_ini)
// decide: at the start, and after a Roll changed them.
func (c *Cluster) readPostMaxSize() {
	s, err := c.Stats()
	if err != nil {
		return
	}
	for _, p := range s.Processes {
		if p.State == "running" { // one answered: the snapshot has its setting
			c.postMax.Store(s.PostMaxSize)
			return
		}
	}
}

// Running is how many children run PHP and take requests, the child of debugged requests
// aside: none while every one that died waits for its replacement.
func (c *Cluster) Running() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.procs {
		if p != nil && p.alive.Load() {
			n++
		}
	}
	return n
}

// live is the children running now.
func (c *Cluster) live() []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*proc, 0, len(c.procs))
	for _, p := range c.procs {
		if p != nil && p.alive.Load() {
			out = append(out, p)
		}
	}
	return out
}

// each runs f on every live child at once and returns the first error.
func (c *Cluster) each(f func(p *proc) error) error {
	procs := c.live()
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(p); err != nil {
				errs[i] = fmt.Errorf("PHP process %d: %w", p.slot, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Apply brings every child to its share of state s (core.State): a child started from
// now on gets it whole at its start. The shared table is this process's: its capacity
// is set here.
func (c *Cluster) Apply(s core.State) error {
	c.mu.Lock()
	c.state = s
	c.state.Pools = slices.Clone(s.Pools)
	c.version++
	c.mu.Unlock()
	core.ConfigureStores(s.SharedStore, s.LocalStore)
	return c.each(func(p *proc) error { return p.apply(0) })
}

// known tells whether the children run worker pool id (or it is the classic pool). The
// cluster's mu is held.
func (c *Cluster) known(id uint32) bool {
	return id == core.ClassicPool || c.state.Pool(id) != nil
}

// PoolWaiting is how many threads of a pool wait for a request, in all children. A
// request waits in one child, for that child's threads: Submitted.PoolWaiting counts those.
func (c *Cluster) PoolWaiting(id uint32) int {
	var n atomic.Int64
	_ = c.each(func(p *proc) error {
		c.mu.Lock()
		has := p.pools[id]
		c.mu.Unlock()
		if !has {
			return nil
		}
		raw, err := p.call(call{Op: opWaiting, Pool: id})
		var k int64
		if err == nil && json.Unmarshal(raw, &k) == nil {
			n.Add(k)
		}
		return err
	})
	return int(n.Load())
}

// ProfileStart starts a profile in every child; if one cannot, none profiles.
func (c *Cluster) ProfileStart(hz int, cpu bool) error {
	var started []*proc
	var mu sync.Mutex
	err := c.each(func(p *proc) error {
		_, err := p.call(call{Op: opProfileStart, N: hz, CPU: cpu})
		if err == nil {
			mu.Lock()
			started = append(started, p)
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		for _, p := range started {
			_, _ = p.call(call{Op: opProfileStop})
		}
	}
	return err
}

// ProfileStop ends the children's profiles and merges them into one, in the JSON of
// php_worker_profile_stop. A child that died meanwhile took its part with it; the
// profile says how many.
func (c *Cluster) ProfileStop() ([]byte, error) {
	var mu sync.Mutex
	var parts [][]byte
	err := c.each(func(p *proc) error {
		raw, err := p.call(call{Op: opProfileStop})
		if err == nil {
			mu.Lock()
			parts = append(parts, raw)
			mu.Unlock()
		}
		return err
	})
	if len(parts) == 0 {
		if err == nil {
			err = errors.New("no PHP process runs")
		}
		return nil, err
	}
	return mergeProfiles(parts)
}

// mergeProfiles joins the children's profiles: their frames one after the other, each
// child's stacks pointing into its own.
func mergeProfiles(parts [][]byte) ([]byte, error) {
	var out phpprofile.Data
	for i, raw := range parts {
		var d phpprofile.Data
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("reading a PHP process's profile: %w", err)
		}
		if i == 0 {
			out.Hz, out.Mode = d.Hz, d.Mode
		}
		out.DurationNs = max(out.DurationNs, d.DurationNs)
		out.Dropped += d.Dropped
		base := len(out.Frames)
		out.Frames = append(out.Frames, d.Frames...)
		for _, s := range d.Samples {
			for k := range s.Stack {
				s.Stack[k] += base
			}
			out.Samples = append(out.Samples, s)
		}
	}
	return json.Marshal(out)
}

// RunJob runs a scheduled job's script once, in one child.
func (c *Cluster) RunJob(spec []byte) (core.JobOutcome, error) {
	var out core.JobOutcome
	procs := c.live()
	if len(procs) == 0 {
		return out, errors.New("no PHP process runs")
	}
	p := procs[int(c.next.Add(1)%uint64(len(procs)))]
	raw, err := p.call(call{Op: opRunJob, Spec: spec})
	if err == nil {
		err = json.Unmarshal(raw, &out)
	}
	return out, err
}

// Roll restarts the children one at a time with new engine settings (a php_ini change):
// a new child starts in a slot, boots the workers, and takes the slot's share of the
// requests; then the old one drains and ends. Capacity never drops to nothing. When
// the first new child cannot start (PHP refuses the settings) the old children go on
// with the old settings, and the error says why. Once the first one started, the
// settings are the cluster's: a later slot whose new child fails to start (a failure
// of the moment, as the settings started a child already) keeps its old child while
// its new one is tried again in the background, and every child started from then on
// (a crash's replacement too) has the new settings.
func (c *Cluster) Roll(settings []byte, grace time.Duration) error {
	c.mu.Lock()
	previous := c.opts.Settings
	c.opts.Settings = settings
	c.mu.Unlock()
	for i := range c.opts.Processes {
		err := c.rollSlot(i, grace)
		for try := 0; err != nil && i > 0 && try < 2; try++ {
			time.Sleep(200 * time.Millisecond)
			err = c.rollSlot(i, grace)
		}
		if err == nil {
			continue
		}
		if i == 0 {
			c.mu.Lock()
			c.opts.Settings = previous
			c.mu.Unlock()
			return err
		}
		c.logger().Error("a PHP process does not start with the new php_ini; the one it replaces serves on with the previous php_ini "+
			"while it is tried again", zap.Int("process", i), zap.Error(err))
		c.mu.Lock()
		if !c.stopping.Load() {
			c.replacing.Add(1)
			go c.rollLater(i, grace)
		}
		c.mu.Unlock()
	}
	// The child of debugged requests ends too: the next one starts with the new settings.
	c.mu.Lock()
	debug := c.debug
	c.debug = nil
	c.mu.Unlock()
	if debug != nil {
		debug.retire(grace)
	}
	c.readPostMaxSize() // the request bodies read ahead follow the new setting
	return nil
}

// rollSlot starts a slot's new child with the cluster's settings, installs it, and
// retires the child it replaces. The old child's background workers end first, and
// are given back to it if the new child does not start.
func (c *Cluster) rollSlot(slot int, grace time.Duration) error {
	holder := c.stopBackground(slot, grace)
	old, err := c.spawnInstalled(slot, minBackoff)
	if err != nil {
		c.resumeBackground(slot, holder)
		return err
	}
	if old != nil {
		old.retire(grace)
	}
	return nil
}

// rollLater tries again, with growing pauses, to start a slot's child with the settings
// a roll could not start it with, until it does, the slot's child is replaced anyway
// (it died, or another roll came), or the cluster stops.
func (c *Cluster) rollLater(slot int, grace time.Duration) {
	defer c.replacing.Done()
	c.mu.Lock()
	stale := c.procs[slot]
	c.mu.Unlock()
	for wait := time.Second; ; wait = min(2*wait, maxBackoff) {
		select {
		case <-time.After(wait):
		case <-c.stopped:
			return
		}
		c.mu.Lock()
		replaced := c.procs[slot] != stale
		c.mu.Unlock()
		if replaced || c.stopping.Load() {
			return
		}
		err := c.rollSlot(slot, grace)
		if err == nil {
			c.logger().Info("a PHP process started with the new php_ini at last", zap.Int("process", slot))
			return
		}
		c.logger().Error("a PHP process still does not start with the new php_ini; trying again", zap.Int("process", slot),
			zap.Duration("in", min(2*wait, maxBackoff)), zap.Error(err))
	}
}

// install puts a started child in its slot; one that died before (its death found
// no slot to leave) is replaced as if it died now. The cluster's mu is held.
// It returns false, installing nothing, when the state changed since the child was
// brought to it: the caller applies the new one first.
func (c *Cluster) install(slot int, p *proc) bool {
	if p.version != c.version && p.alive.Load() {
		return false
	}
	c.procs[slot] = p
	if !p.alive.Load() {
		if !c.stopping.Load() {
			c.startReplace(slot, p, p.backoff)
		}
		return true
	}
	if c.opts.Installed != nil {
		c.opts.Installed()
	}
	if len(c.parked) > 0 && !c.stopping.Load() {
		parked := c.parked
		c.parked = nil
		go c.unpark(parked)
	}
	return true
}

// spawnInstalled starts the child of a slot and installs it, once it runs the state
// the cluster has then; it returns the child the slot had.
func (c *Cluster) spawnInstalled(slot int, backoff time.Duration) (old *proc, err error) {
	p, err := c.spawnWithBackoff(slot, backoff)
	if err != nil {
		return nil, err
	}
	for {
		c.mu.Lock()
		old = c.procs[slot]
		if c.install(slot, p) {
			c.mu.Unlock()
			return old, nil
		}
		c.mu.Unlock()
		if err := p.apply(0); err != nil {
			p.stop()
			return nil, fmt.Errorf("starting PHP process %d: %w", slot, err)
		}
	}
}

// startReplace starts the replacement of a dead child, unless the cluster stops;
// Shutdown waits for it. The cluster's mu is held, so no replacement starts once
// Shutdown waits.
func (c *Cluster) startReplace(slot int, dead *proc, backoff time.Duration) {
	if c.stopping.Load() {
		return
	}
	c.replacing.Add(1)
	go c.replace(slot, dead, backoff)
}

// Shutdown drains every child (up to grace, as core.Engine.Shutdown) and ends them.
func (c *Cluster) Shutdown(grace time.Duration) {
	c.mu.Lock()
	c.stopping.Store(true)
	parked := c.parked
	c.parked = nil
	c.mu.Unlock()
	for _, r := range parked {
		answerParked(r.h, core.RefusedStopped)
	}
	c.stopOnce.Do(func() { close(c.stopped) })
	c.replacing.Wait() // a child being started is ended by its starter
	c.mu.Lock()
	debug := c.debug
	c.mu.Unlock()
	drain := func(p *proc) error {
		_, err := p.callWithin(call{Op: opShutdown, MS: grace.Milliseconds()}, grace+5*time.Second)
		return err
	}
	var debugDrained sync.WaitGroup
	if debug != nil && debug.alive.Load() {
		// Its debugged requests finish too, rather than end as lost.
		debugDrained.Go(func() { _ = drain(debug) })
	}
	_ = c.each(drain)
	debugDrained.Wait()
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	if c.debug != nil {
		procs = append(procs, c.debug)
	}
	c.mu.Unlock()
	for _, p := range procs {
		if p != nil {
			p.stop()
		}
	}
}

// Submitted is a request a child holds.
type Submitted struct {
	p      atomic.Pointer[proc] // the child holding it: another one if its first died
	handle uint64
	pool   uint32
	flags  uint32
	tried  uint64 // the slots of the children that refused it (Resubmit)
}

// Cancel withdraws the request if no PHP thread took it yet; true when it will not run.
func (s *Submitted) Cancel() bool {
	p := s.p.Load()
	if p.c.withdrawParked(s) {
		return true
	}
	return p.cancel(s.handle)
}

// ClientGone tells the child holding the request that its client left.
func (s *Submitted) ClientGone() {
	s.p.Load().clientGone(s.handle)
}

// PoolWaiting is how many threads of the request's pool wait for a request in the child
// holding it: only those can take it, for a child never takes another's requests. A child
// that does not answer within a second has none.
func (s *Submitted) PoolWaiting() int {
	raw, err := s.p.Load().callWithin(call{Op: opWaiting, Pool: s.pool}, time.Second)
	var n int
	if err != nil || json.Unmarshal(raw, &n) != nil {
		return 0
	}
	return n
}

// Resubmit hands the request to another child after its own refused it without running
// it: its worker cannot boot there (core.RefusedBootFailing, retryAfter the pause before
// the next attempt) or its queue is full (core.RefusedQueueFull). Another child may
// serve it. b is the request as first submitted. False when no other child can take it:
// the refusal stands. Called by the request's handler alone.
func (s *Submitted) Resubmit(b *core.RequestBuffer, refusal uint32, retryAfter time.Duration) bool {
	refuser := s.p.Load()
	c := refuser.c
	if c.stopping.Load() || s.flags&core.RequestOneShotWorker != 0 || refuser.slot >= 64 {
		return false
	}
	s.tried |= 1 << uint(refuser.slot)
	now := time.Now()
	c.mu.Lock()
	if refusal == core.RefusedBootFailing {
		c.noteBootFailing(refuser, s.pool, retryAfter, now)
	}
	p := c.leastLoaded(s.pool, nil, s.tried)
	if p != nil && c.failsToBoot(p, s.pool, now) {
		p = nil // it would refuse the request too
	}
	c.mu.Unlock()
	if p == nil {
		return false
	}
	packed := packSubmit((*packedPool.Get().(*[]byte))[:0], s.pool, s.flags, b)
	if p.send(s, packed) {
		return true
	}
	keepPacked(packed)
	return false
}

// Submit hands a request to the least busy child that runs the pool. Failures the child
// finds (a full queue) come back as the request's refusal.
func (c *Cluster) Submit(pool uint32, b *core.RequestBuffer, flags uint32, handle uintptr) (core.Submitted, core.Code) {
	if c.stopping.Load() {
		return nil, core.ErrStopped
	}
	c.mu.Lock()
	if !c.known(pool) {
		c.mu.Unlock()
		return nil, core.ErrUnknownPool
	}
	best := c.leastLoaded(pool, nil, 0)
	c.mu.Unlock()
	if flags&core.RequestOneShotWorker != 0 {
		if p := c.debugChild(); p != nil {
			best = p
		}
	}
	s := &Submitted{handle: uint64(handle), pool: pool, flags: flags}
	packed := packSubmit((*packedPool.Get().(*[]byte))[:0], pool, flags, b)
	for tries := 0; best != nil && tries <= c.opts.Processes; tries++ {
		if best.send(s, packed) {
			return s, core.OK
		}
		// It died since it was chosen: another child takes the request.
		c.mu.Lock()
		best = c.leastLoaded(pool, best, 0)
		c.mu.Unlock()
	}
	keepPacked(packed)
	return nil, core.ErrStopped // no child runs: the runtime waits for one (Installed)
}

// debugSlot is the slot of the child of debugged requests: one past the others.
func (c *Cluster) debugSlot() int { return c.opts.Processes }

// debugChild is the child of debugged requests, started if none runs; nil when it
// cannot start (the request then runs in the other children, as it would without it).
func (c *Cluster) debugChild() *proc {
	c.mu.Lock()
	p := c.debug
	c.mu.Unlock()
	if p != nil && p.alive.Load() {
		return p
	}
	c.debugStart.Lock()
	defer c.debugStart.Unlock()
	c.mu.Lock()
	p = c.debug
	wait := time.Until(c.debugNotBefore)
	c.mu.Unlock()
	if p != nil && p.alive.Load() {
		return p
	}
	if wait > 0 {
		// After a death, as a slot's replacement does: a crash loop costs a process
		// start per pause, not one per debugged request.
		select {
		case <-time.After(wait):
		case <-c.stopped:
			return nil
		}
	}
	p, err := c.spawn(c.debugSlot())
	if err != nil {
		c.logger().Error("the PHP process of debugged requests does not start; they run in the others", zap.Error(err))
		return nil
	}
	c.mu.Lock()
	if c.stopping.Load() {
		c.mu.Unlock()
		p.stop()
		return nil
	}
	c.debug = p
	c.mu.Unlock()
	return p
}

// leastLoaded is the live child running pool that holds the fewest requests, other
// than not and those whose slot is in the tried mask; ties go round robin. A child whose
// worker cannot boot (bootFailing) refuses the pool's requests without holding them, so
// it would look the least loaded: it is chosen only when no other child runs the pool.
// The cluster's mu is held.
func (c *Cluster) leastLoaded(pool uint32, not *proc, tried uint64) *proc {
	var best, failing *proc
	var now time.Time
	n := len(c.procs)
	start := int(c.next.Add(1) % uint64(n))
	for k := 0; k < n; k++ {
		p := c.procs[(start+k)%n]
		if p == nil || p == not || tried&(1<<uint(p.slot)) != 0 || !p.alive.Load() ||
			(pool != core.ClassicPool && !p.pools[pool]) {
			continue
		}
		if len(c.bootFailing) > 0 {
			if now.IsZero() {
				now = time.Now()
			}
			if c.failsToBoot(p, pool, now) {
				if failing == nil || p.load.Load() < failing.load.Load() {
					failing = p
				}
				continue
			}
		}
		if best == nil || p.load.Load() < best.load.Load() {
			best = p
		}
	}
	if best == nil {
		return failing
	}
	return best
}

// noteBootFailing records that a child's worker cannot boot until retryAfter from now,
// and forgets the records that expired or whose child ended. The cluster's mu is held.
func (c *Cluster) noteBootFailing(p *proc, pool uint32, retryAfter time.Duration, now time.Time) {
	for k, until := range c.bootFailing {
		if !now.Before(until) || !k.p.alive.Load() {
			delete(c.bootFailing, k)
		}
	}
	if c.bootFailing == nil {
		c.bootFailing = map[procPool]time.Time{}
	}
	c.bootFailing[procPool{p, pool}] = now.Add(max(retryAfter, minBackoff))
}

// failsToBoot tells whether a child's worker cannot boot now, as its refusals told. The
// cluster's mu is held.
func (c *Cluster) failsToBoot(p *proc, pool uint32, now time.Time) bool {
	until, ok := c.bootFailing[procPool{p, pool}]
	if ok && !now.Before(until) {
		delete(c.bootFailing, procPool{p, pool})
		return false
	}
	return ok
}

// resend gives a request that no PHP thread of a dead child had taken to another
// child, or, while none runs, to the first that takes requests (parked); false when the
// cluster stops.
func (c *Cluster) resend(h held, dead *proc) bool {
	for tries := 0; tries < len(c.procs); tries++ {
		c.mu.Lock()
		if c.stopping.Load() {
			c.mu.Unlock()
			return false
		}
		p := c.leastLoaded(submitPool(h.packed), dead, 0)
		if p == nil {
			c.park(h)
			c.mu.Unlock()
			return true
		}
		c.mu.Unlock()
		if p.send(h.s, h.packed) {
			return true
		}
	}
	return false
}

// park keeps a request for the next child that takes requests. The cluster's mu is held.
func (c *Cluster) park(h held) {
	c.parked = append(c.parked, parkedRequest{h: h, until: time.Now().Add(parkWait)})
	if !c.parkTimer {
		c.parkTimer = true
		time.AfterFunc(parkWait, c.expireParked)
	}
}

// unpark hands parked requests to the children, a child having started taking requests.
func (c *Cluster) unpark(parked []parkedRequest) {
	for _, r := range parked {
		if !c.resend(r.h, nil) {
			answerParked(r.h, core.RefusedStopped) // the cluster stops
		}
	}
}

// expireParked answers the parked requests that waited parkWait: they never ran, and no
// child came back to run them (503, as a request that waited that long for PHP to start).
func (c *Cluster) expireParked() {
	now := time.Now()
	var expired []held
	c.mu.Lock()
	keep := c.parked[:0]
	for _, r := range c.parked {
		if now.Before(r.until) {
			keep = append(keep, r)
		} else {
			expired = append(expired, r.h)
		}
	}
	c.parked = keep
	c.parkTimer = len(keep) > 0
	if c.parkTimer {
		time.AfterFunc(time.Until(keep[0].until), c.expireParked)
	}
	c.mu.Unlock()
	for _, h := range expired {
		answerParked(h, core.RefusedStopped)
	}
}

// withdrawParked withdraws a parked request (Cancel); false when it is not parked.
func (c *Cluster) withdrawParked(s *Submitted) bool {
	c.mu.Lock()
	for i, r := range c.parked {
		if r.h.s == s {
			c.parked = append(c.parked[:i], c.parked[i+1:]...)
			c.mu.Unlock()
			// Answered later, as a child's withdrawal is: the caller holds the request's lock.
			go answerParked(r.h, core.RefusedWithdrawn)
			return true
		}
	}
	c.mu.Unlock()
	return false
}

// answerParked ends a parked request with a refusal: stopped (the host answers 503) or
// withdrawn (its handler answered it).
func answerParked(h held, refusal uint32) {
	keepPacked(h.packed)
	core.CurrentHost().Respond(uintptr(h.s.handle), core.Response{Flags: core.ResponseDone | core.ResponseRefused,
		Refusal: refusal, Thread: -1}, core.FromChild)
}

// The wire's numbers for a submission failure a child reports.
func refusalOf(code core.Code) uint32 {
	switch code {
	case core.ErrQueueFull:
		return core.RefusedQueueFull
	default:
		return core.RefusedStopped
	}
}

func le64(n int64) []byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	return b[:]
}

// exitDescription says how a child ended, as a shell would.
// deathSignal names the signal that ended a process ("SIGSEGV"), "" for an exit. A
// crash handler that could not die of its signal (PID 1 of a namespace) exits with 128
// plus its number instead.
func deathSignal(state *os.ProcessState) string {
	if state == nil {
		return ""
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return unix.SignalName(ws.Signal())
	}
	if code := state.ExitCode(); code > 128 && code < 128+65 {
		return unix.SignalName(syscall.Signal(code - 128))
	}
	return ""
}

func exitDescription(state *os.ProcessState) (string, int) {
	if state == nil {
		return "unknown", -1
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by " + unix.SignalName(ws.Signal()), 128 + int(ws.Signal())
	}
	return fmt.Sprintf("exit status %d", state.ExitCode()), state.ExitCode()
}
