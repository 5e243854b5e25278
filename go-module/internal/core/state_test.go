// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package core

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"
)

func spec(name string) json.RawMessage { return json.RawMessage(`{"name":"` + name + `","num":1}`) }

// base is a state with two pools, the second staging generation 4.
func base() State {
	return State{Classic: 2, MaxThreads: 8, MaxIdle: time.Second, TimeoutGrace: time.Second, MaxStuck: 1,
		SharedStore: 1 << 20, LocalStore: 1 << 10, Pools: []PoolState{
			{ID: 1, Spec: spec("a"), Generation: 1},
			{ID: 2, Spec: spec("b"), Generation: 3, Staged: &StagedGeneration{Generation: 4, Spec: spec("b2")}},
		}}
}

func kinds(cs []change) []changeKind {
	out := make([]changeKind, len(cs))
	for i, c := range cs {
		out[i] = c.kind
	}
	return out
}

// Each difference between two states is one call, and making the calls (recorded as
// made) ends in the state asked for.
func TestChangesAreTheCallsBetweenTwoStates(t *testing.T) {
	with := func(f func(*State)) State {
		s := base()
		s.Pools = slices.Clone(s.Pools)
		f(&s)
		return s
	}
	cases := []struct {
		name     string
		from, to State
		fresh    bool
		want     []changeKind
	}{
		{name: "a new engine gets everything", to: base(), fresh: true,
			want: []changeKind{changeStores, changeAutoscale, changeDeadlines, changeClassic, changeNewPool, changeNewPool, changeStagePool}},
		{name: "the same state changes nothing", from: base(), to: base()},
		{name: "limits", from: base(), to: with(func(s *State) { s.Classic, s.MaxIdle, s.LocalStore = 3, 2*time.Second, 1 }),
			want: []changeKind{changeStores, changeAutoscale, changeClassic}},
		{name: "the staged generation takes over", from: base(), to: with(func(s *State) {
			s.Pools[1] = PoolState{ID: 2, Spec: spec("b2"), Generation: 4}
		}), want: []changeKind{changeActivatePool}},
		{name: "a restart", from: base(), to: with(func(s *State) { s.Pools[0].Generation = 2 }),
			want: []changeKind{changeRestartPool}},
		{name: "a restart past the staged generation discards it with no call of its own", from: base(),
			to:   with(func(s *State) { s.Pools[1] = PoolState{ID: 2, Spec: spec("b"), Generation: 5} }),
			want: []changeKind{changeRestartPool}},
		{name: "the staged generation dropped", from: base(), to: with(func(s *State) { s.Pools[1].Staged = nil }),
			want: []changeKind{changeDiscardPool}},
		{name: "another staged generation", from: base(),
			to:   with(func(s *State) { s.Pools[1].Staged = &StagedGeneration{Generation: 5, Spec: spec("b3")} }),
			want: []changeKind{changeStagePool}},
		{name: "a pool goes, another comes", from: base(), to: with(func(s *State) {
			s.Pools[0] = PoolState{ID: 7, Spec: spec("c"), Generation: 1}
			slices.SortFunc(s.Pools, func(a, b PoolState) int { return int(a.ID) - int(b.ID) })
		}), want: []changeKind{changeDeletePool, changeNewPool}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var from *State
			applied := &State{}
			if !tc.fresh {
				from = &tc.from
				*applied = tc.from
				applied.Pools = slices.Clone(tc.from.Pools)
			}
			cs := changes(from, &tc.to)
			if got := kinds(cs); !slices.Equal(got, tc.want) {
				t.Fatalf("changes %v, want %v", got, tc.want)
			}
			if err := reach(applied, from, &tc.to, func(change) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*applied, tc.to) && !(len(applied.Pools) == 0 && len(tc.to.Pools) == 0) {
				t.Errorf("the calls made reach\n%+v\nnot\n%+v", *applied, tc.to)
			}
		})
	}
}

// A change that failed is not recorded: the next Apply makes it again, and only it.
func TestAFailedChangeIsMadeAgainByTheNextApply(t *testing.T) {
	from := base()
	to := base()
	to.Pools = append(slices.Clone(to.Pools), PoolState{ID: 3, Spec: spec("c"), Generation: 1})
	to.Classic = 4
	applied := base()
	applied.Pools = slices.Clone(applied.Pools)
	refuse := errors.New("the script is not there")
	err := reach(&applied, &from, &to, func(c change) error {
		if c.kind == changeNewPool {
			return refuse
		}
		return nil
	})
	if !errors.Is(err, refuse) {
		t.Fatalf("the failure is not returned: %v", err)
	}
	if applied.Classic != 4 || applied.Pool(3) != nil {
		t.Fatalf("recorded %+v: the classic change was made, the pool was not", applied)
	}
	next := applied
	if got := kinds(changes(&next, &to)); !slices.Equal(got, []changeKind{changeNewPool}) {
		t.Errorf("the next Apply makes %v, want only the pool that failed", got)
	}
}

// The spec sent to the core carries its generation's number.
func TestASpecCarriesItsGenerationsNumber(t *testing.T) {
	out, err := numbered(spec("a"), 7)
	if err != nil {
		t.Fatal(err)
	}
	var fields struct {
		Name       string `json:"name"`
		Generation uint32 `json:"generation"`
	}
	if err := json.Unmarshal(out, &fields); err != nil || fields.Name != "a" || fields.Generation != 7 {
		t.Errorf("numbered spec %s", out)
	}
	if _, err := numbered(json.RawMessage(`[1]`), 1); err == nil {
		t.Error("a spec that is not an object was numbered")
	}
}
