// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package core

/*
#include <stdlib.h>
#include "php_worker.h"

// Exported from callbacks.go; cgo declares them without const.
extern int32_t goPhpWorkerRespond(size_t handle, php_worker_response_t *response);
extern int64_t goPhpWorkerReadBody(size_t handle, uint8_t *buf, size_t len);
extern void goPhpWorkerLog(size_t handle, int32_t level, uint8_t *message, size_t len, uint8_t *fields, size_t fields_len);
extern int32_t goPhpWorkerSharedStore(uint8_t *request, size_t len, uint8_t **reply, size_t *reply_len);

static php_worker_callbacks_t php_worker_go_callbacks(int remote_store) {
	php_worker_callbacks_t cb = {
		.respond = (int32_t (*)(size_t, const php_worker_response_t *))goPhpWorkerRespond,
		.read_body = goPhpWorkerReadBody,
		.log = (void (*)(size_t, int32_t, const uint8_t *, size_t, const uint8_t *, size_t))goPhpWorkerLog,
		.shared_store = remote_store ? (int32_t (*)(const uint8_t *, size_t, uint8_t **, size_t *))goPhpWorkerSharedStore : NULL,
	};
	return cb;
}

// The core copies the request and never calls back during a submission.
#cgo noescape php_worker_request_submit
#cgo nocallback php_worker_request_submit
#cgo noescape php_worker_completions_take
#cgo nocallback php_worker_completions_take
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Engine is the Go handle of the Rust core's engine (rust-core/include/php_worker.h):
// one per process at a time. Its methods are safe from any goroutine; they fail once
// the engine is shut down.
type Engine struct {
	mu       sync.RWMutex // write-held only to free ptr
	ptr      *C.php_worker_engine_t
	stopping atomic.Bool
	// completions is the core's completion eventfd (a duplicate Go owns), read by the
	// goroutine that delivers completed responses; delivered closes when it ended.
	completions *os.File
	delivered   chan struct{}
	// PHP's post_max_size in bytes (0: no limit), set before the engine is published.
	postMaxSize int64
	// applied is the state the engine runs (nil before the first Apply, state.go);
	// applyMu serialises Applies.
	applyMu sync.Mutex
	applied *State
}

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

// Crossings are the calls into the core and the callbacks out of it so far, when
// PHP_WORKER_COUNT_CROSSINGS=1 (ok false otherwise).
func Crossings() (in, out int64, ok bool) {
	return crossings.in.Load(), crossings.out.Load(), crossings.enabled
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

// CPUs is the number of CPUs Go schedules on (GOMAXPROCS), which thread counts default
// from. php_worker leaves GOMAXPROCS at Go's default: PHP threads are not Go's, and with
// PHP using the CPUs too, every P more means more Go threads spinning for work. One P
// more than the CPUs, once worth up to 30% when every response came back through a
// callback, now costs real pages 1 to 2% and classic hello world 4% (gaining 3% only on
// hello world in worker mode), in interleaved rounds on 2 cores; a GOMAXPROCS
// environment variable still sets it (docs/performance.md).
func CPUs() int {
	return runtime.GOMAXPROCS(0)
}

// dupCloseOnExec duplicates a descriptor of the core's for Go's poller, close-on-exec
// from the start: PHP threads may be starting programs (exec, proc_open) meanwhile, and
// none may inherit it.
func dupCloseOnExec(fd int) (int, error) {
	return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
}

// coreError turns an error of the core into a Go error and frees it.
func coreError(err *C.php_worker_error_t) error {
	if err == nil {
		return nil
	}
	var n C.size_t
	msg := C.GoStringN(C.php_worker_error_message(err, &n), C.int(n))
	C.php_worker_error_delete(err)
	return errors.New(msg)
}

var errEngineStopped = errors.New("the PHP engine is stopped")

// withCompletions is the JSON of php_worker_engine_new: the caller's settings (a JSON
// object) with the completion queue on, which the engine's delivering goroutine serves,
// and, in a child process, the wire (OpenWire) in its place.
func withCompletions(settings []byte) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(settings, &fields); err != nil {
		return nil, fmt.Errorf("the engine settings: %w", err)
	}
	if fields == nil {
		fields = map[string]json.RawMessage{}
	}
	fields["completions"] = json.RawMessage("true")
	if wireOpen.Load() {
		fields["wire"] = json.RawMessage("true")
	}
	return json.Marshal(fields)
}

// CheckSettings tells whether an engine would start with the settings (the JSON of
// php_worker_engine_new), starting no PHP (php_worker_engine_config_check).
func CheckSettings(settings []byte) error {
	settings, err := withCompletions(settings)
	if err != nil {
		return err
	}
	cfg := C.CBytes(settings)
	defer C.free(cfg)
	return coreError(C.php_worker_engine_config_check((*C.uint8_t)(cfg), C.size_t(len(settings))))
}

// NewEngine starts PHP with the engine settings (the JSON php_worker_engine_new reads,
// but for the completion queue, which is always on).
func NewEngine(settings []byte) (*Engine, error) {
	settings, err := withCompletions(settings)
	if err != nil {
		return nil, err
	}
	remote := C.int(0)
	if _, ok := host.(SharedStoreHost); ok {
		remote = 1
	}
	cb := C.php_worker_go_callbacks(remote)
	var ptr *C.php_worker_engine_t
	cfg := C.CBytes(settings)
	defer C.free(cfg)
	if err := coreError(C.php_worker_engine_new((*C.uint8_t)(cfg), C.size_t(len(settings)), &cb, &ptr)); err != nil {
		return nil, err
	}
	e := &Engine{ptr: ptr, delivered: make(chan struct{})}
	fd, err := dupCloseOnExec(int(C.php_worker_engine_completion_fd(ptr)))
	if err == nil {
		err = syscall.SetNonblock(fd, true)
	}
	if err != nil {
		C.php_worker_engine_delete(ptr)
		return nil, fmt.Errorf("the completion queue's descriptor: %w", err)
	}
	e.completions = os.NewFile(uintptr(fd), "php_worker completions")
	go e.deliverCompletions()
	if s, err := e.Stats(); err == nil {
		e.postMaxSize = s.PostMaxSize
	}
	return e, nil
}

// Stopping tells whether the engine is shutting down (or asked to): it takes no new
// requests.
func (e *Engine) Stopping() bool {
	return e.stopping.Load()
}

// MarkStopping makes Stopping true ahead of Shutdown, for callers that tell waiting
// requests first.
func (e *Engine) MarkStopping() {
	e.stopping.Store(true)
}

// PostMaxSize is PHP's post_max_size in bytes (0: no limit).
func (e *Engine) PostMaxSize() int64 {
	return e.postMaxSize
}

// deliverCompletions hands each completed response to its request, as the respond
// callback does, whenever the core's eventfd says some are queued (through Go's poller,
// so no thread blocks on it). It ends when shutdown closes the descriptor, after a last
// take.
func (e *Engine) deliverCompletions() {
	defer close(e.delivered)
	var count [8]byte
	for {
		_, err := e.completions.Read(count[:])
		e.takeCompletions()
		if err != nil {
			return
		}
	}
}

// takeCompletions delivers every queued completion.
func (e *Engine) takeCompletions() {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.ptr == nil {
		return
	}
	var items *C.php_worker_completion_t
	var n C.size_t
	batch := C.php_worker_completions_take(e.ptr, &items, &n)
	if batch == nil {
		return
	}
	for _, c := range unsafe.Slice(items, int(n)) {
		deliverResponse(c.handle, &c.response, FromCompletions)
	}
	C.php_worker_completions_delete(batch)
}

// Shutdown drains and frees the engine: queued and running requests finish, scripts
// still running after grace are stopped. Submissions racing with it fail cleanly.
func (e *Engine) Shutdown(grace time.Duration) {
	e.stopping.Store(true)
	e.mu.RLock()
	if e.ptr != nil {
		C.php_worker_engine_shutdown(e.ptr, C.uint64_t(grace.Milliseconds())) // blocks until done
	}
	e.mu.RUnlock()
	// Every PHP thread ended: the last completions are queued. Closing the descriptor
	// makes the delivering goroutine take them and end.
	if e.completions != nil && e.completions.Close() == nil {
		<-e.delivered
	}
	e.mu.Lock()
	if e.ptr != nil {
		C.php_worker_engine_delete(e.ptr)
		e.ptr = nil
	}
	e.mu.Unlock()
}

// call runs f with the live engine pointer.
func (e *Engine) call(f func(*C.php_worker_engine_t) *C.php_worker_error_t) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.ptr == nil {
		return errEngineStopped
	}
	return coreError(f(e.ptr))
}

// bytesArg is a buffer C reads during the call, or NULL for nil.
func bytesArg(b []byte) (*C.uint8_t, C.size_t, func()) {
	if b == nil {
		return nil, 0, func() {}
	}
	p := C.CBytes(b)
	return (*C.uint8_t)(p), C.size_t(len(b)), func() { C.free(p) }
}

// newPool creates worker pool id with a spec (JSON, see php_worker_pool_new).
func (e *Engine) newPool(id uint32, spec []byte) error {
	p, n, free := bytesArg(spec)
	defer free()
	return e.call(func(ptr *C.php_worker_engine_t) *C.php_worker_error_t {
		return C.php_worker_pool_new(ptr, C.uint32_t(id), p, n)
	})
}

// resizeClassic sets the number of classic threads.
func (e *Engine) resizeClassic(threads int) error {
	return e.call(func(ptr *C.php_worker_engine_t) *C.php_worker_error_t {
		return C.php_worker_pool_resize(ptr, C.PHP_WORKER_CLASSIC_POOL, C.uint32_t(threads))
	})
}

// ConfigureStores sets the capacities of the shared table and of each thread's local
// store. The stores belong to the process: no engine is needed.
func ConfigureStores(sharedBytes, localBytes int64) {
	C.php_worker_stores_configure(C.uint64_t(sharedBytes), C.uint64_t(localBytes))
}

// RunSharedStore runs an operation of another process's PHP threads on this process's
// shared table (php_worker_shared_store_run): the encoded reply.
func RunSharedStore(request []byte) ([]byte, error) {
	var out *C.php_worker_bytes_t
	if err := coreError(C.php_worker_shared_store_run((*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(request))),
		C.size_t(len(request)), &out)); err != nil {
		return nil, err
	}
	return takeBytes(out), nil
}

// autoscale sets the autoscaling limits: at most maxThreads PHP threads (0: none
// added), extra threads ending after maxIdle without a request.
func (e *Engine) autoscale(maxThreads int, maxIdle time.Duration) error {
	return e.call(func(ptr *C.php_worker_engine_t) *C.php_worker_error_t {
		return C.php_worker_engine_autoscale(ptr, C.uint32_t(maxThreads), C.uint64_t(maxIdle.Milliseconds()))
	})
}

// setDeadlines sets how long a request may run past its PHP time limit before the core
// ends it (negative: never), and how many stuck threads get a replacement.
func (e *Engine) setDeadlines(grace time.Duration, maxStuck int) error {
	ms := int64(-1)
	if grace >= 0 {
		ms = grace.Milliseconds()
	}
	return e.call(func(ptr *C.php_worker_engine_t) *C.php_worker_error_t {
		return C.php_worker_engine_set_deadlines(ptr, C.int64_t(ms), C.uint32_t(maxStuck))
	})
}

// restartPool starts a new generation of a worker pool, staged unless activate.
func (e *Engine) restartPool(id uint32, spec []byte, activate bool) error {
	p, n, free := bytesArg(spec)
	defer free()
	return e.call(func(ptr *C.php_worker_engine_t) *C.php_worker_error_t {
		return C.php_worker_pool_restart(ptr, C.uint32_t(id), p, n, C.bool(activate), nil)
	})
}

// activatePool makes a staged generation take over its pool.
func (e *Engine) activatePool(id, generation uint32) error {
	return e.call(func(ptr *C.php_worker_engine_t) *C.php_worker_error_t {
		return C.php_worker_pool_activate(ptr, C.uint32_t(id), C.uint32_t(generation))
	})
}

// discardPool ends a staged generation that will not take over.
func (e *Engine) discardPool(id, generation uint32) error {
	return e.call(func(ptr *C.php_worker_engine_t) *C.php_worker_error_t {
		return C.php_worker_pool_discard(ptr, C.uint32_t(id), C.uint32_t(generation))
	})
}

// deletePool removes a pool: it serves what is queued, then its threads end.
func (e *Engine) deletePool(id uint32) error {
	return e.call(func(ptr *C.php_worker_engine_t) *C.php_worker_error_t {
		return C.php_worker_pool_delete(ptr, C.uint32_t(id))
	})
}

// StatsJSON is the engine's snapshot of its threads and pools (JSON, see
// php_worker_engine_stats); Stats decodes it.
func (e *Engine) StatsJSON() ([]byte, error) {
	var out *C.php_worker_bytes_t
	if err := e.call(func(ptr *C.php_worker_engine_t) *C.php_worker_error_t {
		return C.php_worker_engine_stats(ptr, &out)
	}); err != nil {
		return nil, err
	}
	return takeBytes(out), nil
}

// ProfileStart starts a profile of every PHP thread, hz samples a second (1 to 1000),
// weighted by wall time or, with cpu, by the threads' CPU time (php_worker_profile_start).
func (e *Engine) ProfileStart(hz int, cpu bool) error {
	return e.call(func(ptr *C.php_worker_engine_t) *C.php_worker_error_t {
		return C.php_worker_profile_start(ptr, C.uint32_t(hz), C.bool(cpu))
	})
}

// ProfileStop ends the profile and returns it as JSON (php_worker_profile_stop).
func (e *Engine) ProfileStop() ([]byte, error) {
	var out *C.php_worker_bytes_t
	if err := e.call(func(ptr *C.php_worker_engine_t) *C.php_worker_error_t {
		return C.php_worker_profile_stop(ptr, &out)
	}); err != nil {
		return nil, err
	}
	return takeBytes(out), nil
}

// Submit queues a request, to be answered through the Host's callbacks for handle;
// see php_worker_request_submit in php_worker.h.
func (e *Engine) Submit(pool uint32, b *RequestBuffer, flags uint32, handle uintptr) (Submitted, Code) {
	return e.SubmitMarked(pool, b, flags, handle, nil)
}

// SubmitMarked is Submit for a host that must know when a PHP thread takes the request
// (a child process, for the Caddy process): that thread stores handle in *taken, with
// no callback, before the script starts. taken must not be in Go's heap (the child's
// is a shared mapping) and must stay mapped until the request's last response call.
func (e *Engine) SubmitMarked(pool uint32, b *RequestBuffer, flags uint32, handle uintptr, taken *uint64) (Submitted, Code) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.ptr == nil {
		return nil, ErrStopped
	}
	var out *C.php_worker_request_t
	countIn()
	rc := C.php_worker_request_submit(e.ptr, C.uint32_t(pool),
		(*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(b.Strings))), C.size_t(len(b.Strings)),
		(*C.uint32_t)(unsafe.Pointer(unsafe.SliceData(b.Spans))), C.size_t(len(b.Spans)),
		C.uint32_t(b.EnvPairs), C.size_t(b.BodyLen), C.int64_t(b.ContentLength), C.uint32_t(flags),
		C.size_t(handle), (*C.uint64_t)(unsafe.Pointer(taken)), &out)
	if rc != C.PHP_WORKER_OK {
		return nil, Code(rc)
	}
	return (*Request)(out), OK
}

// PoolWaiting is how many threads of pool wait for a request now (0 when PHP is not
// running).
func (e *Engine) PoolWaiting(pool uint32) int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.ptr == nil {
		return 0
	}
	return int(C.php_worker_pool_waiting(e.ptr, C.uint32_t(pool)))
}

// Submitted is a request an engine took: this process's core (Request), or a child
// process's (internal/cluster).
type Submitted interface {
	// Cancel withdraws the request; true when it will not run. Valid only before the
	// request's last response call (PHP_WORKER_RESPONSE_DONE).
	Cancel() bool
	// ClientGone tells the request its client left: the script's next
	// fastcgi_finish_request() reports it aborted. Valid as Cancel is.
	ClientGone()
}

// Request is a submitted request, as the core knows it until its last response call.
type Request C.php_worker_request_t

// Cancel withdraws the request; true when it will not run. Valid only before the
// request's last response call (PHP_WORKER_RESPONSE_DONE).
func (r *Request) Cancel() bool {
	countIn()
	return bool(C.php_worker_request_cancel((*C.php_worker_request_t)(r)))
}

// ClientGone tells the request its client left. Valid only before the request's last
// response call (PHP_WORKER_RESPONSE_DONE).
func (r *Request) ClientGone() {
	countIn()
	C.php_worker_request_client_gone((*C.php_worker_request_t)(r))
}

// takeBytes copies bytes the core handed over into Go memory and frees them.
func takeBytes(out *C.php_worker_bytes_t) []byte {
	defer C.php_worker_bytes_delete(out)
	var n C.size_t
	data := C.php_worker_bytes_data(out, &n)
	return C.GoBytes(unsafe.Pointer(data), C.int(n))
}
