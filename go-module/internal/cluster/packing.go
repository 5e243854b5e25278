// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package cluster

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/php-worker/php_worker/go-module/internal/core"
)

// The hot path's payloads, little-endian, packed by hand: a submission is the request
// buffer the core reads (core.RequestBuffer) behind a fixed head, so the child submits
// it without building anything.

var errShort = errors.New("a truncated frame")

const submitHead = core.WireSubmitHead

// packSubmit is a submission's payload: pool, flags, env pairs, body length, content
// length, span count, the slot in the child's taken table (taken.go), then the spans and
// the strings.
func packSubmit(dst []byte, pool, flags uint32, b *core.RequestBuffer) []byte {
	var head [submitHead]byte
	le := binary.LittleEndian
	le.PutUint32(head[0:], pool)
	le.PutUint32(head[4:], flags)
	le.PutUint32(head[8:], uint32(b.EnvPairs))
	le.PutUint32(head[12:], uint32(b.BodyLen))
	le.PutUint64(head[16:], uint64(b.ContentLength))
	le.PutUint32(head[24:], uint32(len(b.Spans)))
	le.PutUint32(head[28:], noSlot)
	dst = append(dst, head[:]...)
	for _, s := range b.Spans {
		dst = le.AppendUint32(dst, s)
	}
	return append(dst, b.Strings...)
}

// setSubmitSlot sets a packed submission's slot in its child's taken table.
func setSubmitSlot(p []byte, slot uint32) {
	binary.LittleEndian.PutUint32(p[28:], slot)
}

// submitPool is a packed submission's pool.
func submitPool(p []byte) uint32 {
	return binary.LittleEndian.Uint32(p[0:])
}

// submitSlot is a submission's slot in the taken table (noSlot: none).
func submitSlot(p []byte) uint32 {
	if len(p) < submitHead {
		return noSlot
	}
	return binary.LittleEndian.Uint32(p[28:])
}

// unpackSubmit fills b from a submission's payload (b's slices alias p).
func unpackSubmit(p []byte, b *core.RequestBuffer) (pool, flags uint32, err error) {
	if len(p) < submitHead {
		return 0, 0, errShort
	}
	le := binary.LittleEndian
	pool, flags = le.Uint32(p[0:]), le.Uint32(p[4:])
	b.EnvPairs = int(le.Uint32(p[8:]))
	b.BodyLen = int(le.Uint32(p[12:]))
	b.ContentLength = int64(le.Uint64(p[16:]))
	spans := int(le.Uint32(p[24:]))
	p = p[submitHead:]
	if len(p) < 4*spans {
		return 0, 0, errShort
	}
	b.Spans = b.Spans[:0]
	for i := 0; i < spans; i++ {
		b.Spans = append(b.Spans, le.Uint32(p[4*i:]))
	}
	b.Strings = p[4*spans:]
	return pool, flags, nil
}

const respondHead = core.WireRespondHead

// packRespond is a response call's payload: its numbers, its headers as (name length,
// value length, name, value), then the body.
func packRespond(dst []byte, r *core.Response) []byte {
	var head [respondHead]byte
	le := binary.LittleEndian
	le.PutUint32(head[0:], uint32(int32(r.Status)))
	le.PutUint32(head[4:], r.Flags)
	le.PutUint32(head[8:], r.Refusal)
	le.PutUint32(head[12:], uint32(r.RetryAfter.Milliseconds()))
	le.PutUint32(head[16:], uint32(int32(r.Thread)))
	le.PutUint64(head[20:], uint64(r.Queued.Microseconds()))
	le.PutUint32(head[28:], uint32(len(r.Headers)))
	le.PutUint32(head[32:], uint32(len(r.Body)))
	dst = append(dst, head[:]...)
	for i := range r.Headers {
		name, value := r.Headers[i].Name(), r.Headers[i].Value()
		dst = le.AppendUint32(dst, uint32(len(name)))
		dst = le.AppendUint32(dst, uint32(len(value)))
		dst = append(dst, name...)
		dst = append(dst, value...)
	}
	return append(dst, r.Body...)
}

// unpackRespond decodes a response call; its headers and body alias p, and headers
// reuses the slice given.
func unpackRespond(p []byte, headers []core.Header) (core.Response, []core.Header, error) {
	if len(p) < respondHead {
		return core.Response{}, headers, errShort
	}
	le := binary.LittleEndian
	r := core.Response{
		Status:     int(int32(le.Uint32(p[0:]))),
		Flags:      le.Uint32(p[4:]),
		Refusal:    le.Uint32(p[8:]),
		RetryAfter: time.Duration(le.Uint32(p[12:])) * time.Millisecond,
		Thread:     int(int32(le.Uint32(p[16:]))),
		Queued:     time.Duration(le.Uint64(p[20:])) * time.Microsecond,
	}
	n, bodyLen := int(le.Uint32(p[28:])), int(le.Uint32(p[32:]))
	p = p[respondHead:]
	headers = headers[:0]
	for i := 0; i < n; i++ {
		if len(p) < 8 {
			return r, headers, errShort
		}
		nl, vl := int(le.Uint32(p[0:])), int(le.Uint32(p[4:]))
		if len(p) < 8+nl+vl {
			return r, headers, errShort
		}
		headers = append(headers, core.NewHeader(p[8:8+nl], p[8+nl:8+nl+vl]))
		p = p[8+nl+vl:]
	}
	if len(p) != bodyLen {
		return r, headers, errShort
	}
	r.Headers, r.Body = headers, p
	return r, headers, nil
}
