// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
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

	"github.com/php-worker/php_worker/go-module/internal/core"
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

// held is a request a child holds.
type held struct {
	s *Submitted
	// packed is the submission as sent: if the child dies before a PHP thread took
	// the request (its slot in the taken table says), another child runs it.
	packed []byte
	slot   uint32
	// reading is true while the Caddy process reads body bytes for it.
	reading bool
	// withdrawn: the child withdrew it (Cancel); its client was answered already.
	withdrawn bool
	// responded: response data of it came, so it runs or ran: a withdraw is refused
	// without asking the child (see respondedTo).
	responded bool
}

// packedPool recycles the kept submissions.
var packedPool = sync.Pool{New: func() any { return new([]byte) }}

func keepPacked(b []byte) {
	if cap(b) <= 64<<10 {
		b = b[:0]
		packedPool.Put(&b)
	}
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
	err = cmd.Start()
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
	c.logger().Info("PHP process started", zap.Int("process", i), zap.Int("pid", cmd.Process.Pid))
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

// apply brings the child to its share of the cluster's state (Cluster.shareOf), the
// latest whenever it is called: two applies to one child never cross. With wait, it
// also waits for the threads of the pools it ends to finish, up to wait.
func (p *proc) apply(wait time.Duration) error {
	p.applying.Lock()
	defer p.applying.Unlock()
	c := p.c
	c.mu.Lock()
	share, version := c.shareOf(c.state, p), c.version
	c.mu.Unlock()
	raw, err := json.Marshal(share)
	if err != nil {
		return err
	}
	// No bound: a resize waits for busy threads; a child that stops answering is
	// killed by its pings, which ends the call.
	if _, err := p.call(call{Op: opApply, State: raw, MS: wait.Milliseconds()}); err != nil {
		return err
	}
	c.mu.Lock()
	p.version = version
	p.pools = make(map[uint32]bool, len(share.Pools))
	for _, pl := range share.Pools {
		p.pools[pl.ID] = true
	}
	c.mu.Unlock()
	return nil
}

var errProcessGone = errors.New("the PHP process ended")

// call runs a control call and waits for its reply. A call that makes the child wait
// (a resize waits for busy threads, a job for its script) has no bound of its own: a
// child that stops answering is killed by its pings, which ends every call.
func (p *proc) call(req call) (json.RawMessage, error) {
	d := time.Duration(0)
	if req.Op == opStats {
		// Behind the probes, the metrics and the status page: a child that does not
		// answer at once shows as not answering rather than hold them up.
		d = statsTimeout
	}
	return p.callWithin(req, d)
}

// statsTimeout bounds a child's answer to a snapshot.
const statsTimeout = 2 * time.Second

// DefaultPingTimeout is how long a child may leave its pings unanswered before it is
// killed as hung (Options.PingTimeout).
const DefaultPingTimeout = 10 * time.Second

// pings checks that the child answers, a ping every fifth of the ping timeout: one that
// answers none for the timeout (stopped by SIGSTOP or a debugger, or deadlocked) is
// killed, which fails every call and request waiting on it, and is replaced as a crash
// is. Its PHP threads play no part: a child whose threads are all busy answers at once.
func (p *proc) pings() {
	timeout := p.c.opts.PingTimeout
	if timeout <= 0 {
		timeout = DefaultPingTimeout
	}
	t := time.NewTicker(timeout / 5)
	defer t.Stop()
	for {
		select {
		case <-p.exited:
			return
		case <-t.C:
		}
		_, err := p.callWithin(call{Op: opPing}, timeout)
		switch {
		case errors.Is(err, errCallTimeout) && !p.ending.Load():
			p.c.logger().Error("a PHP process answered no ping; killing it as hung", zap.Int("process", p.slot),
				zap.Int("pid", p.cmd.Process.Pid), zap.Duration("timeout", timeout))
			p.kill()
			return
		case err != nil:
			return // it ended, or ends
		}
	}
}

var errCallTimeout = errors.New("the PHP process did not answer in time")

// callWithin is call, giving up after d (0: never). For the calls that end a child,
// whose engine may wait on a thread blocked in a body read or a stuck call.
func (p *proc) callWithin(req call, d time.Duration) (json.RawMessage, error) {
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	ch := make(chan reply, 1)
	p.mu.Lock()
	if p.dead {
		p.mu.Unlock()
		return nil, errProcessGone
	}
	p.nextCall++
	id := p.nextCall
	p.calls[id] = ch
	p.mu.Unlock()
	// Posted: a call never waits for a child that stopped reading its wire.
	if !p.link.post(kindCall, id, raw) {
		p.mu.Lock()
		delete(p.calls, id)
		p.mu.Unlock()
		return nil, errProcessGone
	}
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	var rep reply
	var ok bool
	select {
	case rep, ok = <-ch:
	case <-timeout:
		p.mu.Lock()
		delete(p.calls, id)
		p.mu.Unlock()
		return nil, errCallTimeout
	}
	if !ok {
		return nil, errProcessGone
	}
	if rep.Error != "" {
		return nil, errors.New(rep.Error)
	}
	return rep.Result, nil
}

// submit sends a request; false when the child is gone.
func (p *proc) submit(s *Submitted, pool, flags uint32, b *core.RequestBuffer) bool {
	packed := packSubmit((*packedPool.Get().(*[]byte))[:0], pool, flags, b)
	return p.send(s, packed)
}

// send hands a packed submission to the child, which owns it from then on.
func (p *proc) send(s *Submitted, packed []byte) bool {
	handle := s.handle
	p.mu.Lock()
	if p.dead {
		p.mu.Unlock()
		return false
	}
	slot := p.taken.take()
	setSubmitSlot(packed, slot)
	p.inflight[handle] = held{s: s, packed: packed, slot: slot}
	s.p.Store(p)
	p.load.Add(1)
	p.mu.Unlock()
	if p.link.send(kindSubmit, handle, packed) {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if h, ok := p.inflight[handle]; ok {
		delete(p.inflight, handle)
		p.taken.release(h.slot)
		p.load.Add(-1)
		return false
	}
	return true // the child died meanwhile, and its cleanup took the request on
}

// cancel withdraws a request; see core.Request.Cancel.
func (p *proc) cancel(handle uint64) bool {
	ch := make(chan bool, 1)
	p.mu.Lock()
	if h, ok := p.inflight[handle]; p.dead || !ok || h.responded {
		// Answered, or answering: it cannot be withdrawn, and the read loop may be
		// delivering its response now, under the request's lock the caller holds,
		// ahead of any verdict the child would send.
		p.mu.Unlock()
		return false
	}
	p.cancels[handle] = ch
	p.mu.Unlock()
	if !p.link.send(kindCancel, handle, nil) {
		return false
	}
	withdrawn, ok := <-ch
	return ok && withdrawn
}

// clientGone tells the child that a request's client left.
func (p *proc) clientGone(handle uint64) {
	p.link.post(kindClientGone, handle, nil)
}

// readLoop takes the child's frames until it ends, then answers what it held.
func (p *proc) readLoop(r *reader) {
	host := core.CurrentHost()
	var headers []core.Header
	for {
		kind, id, payload, err := r.next()
		if err != nil {
			break
		}
		switch kind {
		case kindRespond:
			var resp core.Response
			resp, headers, err = unpackRespond(payload, headers)
			if err != nil {
				p.c.logger().Error("a PHP process sent a malformed response; ending it", zap.Int("process", p.slot), zap.Error(err))
				p.kill()
				continue
			}
			p.respondedTo(id, resp.Flags&core.ResponseDone != 0 && resp.Flags&core.ResponseRefused != 0 &&
				resp.Refusal == core.RefusedWithdrawn)
			if resp.Flags&core.ResponseDone != 0 && !p.finish(id) {
				continue // already answered (it cannot be, but never twice)
			}
			if !host.Respond(uintptr(id), resp, core.FromChild) && resp.Flags&core.ResponseDone == 0 {
				p.link.post(kindClientGone, id, nil)
			}
		case kindStore:
			// The table answers from memory, at once: in the read loop, in order.
			reply, err := core.RunSharedStore(payload)
			if err != nil || len(reply) > maxFrame {
				reply = nil // the child's operation fails as on an unreachable table
			}
			p.link.post(kindStoreReply, id, reply)
		case kindReadBody:
			if len(payload) >= 4 {
				p.readBody(id, int(binary.LittleEndian.Uint32(payload)))
			}
		case kindLog:
			level, msg, fields, err := unpackLog(payload)
			if err != nil {
				continue
			}
			handle := uintptr(0)
			p.mu.Lock()
			if _, ok := p.inflight[id]; ok {
				handle = uintptr(id)
			}
			p.mu.Unlock()
			log := host.Logger(handle)
			zf := []zap.Field{zap.Int("process", p.slot)}
			if len(fields) > 2 {
				zf = append(zf, core.LogFields(fields)...)
			}
			log.Log(level, msg, zf...)
		case kindSubmitFailed:
			p.respondedTo(id, false) // the refusal answers the client
			if len(payload) >= 4 && p.finish(id) {
				code := core.Code(int32(binary.LittleEndian.Uint32(payload)))
				host.Respond(uintptr(id), core.Response{Flags: core.ResponseDone | core.ResponseRefused,
					Refusal: refusalOf(code), Thread: -1}, core.FromChild)
			}
		case kindCancelled:
			withdrawn := len(payload) > 0 && payload[0] == 1
			p.mu.Lock()
			// Only while its withdraw waits: once the request's DONE came (it can
			// overtake this verdict), the withdraw was answered, and the handle may
			// be another request's already.
			if _, waits := p.cancels[id]; waits && withdrawn {
				if h, ok := p.inflight[id]; ok {
					h.withdrawn = true
					p.inflight[id] = h
				}
			}
			p.mu.Unlock()
			p.answerCancel(id, withdrawn)
		case kindReply:
			var rep reply
			if err := json.Unmarshal(payload, &rep); err != nil {
				rep.Error = err.Error()
			}
			p.mu.Lock()
			ch := p.calls[id]
			delete(p.calls, id)
			p.mu.Unlock()
			if ch != nil {
				ch <- rep
			}
		}
	}
	p.died()
}

// respondedTo notes that response data of handle came, before it is delivered. A
// withdraw waiting for the child's verdict may hold the request's lock, which delivering
// takes, and that verdict comes behind this frame: the frame decides it (a request
// that answers runs, unless its answer is the withdraw's refusal), so it is given
// first. Under the same lock as cancel's check, so a withdraw that comes later is
// refused at once rather than waiting for a verdict the blocked read loop cannot read.
func (p *proc) respondedTo(handle uint64, withdrawn bool) {
	p.mu.Lock()
	if h, ok := p.inflight[handle]; ok {
		h.responded = true
		p.inflight[handle] = h
	}
	ch := p.cancels[handle]
	delete(p.cancels, handle)
	p.mu.Unlock()
	if ch != nil {
		ch <- withdrawn // buffered: never blocks the read loop
	}
}

// answerCancel gives a waiting Cancel of handle its verdict, if one waits.
func (p *proc) answerCancel(handle uint64, withdrawn bool) {
	p.mu.Lock()
	ch := p.cancels[handle]
	delete(p.cancels, handle)
	p.mu.Unlock()
	if ch != nil {
		ch <- withdrawn // buffered: never blocks the read loop
	}
}

// finish ends a request's stay in the child (its DONE); false when it was not there.
func (p *proc) finish(handle uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.inflight[handle]
	if !ok {
		return false
	}
	keepPacked(h.packed)
	p.taken.release(h.slot)
	delete(p.inflight, handle)
	p.load.Add(-1)
	return true
}

// readBody reads body bytes for the child on a goroutine of its own: the client may be
// slow. A request whose child died meanwhile is answered once the read ends, so its
// handle is never reused under the read.
func (p *proc) readBody(handle uint64, n int) {
	p.mu.Lock()
	h, ok := p.inflight[handle]
	if !ok || p.dead {
		p.mu.Unlock()
		return
	}
	h.reading = true
	p.inflight[handle] = h
	p.mu.Unlock()
	go func() {
		host := core.CurrentHost()
		buf := make([]byte, max(0, min(n, 1<<20)))
		got := host.ReadBody(uintptr(handle), buf)
		if got < 0 {
			p.link.send(kindBody, handle, le64(-1))
		} else {
			p.link.send(kindBody, handle, le64(int64(got)), buf[:got])
		}
		p.mu.Lock()
		h, held := p.inflight[handle]
		orphan := held && p.dead
		if held {
			h.reading = false
			p.inflight[handle] = h
		}
		if orphan {
			delete(p.inflight, handle)
		}
		p.mu.Unlock()
		if orphan {
			p.answerLost(handle)
		}
	}()
}

// answerLost answers a request the dead child held: the host writes a 502.
func (p *proc) answerLost(handle uint64) {
	core.CurrentHost().Respond(uintptr(handle), core.Response{Flags: core.ResponseDone | core.ResponseRefused,
		Refusal: core.RefusedProcessDied, Thread: -1}, core.FromChild)
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

// trailWriter passes a child's standard error on, line by line, and keeps the crash
// trail line (rust-core/csrc/crash.c) a PHP thread writes when it gets a fatal signal,
// so the log line of the child's death names the request and the PHP code.
type trailWriter struct {
	out    io.Writer
	mu     sync.Mutex
	line   []byte
	last   map[string]any
	lastAt time.Time // when last came
}

// trailWindow is how long before a child's death its trail may come: the handler writes
// it and raises the signal at once.
const trailWindow = 5 * time.Second

// trailMessage starts the trail line's message.
const trailMessage = "PHP thread received a fatal signal"

func (w *trailWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(w.line) < 1<<20 {
				w.line = append(w.line, b...)
			}
			break
		}
		w.line = append(w.line, b[:i+1]...)
		b = b[i+1:]
		w.take(w.line)
		w.line = w.line[:0]
	}
	return n, nil
}

func (w *trailWriter) take(line []byte) {
	_, _ = w.out.Write(line)
	if !bytes.Contains(line, []byte(trailMessage)) {
		return
	}
	var m map[string]any
	if json.Unmarshal(line, &m) == nil {
		w.last, w.lastAt = m, time.Now()
	}
}

// end passes on an unfinished last line (a trail cut short by a second fault).
func (w *trailWriter) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.line) > 0 {
		w.take(append(w.line, '\n'))
		w.line = w.line[:0]
	}
}

// fields are the trail's fields for the log line of a death by signal (its name, ""
// for an exit) at died: which signal, request and PHP code. Any line of standard error
// can quote the trail's message (an app's JSON log line with user input in it), so a
// trail counts only if it names the signal the child died of and came within
// trailWindow before.
func (w *trailWriter) fields(signal string, died time.Time) []zap.Field {
	w.mu.Lock()
	defer w.mu.Unlock()
	if named, _ := w.last["signal"].(string); named == "" || named != signal || died.Sub(w.lastAt) > trailWindow {
		return nil
	}
	var out []zap.Field
	for _, key := range []string{"signal", "thread", "method", "uri", "script", "php_function", "php_file", "php_line"} {
		if v, ok := w.last[key]; ok {
			out = append(out, zap.Any(key, v))
		}
	}
	return out
}
