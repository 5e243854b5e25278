// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// State is everything an engine runs but its settings (php_ini, which need a new
// engine): threads, limits, stores and worker pools, as one value. The runtime gives
// its engine the whole desired state at each change (Engine.Apply); the engine makes
// the changes from the state it runs to that one, and nothing else. A cluster of child
// processes gives each child its share of the same value, so a child started at any
// moment gets all of it in one call, and no change made while it started is lost.
type State struct {
	// Classic is the number of classic threads.
	Classic int `json:"classic"`
	// MaxThreads is the most PHP threads autoscaling may run (0: none added); an extra
	// thread ends after MaxIdle without a request.
	MaxThreads int           `json:"max_threads"`
	MaxIdle    time.Duration `json:"max_idle"`
	// TimeoutGrace is the hard deadline past PHP's time limit (negative: none);
	// MaxStuck, how many stuck threads get a replacement.
	TimeoutGrace time.Duration `json:"timeout_grace"`
	MaxStuck     int           `json:"max_stuck"`
	// The capacities of the shared table and of each thread's local store, in bytes.
	SharedStore int64 `json:"shared_store"`
	LocalStore  int64 `json:"local_store"`
	// Pools are the worker pools, by id.
	Pools []PoolState `json:"pools"`
}

// PoolState is a worker pool in a State.
type PoolState struct {
	ID uint32 `json:"id"`
	// Spec is the worker spec (php_worker_pool_new's JSON) of the generation that takes
	// the pool's requests, and Generation its number. The host numbers generations, so
	// every process of a cluster knows one by the same number. A Generation above the
	// running one restarts the pool: the new generation boots beside the old, which
	// serves until it is ready.
	Spec       json.RawMessage `json:"spec"`
	Generation uint32          `json:"generation"`
	// Staged, when set, is a generation that boots beside the running one and takes no
	// request until a later state makes it the pool's Generation (a reload's new
	// workers, while the old config still serves). Dropped from a later state, it ends.
	Staged *StagedGeneration `json:"staged,omitempty"`
}

// StagedGeneration is a generation booted ahead of taking requests.
type StagedGeneration struct {
	Generation uint32          `json:"generation"`
	Spec       json.RawMessage `json:"spec"`
}

// Pool is the pool id of s, or nil.
func (s *State) Pool(id uint32) *PoolState {
	for i := range s.Pools {
		if s.Pools[i].ID == id {
			return &s.Pools[i]
		}
	}
	return nil
}

// changeKind is what one change does to an engine.
type changeKind int

const (
	changeStores changeKind = iota
	changeAutoscale
	changeDeadlines
	changeClassic
	changeDeletePool
	changeNewPool
	changeRestartPool // the generation takes requests as it boots (activate)
	changeStagePool   // the generation boots, staged
	changeActivatePool
	changeDiscardPool
)

// change is one call that takes an engine a step from the state it runs towards the
// one asked.
type change struct {
	kind       changeKind
	pool       uint32
	generation uint32
	spec       json.RawMessage // the spec without its generation
}

// changes lists the calls that take an engine from state from (nil: a new engine,
// which runs nothing yet) to state to, in the order they are made: the stores, limits
// and classic threads first, then the pools that go, then each pool by id.
func changes(from *State, to *State) []change {
	var out []change
	fresh := from == nil
	if fresh {
		from = &State{}
	}
	if fresh || from.SharedStore != to.SharedStore || from.LocalStore != to.LocalStore {
		out = append(out, change{kind: changeStores})
	}
	if fresh || from.MaxThreads != to.MaxThreads || from.MaxIdle != to.MaxIdle {
		out = append(out, change{kind: changeAutoscale})
	}
	if fresh || from.TimeoutGrace != to.TimeoutGrace || from.MaxStuck != to.MaxStuck {
		out = append(out, change{kind: changeDeadlines})
	}
	if fresh || from.Classic != to.Classic {
		out = append(out, change{kind: changeClassic})
	}
	for _, f := range from.Pools {
		if to.Pool(f.ID) == nil {
			out = append(out, change{kind: changeDeletePool, pool: f.ID})
		}
	}
	for _, t := range to.Pools {
		f := from.Pool(t.ID)
		var staged *StagedGeneration
		switch {
		case f == nil:
			out = append(out, change{kind: changeNewPool, pool: t.ID, generation: t.Generation, spec: t.Spec})
		case f.Generation == t.Generation:
			staged = f.Staged
		case f.Staged != nil && f.Staged.Generation == t.Generation:
			out = append(out, change{kind: changeActivatePool, pool: t.ID, generation: t.Generation})
		default:
			// The engine's restart discards the generation it had staged, if any.
			out = append(out, change{kind: changeRestartPool, pool: t.ID, generation: t.Generation, spec: t.Spec})
		}
		switch {
		case t.Staged != nil && (staged == nil || staged.Generation != t.Staged.Generation):
			out = append(out, change{kind: changeStagePool, pool: t.ID, generation: t.Staged.Generation, spec: t.Staged.Spec})
		case t.Staged == nil && staged != nil:
			out = append(out, change{kind: changeDiscardPool, pool: t.ID, generation: staged.Generation})
		}
	}
	return out
}

// record makes s what the engine runs once change c, made to reach state to, is made.
func (s *State) record(c change, to *State) {
	pool := s.Pool(c.pool)
	switch c.kind {
	case changeStores:
		s.SharedStore, s.LocalStore = to.SharedStore, to.LocalStore
	case changeAutoscale:
		s.MaxThreads, s.MaxIdle = to.MaxThreads, to.MaxIdle
	case changeDeadlines:
		s.TimeoutGrace, s.MaxStuck = to.TimeoutGrace, to.MaxStuck
	case changeClassic:
		s.Classic = to.Classic
	case changeDeletePool:
		s.Pools = slices.DeleteFunc(s.Pools, func(p PoolState) bool { return p.ID == c.pool })
	case changeNewPool:
		s.Pools = append(s.Pools, PoolState{ID: c.pool, Spec: c.spec, Generation: c.generation})
		slices.SortFunc(s.Pools, func(a, b PoolState) int { return int(a.ID) - int(b.ID) })
	case changeRestartPool:
		pool.Spec, pool.Generation, pool.Staged = c.spec, c.generation, nil
	case changeStagePool:
		pool.Staged = &StagedGeneration{Generation: c.generation, Spec: c.spec}
	case changeActivatePool:
		pool.Spec, pool.Generation, pool.Staged = pool.Staged.Spec, pool.Staged.Generation, nil
	case changeDiscardPool:
		pool.Staged = nil
	}
}

// numbered is a worker spec with its generation's number in it.
func numbered(spec json.RawMessage, generation uint32) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(spec, &fields); err != nil {
		return nil, fmt.Errorf("a worker spec is not a JSON object: %w", err)
	}
	fields["generation"] = json.RawMessage(fmt.Sprint(generation))
	return json.Marshal(fields)
}

// Apply brings the engine to state s: it makes the changes from the state it runs
// (nothing before the first Apply) and returns those that failed. A change that failed
// is not recorded as made: the next Apply tries it again.
func (e *Engine) Apply(s State) error {
	e.applyMu.Lock()
	defer e.applyMu.Unlock()
	from := e.applied
	if from == nil {
		e.applied = &State{}
	}
	return reach(e.applied, from, &s, func(c change) error { return e.make(c, &s) })
}

// reach makes the changes from state from (nil: a new engine) to state to with make,
// recording in applied each one made.
func reach(applied, from, to *State, make func(change) error) error {
	var errs []error
	for _, c := range changes(from, to) {
		if err := make(c); err != nil {
			errs = append(errs, err)
			continue
		}
		applied.record(c, to)
	}
	return errors.Join(errs...)
}

// Applied is the state the engine runs, as its Applies made it.
func (e *Engine) Applied() State {
	e.applyMu.Lock()
	defer e.applyMu.Unlock()
	if e.applied == nil {
		return State{}
	}
	out := *e.applied
	out.Pools = slices.Clone(out.Pools)
	return out
}

// PoolError is a change to one worker pool that failed.
type PoolError struct {
	Pool uint32
	Err  error
}

func (e *PoolError) Error() string { return fmt.Sprintf("worker pool %d: %v", e.Pool, e.Err) }
func (e *PoolError) Unwrap() error { return e.Err }

// make makes one change.
func (e *Engine) make(c change, to *State) error {
	err := e.makeUnnamed(c, to)
	if err != nil && c.kind >= changeDeletePool {
		err = &PoolError{Pool: c.pool, Err: err}
	}
	return err
}

func (e *Engine) makeUnnamed(c change, to *State) error {
	switch c.kind {
	case changeStores:
		ConfigureStores(to.SharedStore, to.LocalStore)
		return nil
	case changeAutoscale:
		return e.autoscale(to.MaxThreads, to.MaxIdle)
	case changeDeadlines:
		return e.setDeadlines(to.TimeoutGrace, to.MaxStuck)
	case changeClassic:
		return e.resizeClassic(to.Classic)
	case changeDeletePool:
		return e.deletePool(c.pool)
	case changeActivatePool:
		return e.activatePool(c.pool, c.generation)
	case changeDiscardPool:
		return e.discardPool(c.pool, c.generation)
	}
	spec, err := numbered(c.spec, c.generation)
	if err != nil {
		return err
	}
	if c.kind == changeNewPool {
		return e.newPool(c.pool, spec)
	}
	return e.restartPool(c.pool, spec, c.kind == changeRestartPool)
}
