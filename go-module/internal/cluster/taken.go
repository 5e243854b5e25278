// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/php-worker/php_worker/go-module/internal/core"
)

// takenTable tells the Caddy process which of a child's requests a PHP thread took. It
// is a memory page set shared with the child (a memfd, the child's descriptor 4): each
// request the child holds has a slot, and the child's PHP thread writes the request's
// handle there before its script starts. When the child dies, a request whose slot does
// not hold its handle never started, and goes to another child; one that does was
// answered 502. A store in shared memory costs the PHP thread nothing, where a message
// would cost a system call and a wait for every request; the Rust core makes the store
// itself, so it costs no call into Go either.
type takenTable struct {
	words []uint64 // the mapping, as slots
	mem   []byte
	free  []uint32 // the Caddy process's free slots (guarded by the proc's mu)
}

// takenSlots is how many requests a child can hold with a slot. A request past it has
// none: it counts as taken, so it is answered 502 rather than run twice.
const takenSlots = core.WireTakenSlots

// noSlot marks a request without a slot.
const noSlot = core.WireNoSlot

// takenFD is the table's descriptor in a child.
const takenFD = 4

// newTakenTable makes a table and the file a child maps it from.
func newTakenTable() (*takenTable, *os.File, error) {
	fd, err := unix.MemfdCreate("php_worker taken", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("the shared table of a PHP process: %w", err)
	}
	f := os.NewFile(uintptr(fd), "php_worker taken")
	if err := f.Truncate(takenSlots * 8); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("the shared table of a PHP process: %w", err)
	}
	t, err := mapTaken(fd)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	t.free = make([]uint32, takenSlots)
	for i := range t.free {
		t.free[i] = uint32(takenSlots - 1 - i) // low slots first: fewer pages touched
	}
	return t, f, nil
}

// mapTaken maps a table from its descriptor (the child's side).
func mapTaken(fd int) (*takenTable, error) {
	mem, err := unix.Mmap(fd, 0, takenSlots*8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the shared table of a PHP process: %w", err)
	}
	return &takenTable{mem: mem, words: unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), takenSlots)}, nil
}

// take gives a request a slot, cleared; noSlot when none is free. The proc's mu is held.
func (t *takenTable) take() uint32 {
	if len(t.free) == 0 {
		return noSlot
	}
	s := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	atomic.StoreUint64(&t.words[s], 0)
	return s
}

// release gives a slot back. The proc's mu is held.
func (t *takenTable) release(s uint32) {
	if s != noSlot {
		t.free = append(t.free, s)
	}
}

// word is, in the child, where the PHP thread that takes the request of slot s stores
// its handle (core.Engine.SubmitMarked); nil for a request without a slot.
func (t *takenTable) word(s uint32) *uint64 {
	if t == nil || s >= takenSlots {
		return nil
	}
	return &t.words[s]
}

// taken tells, in the Caddy process, whether the request of handle in slot s started.
func (t *takenTable) taken(s uint32, handle uint64) bool {
	return s >= takenSlots || atomic.LoadUint64(&t.words[s]) == handle
}

// unmap ends the Caddy process's mapping (once its child is gone).
func (t *takenTable) unmap() {
	if t.mem != nil {
		_ = unix.Munmap(t.mem)
		t.mem, t.words = nil, nil
	}
}
