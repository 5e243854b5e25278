//! Every `extern "C"` function the host calls (include/php_worker.h). Each catches
//! panics: no unwinding crosses the ABI.

use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use crate::abi::types::{
    Callbacks, CliCommand, CompletionEntry, JobOutcome, PHP_WORKER_ERR_INTERNAL, PHP_WORKER_ERR_INVALID, PHP_WORKER_ERR_QUEUE_FULL, PHP_WORKER_ERR_STOPPED,
    PHP_WORKER_ERR_UNKNOWN_POOL, PHP_WORKER_OK,
};
use crate::config::{EngineConfig, WorkerSpec};
use crate::supervisor::engine::Engine;
use crate::error::{Error, Result, panic_message};
use crate::host::{Host, without_callbacks};
use crate::host::completions::Completion;
use crate::layout::Strings;
use crate::request::{Request, RunState, TakenMark};
use crate::supervisor::scaling::Limits;

/// A running PHP engine (opaque).
pub struct EngineHandle {
    engine: Arc<Engine>,
}

/// A submitted request (opaque), for php_worker_request_cancel().
pub struct RequestHandle {
    _private: [u8; 0],
}

/// An error message (opaque), freed with php_worker_error_delete().
pub struct ErrorHandle {
    message: String,
}

/// Completions the host took (opaque), freed with php_worker_completions_delete().
pub struct CompletionsHandle {
    _completions: Vec<Completion>,
    entries: Vec<CompletionEntry>,
}

/// Bytes the core hands over (opaque), freed with php_worker_bytes_delete().
pub struct BytesHandle {
    bytes: Vec<u8>,
}

fn error_box(err: &Error) -> *mut ErrorHandle {
    Box::into_raw(Box::new(ErrorHandle { message: err.to_string() }))
}

/// Runs an operation that reports errors as a php_worker_error_t.
fn catch(f: impl FnOnce() -> Result<()>) -> *mut ErrorHandle {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(e)) => error_box(&e),
        Err(panic) => error_box(&Error::Panic(panic_message(&*panic))),
    }
}

/// # Safety
/// `engine` is NULL or live.
unsafe fn engine_ref<'a>(engine: *const EngineHandle) -> Result<&'a Engine> {
    // SAFETY: the caller's contract: `engine` is NULL or live.
    unsafe { engine.as_ref() }.map(|h| &*h.engine).ok_or(Error::InvalidRequest("NULL engine"))
}

/// # Safety
/// `ptr` is NULL (then `len` is 0) or valid for `len` bytes.
unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8]> {
    if ptr.is_null() {
        return if len == 0 { Ok(&[]) } else { Err(Error::InvalidRequest("NULL buffer")) };
    }
    // SAFETY: not NULL, and the caller's contract: valid for `len` bytes.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Starts PHP: TSRM, the SAPI and the modules, on a main thread of the core's own.
/// Blocks until PHP is up. The engine starts with an empty classic pool
/// (PHP_WORKER_CLASSIC_POOL): give it threads with php_worker_pool_resize() and add
/// worker pools with php_worker_pool_new().
///
/// `config_json` (`config_len` bytes, UTF-8 JSON, not NUL-terminated) is read during the
/// call: `{"php_ini": {"key": "value", "extension": ["a.so", "b.so"]}, "ini_defaults":
/// {"key": "value"}, "thread_max_requests": n, "completions": bool}`:
/// php_ini applies after php.ini (a list gives a line per value, in order), ini_defaults
/// under it; after thread_max_requests requests (0: never) a PHP thread starts a fresh
/// PHP context.
/// `callbacks` is copied. With `completions`, the last response call of every request
/// (the one with PHP_WORKER_RESPONSE_DONE, refusals aside) is not made through
/// `respond`: it is queued for php_worker_completions_take(), and the descriptor of
/// php_worker_engine_completion_fd() becomes readable.
/// On success writes the engine to `*engine_out` and returns NULL; otherwise returns an
/// error to free with php_worker_error_delete(). Only one engine may exist per process.
///
/// # Safety
/// The pointers are valid as described; the callbacks follow php_worker_callbacks_t
/// until php_worker_engine_delete() returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_engine_new(
    config_json: *const u8,
    config_len: usize,
    callbacks: *const Callbacks,
    engine_out: *mut *mut EngineHandle,
) -> *mut ErrorHandle {
    catch(|| {
        if callbacks.is_null() || engine_out.is_null() {
            return Err(Error::InvalidRequest("NULL argument"));
        }
        // SAFETY: per the function contract.
        let (json, callbacks) = unsafe { (bytes(config_json, config_len)?, *callbacks) };
        let config = EngineConfig::from_json(json)?;
        crate::runtime::store::set_remote(callbacks.shared_store);
        // SAFETY: per the function contract.
        let mut host = unsafe { Host::new(callbacks, Strings::from_process_env()) };
        if config.completions {
            host.enable_completions().map_err(|e| Error::Startup(format!("cannot create the completion queue: {e}")))?;
        }
        let wire = if config.wire {
            let wire = crate::wire::current().ok_or(Error::Startup("\"wire\" is set, but no wire is open (php_worker_wire_open)".into()))?;
            host.set_remote(wire.clone());
            Some(wire)
        } else {
            None
        };
        let host = Arc::new(host);
        let engine = Arc::new(Engine::start(&config, host)?);
        if let Some(wire) = wire {
            wire.attach(engine.clone());
        }
        // SAFETY: `engine_out` is not NULL (checked) and writable by the function's contract.
        unsafe { *engine_out = Box::into_raw(Box::new(EngineHandle { engine })) };
        Ok(())
    })
}

/// Checks an engine config, the JSON php_worker_engine_new() reads, without starting
/// PHP: returns NULL when an engine would accept it, else the error it would give (to
/// free with php_worker_error_delete()). For a host's config validation; any thread,
/// never blocks.
///
/// # Safety
/// `config_json` is readable for `config_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_engine_config_check(config_json: *const u8, config_len: usize) -> *mut ErrorHandle {
    catch(|| {
        // SAFETY: per the function contract.
        let json = unsafe { bytes(config_json, config_len)? };
        EngineConfig::from_json(json).map(drop)
    })
}

/// Stops taking requests, lets queued and running ones finish for up to `grace_ms`,
/// stops the scripts still running then (the way max_execution_time does), and stops
/// PHP. Blocks until done. Submissions made afterwards fail with PHP_WORKER_ERR_STOPPED.
/// Calling it twice is harmless.
///
/// # Safety
/// `engine` comes from php_worker_engine_new() and was not deleted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_engine_shutdown(engine: *mut EngineHandle, grace_ms: u64) {
    // SAFETY: the function's contract: `engine` is NULL or from php_worker_engine_new(), not deleted.
    if let Some(handle) = unsafe { engine.as_ref() } {
        let _ = catch_unwind(AssertUnwindSafe(|| handle.engine.shutdown(Duration::from_millis(grace_ms))));
    }
}

/// Shuts the engine down (as php_worker_engine_shutdown() with a 30 s grace, unless that
/// was done) and frees it. After this, a new engine may be created.
///
/// # Safety
/// `engine` comes from php_worker_engine_new(), is not used by any other call during
/// or after this one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_engine_delete(engine: *mut EngineHandle) {
    if !engine.is_null() {
        // SAFETY: per the function contract, we own it now.
        let handle = unsafe { Box::from_raw(engine) };
        let _ = catch_unwind(AssertUnwindSafe(move || {
            // The wire's reader lets go of it first, so the engine stops here.
            if let Some(wire) = crate::wire::current() {
                wire.detach(&handle.engine);
            }
            drop(handle)
        }));
    }
}

/// A snapshot of the engine's threads and pools, as UTF-8 JSON:
/// `{"max_threads", "histogram_bounds": [seconds], "threads": [{"index", "name", "state", "pool", "worker",
/// "generation", "method", "uri", "requests", "memory", "real_memory"}], "pools": [{"id",
/// "worker", "generation", "staged", "threads", "ready", "failing", "busy", "idle", "base",
/// "max_threads", "queued", "duration", "wait", "crashes", "restarts", "memory_growth":
/// [{"path", "bytes", "requests"}]}], "opcache":
/// {"guarded", "restart_pending", "restarts_out_of_memory", "restarts_key_table_full",
/// "restarts_opcache_reset", "holds_timed_out"}, "stuck_threads", "expired_requests",
/// "post_max_size"}` (PHP's post_max_size in bytes, 0 for no limit), where
/// `duration` and `wait` are histograms `{"buckets": [cumulative counts], "count",
/// "sum"}` in seconds over fixed bounds (src/runtime/counters.rs). Reads atomics and
/// short locks only: PHP is not called.
/// On success writes the bytes to `*out` (free them with php_worker_bytes_delete()).
///
/// # Safety
/// `engine` is live; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_engine_stats(engine: *const EngineHandle, out: *mut *mut BytesHandle) -> *mut ErrorHandle {
    catch(|| {
        // SAFETY: the function's contract: `engine` is live.
        let engine = unsafe { engine_ref(engine)? };
        if out.is_null() {
            return Err(Error::InvalidRequest("NULL out"));
        }
        let bytes = serde_json::to_vec(&crate::supervisor::stats::collect(engine)).map_err(|e| Error::Panic(e.to_string()))?;
        // SAFETY: the function's contract: `out` is writable.
        unsafe { *out = Box::into_raw(Box::new(BytesHandle { bytes })) };
        Ok(())
    })
}

/// Starts a profile of every PHP thread (classic, worker, task, background): `hz`
/// samples a second (1 to 1000), weighted by wall time, or with `cpu` by the CPU time
/// each thread used. A sampler thread runs until php_worker_profile_stop(); PHP threads
/// walk their own stacks when it asks them to, at their next instruction. Fails when a
/// profile is being taken or `hz` is out of range; one profile at a time per process.
///
/// # Safety
/// `engine` is live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_profile_start(engine: *const EngineHandle, hz: u32, cpu: bool) -> *mut ErrorHandle {
    catch(|| {
        // SAFETY: the function's contract: `engine` is live.
        let engine = unsafe { engine_ref(engine)? };
        engine.profile_start(hz, cpu)
    })
}

/// Ends the profile php_worker_profile_start() began and writes it to `*out` (free it
/// with php_worker_bytes_delete()), as UTF-8 JSON: `{"hz", "mode": "wall"|"cpu",
/// "duration_ns", "frames": [{"function", "file", "line"}], "samples": [{"stack":
/// [frame index, innermost first], "worker", "route", "kind":
/// "classic"|"worker"|"background"|"task", "count", "weight"}], "dropped"}`, where
/// `function` is "Class::method", "function" or "{main}" (a file's top level), `file` is
/// "" and `line` 0 for an internal function, `worker` is "" on classic threads, `route`
/// is the request's URI path ("" outside a request), `count` the sampler's ticks and
/// `weight` their nanoseconds; `dropped` counts ticks past the profile's size bound.
/// Fails when no profile is being taken.
///
/// # Safety
/// `engine` is live; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_profile_stop(engine: *const EngineHandle, out: *mut *mut BytesHandle) -> *mut ErrorHandle {
    catch(|| {
        // SAFETY: the function's contract: `engine` is live.
        let engine = unsafe { engine_ref(engine)? };
        if out.is_null() {
            return Err(Error::InvalidRequest("NULL out"));
        }
        let bytes = engine.profile_stop()?;
        // SAFETY: the function's contract: `out` is writable.
        unsafe { *out = Box::into_raw(Box::new(BytesHandle { bytes })) };
        Ok(())
    })
}

/// Creates the worker pool `pool` (any id but PHP_WORKER_CLASSIC_POOL, not in use): its
/// threads boot the worker script at once, and it takes requests as they are ready.
/// `spec_json` is `{"name": s, "kind": "http"|"task"|"background", "file": absolute path,
/// "num": n, "max_threads": n, "max_requests": n, "max_memory": n, "max_boot_backoff_ms": n,
/// "stop_timeout_ms": n, "env": [[k, v], ...], "boot": {"fields": [s, ...], "vars": [[k,
/// v], ...], "env_pairs": n}, "generation": n}`, read during the call (`kind` defaults to "http": a worker
/// that serves requests; a task worker's queue takes tasks from PHP threads, not
/// requests; a background pool takes nothing, and its scripts must end within
/// `stop_timeout_ms` once told to stop; a pool keeps its kind). `boot` is the
/// request the script sees while it boots and between requests, in the layout of
/// php_worker_request_submit() (the fields in php_worker_field order, then the
/// `$_SERVER` pairs, the last `env_pairs` of which answer getenv()); without it the
/// script sees a bare GET of its file. `generation` numbers the generation the spec
/// starts (0 or absent: the one after the pool's last, 1 for a new pool), so a host
/// running engines in several processes knows a generation by one number in all.
///
/// # Safety
/// `engine` is live; `spec_json` is valid for `spec_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_pool_new(engine: *const EngineHandle, pool: u32, spec_json: *const u8, spec_len: usize) -> *mut ErrorHandle {
    catch(|| {
        // SAFETY: the function's contract: `engine` is live.
        let engine = unsafe { engine_ref(engine)? };
        // SAFETY: the function's contract: `spec_json` is valid for `spec_len` bytes.
        let spec = WorkerSpec::from_json(unsafe { bytes(spec_json, spec_len)? })?;
        engine.create_worker_pool(pool, spec)
    })
}

/// Runs a scheduled job: the script `spec_json` names (a worker spec, see
/// php_worker_pool_new(), with `"kind": "background"` and `"argv": [script, args...]`)
/// once, on a PHP thread of its own, with `$argv` and no time limit; its output goes to
/// the log. Blocks until the script ends (php_worker_engine_shutdown() stops it like
/// any script), then fills `*out`. Call it from a thread that may block that long.
///
/// # Safety
/// `engine` is live for the whole call; `spec_json` is valid for `spec_len` bytes; `out`
/// is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_job_run(
    engine: *const EngineHandle,
    spec_json: *const u8,
    spec_len: usize,
    out: *mut JobOutcome,
) -> *mut ErrorHandle {
    catch(|| {
        if out.is_null() {
            return Err(Error::InvalidRequest("NULL out"));
        }
        // SAFETY: the function's contract: `engine` is live.
        let engine = unsafe { engine_ref(engine)? };
        // SAFETY: the function's contract: `spec_json` is valid for `spec_len` bytes.
        let spec = WorkerSpec::from_json(unsafe { bytes(spec_json, spec_len)? })?;
        let outcome = engine.run_job(spec)?;
        // SAFETY: the function's contract: `out` is writable.
        unsafe {
            *out = JobOutcome {
                exit_status: outcome.exit_status,
                fatal: outcome.fatal,
                failed_to_run: outcome.failed_to_run,
                duration_ms: outcome.duration.as_millis() as u64,
            }
        };
        Ok(())
    })
}

/// Sets the number of threads of the classic pool: new threads start at once. Extra
/// ones finish their request and end (the call does not wait for them), or, while
/// autoscaling is on, end once idle for longer than its idle time.
///
/// # Safety
/// `engine` is live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_pool_resize(engine: *const EngineHandle, pool: u32, threads: u32) -> *mut ErrorHandle {
    catch(|| {
        // SAFETY: the function's contract: `engine` is live.
        let engine = unsafe { engine_ref(engine)? };
        let autoscaling = engine.limits().max_threads > 0;
        engine.pool(pool)?.resize(threads as usize, autoscaling)
    })
}

/// How many threads of `pool` wait for a request now: a request queued meanwhile goes
/// to one of them at once. 0 when the pool or the engine does not exist. Never blocks.
///
/// # Safety
/// `engine` is live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_pool_waiting(engine: *const EngineHandle, pool: u32) -> u32 {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the function's contract: `engine` is live.
        let engine = unsafe { engine_ref(engine) }.ok()?;
        Some(engine.pool(pool).ok()?.waiting() as u32)
    }))
    .ok()
    .flatten()
    .unwrap_or(0)
}

/// Sets the capacity of the store shared by all PHP threads and of each thread's local
/// store, in bytes. The stores belong to the process, not to an engine: they keep their
/// entries across engine restarts. A store over its new capacity refuses puts until
/// entries expire or are forgotten. Takes effect at once; any thread may call it.
#[unsafe(no_mangle)]
pub extern "C" fn php_worker_stores_configure(shared_bytes: u64, local_bytes: u64) {
    let _ = catch_unwind(|| crate::store::configure(shared_bytes as usize, local_bytes as usize));
}

/// Runs one operation on this process's shared table, for PHP threads of another
/// process (the `shared_store` callback of php_worker_callbacks_t): `request` is the
/// operation as that callback gets it; the encoded reply goes to `*out` (free it with
/// php_worker_bytes_delete()). Needs no engine: the table belongs to the process. Any
/// thread; takes one of the table's locks briefly, never calls PHP.
///
/// # Safety
/// `request` is valid for `len` bytes; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_shared_store_run(request: *const u8, len: usize, out: *mut *mut BytesHandle) -> *mut ErrorHandle {
    catch(|| {
        if out.is_null() {
            return Err(Error::InvalidRequest("NULL out"));
        }
        // SAFETY: per the function contract.
        let request = unsafe { bytes(request, len)? };
        let bytes = crate::runtime::store::run_shared(request).ok_or(Error::InvalidRequest("a malformed shared table operation"))?;
        // SAFETY: the function's contract: `out` is writable.
        unsafe { *out = Box::into_raw(Box::new(BytesHandle { bytes })) };
        Ok(())
    })
}

/// Sets autoscaling: while requests wait for a thread and the CPU has room, threads are
/// added to their pool (up to `max_threads` PHP threads in all, and each worker's own
/// max_threads); threads beyond a pool's configured number that wait for a request
/// longer than `max_idle_ms` end. `max_threads` 0 adds no thread (idle extra ones
/// still end). Takes effect at once; does not block.
///
/// # Safety
/// `engine` is live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_engine_autoscale(engine: *const EngineHandle, max_threads: u32, max_idle_ms: u64) -> *mut ErrorHandle {
    catch(|| {
        // SAFETY: the function's contract: `engine` is live.
        let engine = unsafe { engine_ref(engine)? };
        engine.set_limits(Limits { max_threads: max_threads as usize, max_idle: Duration::from_millis(max_idle_ms) });
        Ok(())
    })
}

/// Sets the hard deadline of requests: a request still running `grace_ms` after its PHP
/// time limit (`max_execution_time`, `set_time_limit()`) passed is answered with
/// PHP_WORKER_RESPONSE_EXPIRED from the core's watchdog thread, its thread is woken
/// until its blocking call returns, and its pool gets a replacement thread, for up to
/// `max_stuck` stuck threads at once. `grace_ms` < 0 turns this off. Takes effect at
/// once; does not block.
///
/// # Safety
/// `engine` is live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_engine_set_deadlines(engine: *const EngineHandle, grace_ms: i64, max_stuck: u32) -> *mut ErrorHandle {
    catch(|| {
        // SAFETY: the function's contract: `engine` is live.
        let engine = unsafe { engine_ref(engine)? };
        let grace = u64::try_from(grace_ms).ok().map(Duration::from_millis);
        engine.set_deadlines(crate::supervisor::watchdog::Deadlines { grace, max_stuck: max_stuck as usize });
        Ok(())
    })
}

/// Restarts a worker pool's script without refusing a request: a new generation of
/// threads boots (with `spec_json`, or the current settings when it is NULL) beside the
/// running one, which keeps serving. With `activate`, each new thread that boots
/// retires an old one once its request is done; a new generation that cannot boot
/// retires nothing. Without it, the new generation boots but takes no requests until
/// php_worker_pool_activate() (or is stopped by php_worker_pool_discard()); a staged
/// generation it replaces is discarded. The spec's `generation`, when given, must be
/// above every generation the pool had (else an error, and nothing changes). Writes the
/// generation's id to `*generation_out` (may be NULL). Does not wait for the boot.
///
/// # Safety
/// `engine` is live; `spec_json` is NULL or valid for `spec_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_pool_restart(
    engine: *const EngineHandle,
    pool: u32,
    spec_json: *const u8,
    spec_len: usize,
    activate: bool,
    generation_out: *mut u32,
) -> *mut ErrorHandle {
    catch(|| {
        // SAFETY: the function's contract: `engine` is live.
        let engine = unsafe { engine_ref(engine)? };
        let spec = match spec_json.is_null() {
            true => None,
            // SAFETY: the function's contract: `spec_json` is valid for `spec_len` bytes.
            false => Some(WorkerSpec::from_json(unsafe { bytes(spec_json, spec_len)? })?),
        };
        let generation = engine.pool(pool)?.restart(spec, activate)?;
        if !generation_out.is_null() {
            // SAFETY: not NULL (checked) and writable by the function's contract.
            unsafe { *generation_out = generation };
        }
        Ok(())
    })
}

/// Lets a staged generation (php_worker_pool_restart() without `activate`) take
/// requests; it retires the older threads as its own boot.
///
/// # Safety
/// `engine` is live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_pool_activate(engine: *const EngineHandle, pool: u32, generation: u32) -> *mut ErrorHandle {
    // SAFETY: the function's contract: `engine` is live.
    catch(|| unsafe { engine_ref(engine)? }.pool(pool)?.activate(generation))
}

/// Stops a staged generation that never took requests; the running one is untouched.
///
/// # Safety
/// `engine` is live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_pool_discard(engine: *const EngineHandle, pool: u32, generation: u32) -> *mut ErrorHandle {
    // SAFETY: the function's contract: `engine` is live.
    catch(|| unsafe { engine_ref(engine)? }.pool(pool)?.discard(generation))
}

/// Removes a worker pool: submissions to it fail with PHP_WORKER_ERR_UNKNOWN_POOL from
/// now on; what is queued is served, then its threads end. Does not wait for them.
///
/// # Safety
/// `engine` is live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_pool_delete(engine: *const EngineHandle, pool: u32) -> *mut ErrorHandle {
    // SAFETY: the function's contract: `engine` is live.
    catch(|| unsafe { engine_ref(engine)? }.delete_pool(pool))
}

/// Queues one request for PHP; never waits for PHP.
///
/// `strings` (`strings_len` bytes) holds every string of the request, each followed by a
/// NUL, then `body_len` bytes of request body read ahead. `spans` holds `spans_len` u32:
/// an (offset, length) pair per string: the `Field`s in order, then (name, value) pairs
/// for `$_SERVER` in registration order (later wins), the last `env_pairs` of which are
/// also answered by PHP's getenv(). Both buffers are copied during the call.
/// `content_length` is -1 when unknown; `flags` are PHP_WORKER_REQUEST_*. `pool` selects
/// the pool. `handle` is the host's name for the request in callbacks.
///
/// `taken_mark`, when not NULL, is a word of the host's where the PHP thread that takes
/// the request stores `handle` (atomically, with release ordering) before the script
/// starts: until then the request has not started, and a host that hands requests on
/// (php_worker's child processes) may give it to another engine if this one is lost.
/// It is written with no callback, so it costs the PHP thread no crossing.
///
/// Returns PHP_WORKER_OK and writes the request to `*request_out` (may be NULL); the
/// request is then answered through `respond`, ending with exactly one DONE. On any
/// other status the request was not taken and no callback will name `handle`.
///
/// # Safety
/// `engine` is live; the buffers are valid for their lengths; `taken_mark` is NULL, or
/// 8-byte aligned and writable until the request's DONE reached the host, and only
/// accessed atomically by the host meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_request_submit(
    engine: *const EngineHandle,
    pool: u32,
    strings: *const u8,
    strings_len: usize,
    spans: *const u32,
    spans_len: usize,
    env_pairs: u32,
    body_len: usize,
    content_length: i64,
    flags: u32,
    handle: usize,
    taken_mark: *mut u64,
    request_out: *mut *mut RequestHandle,
) -> i32 {
    // Go calls this with #cgo nocallback: a request dropped here (a panic) must not answer
    // its host, which learns of the failure from the return value.
    let result = catch_unwind(AssertUnwindSafe(|| without_callbacks(|| {
        // SAFETY: the function's contract: `engine` is live.
        let engine = unsafe { engine_ref(engine)? };
        if strings.is_null() || spans.is_null() {
            return Err(Error::InvalidRequest("NULL buffer"));
        }
        // SAFETY: per the function contract.
        let (strings, spans) =
            unsafe { (std::slice::from_raw_parts(strings, strings_len), std::slice::from_raw_parts(spans, spans_len)) };
        let mut request =
            Request::new(engine.host().clone(), strings, spans, env_pairs, body_len, content_length, flags, handle)?;
        // SAFETY: the function's contract on `taken_mark`.
        if let Some(mark) = unsafe { TakenMark::new(taken_mark) } {
            request.set_taken_mark(mark);
        }
        let state: *const RunState = request.run_state();
        engine.submit(pool, request)?;
        if !request_out.is_null() {
            // SAFETY: not NULL (checked) and writable by the function's contract.
            unsafe { *request_out = state.cast_mut().cast() };
        }
        Ok(())
    })));
    match result {
        Ok(Ok(())) => PHP_WORKER_OK,
        Ok(Err(Error::Stopped)) => PHP_WORKER_ERR_STOPPED,
        Ok(Err(Error::QueueFull)) => PHP_WORKER_ERR_QUEUE_FULL,
        Ok(Err(Error::UnknownPool(_))) => PHP_WORKER_ERR_UNKNOWN_POOL,
        Ok(Err(Error::InvalidRequest(_))) => PHP_WORKER_ERR_INVALID,
        Ok(Err(_)) | Err(_) => PHP_WORKER_ERR_INTERNAL,
    }
}

/// Withdraws a request the host gave up on (max_wait_time passed; the Go host does not
/// withdraw a request whose client left: received whole, it runs).
/// Returns true when the request had not started and never will: the host may answer
/// the client itself. Returns false when it is already running: it goes on, and its
/// script sees an aborted connection at its next output if `respond` reports the client
/// gone. Either way the request still ends with one DONE `respond` call.
///
/// # Safety
/// `request` comes from php_worker_request_submit() and its DONE has not reached the
/// host yet: its DONE `respond` call has not returned, or its completion's batch was
/// not deleted (the host serialises the two).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_request_cancel(request: *mut RequestHandle) -> bool {
    // SAFETY: the handle is the request's run state, alive per the contract.
    let cancel = || unsafe { request.cast::<RunState>().as_ref() }.is_some_and(RunState::cancel);
    catch_unwind(cancel).unwrap_or(false)
}

/// Tells a submitted request its client is gone (the host saw the connection close or
/// its context end). The script learns it at its next fastcgi_finish_request() (its
/// connection_status() then says aborted) without a `respond` call asking the host. A
/// request still queued is not withdrawn by this: it runs. Does not block; callable from
/// any thread, once or more.
///
/// # Safety
/// As for php_worker_request_cancel(): `request` comes from php_worker_request_submit()
/// and its DONE has not reached the host yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_request_client_gone(request: *mut RequestHandle) {
    let mark = || {
        // SAFETY: the handle is the request's run state, alive per the contract.
        if let Some(state) = unsafe { request.cast::<RunState>().as_ref() } {
            state.mark_client_gone();
        }
    };
    let _ = catch_unwind(mark);
}

/// The message of an error, UTF-8, not NUL-terminated; `*len_out` gets its length. Valid
/// until the error is deleted.
///
/// # Safety
/// `err` comes from this library and was not deleted; `len_out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_error_message(err: *const ErrorHandle, len_out: *mut usize) -> *const c_char {
    // SAFETY: the function's contract: NULL or an error from this library, not deleted.
    let Some(err) = (unsafe { err.as_ref() }) else {
        return std::ptr::null();
    };
    // SAFETY: the function's contract: `len_out` is writable.
    unsafe { *len_out = err.message.len() };
    err.message.as_ptr().cast()
}

/// Frees an error.
///
/// # Safety
/// `err` comes from this library and was not deleted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_error_delete(err: *mut ErrorHandle) {
    if !err.is_null() {
        // SAFETY: not NULL, and from Box::into_raw in this library (the function's contract).
        drop(unsafe { Box::from_raw(err) });
    }
}

/// The bytes of a php_worker_bytes_t; `*len_out` gets their count. Valid until the
/// bytes are deleted.
///
/// # Safety
/// `bytes` comes from this library and was not deleted; `len_out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_bytes_data(bytes: *const BytesHandle, len_out: *mut usize) -> *const u8 {
    // SAFETY: the function's contract: NULL or bytes from this library, not deleted.
    let Some(bytes) = (unsafe { bytes.as_ref() }) else {
        return std::ptr::null();
    };
    // SAFETY: the function's contract: `len_out` is writable.
    unsafe { *len_out = bytes.bytes.len() };
    bytes.bytes.as_ptr()
}

/// Frees bytes the core handed over.
///
/// # Safety
/// `bytes` comes from this library and was not deleted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_bytes_delete(bytes: *mut BytesHandle) {
    if !bytes.is_null() {
        // SAFETY: not NULL, and from Box::into_raw in this library (the function's contract).
        drop(unsafe { Box::from_raw(bytes) });
    }
}

/// The version of the PHP linked in ("8.2.32"), a static NUL-terminated string.
#[unsafe(no_mangle)]
pub extern "C" fn php_worker_php_version() -> *const c_char {
    concat!(env!("PHP_WORKER_PHP_VERSION"), "\0").as_ptr().cast()
}

/// How the PHP linked in was built ("ZTS, static embed SAPI, build php-8.2.32-zts-static-…"),
/// a static NUL-terminated string.
#[unsafe(no_mangle)]
pub extern "C" fn php_worker_php_build() -> *const c_char {
    concat!(env!("PHP_WORKER_PHP_BUILD"), "\0").as_ptr().cast()
}

/// Runs one command line as PHP's own CLI does (`php script.php args`, `php -r`, `-v`,
/// `-m`, `-i`): PHP starts with a SAPI named "cli", reads php.ini and then the
/// settings' php_ini, runs the command with the process's standard input, output and error,
/// and stops. Returns the script's exit status (255 after a fatal error, 1 when PHP does
/// not start, 2 when the command is invalid or an engine runs in this process). Blocks
/// until the command ends. Meant for a process of its own (`caddy php-cli`).
///
/// # Safety
/// `command` and the strings it points to are valid for the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_cli_run(command: *const CliCommand) -> i32 {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller lends a valid command for the call.
        let Some(command) = (unsafe { command.as_ref() }) else { return 2 };
        // SAFETY: as above.
        match unsafe { crate::cli::Command::copy(command) } {
            Some(command) => crate::cli::run(command),
            None => 2,
        }
    }))
    .unwrap_or(2)
}

/// The eventfd that is readable while completions are queued, or -1 when the engine was
/// created without `completions`. The core owns it (it closes it in
/// php_worker_engine_delete()); the host reads it (8 bytes, which clears it), then calls
/// php_worker_completions_take(). Any thread.
///
/// # Safety
/// `engine` is live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_engine_completion_fd(engine: *const EngineHandle) -> i32 {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the function's contract: `engine` is live.
        let engine = unsafe { engine_ref(engine) }.ok()?;
        engine.host().completions().map(|c| c.fd())
    }))
    .ok()
    .flatten()
    .unwrap_or(-1)
}

/// Takes every queued completion: the last response call of each of their requests, as
/// `respond` would have received it. Writes an array of them to `*items` and its length
/// to `*len` (NULL and 0 when none is queued), and returns the batch that owns them,
/// to free with php_worker_completions_delete() once the host copied what it keeps. For
/// each completion the host treats the response as a `respond` call with DONE: after
/// it, the request's handle is never used again. Any thread; never blocks on PHP.
///
/// # Safety
/// `engine` is live; `items` and `len` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_completions_take(
    engine: *const EngineHandle,
    items: *mut *const CompletionEntry,
    len: *mut usize,
) -> *mut CompletionsHandle {
    // Go calls this with #cgo nocallback: nothing dropped here may call back into Go.
    let batch = catch_unwind(AssertUnwindSafe(|| without_callbacks(|| {
        // SAFETY: the function's contract: `engine` is live.
        let engine = unsafe { engine_ref(engine) }.ok()?;
        let completions = engine.host().completions()?.take();
        if completions.is_empty() {
            return None;
        }
        let entries = completions.iter().map(|c| c.entry()).collect();
        Some(Box::new(CompletionsHandle { _completions: completions, entries }))
    })))
    .ok()
    .flatten();
    let (ptr, n) = batch.as_ref().map_or((std::ptr::null(), 0), |b| (b.entries.as_ptr(), b.entries.len()));
    // SAFETY: the function's contract: `items` and `len` are writable.
    unsafe {
        *items = ptr;
        *len = n;
    }
    batch.map_or(std::ptr::null_mut(), Box::into_raw)
}

/// Frees a batch of completions (NULL is ignored).
///
/// # Safety
/// `batch` comes from php_worker_completions_take() and was not freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_completions_delete(batch: *mut CompletionsHandle) {
    if !batch.is_null() {
        // SAFETY: the function's contract: from php_worker_completions_take(), not freed.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(batch) })));
    }
}

/// Opens the process's wire to the Caddy process (a php_worker child process's
/// descriptor 3, `socket`) with the taken table (`taken_fd`, a memfd of
/// PHP_WORKER_WIRE_TAKEN_SLOTS u64 words), and starts the thread that reads it. The core
/// takes both descriptors, also on failure. An engine created afterwards with `"wire":
/// true` serves the SUBMIT frames and answers over the wire, not through its callbacks;
/// the CALL frames wait for php_worker_wire_call_next(). One wire per process, for its
/// life. Returns NULL, or an error to free with php_worker_error_delete().
#[unsafe(no_mangle)]
pub extern "C" fn php_worker_wire_open(socket: i32, taken_fd: i32) -> *mut ErrorHandle {
    catch(|| {
        use std::os::fd::{FromRawFd, OwnedFd};
        if socket < 0 || taken_fd < 0 {
            return Err(Error::InvalidRequest("a negative descriptor"));
        }
        // SAFETY: the function's contract: the caller hands both descriptors over.
        let (socket, taken) = unsafe { (OwnedFd::from_raw_fd(socket), OwnedFd::from_raw_fd(taken_fd)) };
        crate::wire::open(socket, taken).map(drop)
    })
}

/// The eventfd that is readable while control calls wait for php_worker_wire_call_next(),
/// and once the wire ended; -1 when no wire is open. The core owns it. Any thread.
#[unsafe(no_mangle)]
pub extern "C" fn php_worker_wire_calls_fd() -> i32 {
    crate::wire::current().map_or(-1, |w| w.calls_fd())
}

/// Takes the next control call (a CALL frame's JSON): returns 1 and writes its id to
/// `*id` and its bytes to `*call` (free them with php_worker_bytes_delete()); 0 when
/// none waits; -1 once the wire ended (the Caddy process is gone or done with this
/// process) and none is left. Any thread; never blocks.
///
/// # Safety
/// `id` and `call` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_wire_call_next(id: *mut u64, call: *mut *mut BytesHandle) -> i32 {
    let Some(wire) = crate::wire::current() else { return -1 };
    match catch_unwind(AssertUnwindSafe(|| wire.next_call())) {
        Ok(Ok(Some((call_id, bytes)))) => {
            // SAFETY: the function's contract: both are writable.
            unsafe {
                *id = call_id;
                *call = Box::into_raw(Box::new(BytesHandle { bytes }));
            }
            1
        }
        Ok(Ok(None)) => 0,
        Ok(Err(())) | Err(_) => -1,
    }
}

/// Sends one frame over the wire (`kind`, one of the PHP_WORKER_WIRE_* kinds a child
/// sends; `payload` of `len` bytes): a control call's REPLY, or a LOG line of Go's.
/// Blocks until the frame left; false when the wire is closed or the payload past
/// PHP_WORKER_WIRE_MAX_FRAME. Any thread.
///
/// # Safety
/// `payload` is readable for `len` bytes (or NULL with `len` 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_wire_send(kind: u8, id: u64, payload: *const u8, len: usize) -> bool {
    let Some(wire) = crate::wire::current() else { return false };
    // SAFETY: the function's contract.
    let Ok(payload) = (unsafe { bytes(payload, len) }) else { return false };
    catch_unwind(AssertUnwindSafe(|| wire.send(kind, id, payload))).unwrap_or(false)
}

/// Whether the wire carries the engine's debug lines (the Caddy process logs them).
#[unsafe(no_mangle)]
pub extern "C" fn php_worker_wire_set_debug(on: bool) {
    if let Some(wire) = crate::wire::current() {
        wire.set_debug(on);
    }
}
