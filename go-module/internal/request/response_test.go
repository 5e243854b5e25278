// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import (
	"bytes"
	"net/http/httptest"
	"testing"
)

// filled returns n bytes of a pattern that shows misplaced or reordered bytes.
func filled(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%251)
	}
	return b
}

// drain writes what q holds the way the handler goroutine does and releases it.
func drain(t *testing.T, q *responseQueue, w *httptest.ResponseRecorder) {
	t.Helper()
	parts := q.take()
	if err := writeParts(w, q.spill, parts); err != nil {
		t.Fatal(err)
	}
	q.released(parts)
}

func inMemory(q *responseQueue) (memory, spilled int) {
	for _, p := range q.parts {
		if p.kind != partBody {
			continue
		}
		if p.data != nil {
			memory += len(p.data)
		} else {
			spilled += int(p.length)
		}
	}
	return memory, spilled
}

func TestResponseQueueSpillsPastItsBoundAndComesBack(t *testing.T) {
	base := buffered.Load()
	q := &responseQueue{BufferPolicy: BufferPolicy{Limit: 100 << 10, Total: 64 << 20}}
	defer q.reset()
	var want bytes.Buffer
	for i := range 3 { // 3 × 48 KiB: the third passes the 100 KiB bound
		b := filled(48<<10, byte(i))
		want.Write(b)
		if err := q.queueBody(b, false); err != nil {
			t.Fatal(err)
		}
	}
	memory, spilled := inMemory(q)
	if memory != 96<<10 || spilled != 48<<10 || q.spill == nil {
		t.Fatalf("in memory %d, spilled %d: want 96 KiB kept and 48 KiB in the file", memory, spilled)
	}
	if got := buffered.Load() - base; got != 96<<10 {
		t.Errorf("the process counts %d bytes buffered, want %d", got, 96<<10)
	}
	w := httptest.NewRecorder()
	drain(t, q, w)
	if got := buffered.Load() - base; got != 0 || q.memory != 0 {
		t.Errorf("after sending: %d bytes counted for the process, %d for the response; want 0", got, q.memory)
	}
	// The client took everything: the next bodies fit in memory again, after the
	// spilled ones.
	b := filled(10<<10, 7)
	want.Write(b)
	if err := q.queueBody(b, false); err != nil {
		t.Fatal(err)
	}
	if memory, spilled := inMemory(q); memory != 10<<10 || spilled != 0 {
		t.Errorf("after the client caught up: in memory %d, spilled %d; want all in memory", memory, spilled)
	}
	drain(t, q, w)
	if !bytes.Equal(w.Body.Bytes(), want.Bytes()) {
		t.Errorf("sent %d bytes that differ from the %d queued", w.Body.Len(), want.Len())
	}
}

func TestResponseQueueSpillsWhenAllResponsesHoldTheTotal(t *testing.T) {
	base := buffered.Load()
	total := base + 64<<10
	a := &responseQueue{BufferPolicy: BufferPolicy{Limit: 1 << 20, Total: total}}
	b := &responseQueue{BufferPolicy: BufferPolicy{Limit: 1 << 20, Total: total}}
	defer a.reset()
	defer b.reset()
	if err := a.queueBody(filled(60<<10, 1), false); err != nil {
		t.Fatal(err)
	}
	if err := b.queueBody(filled(8<<10, 2), false); err != nil {
		t.Fatal(err)
	}
	if memory, spilled := inMemory(b); memory != 0 || spilled != 8<<10 {
		t.Errorf("a response under its own bound but over the total: in memory %d, spilled %d; want it spilled", memory, spilled)
	}
	a.reset()
	if err := b.queueBody(filled(8<<10, 3), false); err != nil {
		t.Fatal(err)
	}
	if memory, _ := inMemory(b); memory != 8<<10 {
		t.Errorf("once the other response ended, in memory %d, want 8 KiB", memory)
	}
	b.reset()
	if got := buffered.Load(); got != base {
		t.Errorf("after both responses ended the process counts %d bytes, want %d", got, base)
	}
}
