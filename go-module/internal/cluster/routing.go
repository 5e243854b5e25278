// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/php-worker/php_worker/go-module/internal/core"
)

// Routing: which child takes a request (the least loaded that runs its pool, passing by
// one whose worker cannot boot), and what becomes of a request whose child died before
// a PHP thread took it (another child runs it, or it waits for one: parked).

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
