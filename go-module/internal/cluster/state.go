// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"encoding/json"
	"slices"

	"github.com/php-worker/php_worker/go-module/internal/core"
)

// The cluster's state (core.State) and each child's share of it: the threads divided
// among the children, HTTP and task workers in every child with their num divided, a
// background worker's copies divided rather than multiplied.

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
