// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package core

import "sync"

// RequestBuffer is a request in the layout php_worker_request_submit reads: every
// string NUL-terminated in one block, the read-ahead body at its end, and (offset,
// length) spans. It holds no Go pointers, so cgo lets us pass it as is.
type RequestBuffer struct {
	Strings []byte
	Spans   []uint32
	// Pairs counts the name/value pairs after the fixed fields; the last EnvPairs of
	// them are configured env (getenv() sees them too).
	Pairs    int
	EnvPairs int
	// The body's bytes at the end of Strings, and the body's announced length (-1:
	// unknown).
	BodyLen       int
	ContentLength int64
}

var requestBuffers = sync.Pool{New: func() any {
	return &RequestBuffer{Strings: make([]byte, 0, 4096), Spans: make([]uint32, 0, 256)}
}}

// GetRequestBuffer returns an empty buffer; pair with PutRequestBuffer once submitted.
func GetRequestBuffer() *RequestBuffer {
	b := requestBuffers.Get().(*RequestBuffer)
	b.Strings, b.Spans = b.Strings[:0], b.Spans[:0]
	b.Pairs, b.EnvPairs, b.BodyLen, b.ContentLength = 0, 0, 0, -1
	return b
}

// PutRequestBuffer recycles b (the core copied it during the submission).
func PutRequestBuffer(b *RequestBuffer) {
	if cap(b.Strings) <= 1<<20 {
		requestBuffers.Put(b)
	}
}

// Add appends a string and its span.
func (b *RequestBuffer) Add(s string) {
	b.Spans = append(b.Spans, uint32(len(b.Strings)), uint32(len(s)))
	b.Strings = append(b.Strings, s...)
	b.Strings = append(b.Strings, 0)
}

// Pair appends a variable.
func (b *RequestBuffer) Pair(name, value string) {
	b.Add(name)
	b.Add(value)
	b.Pairs++
}

// Span is the string of span i (a field, or a pair's name or value).
func (b *RequestBuffer) Span(i int) string {
	off, n := b.Spans[2*i], b.Spans[2*i+1]
	return string(b.Strings[off : off+n])
}
