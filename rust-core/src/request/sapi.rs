//! The SAPI hooks: what PHP's SAPI callbacks (csrc/sapi.c) forward to Rust. Each one
//! runs in the panic guard and none calls PHP, so no bailout can start inside them.
//!
//! `ctx` is PHP's `SG(server_context)`: a `*mut RequestContext` the PHP thread set for
//! the duration of a request, or NULL outside one.

use std::ffi::{c_char, c_int, c_void};

use super::context::{RequestContext, Sink, split_header_line};
use super::task::TaskError;
use crate::abi::types::Field;
use crate::host::{Level, LogField, log_unattached};
use crate::php::guard::guard;
use crate::php::sys::{PW_LOG_FRANKENPHP, PhpLogLine, ShimVars};

/// # Safety
/// `ctx` is NULL or the live `RequestContext` of this thread's request.
unsafe fn context<'a>(ctx: *mut c_void) -> Option<&'a mut RequestContext> {
    // SAFETY: per the function contract.
    unsafe { ctx.cast::<RequestContext>().as_mut() }
}

/// # Safety
/// `ptr` is valid for `len` bytes (or `len` is 0).
unsafe fn bytes<'a>(ptr: *const c_char, len: usize) -> &'a [u8] {
    // SAFETY: the caller's contract: valid for `len` bytes.
    if len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(ptr.cast(), len) } }
}

/// Output of the script. Output outside a request (a worker booting) goes to the log.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_ub_write(ctx: *mut c_void, s: *const c_char, len: usize, aborted: *mut bool) -> usize {
    guard(len, || {
        // SAFETY: the shim passes PHP's buffer and length, and its own flag.
        let data = unsafe { bytes(s, len) };
        // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
        match unsafe { context(ctx) } {
            Some(ctx) => {
                if !ctx.write(data) {
                    // SAFETY: the shim passes its own flag, writable for the call.
                    unsafe { *aborted = true };
                }
            }
            None => log_unattached(Level::Info, &String::from_utf8_lossy(data), &[]),
        }
        len
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_flush(ctx: *mut c_void) -> bool {
    // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
    guard(true, || unsafe { context(ctx) }.is_none_or(|ctx| ctx.flush()))
}

#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_header(ctx: *mut c_void, line: *const c_char, len: usize) {
    guard((), || {
        // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
        if let Some(ctx) = unsafe { context(ctx) } {
            // SAFETY: PHP lends the header line, `len` bytes, for the call.
            ctx.add_header(unsafe { bytes(line, len) });
        }
    })
}

/// The env the request inherits from its worker pool, registered in `$_SERVER` after
/// the request's CGI variables and headers, before its own env; no pairs outside a
/// worker pool.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_inherited_env(ctx: *mut c_void, vars: *mut ShimVars) {
    guard((), || {
        // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
        if let Some(env) = unsafe { context(ctx) }.and_then(|ctx| ctx.inherited_env()) {
            // SAFETY: the shim passes a writable struct; the strings live with the context.
            unsafe { *vars = ShimVars { block: env.bytes().as_ptr().cast(), spans: env.spans().as_ptr(), pairs: env.pair_count() } };
        }
    })
}

/// Splits a header line into its name and value (offsets into `line`), as the response
/// does; false when the line has no name.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_header_split(
    line: *const c_char,
    len: usize,
    name_len: *mut usize,
    value_at: *mut usize,
    value_len: *mut usize,
) -> bool {
    guard(false, || {
        // SAFETY: PHP lends the header line, `len` bytes, for the call.
        let line = unsafe { bytes(line, len) };
        let Some((name, value)) = split_header_line(line) else { return false };
        // SAFETY: the shim passes writable out-parameters.
        unsafe {
            *name_len = name.len();
            *value_at = value.as_ptr() as usize - line.as_ptr() as usize;
            *value_len = value.len();
        }
        true
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_headers_done(ctx: *mut c_void, status: c_int) {
    guard((), || {
        // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
        if let Some(ctx) = unsafe { context(ctx) } {
            ctx.headers_done(status);
        }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_read_post(ctx: *mut c_void, buf: *mut c_char, len: usize, aborted: *mut bool) -> usize {
    // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
    guard(0, || match unsafe { context(ctx) } {
        Some(ctx) if len > 0 => {
            // SAFETY: PHP's buffer is valid for `len` bytes.
            let n = ctx.read_body(unsafe { std::slice::from_raw_parts_mut(buf.cast(), len) });
            // SAFETY: the shim passes its own flag.
            unsafe { *aborted = ctx.aborted() };
            n
        }
        _ => 0,
    })
}

/// The Cookie header, owned by the request (PHP copies it before parsing).
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_read_cookies(ctx: *mut c_void) -> *mut c_char {
    // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
    guard(std::ptr::null_mut(), || match unsafe { context(ctx) } {
        Some(ctx) => ctx.request().field_ptr_or_null(Field::Cookie).cast_mut(),
        None => std::ptr::null_mut(),
    })
}

/// The request's `$_SERVER` pairs in two parts: its CGI variables and headers (`vars`),
/// then its configured env (`env`). The shim adds the process environment before them,
/// and a worker pool's env between the two: a request's env wins over its pool's, as
/// in getenv().
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_server_vars(ctx: *mut c_void, vars: *mut ShimVars, env: *mut ShimVars) {
    guard((), || {
        // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
        if let Some(ctx) = unsafe { context(ctx) } {
            let request = ctx.request();
            let (spans, pairs) = request.var_spans();
            let own = pairs - request.env_pair_count();
            let block = request.block().as_ptr().cast();
            // SAFETY: the shim passes writable structs; each pair has 4 spans.
            unsafe {
                *vars = ShimVars { block, spans: spans.as_ptr(), pairs: own };
                *env = ShimVars { block, spans: spans[4 * own..].as_ptr(), pairs: pairs - own };
            }
        }
    })
}

/// The request's HTTP version as PHP counts it (1000 for HTTP/1.0, 1001 for HTTP/1.1,
/// 2000 for HTTP/2, 3000 for HTTP/3), for the SAPI's activate hook: PHP's
/// sapi_activate() resets it just before.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_proto_num(ctx: *mut c_void) -> c_int {
    // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
    guard(1001, || unsafe { context(ctx) }.map_or(1001, |ctx| ctx.request().proto_num()))
}

/// PHP's log lines (errors, error_log()) with their syslog level. `line` has the parts of
/// the line: the message alone, and where it comes from, as structured fields.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_log(ctx: *mut c_void, message: *const c_char, syslog_level: c_int, line: *const PhpLogLine) {
    guard((), || {
        let level = Level::from_syslog(syslog_level);
        // SAFETY: PHP passes a C string; `line` and its strings are valid for the call.
        let (message, mut fields, extra) = match unsafe { line.as_ref() } {
            // SAFETY: the shim's line and its strings are valid for the call.
            Some(line) => unsafe { php_log_fields(line) },
            None if message.is_null() => return,
            // SAFETY: PHP passes a NUL-terminated message, valid for the call.
            None => (unsafe { std::ffi::CStr::from_ptr(message) }.to_string_lossy().into_owned(), Vec::new(), None),
        };
        if let Some(extra) = &extra {
            fields.extend(extra.iter().map(|(k, v)| (k.as_str(), v.clone())));
        }
        // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
        match unsafe { context(ctx) } {
            Some(ctx) => ctx.event(level, &message, &fields),
            None => log_unattached(level, &message, &fields),
        }
    })
}

/// The message of a PHP log line and its fields: `php_error` (the error's kind, as PHP
/// names it: "Warning", "Fatal error", ...) or `source` ("error_log", "frankenphp_log"),
/// then `file` and `line` when known; and the entries of frankenphp_log()'s context.
///
/// # Safety
/// The strings of `line` are valid for reads of their lengths (or NULL).
unsafe fn php_log_fields(line: &PhpLogLine) -> (String, Vec<LogField<'static>>, Option<serde_json::Map<String, serde_json::Value>>) {
    let text = |p: *const c_char, n: usize| {
        // SAFETY: the caller's contract.
        if p.is_null() { String::new() } else { String::from_utf8_lossy(unsafe { bytes(p, n) }).into_owned() }
    };
    let mut fields: Vec<LogField<'static>> = Vec::with_capacity(3);
    match line.r#type {
        0 => fields.push(("source", "error_log".into())),
        PW_LOG_FRANKENPHP => fields.push(("source", "frankenphp_log".into())),
        kind => fields.push(("php_error", php_error_kind(kind).into())),
    }
    if !line.file.is_null() {
        fields.push(("file", text(line.file, line.file_len).into()));
        fields.push(("line", line.line.into()));
    }
    let context = if line.context.is_null() {
        None
    } else {
        // SAFETY: the caller's contract. A list context is keyed by index, as PHP keys it.
        match serde_json::from_slice(unsafe { bytes(line.context, line.context_len) }) {
            Ok(serde_json::Value::Object(map)) => Some(map),
            Ok(serde_json::Value::Array(items)) => Some(items.into_iter().enumerate().map(|(i, v)| (i.to_string(), v)).collect()),
            _ => None,
        }
    };
    (text(line.message, line.message_len), fields, context)
}

/// PHP's name for an E_* error type, as in its own log lines.
fn php_error_kind(kind: c_int) -> &'static str {
    const E_ERROR: c_int = 1;
    const E_WARNING: c_int = 2;
    const E_PARSE: c_int = 4;
    const E_NOTICE: c_int = 8;
    const E_CORE_ERROR: c_int = 16;
    const E_CORE_WARNING: c_int = 32;
    const E_COMPILE_ERROR: c_int = 64;
    const E_COMPILE_WARNING: c_int = 128;
    const E_USER_ERROR: c_int = 256;
    const E_USER_WARNING: c_int = 512;
    const E_USER_NOTICE: c_int = 1024;
    const E_STRICT: c_int = 2048;
    const E_RECOVERABLE_ERROR: c_int = 4096;
    const E_DEPRECATED: c_int = 8192;
    const E_USER_DEPRECATED: c_int = 16384;
    /// A flag uncaught exceptions carry beside E_ERROR.
    const E_DONT_BAIL: c_int = 1 << 15;
    match kind & !E_DONT_BAIL {
        E_ERROR | E_CORE_ERROR | E_COMPILE_ERROR | E_USER_ERROR => "Fatal error",
        E_RECOVERABLE_ERROR => "Recoverable fatal error",
        E_WARNING | E_CORE_WARNING | E_COMPILE_WARNING | E_USER_WARNING => "Warning",
        E_PARSE => "Parse error",
        E_NOTICE | E_USER_NOTICE => "Notice",
        E_STRICT => "Strict Standards",
        E_DEPRECATED | E_USER_DEPRECATED => "Deprecated",
        _ => "Unknown error",
    }
}

/// True when `ctx` answers an HTTP client (not a worker booting or idle).
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_is_client(ctx: *mut c_void) -> bool {
    // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
    guard(false, || unsafe { context(ctx) }.is_some_and(|ctx| ctx.sink() == Sink::Client))
}

/// [`pw_rs_finish_early`]: the response was complete already (or there is none).
pub const PW_FINISH_NONE: i32 = 0;
/// [`pw_rs_finish_early`]: the response is complete now; its client is there.
pub const PW_FINISH_DONE: i32 = 1;
/// [`pw_rs_finish_early`]: the response is complete now, but its client had left.
pub const PW_FINISH_CLIENT_GONE: i32 = 2;

/// fastcgi_finish_request(): the response is complete now. A PW_FINISH_* value.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_finish_early(ctx: *mut c_void) -> i32 {
    // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
    guard(PW_FINISH_NONE, || match unsafe { context(ctx) }.and_then(|ctx| ctx.finish_early()) {
        None => PW_FINISH_NONE,
        Some(false) => PW_FINISH_DONE,
        Some(true) => PW_FINISH_CLIENT_GONE,
    })
}

/// headers_send() with a 1xx status.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_informational(ctx: *mut c_void, status: c_int) -> bool {
    // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
    guard(false, || unsafe { context(ctx) }.is_some_and(|ctx| ctx.informational(status)))
}

/// The request's own `$_SERVER` pairs, without the configured env.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_request_vars(ctx: *mut c_void, vars: *mut ShimVars) {
    guard((), || {
        // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
        if let Some(ctx) = unsafe { context(ctx) } {
            let request = ctx.request();
            let (spans, pairs) = request.var_spans();
            let own = pairs - request.env_pairs();
            // SAFETY: the shim passes a writable struct.
            unsafe { *vars = ShimVars { block: request.block().as_ptr().cast(), spans: spans.as_ptr(), pairs: own } };
        }
    })
}

/// A task's payload: `*data` and `*len`, valid until the task ends. False when `ctx` is
/// not a task.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_task_payload(ctx: *mut c_void, data: *mut *const c_char, len: *mut usize) -> bool {
    guard(false, || {
        // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
        let Some(ctx) = (unsafe { context(ctx) }).filter(|ctx| ctx.sink() == Sink::Task) else { return false };
        let payload = ctx.task_payload();
        // SAFETY: the shim passes writable out-parameters.
        unsafe {
            *data = payload.as_ptr().cast();
            *len = payload.len();
        }
        true
    })
}

/// A task's handler answered: `ok` with what it returned, else why it failed (`len`
/// bytes at `s`).
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_task_result(ctx: *mut c_void, ok: bool, s: *const c_char, len: usize) {
    guard((), || {
        // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
        if let Some(ctx) = unsafe { context(ctx) } {
            // SAFETY: the shim passes a buffer valid for `len` bytes.
            let data = unsafe { bytes(s, len) };
            ctx.set_task_result(if ok { Ok(data.to_vec()) } else { Err(TaskError::Failed(String::from_utf8_lossy(data).into_owned())) });
        }
    })
}
