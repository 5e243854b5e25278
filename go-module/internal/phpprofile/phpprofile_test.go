// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpprofile

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// A profile as the core writes it: a hot function under a method and a script's top
// level, on a worker and a classic thread, and an internal function.
const sample = `{"hz":100,"mode":"wall","duration_ns":2000000000,"dropped":0,
"frames":[
 {"function":"hot_spin","file":"/app/hot.php","line":5},
 {"function":"App\\Kernel::handle","file":"/app/Kernel.php","line":40},
 {"function":"{main}","file":"/app/index.php","line":3},
 {"function":"usleep","file":"","line":0},
 {"function":"hot_spin","file":"/app/hot.php","line":6}],
"samples":[
 {"stack":[0,1,2],"worker":"app","route":"/api","kind":"worker","count":150,"weight":1500000000},
 {"stack":[4,2],"worker":"","route":"/hot.php","kind":"classic","count":40,"weight":400000000},
 {"stack":[3,2],"worker":"","route":"","kind":"background","count":1,"weight":10000000}]}`

// The profile written and parsed back keeps its sample types, period, frames with their
// files and lines (one function for two lines of hot_spin) and labels.
func TestBuildRoundTrip(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	p, err := Build([]byte(sample), start)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.SampleType) != 2 || got.SampleType[0].Type != "samples" || got.SampleType[0].Unit != "count" ||
		got.SampleType[1].Type != "wall" || got.SampleType[1].Unit != "nanoseconds" {
		t.Fatalf("sample types %v", got.SampleType)
	}
	if got.PeriodType.Type != "wall" || got.Period != int64(10*time.Millisecond) {
		t.Fatalf("period %v %d", got.PeriodType, got.Period)
	}
	if got.TimeNanos != start.UnixNano() || got.DurationNanos != 2e9 {
		t.Fatalf("time %d duration %d", got.TimeNanos, got.DurationNanos)
	}
	if len(got.Function) != 4 {
		t.Fatalf("%d functions, want 4 (hot_spin once)", len(got.Function))
	}
	if len(got.Sample) != 3 {
		t.Fatalf("%d samples", len(got.Sample))
	}
	var hot int64
	for _, s := range got.Sample {
		leaf := s.Location[0].Line[0]
		if leaf.Function.Name == "hot_spin" {
			if leaf.Function.Filename != "/app/hot.php" || (leaf.Line != 5 && leaf.Line != 6) {
				t.Fatalf("hot_spin at %s:%d", leaf.Function.Filename, leaf.Line)
			}
			hot += s.Value[1]
		}
		root := s.Location[len(s.Location)-1].Line[0].Function
		if root.Name != "{main}" || root.Filename != "/app/index.php" {
			t.Fatalf("root frame %s in %s", root.Name, root.Filename)
		}
		label := func(k string) string {
			if v := s.Label[k]; len(v) == 1 {
				return v[0]
			}
			return ""
		}
		switch label(LabelKind) {
		case "worker":
			if label(LabelWorker) != "app" || label(LabelRoute) != "/api" || s.Value[0] != 150 {
				t.Fatalf("worker sample %v %v", s.Label, s.Value)
			}
			if s.Location[1].Line[0].Function.Name != `App\Kernel::handle` {
				t.Fatalf("method frame %s", s.Location[1].Line[0].Function.Name)
			}
		case "classic":
			if _, ok := s.Label[LabelWorker]; ok || label(LabelRoute) != "/hot.php" {
				t.Fatalf("classic sample %v", s.Label)
			}
		case "background":
			if leaf.Function.Name != "usleep" || leaf.Function.Filename != "" || leaf.Line != 0 {
				t.Fatalf("internal frame %+v", leaf)
			}
		default:
			t.Fatalf("kind %v", s.Label[LabelKind])
		}
	}
	if hot != 1_900_000_000 {
		t.Fatalf("hot_spin weighs %d ns", hot)
	}
}

func TestBuildRejectsBadInput(t *testing.T) {
	for _, raw := range []string{
		`not json`,
		`{"hz":100,"mode":"sideways","frames":[],"samples":[]}`,
		`{"hz":0,"mode":"cpu","frames":[],"samples":[]}`,
		`{"hz":100,"mode":"cpu","frames":[],"samples":[{"stack":[3],"count":1,"weight":1}]}`,
	} {
		if _, err := Build([]byte(raw), time.Now()); err == nil {
			t.Errorf("%s: no error", raw)
		}
	}
}
