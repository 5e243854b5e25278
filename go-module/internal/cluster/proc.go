// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// proc is one child process, from its start to its death.
type proc struct {
	c     *Cluster
	slot  int
	cmd   *exec.Cmd
	link  *link
	taken *takenTable
	trail *trailWriter
	alive atomic.Bool
	load  atomic.Int64 // the requests it holds
	start time.Time
	// backoff is the pause before this slot's next child, if this one dies.
	backoff time.Duration

	mu       sync.Mutex
	inflight map[uint64]held // the requests it holds, by handle
	calls    map[uint64]chan reply
	cancels  map[uint64]chan bool
	nextCall uint64
	dead     bool
	exited   chan struct{} // closed once the process was reaped (watch)
	state    *os.ProcessState
	exitedAt time.Time
	// ending: stop closed the wire, and the child exits on its own; trailDone is closed
	// once its standard error ended.
	ending    atomic.Bool
	trailDone chan struct{}

	// What it counted as of its last snapshot, and whether that went to the cluster's
	// retired counts at its death (counters.go; guarded by the cluster's mu).
	counts        *counts
	countsRetired bool
	// pools are the worker pools it runs, version the cluster's state it was brought
	// to, and noBackground says its share leaves out the background workers (a roll
	// replaces it); guarded by the cluster's mu. applying serialises its Applies.
	pools        map[uint32]bool
	version      uint64
	noBackground bool
	applying     sync.Mutex
}

// spawn starts the child of slot i and brings it to the cluster's state: its engine,
// stores, classic threads, autoscaling, deadlines and workers.
func (c *Cluster) spawn(i int) (*proc, error) {
	return c.spawnWithBackoff(i, minBackoff)
}

func (c *Cluster) spawnWithBackoff(i int, backoff time.Duration) (*proc, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the socket to a PHP process: %w", err)
	}
	// Our end non-blocking, so its reads and writes wait in Go's poller.
	_ = syscall.SetNonblock(fds[0], true)
	ours, theirs := os.NewFile(uintptr(fds[0]), "php_worker wire"), os.NewFile(uintptr(fds[1]), "php_worker wire")
	cmd := exec.Command(c.opts.Command[0], c.opts.Command[1:]...)
	if cmd.Path == selfExe {
		// Its command line names the binary by its path, as before an upgrade replaced it.
		if exe, err := os.Executable(); err == nil {
			cmd.Args[0] = exe
		}
	}
	// Standard error through a pipe copied by a goroutine of our own, not one exec
	// makes: cmd.Wait would wait for that one's copy, which a process the script started
	// may hold open long after the child is gone, and Wait must return at its end.
	errRead, errWrite, err := os.Pipe()
	if err != nil {
		ours.Close()
		theirs.Close()
		return nil, fmt.Errorf("the standard error of a PHP process: %w", err)
	}
	trail := &trailWriter{out: os.Stderr}
	// Its standard output is the server's, as in one process: php://stdout of a
	// scheduled job or a background worker writes there.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, errWrite
	taken, table, err := newTakenTable()
	if err != nil {
		ours.Close()
		theirs.Close()
		errRead.Close()
		errWrite.Close()
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{theirs, table} // descriptors 3 and 4
	// The child dies with the Caddy process, and a terminal's Ctrl-C (sent to the whole
	// process group) reaches only the Caddy process, which drains the children itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	var cpus []int
	if i < len(c.cpus) {
		cpus = c.cpus[i] // the debug child, past the slots, goes where the kernel puts it
	}
	pinned, err := startOn(cmd, cpus)
	theirs.Close()
	table.Close()
	errWrite.Close()
	if err != nil {
		ours.Close()
		errRead.Close()
		taken.unmap()
		return nil, fmt.Errorf("starting a PHP process: %w", err)
	}
	p := &proc{
		c: c, slot: i, cmd: cmd, link: newLink(ours), taken: taken, trail: trail, start: time.Now(), backoff: backoff,
		inflight: map[uint64]held{}, calls: map[uint64]chan reply{}, cancels: map[uint64]chan bool{},
		exited: make(chan struct{}), trailDone: make(chan struct{}), pools: map[uint32]bool{},
	}
	p.alive.Store(true)
	go func() {
		_, _ = io.Copy(trail, errRead)
		errRead.Close()
		close(p.trailDone)
	}()
	go p.watch()
	go p.readLoop(newReader(ours))
	go p.pings()

	c.mu.Lock()
	settings := c.opts.Settings
	c.mu.Unlock()
	debug := c.logger().Core().Enabled(zap.DebugLevel)
	_, err = p.call(call{Op: opStart, Settings: settings, Debug: debug, Build: buildID()})
	if err == nil {
		err = p.apply(0)
	}
	if err != nil {
		if errors.Is(err, errProcessGone) {
			err = fmt.Errorf("%w (%s)", err, p.exitedHow(time.Second))
		}
		p.stop()
		return nil, fmt.Errorf("starting PHP process %d: %w", i, err)
	}
	fields := []zap.Field{zap.Int("process", i), zap.Int("pid", cmd.Process.Pid)}
	if pinned {
		fields = append(fields, zap.String("cpus", cpuList(cpus)))
	}
	c.logger().Info("PHP process started", fields...)
	return p, nil
}

// watch reaps the child when it ends, and ends its wire's reads then: the death is
// seen whatever holds the other end of the socket (a fork of the child, or a program it
// started before the wire was close-on-exec). The read loop takes what the child wrote
// before its end, then answers what it held.
func (p *proc) watch() {
	_ = p.cmd.Wait()
	p.state, p.exitedAt = p.cmd.ProcessState, time.Now()
	close(p.exited)
	p.link.endReads()
}

// exitedHow says how the process ended ("killed by SIGABRT", "exit status 1"), once its
// death was seen, waiting at most d for it.
func (p *proc) exitedHow(d time.Duration) string {
	select {
	case <-p.exited:
		how, _ := exitDescription(p.state)
		return how
	case <-time.After(d):
		return "how is not known yet"
	}
}

// died ends and reaps the child, answers every request it held and, unless the cluster
// stops, starts its replacement after the slot's pause.
func (p *proc) died() {
	p.alive.Store(false)
	p.link.close()
	// The child is gone before its taken table is read: one declared dead while it runs
	// (its wire failed) could otherwise hand a request to a PHP thread after the read,
	// and that request, resent elsewhere, would run twice. A child that stop ends exits
	// on its own once its wire closes (stop kills it if it lingers).
	if !p.ending.Load() {
		p.kill()
	}
	<-p.exited
	p.mu.Lock()
	p.dead = true
	var lost, answered []uint64
	var waiting []held
	for handle, h := range p.inflight {
		switch {
		case h.withdrawn:
			// Its client was answered; it must not run elsewhere. Its end frees it.
			keepPacked(h.packed)
			answered = append(answered, handle)
			delete(p.inflight, handle)
		case !p.taken.taken(h.slot, handle):
			waiting = append(waiting, h)
			delete(p.inflight, handle)
		case !h.reading:
			keepPacked(h.packed)
			lost = append(lost, handle)
			delete(p.inflight, handle)
		}
	}
	p.taken.unmap()
	for id, ch := range p.calls {
		close(ch)
		delete(p.calls, id)
	}
	for id, ch := range p.cancels {
		close(ch)
		delete(p.cancels, id)
	}
	p.mu.Unlock()
	p.c.retireCounts(p)
	p.load.Store(0)
	for _, h := range append(lost, answered...) {
		p.answerLost(h)
	}
	// Requests no PHP thread had taken go to the other children, as if sent there.
	for _, h := range waiting {
		if !p.c.resend(h, p) {
			keepPacked(h.packed)
			p.answerLost(h.s.handle)
		}
	}
	// Its last lines of standard error, the crash trail among them, unless a program it
	// started holds the pipe open.
	select {
	case <-p.trailDone:
	case <-time.After(time.Second):
	}
	p.trail.end()
	how, status := exitDescription(p.state)
	var debugPause time.Duration
	p.c.mu.Lock()
	debugChild := p.slot == p.c.debugSlot() && p.c.debug == p
	if debugChild {
		p.c.debug = nil // the next debugged request starts another, after a pause
		previous := p.c.debugBackoff
		p.c.debugBackoff = minBackoff
		if time.Since(p.start) < stableAfter && previous > 0 {
			p.c.debugBackoff = min(2*previous, maxBackoff)
		}
		p.c.debugNotBefore = time.Now().Add(p.c.debugBackoff)
		debugPause = p.c.debugBackoff
	}
	installed := p.slot < len(p.c.procs) && p.c.procs[p.slot] == p
	p.c.mu.Unlock()
	if debugChild && !p.c.stopping.Load() {
		p.c.crashes.Add(1)
		p.c.logger().Error("the PHP process of debugged requests died; the requests it ran were answered 502",
			append([]zap.Field{zap.Int("process", p.slot), zap.Int("pid", p.cmd.Process.Pid), zap.String("how", how),
				zap.Int("status", status), zap.Int("requests_lost", len(lost)), zap.Duration("restart_in", debugPause)},
				p.trail.fields(deathSignal(p.state), p.exitedAt)...)...)
		return
	}
	if p.c.stopping.Load() || !installed {
		return // the cluster stops, or the child was still starting: its starter says why
	}
	p.c.crashes.Add(1)
	backoff := minBackoff
	if time.Since(p.start) < stableAfter {
		backoff = min(2*p.backoff, maxBackoff)
	}
	fields := []zap.Field{zap.Int("process", p.slot), zap.Int("pid", p.cmd.Process.Pid), zap.String("how", how),
		zap.Int("status", status), zap.Int("requests_lost", len(lost)), zap.Int("requests_moved", len(waiting)),
		zap.Duration("restart_in", backoff)}
	p.c.logger().Error("a PHP process died; the requests it ran were answered 502, and it is replaced",
		append(fields, p.trail.fields(deathSignal(p.state), p.exitedAt)...)...)
	p.c.mu.Lock()
	p.c.startReplace(p.slot, p, backoff)
	p.c.mu.Unlock()
}

// replace starts a new child in a dead one's slot after a pause, trying again (with
// growing pauses) while it fails to start.
func (c *Cluster) replace(slot int, dead *proc, backoff time.Duration) {
	defer c.replacing.Done()
	wait := backoff
	for {
		select {
		case <-time.After(wait):
		case <-c.stopped:
			return
		}
		if c.stopping.Load() {
			return
		}
		p, err := c.spawnWithBackoff(slot, backoff)
		for err == nil {
			c.mu.Lock()
			if c.procs[slot] != dead || c.stopping.Load() {
				c.mu.Unlock()
				p.stop() // another child took the slot (a rolling restart), or the cluster stops
				return
			}
			if c.install(slot, p) {
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
			// The state changed while it started: it is brought to the new one first.
			if err = p.apply(0); err != nil {
				p.stop()
			}
		}
		c.logger().Error("a PHP process does not start; trying again", zap.Int("process", slot), zap.Error(err))
		backoff = min(2*backoff, maxBackoff)
		wait = backoff
	}
}

// retire ends a child that a new one replaced: it takes no new request, finishes those
// it holds (up to grace, as a shutdown), and ends.
func (p *proc) retire(grace time.Duration) {
	p.alive.Store(false)
	deadline := time.Now().Add(grace)
	for p.load.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	p.mu.Lock()
	dead := p.dead
	p.mu.Unlock()
	if !dead {
		left := max(0, time.Until(deadline))
		_, _ = p.callWithin(call{Op: opShutdown, MS: left.Milliseconds()}, left+5*time.Second)
	}
	p.stop()
}

// kill ends the child at once.
func (p *proc) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
	}
}

// stop ends the child: it exits when its wire closes; killed if it lingers.
func (p *proc) stop() {
	p.ending.Store(true)
	p.link.close()
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		p.kill()
		<-p.exited
	}
}
