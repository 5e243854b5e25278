// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

// #include "php_worker.h"
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

// The callbacks the Rust core calls on its PHP threads (php_worker_callbacks_t). They
// must not panic: a Go panic here would kill the process.

//export goPhpWorkerRespond
func goPhpWorkerRespond(handle C.size_t, resp *C.php_worker_response_t) C.int32_t {
	pr := cgo.Handle(handle).Value().(*phpRequest)
	headers := unsafe.Slice(resp.headers, int(resp.headers_len))
	var body []byte
	if resp.body_len > 0 {
		body = unsafe.Slice((*byte)(unsafe.Pointer(resp.body)), int(resp.body_len))
	}
	flags := uint32(resp.flags)
	ok := pr.respond(int(resp.status), headers, body, flags)
	if flags&C.PHP_WORKER_RESPONSE_DONE != 0 {
		cgo.Handle(handle).Delete()
	}
	if !ok {
		return 1
	}
	return 0
}

//export goPhpWorkerReadBody
func goPhpWorkerReadBody(handle C.size_t, buf *C.uint8_t, n C.size_t) C.int64_t {
	pr := cgo.Handle(handle).Value().(*phpRequest)
	return C.int64_t(pr.readBody(unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))))
}

//export goPhpWorkerLog
func goPhpWorkerLog(handle C.size_t, level C.int32_t, msg *C.uint8_t, n C.size_t) {
	log := appLogger()
	if handle != 0 {
		log = cgo.Handle(handle).Value().(*phpRequest).logger
	}
	text := C.GoStringN((*C.char)(unsafe.Pointer(msg)), C.int(n))
	switch level {
	case C.PHP_WORKER_LOG_ERROR:
		log.Error(text)
	case C.PHP_WORKER_LOG_WARN:
		log.Warn(text)
	case C.PHP_WORKER_LOG_INFO:
		log.Info(text)
	default:
		log.Debug(text)
	}
}

// headerString reads a header name or value the core lent for the callback.
func headerString(p *C.uint8_t, n C.size_t) string {
	return C.GoStringN((*C.char)(unsafe.Pointer(p)), C.int(n))
}
