// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"time"

	"go.uber.org/zap"
)

// The child of debugged requests: one of its own, started at the first debug trigger, so
// a debugger or profiler extension that crashes takes only the debugged request.

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
