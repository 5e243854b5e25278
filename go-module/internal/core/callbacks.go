// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package core

// #include "php_worker.h"
import "C"

import (
	"bytes"
	"encoding/json"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The callbacks the Rust core calls on its PHP threads (php_worker_callbacks_t) hand
// their calls to the Host. Neither they nor the Host may panic: a Go panic here would
// kill the process.

// Host serves the core's callbacks for the requests submitted with a handle.
type Host interface {
	// Respond takes response data for the request handle; false when its client is
	// gone. from says which goroutine makes the call, and so what it may wait on.
	// After a call with ResponseDone the handle is the host's again.
	Respond(handle uintptr, resp Response, from Delivery) bool
	// ReadBody fills buf from the request's body: the count (short only at the end),
	// or -1 when the body cannot be read.
	ReadBody(handle uintptr, buf []byte) int
	// Logger is the logger of the request handle's lines, or for 0 of lines outside a
	// request.
	Logger(handle uintptr) *zap.Logger
}

// Delivery says which goroutine makes a response call, and so what the host may make
// it wait on.
type Delivery uint8

const (
	// OnPHPThread is the respond callback, on the PHP thread that made the data: with
	// response buffering off it writes to the client itself.
	OnPHPThread Delivery = iota
	// FromCompletions is the one goroutine that delivers every request's completions
	// from the core's queue: it waits on neither a client nor the disk. A completion
	// carries at most the core's stream chunk (64 KiB).
	FromCompletions
	// FromChild is the read loop of a child process's wire, which every request of the
	// child shares: it never waits on a client, but may wait on the disk, since a child
	// sends responses of any size.
	FromChild
)

// Response is one response call, lent for the call's duration: the host copies what it
// keeps.
type Response struct {
	Status     int // the HTTP status on a request's first call, or an informational one's; else 0
	Headers    []Header
	Body       []byte
	Flags      uint32 // Response* flags
	Refusal    uint32 // with ResponseRefused: a Refused* code
	RetryAfter time.Duration
	Thread     int           // the index of the PHP thread running the request (php-<n>); -1: none
	Queued     time.Duration // how long the request waited for that thread
}

// Header is a response header as the core lends it.
type Header C.php_worker_header_t

// Name is the header's name, valid during the call.
func (h *Header) Name() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(h.name)), int(h.name_len))
}

// Value is the header's value, valid during the call.
func (h *Header) Value() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(h.value)), int(h.value_len))
}

// NewHeader is a header over Go bytes, for responses that come from a child process
// (internal/cluster) rather than from the core: it is never passed to C.
func NewHeader(name, value []byte) Header {
	var h Header
	if len(name) > 0 {
		h.name, h.name_len = (*C.uint8_t)(unsafe.Pointer(&name[0])), C.size_t(len(name))
	}
	if len(value) > 0 {
		h.value, h.value_len = (*C.uint8_t)(unsafe.Pointer(&value[0])), C.size_t(len(value))
	}
	return h
}

// host is set once, before the first engine starts.
var host Host

// SharedStoreHost is a Host that keeps the shared table in another process (a child
// process's host): the core hands it each operation of the php_worker_shared_* PHP
// functions, encoded, and it returns the encoded reply (RunSharedStore's, in the
// process of the table), or false when the table cannot be reached.
type SharedStoreHost interface {
	Host
	SharedStore(request []byte) ([]byte, bool)
}

// SetHost names the Host of every engine's callbacks; call it before NewEngine.
func SetHost(h Host) {
	host = h
}

// CurrentHost is the Host SetHost named: internal/cluster hands it the responses of
// child processes, as the core's callbacks do for this process's engine.
func CurrentHost() Host {
	return host
}

//export goPhpWorkerSharedStore
func goPhpWorkerSharedStore(request *C.uint8_t, n C.size_t, reply **C.uint8_t, replyLen *C.size_t) C.int32_t {
	countOut()
	h, ok := host.(SharedStoreHost)
	if !ok {
		return -1
	}
	out, ok := h.SharedStore(C.GoBytes(unsafe.Pointer(request), C.int(n)))
	if !ok {
		return -1
	}
	// The core frees it with free().
	*reply = (*C.uint8_t)(C.CBytes(out))
	*replyLen = C.size_t(len(out))
	return 0
}

//export goPhpWorkerRespond
func goPhpWorkerRespond(handle C.size_t, resp *C.php_worker_response_t) C.int32_t {
	countOut()
	return deliverResponse(handle, resp, OnPHPThread)
}

// deliverResponse hands response data to the Host (the respond callback, or a
// completion taken from the core's queue); non-zero when the client is gone.
func deliverResponse(handle C.size_t, resp *C.php_worker_response_t, from Delivery) C.int32_t {
	r := Response{
		Status:     int(resp.status),
		Flags:      uint32(resp.flags),
		Refusal:    uint32(resp.refusal),
		RetryAfter: time.Duration(resp.retry_after_ms) * time.Millisecond,
		Thread:     int(resp.thread),
		Queued:     time.Duration(resp.queued_us) * time.Microsecond,
	}
	if resp.headers_len > 0 {
		r.Headers = unsafe.Slice((*Header)(unsafe.Pointer(resp.headers)), int(resp.headers_len))
	}
	if resp.body_len > 0 {
		r.Body = unsafe.Slice((*byte)(unsafe.Pointer(resp.body)), int(resp.body_len))
	}
	if !host.Respond(uintptr(handle), r, from) {
		return 1
	}
	return 0
}

//export goPhpWorkerReadBody
func goPhpWorkerReadBody(handle C.size_t, buf *C.uint8_t, n C.size_t) C.int64_t {
	countOut()
	return C.int64_t(host.ReadBody(uintptr(handle), unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))))
}

//export goPhpWorkerLog
func goPhpWorkerLog(handle C.size_t, level C.int32_t, msg *C.uint8_t, n C.size_t, fields *C.uint8_t, fieldsLen C.size_t) {
	countOut()
	lvl := zapcore.DebugLevel
	switch level {
	case C.PHP_WORKER_LOG_ERROR:
		lvl = zapcore.ErrorLevel
	case C.PHP_WORKER_LOG_WARN:
		lvl = zapcore.WarnLevel
	case C.PHP_WORKER_LOG_INFO:
		lvl = zapcore.InfoLevel
	}
	log := host.Logger(0)
	if !log.Core().Enabled(lvl) {
		return // decode nothing for a line nobody logs (debug lines, mostly)
	}
	if handle != 0 {
		log = host.Logger(uintptr(handle))
	}
	var zf []zap.Field
	if fieldsLen > 0 {
		zf = LogFields(unsafe.Slice((*byte)(unsafe.Pointer(fields)), int(fieldsLen)))
	}
	log.Log(lvl, C.GoStringN((*C.char)(unsafe.Pointer(msg)), C.int(n)), zf...)
}

// LogFields turns the core's JSON object of log fields into zap fields, in order:
// integers stay integers, so the fields keep their types in the log.
func LogFields(raw []byte) []zap.Field {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return []zap.Field{zap.ByteString("fields", raw)}
	}
	var out []zap.Field
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := t.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			break
		}
		switch v := v.(type) {
		case string:
			out = append(out, zap.String(key, v))
		case bool:
			out = append(out, zap.Bool(key, v))
		case json.Number:
			if i, err := v.Int64(); err == nil {
				out = append(out, zap.Int64(key, i))
			} else if f, err := v.Float64(); err == nil {
				out = append(out, zap.Float64(key, f))
			}
		case nil:
		default:
			out = append(out, zap.Any(key, v))
		}
	}
	return out
}
