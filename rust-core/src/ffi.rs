//! The C ABI of php_worker's core, the only place that exports functions.
//! include/php_worker.h is generated from this file by cbindgen; its preamble (in
//! cbindgen.toml) describes the model: one engine, one call in per request, callbacks
//! out, who owns what and which thread calls what. The `header_is_current` test fails
//! when the header is stale.

use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::config::Config;
use crate::engine::Engine;
use crate::error::Error;
use crate::host::Host;
use crate::request::{Request, RunState};

/// Status: success.
pub const PHP_WORKER_OK: i32 = 0;
/// Status: the engine is stopping or stopped.
pub const PHP_WORKER_ERR_STOPPED: i32 = 1;
/// Status: the pool's queue is full.
pub const PHP_WORKER_ERR_QUEUE_FULL: i32 = 2;
/// Status: the arguments do not follow this header's layout.
pub const PHP_WORKER_ERR_INVALID: i32 = 3;
/// Status: no pool has the given id.
pub const PHP_WORKER_ERR_UNKNOWN_POOL: i32 = 4;
/// Status: an internal error (a caught panic); details went to the log callback.
pub const PHP_WORKER_ERR_INTERNAL: i32 = 5;

/// Request flag: the bytes at the end of `strings` are the whole body; PHP will not call
/// `read_body`.
pub const PHP_WORKER_REQUEST_BODY_COMPLETE: u32 = 1;

/// Response flag: send what was written so far to the client now (PHP's flush()).
pub const PHP_WORKER_RESPONSE_FLUSH: u32 = 1;
/// Response flag: the response is complete; this is the last call for the request.
pub const PHP_WORKER_RESPONSE_DONE: u32 = 2;
/// Response flag: an informational (1xx) response, such as 103 Early Hints, carrying
/// `status` and `headers`; the final response follows in later calls.
pub const PHP_WORKER_RESPONSE_INFORMATIONAL: u32 = 4;

/// Log levels of the `log` callback.
pub const PHP_WORKER_LOG_DEBUG: i32 = 0;
pub const PHP_WORKER_LOG_INFO: i32 = 1;
pub const PHP_WORKER_LOG_WARN: i32 = 2;
pub const PHP_WORKER_LOG_ERROR: i32 = 3;

/// The fixed fields at the start of a request's spans, in this order. Empty strings
/// stand for "absent".
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// GET, POST, ...
    Method = 0,
    /// The original request URI with its query string (REQUEST_URI).
    RequestUri,
    /// The raw query string, without '?'.
    QueryString,
    /// The Content-Type header.
    ContentType,
    /// Absolute path of the script to run.
    ScriptFilename,
    /// PATH_TRANSLATED, or empty.
    PathTranslated,
    /// The Cookie header(s), joined with "; ".
    Cookie,
    /// The Authorization header (PHP derives PHP_AUTH_USER and PHP_AUTH_PW from it).
    Authorization,
    /// "HTTP/1.1", "HTTP/2.0", ...
    Protocol,
    /// Number of fixed fields.
    Count,
}

/// A response header. Not NUL-terminated; valid only during the callback.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub name: *const u8,
    pub name_len: usize,
    pub value: *const u8,
    pub value_len: usize,
}

/// Response data handed to the `respond` callback. Every pointer is owned by Rust and
/// valid only during the callback: the host copies what it keeps.
#[repr(C)]
#[derive(Debug)]
pub struct Response {
    /// The HTTP status on the first call for a request, with `headers`; 0 on later calls.
    /// An informational call carries its own 1xx status and headers.
    pub status: i32,
    pub headers: *const Header,
    pub headers_len: usize,
    pub body: *const u8,
    pub body_len: usize,
    /// PHP_WORKER_RESPONSE_* flags.
    pub flags: u32,
}

/// The host's callbacks, registered once with php_worker_engine_new(). Each is called
/// on a PHP thread, may block briefly (network writes) and must not unwind.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Callbacks {
    /// Response data for the request `handle`. Returns 0, or non-zero when the client is
    /// gone (PHP then sees an aborted connection). Called exactly once with
    /// PHP_WORKER_RESPONSE_DONE per submitted request; after that call returns, `handle`
    /// is never used again and the request's php_worker_request_t is freed.
    pub respond: Option<unsafe extern "C" fn(handle: usize, response: *const Response) -> i32>,
    /// Fills `buf` with up to `len` bytes of the request body of `handle`. Returns the
    /// count (less than `len` only at the end of the body), or -1 when the body cannot
    /// be read (client gone, timeout). After -1 the body is not asked for again, the
    /// script sees an aborted connection, and a response whose headers have not left
    /// yet becomes a bare 408.
    pub read_body: Option<unsafe extern "C" fn(handle: usize, buf: *mut u8, len: usize) -> i64>,
    /// A log line (UTF-8, not NUL-terminated) at a PHP_WORKER_LOG_* level; `handle` is
    /// the request it belongs to, or 0.
    pub log: Option<unsafe extern "C" fn(handle: usize, level: i32, message: *const u8, len: usize)>,
}

/// A running PHP engine (opaque).
pub struct EngineHandle {
    engine: Engine,
}

/// A submitted request (opaque), for php_worker_request_cancel().
pub struct RequestHandle {
    _private: [u8; 0],
}

/// An error from php_worker_engine_new() (opaque).
pub struct ErrorHandle {
    message: String,
}

fn error_box(err: &Error) -> *mut ErrorHandle {
    Box::into_raw(Box::new(ErrorHandle { message: err.to_string() }))
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned())
}

/// Starts PHP and its threads. Blocks until they are ready for requests.
///
/// `config_json` (`config_len` bytes, UTF-8 JSON, not NUL-terminated) is read during the
/// call: `{"num_threads": n, "php_ini": {"key": "value"}, "queue_capacity": n}`.
/// `callbacks` is copied. On success writes the engine to `*engine_out` and returns
/// NULL; otherwise returns an error to free with php_worker_error_delete(). Only one
/// engine may exist per process.
///
/// # Safety
/// The pointers are valid as described; the callbacks follow php_worker_callbacks_t.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_engine_new(
    config_json: *const u8,
    config_len: usize,
    callbacks: *const Callbacks,
    engine_out: *mut *mut EngineHandle,
) -> *mut ErrorHandle {
    let result = catch_unwind(AssertUnwindSafe(|| {
        if config_json.is_null() || callbacks.is_null() || engine_out.is_null() {
            return Err(Error::InvalidRequest("NULL argument"));
        }
        // SAFETY: per the function contract.
        let (json, callbacks) = unsafe { (std::slice::from_raw_parts(config_json, config_len), *callbacks) };
        let config = Config::from_json(json)?;
        // SAFETY: per the function contract.
        let host = unsafe { Host::new(callbacks) };
        let engine = Engine::start(&config, host)?;
        unsafe { *engine_out = Box::into_raw(Box::new(EngineHandle { engine })) };
        Ok(())
    }));
    match result {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(e)) => error_box(&e),
        Err(panic) => error_box(&Error::Panic(panic_message(&*panic))),
    }
}

/// Stops taking requests, lets queued and running ones finish, then stops PHP. Blocks
/// until done. Submissions made afterwards fail with PHP_WORKER_ERR_STOPPED. Calling it
/// twice is harmless.
///
/// # Safety
/// `engine` comes from php_worker_engine_new() and was not deleted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_engine_shutdown(engine: *mut EngineHandle) {
    if let Some(handle) = unsafe { engine.as_ref() } {
        let _ = catch_unwind(AssertUnwindSafe(|| handle.engine.shutdown()));
    }
}

/// Shuts the engine down (as php_worker_engine_shutdown()) and frees it. After this,
/// a new engine may be created.
///
/// # Safety
/// `engine` comes from php_worker_engine_new(), is not used by any other call during
/// or after this one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_engine_delete(engine: *mut EngineHandle) {
    if !engine.is_null() {
        // SAFETY: per the function contract, we own it now.
        let handle = unsafe { Box::from_raw(engine) };
        let _ = catch_unwind(AssertUnwindSafe(move || drop(handle)));
    }
}

/// Queues one request for PHP; never waits for PHP.
///
/// `strings` (`strings_len` bytes) holds every string of the request, each followed by a
/// NUL, then `body_len` bytes of request body read ahead. `spans` holds `spans_len` u32:
/// an (offset, length) pair per string: the `Field`s in order, then (name, value) pairs
/// for `$_SERVER` in registration order (later wins), the last `env_pairs` of which are
/// also answered by PHP's getenv(). Both buffers are copied during the call.
/// `content_length` is -1 when unknown; `flags` are PHP_WORKER_REQUEST_*. `pool` selects
/// the pool (0 is the classic pool). `handle` is the host's name for the request in
/// callbacks.
///
/// Returns PHP_WORKER_OK and writes the request to `*request_out` (may be NULL); the
/// request is then answered through `respond`, ending with exactly one DONE. On any
/// other status the request was not taken and no callback will name `handle`.
///
/// # Safety
/// `engine` is live; the buffers are valid for their lengths.
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
    request_out: *mut *mut RequestHandle,
) -> i32 {
    let result = catch_unwind(AssertUnwindSafe(|| {
        let Some(engine) = (unsafe { engine.as_ref() }) else {
            return Err(Error::InvalidRequest("NULL engine"));
        };
        if strings.is_null() || spans.is_null() {
            return Err(Error::InvalidRequest("NULL buffer"));
        }
        // SAFETY: per the function contract.
        let (strings, spans) =
            unsafe { (std::slice::from_raw_parts(strings, strings_len), std::slice::from_raw_parts(spans, spans_len)) };
        let request = Request::new(
            engine.engine.shared().clone(),
            pool,
            strings,
            spans,
            env_pairs,
            body_len,
            content_length,
            flags,
            handle,
        )?;
        let state: *const RunState = request.run_state();
        engine.engine.submit(request)?;
        if !request_out.is_null() {
            unsafe { *request_out = state.cast_mut().cast() };
        }
        Ok(())
    }));
    match result {
        Ok(Ok(())) => PHP_WORKER_OK,
        Ok(Err(Error::Stopped)) => PHP_WORKER_ERR_STOPPED,
        Ok(Err(Error::QueueFull)) => PHP_WORKER_ERR_QUEUE_FULL,
        Ok(Err(Error::UnknownPool(_))) => PHP_WORKER_ERR_UNKNOWN_POOL,
        Ok(Err(Error::InvalidRequest(_))) => PHP_WORKER_ERR_INVALID,
        Ok(Err(_)) | Err(_) => PHP_WORKER_ERR_INTERNAL,
    }
}

/// Withdraws a request the host gave up on (client gone, max_wait_time passed).
/// Returns true when the request had not started and never will: the host may answer
/// the client itself. Returns false when it is already running: it goes on, and its
/// script sees an aborted connection at its next output if `respond` reports the client
/// gone. Either way the request still ends with one DONE `respond` call.
///
/// # Safety
/// `request` comes from php_worker_request_submit() and its DONE `respond` call has
/// not returned yet (the host serialises the two).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_request_cancel(request: *mut RequestHandle) -> bool {
    // SAFETY: the handle is the request's run state, alive per the contract.
    let cancel = || unsafe { request.cast::<RunState>().as_ref() }.is_some_and(RunState::cancel);
    catch_unwind(cancel).unwrap_or(false)
}

/// The message of an error, UTF-8, not NUL-terminated; `*len_out` gets its length. Valid
/// until the error is deleted.
///
/// # Safety
/// `err` comes from this library and was not deleted; `len_out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn php_worker_error_message(err: *const ErrorHandle, len_out: *mut usize) -> *const c_char {
    let Some(err) = (unsafe { err.as_ref() }) else {
        return std::ptr::null();
    };
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
        drop(unsafe { Box::from_raw(err) });
    }
}

/// The version of the PHP linked in ("8.2.32"), a static NUL-terminated string.
#[unsafe(no_mangle)]
pub extern "C" fn php_worker_php_version() -> *const c_char {
    concat!(env!("PHP_WORKER_PHP_VERSION"), "\0").as_ptr().cast()
}
