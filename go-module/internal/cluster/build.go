// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"debug/elf"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// selfExe is the running image. A child is exec'd from it, not from the binary's path:
// a package upgrade replaces the file at the path while the Caddy process runs, and a
// child of the new build would not speak the old one's wire.
const selfExe = "/proc/self/exe"

// buildID names the build of the running image: its Go build id, whose last part
// hashes the whole linked file (the PHP and the Rust core in it included), so that any
// two builds differ; the GNU build id when there is no Go one; "" when neither can be
// read. The Caddy process sends its own with a child's start, which the child refuses
// unless it is its own.
var buildID = sync.OnceValue(func() string {
	f, err := elf.Open(selfExe)
	if err != nil {
		return ""
	}
	defer f.Close()
	if id := elfNote(f, ".note.go.buildid"); len(id) > 0 {
		return string(id)
	}
	if id := elfNote(f, ".note.gnu.build-id"); len(id) > 0 {
		return "gnu:" + hex.EncodeToString(id)
	}
	return ""
})

// elfNote is the descriptor of the note a section of f holds; nil when there is none.
func elfNote(f *elf.File, section string) []byte {
	s := f.Section(section)
	if s == nil {
		return nil
	}
	data, err := s.Data()
	if err != nil || len(data) < 12 {
		return nil
	}
	nameSize, descSize := uint64(f.ByteOrder.Uint32(data)), uint64(f.ByteOrder.Uint32(data[4:]))
	at := 12 + (nameSize+3)&^3
	if at+descSize > uint64(len(data)) {
		return nil
	}
	return data[at : at+descSize]
}

// nameProcess gives a child exec'd from /proc/self/exe, which the kernel names "exe",
// its binary's name back, as ps and top show it: on every thread running so far, so
// that those started later take it too.
func nameProcess() {
	name := filepath.Base(os.Args[0])
	if len(name) > 15 {
		name = name[:15] // the kernel keeps 15 bytes
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil || name == "exe" {
		return
	}
	for _, task := range tasks {
		comm := filepath.Join("/proc/self/task", task.Name(), "comm")
		if current, err := os.ReadFile(comm); err == nil && strings.TrimSpace(string(current)) == "exe" {
			_ = os.WriteFile(comm, []byte(name), 0)
		}
	}
}
