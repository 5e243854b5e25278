// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Default store capacities (shared_store_size, local_store_size).
const (
	defaultSharedStoreSize = 64 << 20
	defaultLocalStoreSize  = 16 << 20
)

// defaultMaxIdleTime is how long a thread added by autoscaling waits for a request
// before it ends, unless max_idle_time says otherwise.
const defaultMaxIdleTime = 5 * time.Second

// defaultTimeoutGrace is how long a request may run past its PHP time limit before the
// core ends it from outside PHP, unless timeout_grace says otherwise.
const defaultTimeoutGrace = 5 * time.Second

// defaultMaxStuckThreads is how many stuck threads get a replacement at once.
const defaultMaxStuckThreads = 16

// ThreadLimit is max_threads: a number of threads, or ThreadLimitAuto ("auto" in JSON
// and the Caddyfile).
type ThreadLimit int

// ThreadLimitAuto derives the limit from memory_limit and the machine's memory.
const ThreadLimitAuto ThreadLimit = -1

// MarshalJSON writes "auto" or the number.
func (l ThreadLimit) MarshalJSON() ([]byte, error) {
	if l == ThreadLimitAuto {
		return []byte(`"auto"`), nil
	}
	return json.Marshal(int(l))
}

// UnmarshalJSON reads "auto" or a number.
func (l *ThreadLimit) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		if s != "auto" {
			return fmt.Errorf(`max_threads must be a number or "auto", got %q`, s)
		}
		*l = ThreadLimitAuto
		return nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf(`max_threads must be a number or "auto": %w`, err)
	}
	*l = ThreadLimit(n)
	return nil
}

// parseThreadLimit reads the Caddyfile's max_threads argument.
func parseThreadLimit(v string) (ThreadLimit, error) {
	if v == "auto" {
		return ThreadLimitAuto, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("max_threads must be a positive integer or auto, got %q", v)
	}
	return ThreadLimit(n), nil
}

// maxThreads is the autoscaling limit for total threads (num_threads) and these
// workers, or 0 when autoscaling adds no thread; for "auto", also how it was chosen.
func (a *App) maxThreads(total int, workers []*WorkerConfig) (int, string, error) {
	extra := 0
	for _, w := range workers {
		if w.MaxThreads > 0 {
			extra += w.MaxThreads - w.Num
		}
	}
	switch {
	case a.MaxThreads == ThreadLimitAuto:
		limit, why := autoMaxThreads(a.PHPIni.Get("memory_limit"), total)
		return limit, why, nil
	case a.MaxThreads == 0 && extra == 0:
		return 0, "", nil
	case a.MaxThreads == 0:
		return total + extra, "", nil
	case int(a.MaxThreads) < total:
		return 0, "", fmt.Errorf("max_threads (%d) must be at least num_threads (%d)", a.MaxThreads, total)
	}
	return int(a.MaxThreads), "", nil
}

// autoMaxThreads is what memory allows: 80% of the machine's memory (or of its
// cgroup's limit) divided by memory_limit, and never less than total. It says why.
func autoMaxThreads(memoryLimit string, total int) (int, string) {
	perThread, ok := phpBytes(memoryLimit)
	source := "php_ini memory_limit " + memoryLimit
	if memoryLimit == "" || !ok || perThread <= 0 {
		// Unset, unlimited (-1) or unreadable: assume PHP's default of 128M per thread.
		perThread = 128 << 20
		source = "PHP's default memory_limit 128M"
		if memoryLimit != "" {
			source = fmt.Sprintf("memory_limit %q taken as 128M", memoryLimit)
		}
	}
	memory := machineMemory()
	if memory == 0 {
		return total, "the machine's memory is unknown: autoscaling stays at num_threads"
	}
	limit := int(memory * 8 / 10 / perThread)
	why := fmt.Sprintf("80%% of %d MiB of memory / %s", memory>>20, source)
	if limit < total {
		return total, why + ": less than num_threads, so num_threads"
	}
	return limit, why
}

// phpBytes reads a PHP size ("128M", "1G", "512K", "1048576", "-1").
func phpBytes(v string) (uint64, bool) {
	v = strings.TrimSpace(v)
	if v == "" || strings.HasPrefix(v, "-") {
		return 0, false
	}
	mult := uint64(1)
	switch v[len(v)-1] {
	case 'k', 'K':
		mult = 1 << 10
	case 'm', 'M':
		mult = 1 << 20
	case 'g', 'G':
		mult = 1 << 30
	}
	if mult != 1 {
		v = v[:len(v)-1]
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false
	}
	return n * mult, true
}

// machineMemory is the memory this process may use, in bytes: the machine's total, or
// the tightest memory limit of the cgroups it is in, if lower; 0 when unknown.
func machineMemory() uint64 {
	total := uint64(0)
	if f, err := os.Open("/proc/meminfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if fields := strings.Fields(s.Text()); len(fields) >= 2 && fields[0] == "MemTotal:" {
				if kb, err := strconv.ParseUint(fields[1], 10, 64); err == nil {
					total = kb << 10
				}
				break
			}
		}
		f.Close()
	}
	if self, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		if limit := cgroupMemoryLimit("/sys/fs/cgroup", string(self)); limit > 0 && (total == 0 || limit < total) {
			total = limit
		}
	}
	return total
}

// cgroupMemoryLimit is the tightest memory limit on the cgroups a process is in, given
// its /proc/self/cgroup and where the cgroup filesystems are mounted (root); 0 for
// none. A limit set on any ancestor binds too, so each cgroup's own file is read and
// then its parents', up to the hierarchy's root:
//   - cgroup v2 (the line "0::<path>"): <root>/<path>/memory.max, "max" for none;
//   - cgroup v1 (the line naming the memory controller):
//     <root>/memory/<path>/memory.limit_in_bytes, a huge number for none.
//
// A path that does not exist under the mount is skipped: a container without a cgroup
// namespace sees its host's path in /proc/self/cgroup, but its own cgroup mounted as
// the root, whose file the walk reaches at its end.
func cgroupMemoryLimit(root, selfCgroup string) uint64 {
	limit := uint64(0)
	for _, line := range strings.Split(selfCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, file = root, "memory.max"
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			dir, file = filepath.Join(root, "memory"), "memory.limit_in_bytes"
		default:
			continue
		}
		for p := path.Clean("/" + parts[2]); ; p = path.Dir(p) {
			b, err := os.ReadFile(filepath.Join(dir, p, file))
			if err == nil {
				v := strings.TrimSpace(string(b))
				// v1 says "no limit" with the largest multiple of the page size.
				if n, err := strconv.ParseUint(v, 10, 64); err == nil && n > 0 && n < 1<<62 && (limit == 0 || n < limit) {
					limit = n
				}
			}
			if p == "/" {
				break
			}
		}
	}
	return limit
}
