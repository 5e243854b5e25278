// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"time"

	"go.uber.org/zap"
)

// Rolls: a php_ini change restarts the children one at a time, each new child taking its
// slot's share of the requests before the old one drains.

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
