// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// CPU shares: each child runs on CPUs of its own among those the Caddy process may use,
// so a child's PHP threads keep its OPcache and JIT code warm in their CPU's caches
// instead of trading places with another child's (docs/processes.md, "Where the time
// goes"). The kernel places the Caddy process's threads and the debug child as before.

// cpu is one CPU the Caddy process may use, with where it sits: the CPUs of one core
// (hyper-threads) share its caches, and those of one package its last-level cache.
type cpu struct {
	id      int
	pkg     int
	core    string // the core's CPUs, as the kernel lists them ("0,4"); the CPU alone if unknown
	ordinal int    // the core's place among all cores (its first CPU)
}

// cpuShares splits cpus among n children: whole cores when there are at least n, each
// child's cores next to one another in a package; CPUs of a core apart when there are
// fewer cores than children. Nil when fewer CPUs than children: children sharing a CPU
// would be pinned unevenly, one CPU running two while another runs one.
func cpuShares(cpus []cpu, n int) [][]int {
	if n < 2 || len(cpus) < n {
		return nil
	}
	cpus = slices.Clone(cpus)
	slices.SortFunc(cpus, func(a, b cpu) int {
		if a.pkg != b.pkg {
			return a.pkg - b.pkg
		}
		if a.ordinal != b.ordinal {
			return a.ordinal - b.ordinal
		}
		return a.id - b.id
	})
	// The cores, in that order, each with its CPUs.
	var cores [][]int
	for i, c := range cpus {
		if i == 0 || c.pkg != cpus[i-1].pkg || c.core != cpus[i-1].core {
			cores = append(cores, nil)
		}
		cores[len(cores)-1] = append(cores[len(cores)-1], c.id)
	}
	if len(cores) < n {
		// One CPU per unit: a core's CPUs go to children next to one another.
		cores = cores[:0]
		for _, c := range cpus {
			cores = append(cores, []int{c.id})
		}
	}
	shares := make([][]int, n)
	for i := range n {
		for _, core := range cores[i*len(cores)/n : (i+1)*len(cores)/n] {
			shares[i] = append(shares[i], core...)
		}
	}
	return shares
}

// processCPUs reads the CPUs this process may use and where each sits
// (/sys/devices/system/cpu/cpuN/topology). A CPU whose topology cannot be read counts as
// a core of its own in package 0.
func processCPUs() ([]cpu, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("the CPUs this process may use: %w", err)
	}
	var cpus []cpu
	for id := range len(set) * 64 {
		if !set.IsSet(id) {
			continue
		}
		c := cpu{id: id, core: strconv.Itoa(id), ordinal: id}
		dir := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/topology/", id)
		if b, err := os.ReadFile(dir + "physical_package_id"); err == nil {
			if pkg, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				c.pkg = pkg
			}
		}
		if b, err := os.ReadFile(dir + "thread_siblings_list"); err == nil {
			c.core = strings.TrimSpace(string(b))
			if first, ok := firstOfList(c.core); ok {
				c.ordinal = first
			}
		}
		cpus = append(cpus, c)
	}
	return cpus, nil
}

// firstOfList is the first CPU of a kernel CPU list ("0-1,4-5" → 0).
func firstOfList(list string) (int, bool) {
	end := strings.IndexAny(list, ",-")
	if end < 0 {
		end = len(list)
	}
	n, err := strconv.Atoi(list[:end])
	return n, err == nil
}

// cpuList writes CPUs as a list for a log line ("0,1,4,5").
func cpuList(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	return strings.Join(s, ",")
}

// startOn starts cmd on the given CPUs: a child inherits the CPUs of the thread that
// forks it, so this thread is moved there for the fork, and every thread of the child
// (the Go runtime's, the wire reader, the PHP threads) starts where it belongs. The
// thread is locked to this goroutine meanwhile, and moved back before it runs anything
// else. With no CPUs, or when this thread cannot move, the child starts where the
// kernel places it.
func startOn(cmd *exec.Cmd, ids []int) (pinned bool, err error) {
	if len(ids) == 0 {
		return false, cmd.Start()
	}
	var want, before unix.CPUSet
	for _, id := range ids {
		want.Set(id)
	}
	runtime.LockOSThread()
	// The thread stays alive after the unlock (the goroutine does not end locked): the
	// child's Pdeathsig watches the thread that forked it.
	defer runtime.UnlockOSThread()
	if unix.SchedGetaffinity(0, &before) != nil || unix.SchedSetaffinity(0, &want) != nil {
		return false, cmd.Start()
	}
	err = cmd.Start()
	if unix.SchedSetaffinity(0, &before) != nil {
		// The CPUs it had are no longer allowed (a cpuset changed meanwhile): any the
		// process may use will do.
		var all unix.CPUSet
		for id := range len(all) * 64 {
			all.Set(id)
		}
		_ = unix.SchedSetaffinity(0, &all)
	}
	return err == nil, err
}
