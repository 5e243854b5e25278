// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// machine makes CPUs from their cores: each core a kernel list of its CPUs, in package 0
// unless pkgs names another for the core at that index.
func machine(cores []string, pkgs ...int) []cpu {
	var cpus []cpu
	for i, list := range cores {
		first, _ := firstOfList(list)
		pkg := 0
		if i < len(pkgs) {
			pkg = pkgs[i]
		}
		for _, part := range strings.Split(list, ",") {
			id, _ := firstOfList(part)
			cpus = append(cpus, cpu{id: id, pkg: pkg, core: list, ordinal: first})
		}
	}
	return cpus
}

func TestCPUShares(t *testing.T) {
	cases := []struct {
		name  string
		cpus  []cpu
		n     int
		wants [][]int
	}{
		{"two CPUs, two children", machine([]string{"0", "1"}), 2, [][]int{{0}, {1}}},
		{"more children than CPUs: none pinned", machine([]string{"0", "1"}), 3, nil},
		{"one child: nothing to split", machine([]string{"0", "1"}), 1, nil},
		{"four CPUs, three children: one gets two", machine([]string{"0", "1", "2", "3"}), 3, [][]int{{0}, {1}, {2, 3}}},
		// Linux numbers the first hyper-thread of every core, then the second ones:
		// a child takes both of its cores' CPUs, never one core's with another child.
		{"hyper-threads numbered apart", machine([]string{"0,4", "1,5", "2,6", "3,7"}), 2, [][]int{{0, 4, 1, 5}, {2, 6, 3, 7}}},
		{"one core's two threads, two children", machine([]string{"0,1"}), 2, [][]int{{0}, {1}}},
		// Fewer cores than children: CPUs of one core go to children next to each other.
		{"two cores of two threads, three children", machine([]string{"0,2", "1,3"}), 3, [][]int{{0}, {2}, {1, 3}}},
		// A child stays in one package (one last-level cache) when the split allows it,
		// whatever the CPUs' numbers.
		{"two packages", machine([]string{"0", "2", "1", "3"}, 0, 0, 1, 1), 2, [][]int{{0, 2}, {1, 3}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := cpuShares(tc.cpus, tc.n); !reflect.DeepEqual(got, tc.wants) {
				t.Fatalf("cpuShares(%d children) = %v, want %v", tc.n, got, tc.wants)
			}
		})
	}
}

func TestFirstOfList(t *testing.T) {
	for list, want := range map[string]int{"0": 0, "12-15": 12, "3,7": 3, "10-11,42-43": 10} {
		if got, ok := firstOfList(list); !ok || got != want {
			t.Errorf("firstOfList(%q) = %d, %v; want %d", list, got, ok, want)
		}
	}
	if _, ok := firstOfList(""); ok {
		t.Error("firstOfList(\"\") reads a CPU")
	}
}

// TestStartOnPinsTheChildAndNotTheCaller starts a program on one CPU: it runs there,
// and the thread that started it may again use every CPU it could before.
func TestStartOnPinsTheChildAndNotTheCaller(t *testing.T) {
	cpus, err := processCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) < 2 {
		t.Skip("one CPU: nothing to pin to")
	}
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	last := cpus[len(cpus)-1].id
	cmd := exec.Command("sh", "-c", "grep Cpus_allowed_list /proc/self/status")
	var out strings.Builder
	cmd.Stdout = &out
	pinned, err := startOn(cmd, []int{last})
	if err != nil || !pinned {
		t.Fatalf("startOn: pinned %v, %v", pinned, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Fields(out.String()), []string{"Cpus_allowed_list:", cpuList([]int{last})}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the child: %q, want %q", got, want)
	}
	// Every thread of this process may still use what it could: the caller's thread was
	// moved back (it may be any of them now that it is unlocked, so look at all).
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("this thread's CPUs: %d after, %d before", after.Count(), before.Count())
	}
	if got, err := processCPUs(); err != nil || len(got) != len(cpus) {
		t.Fatalf("this process's CPUs after: %d (%v), before %d", len(got), err, len(cpus))
	}
}
