// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

// Package phpprofile turns the core's profile of PHP threads (the JSON of
// php_worker_profile_stop) into a pprof profile, which `go tool pprof` reads. It has no
// cgo and imports no package of the module: internal/core hands it the JSON.
package phpprofile

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/pprof/profile"
)

// Data is the core's profile JSON (rust-core/src/runtime/profile.rs).
type Data struct {
	Hz         int64    `json:"hz"`
	Mode       string   `json:"mode"` // wall or cpu
	DurationNs int64    `json:"duration_ns"`
	Frames     []Frame  `json:"frames"`
	Samples    []Sample `json:"samples"`
	Dropped    uint64   `json:"dropped"`
}

// Frame is a PHP function at a line: "Class::method", "function" or "{main}"; an
// internal function has no file and line 0.
type Frame struct {
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int64  `json:"line"`
}

// Sample is a stack (frame indexes, innermost first) with its labels, the sampler's
// ticks and their weight in nanoseconds.
type Sample struct {
	Stack  []int  `json:"stack"`
	Worker string `json:"worker"`
	Route  string `json:"route"`
	Kind   string `json:"kind"`
	Count  int64  `json:"count"`
	Weight int64  `json:"weight"`
}

// The labels of a sample; an empty one is left out (pprof's format cannot hold it).
const (
	LabelWorker = "worker" // the worker's name, "" on classic threads
	LabelRoute  = "route"  // the request's URI path, "" outside a request
	LabelKind   = "kind"   // classic, worker, background or task
)

// Build makes a pprof profile of the core's JSON, for a profile begun at start.
func Build(raw []byte, start time.Time) (*profile.Profile, error) {
	var d Data
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("reading the core's profile: %w", err)
	}
	if d.Mode != "wall" && d.Mode != "cpu" {
		return nil, fmt.Errorf("reading the core's profile: unknown mode %q", d.Mode)
	}
	if d.Hz <= 0 {
		return nil, fmt.Errorf("reading the core's profile: sampling rate %d", d.Hz)
	}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "samples", Unit: "count"},
			{Type: d.Mode, Unit: "nanoseconds"},
		},
		DefaultSampleType: d.Mode,
		PeriodType:        &profile.ValueType{Type: d.Mode, Unit: "nanoseconds"},
		Period:            int64(time.Second) / d.Hz,
		TimeNanos:         start.UnixNano(),
		DurationNanos:     d.DurationNs,
	}
	if d.Dropped > 0 {
		p.Comments = append(p.Comments, fmt.Sprintf("%d samples dropped: the profile reached its size bound", d.Dropped))
	}
	// PHP code has no addresses: one mapping says the functions are known already, so
	// pprof does not try to symbolize.
	m := &profile.Mapping{ID: 1, File: "php", HasFunctions: true, HasFilenames: true, HasLineNumbers: true}
	p.Mapping = []*profile.Mapping{m}

	// A function per (name, file); a location per frame (a function at a line).
	type fnKey struct{ name, file string }
	functions := map[fnKey]*profile.Function{}
	locations := make([]*profile.Location, len(d.Frames))
	for i, f := range d.Frames {
		k := fnKey{f.Function, f.File}
		fn := functions[k]
		if fn == nil {
			fn = &profile.Function{ID: uint64(len(p.Function) + 1), Name: f.Function, SystemName: f.Function, Filename: f.File}
			functions[k] = fn
			p.Function = append(p.Function, fn)
		}
		loc := &profile.Location{ID: uint64(i + 1), Mapping: m, Line: []profile.Line{{Function: fn, Line: f.Line}}}
		locations[i] = loc
		p.Location = append(p.Location, loc)
	}
	for _, s := range d.Samples {
		stack := make([]*profile.Location, 0, len(s.Stack))
		for _, id := range s.Stack {
			if id < 0 || id >= len(locations) {
				return nil, fmt.Errorf("reading the core's profile: frame %d out of %d", id, len(locations))
			}
			stack = append(stack, locations[id])
		}
		// pprof's format has no empty string label: "" is written as no label.
		labels := map[string][]string{}
		for k, v := range map[string]string{LabelWorker: s.Worker, LabelRoute: s.Route, LabelKind: s.Kind} {
			if v != "" {
				labels[k] = []string{v}
			}
		}
		p.Sample = append(p.Sample, &profile.Sample{Location: stack, Value: []int64{s.Count, s.Weight}, Label: labels})
	}
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("building the pprof profile: %w", err)
	}
	return p, nil
}
