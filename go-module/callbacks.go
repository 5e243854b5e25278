// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

// #include "php_worker.h"
import "C"

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/textproto"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/net/http/httpguts"
)

// The callbacks the Rust core calls on its PHP threads (php_worker_callbacks_t). They
// must not panic: a Go panic here would kill the process.

//export goPhpWorkerRespond
func goPhpWorkerRespond(handle C.size_t, resp *C.php_worker_response_t) C.int32_t {
	countOut()
	return deliverResponse(handle, resp, false)
}

// deliverResponse hands response data to its request (the respond callback, or a
// completion taken from the core's queue); non-zero when the client is gone.
func deliverResponse(handle C.size_t, resp *C.php_worker_response_t, queued bool) C.int32_t {
	pr := lookupRequest(uintptr(handle))
	headers := unsafe.Slice(resp.headers, int(resp.headers_len))
	var body []byte
	if resp.body_len > 0 {
		body = unsafe.Slice((*byte)(unsafe.Pointer(resp.body)), int(resp.body_len))
	}
	flags := uint32(resp.flags)
	retryAfter := time.Duration(resp.retry_after_ms) * time.Millisecond
	ok := pr.respond(int(resp.status), headers, body, flags, uint32(resp.refusal), retryAfter, queued)
	if flags&C.PHP_WORKER_RESPONSE_DONE != 0 {
		pr.release() // the core's reference
	}
	if !ok {
		return 1
	}
	return 0
}

//export goPhpWorkerReadBody
func goPhpWorkerReadBody(handle C.size_t, buf *C.uint8_t, n C.size_t) C.int64_t {
	countOut()
	pr := lookupRequest(uintptr(handle))
	return C.int64_t(pr.readBody(unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))))
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
	log := appLogger()
	if !log.Core().Enabled(lvl) {
		return // decode nothing for a line nobody logs (debug lines, mostly)
	}
	if handle != 0 {
		log = lookupRequest(uintptr(handle)).logger()
	}
	var zf []zap.Field
	if fieldsLen > 0 {
		zf = logFields(unsafe.Slice((*byte)(unsafe.Pointer(fields)), int(fieldsLen)))
	}
	log.Log(lvl, C.GoStringN((*C.char)(unsafe.Pointer(msg)), C.int(n)), zf...)
}

// logFields turns the core's JSON object of log fields into zap fields, in order:
// integers stay integers, so the fields keep their types in the log.
func logFields(raw []byte) []zap.Field {
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

// addHeaders adds the headers the core lent for the callback. PHP's header() accepts
// names and values HTTP does not ("Bad Name: x", control characters); Go's server then
// strips or drops them silently, differently for HTTP/1, 2 and 3, and over HTTP/3 an
// invalid name stalled the response. Such headers are dropped with a warning: for a bad
// name once (while the name cache has room), for a bad value each time.
func addHeaders(pr *phpRequest, h http.Header, headers []C.php_worker_header_t) {
	for i := range headers {
		raw := unsafe.Slice((*byte)(unsafe.Pointer(headers[i].name)), int(headers[i].name_len))
		name, first := canonicalName(raw)
		if name == "" {
			if first {
				pr.logger().Warn("PHP sent a header with an invalid name; dropping it", zap.ByteString("name", raw))
			}
			continue
		}
		value := C.GoStringN((*C.char)(unsafe.Pointer(headers[i].value)), C.int(headers[i].value_len))
		if !httpguts.ValidHeaderFieldValue(value) {
			pr.logger().Warn("PHP sent a header value with control characters; dropping the header",
				zap.String("name", name))
			continue
		}
		h[name] = append(h[name], value)
	}
}

// headerNames caches the canonical form of the header names PHP sends ("Content-type"
// becomes "Content-Type"; an invalid name maps to ""), so a response allocates only its
// values. Copy on write: lookups take no lock.
var headerNames struct {
	m  atomic.Pointer[map[string]string]
	mu sync.Mutex
}

const maxCachedHeaderNames = 512

// canonicalName returns the name to send, "" for an invalid one, and whether this is
// the first time the name was seen.
func canonicalName(b []byte) (string, bool) {
	if m := headerNames.m.Load(); m != nil {
		if name, ok := (*m)[string(b)]; ok {
			return name, false
		}
	}
	name := ""
	if httpguts.ValidHeaderFieldName(string(b)) {
		name = textproto.CanonicalMIMEHeaderKey(string(b))
	}
	headerNames.mu.Lock()
	defer headerNames.mu.Unlock()
	old := headerNames.m.Load()
	if old == nil || len(*old) < maxCachedHeaderNames {
		next := make(map[string]string, 1+lenOf(old))
		if old != nil {
			for k, v := range *old {
				next[k] = v
			}
		}
		next[string(b)] = name
		headerNames.m.Store(&next)
	}
	return name, true
}

func lenOf(m *map[string]string) int {
	if m == nil {
		return 0
	}
	return len(*m)
}
