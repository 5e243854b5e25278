// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/php-worker/php_worker/go-module/internal/core"
	"github.com/php-worker/php_worker/go-module/internal/phpprofile"
)

// The control calls that reach every child (profiles) or one (scheduled jobs).

// ProfileStart starts a profile in every child; if one cannot, none profiles.
func (c *Cluster) ProfileStart(hz int, cpu bool) error {
	var started []*proc
	var mu sync.Mutex
	err := c.each(func(p *proc) error {
		_, err := p.call(call{Op: opProfileStart, N: hz, CPU: cpu})
		if err == nil {
			mu.Lock()
			started = append(started, p)
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		for _, p := range started {
			_, _ = p.call(call{Op: opProfileStop})
		}
	}
	return err
}

// ProfileStop ends the children's profiles and merges them into one, in the JSON of
// php_worker_profile_stop. A child that died meanwhile took its part with it; the
// profile says how many.
func (c *Cluster) ProfileStop() ([]byte, error) {
	var mu sync.Mutex
	var parts [][]byte
	err := c.each(func(p *proc) error {
		raw, err := p.call(call{Op: opProfileStop})
		if err == nil {
			mu.Lock()
			parts = append(parts, raw)
			mu.Unlock()
		}
		return err
	})
	if len(parts) == 0 {
		if err == nil {
			err = errors.New("no PHP process runs")
		}
		return nil, err
	}
	return mergeProfiles(parts)
}

// mergeProfiles joins the children's profiles: their frames one after the other, each
// child's stacks pointing into its own.
func mergeProfiles(parts [][]byte) ([]byte, error) {
	var out phpprofile.Data
	for i, raw := range parts {
		var d phpprofile.Data
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("reading a PHP process's profile: %w", err)
		}
		if i == 0 {
			out.Hz, out.Mode = d.Hz, d.Mode
		}
		out.DurationNs = max(out.DurationNs, d.DurationNs)
		out.Dropped += d.Dropped
		base := len(out.Frames)
		out.Frames = append(out.Frames, d.Frames...)
		for _, s := range d.Samples {
			for k := range s.Stack {
				s.Stack[k] += base
			}
			out.Samples = append(out.Samples, s)
		}
	}
	return json.Marshal(out)
}

// RunJob runs a scheduled job's script once, in one child.
func (c *Cluster) RunJob(spec []byte) (core.JobOutcome, error) {
	var out core.JobOutcome
	procs := c.live()
	if len(procs) == 0 {
		return out, errors.New("no PHP process runs")
	}
	p := procs[int(c.next.Add(1)%uint64(len(procs)))]
	raw, err := p.call(call{Op: opRunJob, Spec: spec})
	if err == nil {
		err = json.Unmarshal(raw, &out)
	}
	return out, err
}
