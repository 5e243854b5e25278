// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

// Package cluster runs PHP in supervised child processes (the php_worker option
// `processes N`): the Caddy process stays the one HTTP server and hands each request
// to a child over a Unix socket (wire.go); each child runs an engine with its share of
// the PHP threads (child.go). A child that dies costs only the requests it held: they
// are answered 502, and the child is replaced, with a growing pause when it dies over
// and over. Cluster has the methods of core.Engine, so the runtime drives either.
//
// The Caddy process's side, by concern:
//   - cluster.go: the cluster, its children's slots, their start and replacement, its end;
//   - state.go: the state the runtime applies (core.State) and each child's share of it;
//   - routing.go: which child takes a request, and requests whose child died untaken;
//   - roll.go: php_ini changes, one child at a time;
//   - debug.go: the child of debugged requests;
//   - control.go: profiles and scheduled jobs;
//   - stats.go, counters.go: the merged snapshot, and counters that never go back;
//   - proc.go: one child, from its start to its death;
//   - requests.go, calls.go: a child's requests and control calls;
//   - trail.go: a child's standard error and crash trail;
//   - wire.go, packing.go, taken.go: the frames, their payloads, the taken table.
//
// The child's side is child.go (its requests are the Rust core's: core.OpenWire).
package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/php-worker/php_worker/go-module/internal/core"
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
	// PinCPUs runs each child on CPUs of its own among those this process may use
	// (cpus.go), when there are at least as many as children.
	PinCPUs bool
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
	// cpus are the CPUs of each slot's child (none: the kernel places it).
	cpus [][]int
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
	if opts.PinCPUs {
		c.cpus = c.shareCPUs()
	}
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

// shareCPUs splits the CPUs this process may use among the children, or says why not.
func (c *Cluster) shareCPUs() [][]int {
	cpus, err := processCPUs()
	if err != nil {
		c.logger().Warn("cpu_affinity: the kernel places the PHP processes", zap.Error(err))
		return nil
	}
	shares := cpuShares(cpus, c.opts.Processes)
	if shares == nil {
		c.logger().Info("cpu_affinity: fewer CPUs than PHP processes; the kernel places them",
			zap.Int("cpus", len(cpus)), zap.Int("processes", c.opts.Processes))
	}
	return shares
}

func (c *Cluster) logger() *zap.Logger {
	if c.opts.Logger != nil {
		return c.opts.Logger()
	}
	return zap.NewNop()
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
