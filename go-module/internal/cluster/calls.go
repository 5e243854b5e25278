// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"encoding/json"
	"errors"
	"time"

	"go.uber.org/zap"
)

// Control calls to a child: a JSON call and its reply over the wire, with its bound, and
// the pings that find a child that stopped answering.

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
