// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"os"
	"path/filepath"
	"testing"
)

// A fake cgroup tree: files relative to root with their content.
func cgroupTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// max_threads auto divides the memory a process may use: the tightest limit of its own
// cgroup and its ancestors, with cgroup v2 or v1, wherever in the hierarchy it runs.
func TestCgroupMemoryLimit(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		self  string
		want  uint64
	}{
		{"v2 systemd unit with MemoryMax", map[string]string{
			"system.slice/php.service/memory.max": "1073741824",
			"system.slice/memory.max":             "max",
		}, "0::/system.slice/php.service\n", 1 << 30},
		{"v2 a parent's limit binds the child", map[string]string{
			"app.slice/memory.max":             "536870912",
			"app.slice/php.service/memory.max": "max",
		}, "0::/app.slice/php.service\n", 512 << 20},
		{"v2 container with a cgroup namespace", map[string]string{"memory.max": "268435456"}, "0::/\n", 256 << 20},
		{"v2 no limit", map[string]string{"a/memory.max": "max"}, "0::/a\n", 0},
		{"v1 memory controller", map[string]string{
			"memory/php/memory.limit_in_bytes": "2147483648",
			"memory/memory.limit_in_bytes":     "9223372036854771712",
		}, "5:cpu,cpuacct:/php\n4:memory:/php\n0::/\n", 2 << 30},
		{"v1 no limit", map[string]string{"memory/php/memory.limit_in_bytes": "9223372036854771712"},
			"4:memory:/php\n", 0},
		{"v1 container without a cgroup namespace: its own cgroup is the mount's root", map[string]string{
			"memory/memory.limit_in_bytes": "805306368",
		}, "4:memory:/docker/0123abcd\n", 768 << 20},
		{"hybrid: v1 memory and an empty v2 line", map[string]string{
			"memory/x/memory.limit_in_bytes": "104857600",
		}, "4:memory:/x\n0::/x\n", 100 << 20},
		{"no cgroup", nil, "", 0},
	}
	for _, c := range cases {
		root := cgroupTree(t, c.files)
		if got := cgroupMemoryLimit(root, c.self); got != c.want {
			t.Errorf("%s: cgroupMemoryLimit = %d, want %d", c.name, got, c.want)
		}
	}
}
