// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

/*
#include <stdlib.h>
#include "php_worker.h"

// Exported from callbacks.go; cgo declares them without const.
extern int32_t goPhpWorkerRespond(size_t handle, php_worker_response_t *response);
extern int64_t goPhpWorkerReadBody(size_t handle, uint8_t *buf, size_t len);
extern void goPhpWorkerLog(size_t handle, int32_t level, uint8_t *message, size_t len);

static php_worker_callbacks_t php_worker_go_callbacks(void) {
	php_worker_callbacks_t cb = {
		.respond = (int32_t (*)(size_t, const php_worker_response_t *))goPhpWorkerRespond,
		.read_body = goPhpWorkerReadBody,
		.log = (void (*)(size_t, int32_t, const uint8_t *, size_t))goPhpWorkerLog,
	};
	return cb;
}

// The core copies the request and never calls back during a submission.
#cgo noescape php_worker_request_submit
#cgo nocallback php_worker_request_submit
*/
import "C"

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"go.uber.org/zap"
)

// engine is the Go handle of the Rust core's engine (one per process).
type engine struct {
	config []byte
	owner  *App // the app that started or last claimed it; guarded by engines.mu

	mu       sync.RWMutex // write-held only to free ptr
	ptr      *C.php_worker_engine_t
	stopping atomic.Bool
}

var engines struct {
	mu      sync.Mutex // serialises start and stop
	current atomic.Pointer[engine]
	changed atomic.Pointer[chan struct{}] // closed whenever current changes
}

func init() {
	ch := make(chan struct{})
	engines.changed.Store(&ch)
}

// coreBuildID names the Rust core linked in; xcaddy.sh stamps it at link time.
var coreBuildID = "dev"

// crossings counts Go↔Rust calls when PHP_WORKER_COUNT_CROSSINGS=1 (the benchmark
// suite reads them from the "PHP engine stopped" log line): calls into the core, and
// callbacks out of it.
var crossings struct {
	enabled bool
	in, out atomic.Int64
}

func init() {
	crossings.enabled = os.Getenv("PHP_WORKER_COUNT_CROSSINGS") == "1"
}

func countIn() {
	if crossings.enabled {
		crossings.in.Add(1)
	}
}

func countOut() {
	if crossings.enabled {
		crossings.out.Add(1)
	}
}

// logger is php_worker's logger for messages outside a request.
var logger atomic.Pointer[zap.Logger]

func appLogger() *zap.Logger {
	if l := logger.Load(); l != nil {
		return l
	}
	return zap.NewNop()
}

// PHP threads hand responses to Go through callbacks, and each callback needs a P.
// With GOMAXPROCS at the CPU count, the HTTP goroutines hold every P under load and a
// callback waits for one (futex sleeps and wake-ups on both sides); one more P lets
// callbacks through: +8 to +30% worker-mode hello-world throughput on 2 cores, as
// measured. An explicit GOMAXPROCS environment variable is left alone. Guarded by
// engines.mu.
var extraP bool

func reserveCallbackP(on bool) {
	if on == extraP || os.Getenv("GOMAXPROCS") != "" {
		return
	}
	if on {
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1)
	} else {
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) - 1)
	}
	extraP = on
}

// cpus is the number of CPUs Go schedules on, before the extra P.
func cpus() int {
	engines.mu.Lock()
	defer engines.mu.Unlock()
	n := runtime.GOMAXPROCS(0)
	if extraP {
		n--
	}
	return n
}

func publishEngine(e *engine) {
	engines.current.Store(e)
	ch := make(chan struct{})
	old := engines.changed.Swap(&ch)
	close(*old)
}

// startEngine makes a running engine with the given config, reusing the current one
// when its config is the same.
func startEngine(owner *App, config []byte, log *zap.Logger) error {
	engines.mu.Lock()
	defer engines.mu.Unlock()
	logger.Store(log)
	if cur := engines.current.Load(); cur != nil {
		if bytes.Equal(cur.config, config) {
			cur.owner = owner
			return nil
		}
		log.Info("PHP settings changed: restarting the PHP engine")
		cur.shutdown()
		publishEngine(nil)
	}
	cb := C.php_worker_go_callbacks()
	var ptr *C.php_worker_engine_t
	cfg := C.CBytes(config)
	defer C.free(cfg)
	if err := C.php_worker_engine_new((*C.uint8_t)(cfg), C.size_t(len(config)), &cb, &ptr); err != nil {
		var n C.size_t
		msg := C.GoStringN(C.php_worker_error_message(err, &n), C.int(n))
		C.php_worker_error_delete(err)
		return errors.New(msg)
	}
	publishEngine(&engine{config: config, owner: owner, ptr: ptr})
	reserveCallbackP(true)
	log.Info("PHP engine started", zap.String("php_version", phpVersion()), zap.String("core", coreBuildID),
		zap.ByteString("config", config))
	return nil
}

// stopEngine stops the engine if owner still owns it.
func stopEngine(owner *App) {
	engines.mu.Lock()
	defer engines.mu.Unlock()
	if cur := engines.current.Load(); cur != nil && cur.owner == owner {
		cur.shutdown()
		publishEngine(nil)
		reserveCallbackP(false)
		fields := []zap.Field{zap.String("core", coreBuildID)}
		if crossings.enabled {
			fields = append(fields, zap.Int64("calls_into_core", crossings.in.Load()),
				zap.Int64("callbacks_from_core", crossings.out.Load()))
		}
		appLogger().Info("PHP engine stopped", fields...)
	}
}

// shutdown drains and frees the engine. Submissions racing with it fail cleanly.
func (e *engine) shutdown() {
	e.stopping.Store(true)
	C.php_worker_engine_shutdown(e.ptr) // blocks until running requests finish
	e.mu.Lock()
	C.php_worker_engine_delete(e.ptr)
	e.ptr = nil
	e.mu.Unlock()
}

// waitEngine returns the running engine, waiting up to timeout for one to start (the
// http app may start before ours, and a reload may restart the engine).
func waitEngine(done <-chan struct{}, timeout time.Duration) *engine {
	var timer <-chan time.Time
	for {
		changed := *engines.changed.Load()
		if e := engines.current.Load(); e != nil && !e.stopping.Load() {
			return e
		}
		if timer == nil {
			t := time.NewTimer(timeout)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-changed:
		case <-done:
			return nil
		case <-timer:
			return nil
		}
	}
}

// submit queues a request; see php_worker_request_submit in php_worker.h.
func (e *engine) submit(pool uint32, b *requestBuffer, flags uint32, handle uintptr) (*C.php_worker_request_t, C.int32_t) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.ptr == nil {
		return nil, C.PHP_WORKER_ERR_STOPPED
	}
	var out *C.php_worker_request_t
	countIn()
	rc := C.php_worker_request_submit(e.ptr, C.uint32_t(pool),
		(*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(b.strings))), C.size_t(len(b.strings)),
		(*C.uint32_t)(unsafe.Pointer(unsafe.SliceData(b.spans))), C.size_t(len(b.spans)),
		C.uint32_t(b.envPairs), C.size_t(b.bodyLen), C.int64_t(b.contentLength), C.uint32_t(flags),
		C.size_t(handle), &out)
	return out, rc
}

// cancelRequest withdraws a submitted request; true when it will not run.
func cancelRequest(r *C.php_worker_request_t) bool {
	countIn()
	return bool(C.php_worker_request_cancel(r))
}

// phpVersion is the version of the linked PHP.
func phpVersion() string {
	return C.GoString(C.php_worker_php_version())
}
