// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpruntime

import (
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// Runtime.workerPools holds the worker pools every loaded config uses, keyed by worker
// name, the way Caddy's reverse proxy keeps its upstream hosts: a config takes a
// reference in Provision and releases it in Cleanup, so a pool lives as long as some
// config uses it. On a reload the new config takes the pools of the workers it keeps
// before the old one releases them: their threads keep serving while the new config's
// scripts boot beside them (see runtime.go).
//
// Runtime.nextPoolID numbers pools; 0 is the classic pool, and ids are never reused, so
// a request never lands in a pool that replaced the one it was meant for.

// Pool is a worker pool as configs see it: a stable id the core knows the pool by.
type Pool struct {
	rt  *Runtime
	id  uint32
	key string
	// The last config using it is gone: a request still headed for it (an old
	// config's handler finishing its requests) is refused at once, not after the wait for a pool to appear.
	removed atomic.Bool
}

// AcquirePool returns the pool of the worker key, creating it for the first config
// that uses it. Pair with ReleasePool.
func (rt *Runtime) AcquirePool(key string) *Pool {
	v, _, _ := rt.workerPools.LoadOrNew(key, func() (caddy.Destructor, error) {
		return &Pool{rt: rt, id: rt.nextPoolID.Add(1), key: key}, nil
	})
	return v.(*Pool)
}

// ReleasePool drops a config's reference; the last one deletes the pool from the engine.
func (rt *Runtime) ReleasePool(key string) {
	if _, err := rt.workerPools.Delete(key); err != nil {
		rt.Logger().Error("releasing a worker pool", zap.String("worker", key), zap.Error(err))
	}
}

// Release drops a config's reference to the pool (see ReleasePool).
func (p *Pool) Release() { p.rt.ReleasePool(p.key) }

// Key is the pool's worker name, unique among the loaded configs' workers.
func (p *Pool) Key() string { return p.key }

// ID is the pool's id in the engine.
func (p *Pool) ID() uint32 { return p.id }

// Destruct removes the pool from the running engine: it serves what is queued, then
// its threads end.
func (p *Pool) Destruct() error {
	p.removed.Store(true)
	p.rt.removePool(p)
	return nil
}

// Interface guards
var _ caddy.Destructor = (*Pool)(nil)
