//! The SAPI hooks: what PHP's SAPI callbacks (csrc/sapi.c) forward to Rust. Each one
//! runs in the panic guard and none calls PHP, so no bailout can start inside them.
//!
//! `ctx` is PHP's `SG(server_context)`: a `*mut RequestContext` the PHP thread set for
//! the duration of a request, or NULL outside one.

use std::ffi::{c_char, c_int, c_void};

use super::{RequestContext, Sink};
use crate::abi::types::Field;
use crate::host::{Level, log_unattached};
use crate::php::guard::guard;
use crate::php::sys::ShimVars;

/// # Safety
/// `ctx` is NULL or the live `RequestContext` of this thread's request.
unsafe fn context<'a>(ctx: *mut c_void) -> Option<&'a mut RequestContext> {
    // SAFETY: per the function contract.
    unsafe { ctx.cast::<RequestContext>().as_mut() }
}

/// # Safety
/// `ptr` is valid for `len` bytes (or `len` is 0).
unsafe fn bytes<'a>(ptr: *const c_char, len: usize) -> &'a [u8] {
    if len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(ptr.cast(), len) } }
}

/// Output of the script. Output outside a request (a worker booting) goes to the log.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_ub_write(ctx: *mut c_void, s: *const c_char, len: usize, aborted: *mut bool) -> usize {
    guard(len, || {
        // SAFETY: the shim passes PHP's buffer and length, and its own flag.
        let data = unsafe { bytes(s, len) };
        match unsafe { context(ctx) } {
            Some(ctx) => {
                if !ctx.write(data) {
                    unsafe { *aborted = true };
                }
            }
            None => log_unattached(Level::Info, &String::from_utf8_lossy(data)),
        }
        len
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_flush(ctx: *mut c_void) -> bool {
    guard(true, || unsafe { context(ctx) }.is_none_or(|ctx| ctx.flush()))
}

#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_header(ctx: *mut c_void, line: *const c_char, len: usize) {
    guard((), || {
        if let Some(ctx) = unsafe { context(ctx) } {
            ctx.add_header(unsafe { bytes(line, len) });
        }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_headers_done(ctx: *mut c_void, status: c_int) {
    guard((), || {
        if let Some(ctx) = unsafe { context(ctx) } {
            ctx.headers_done(status);
        }
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_read_post(ctx: *mut c_void, buf: *mut c_char, len: usize, aborted: *mut bool) -> usize {
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
    guard(std::ptr::null_mut(), || match unsafe { context(ctx) } {
        Some(ctx) => ctx.request().field_ptr_or_null(Field::Cookie).cast_mut(),
        None => std::ptr::null_mut(),
    })
}

/// The request's `$_SERVER` pairs (the shim adds the process environment before them).
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_server_vars(ctx: *mut c_void, vars: *mut ShimVars) {
    guard((), || {
        if let Some(ctx) = unsafe { context(ctx) } {
            let (spans, pairs) = ctx.request().var_spans();
            // SAFETY: the shim passes a writable struct.
            unsafe { *vars = ShimVars { block: ctx.request().block().as_ptr().cast(), spans: spans.as_ptr(), pairs } };
        }
    })
}

/// getenv() of a configured `env` value; NULL lets PHP fall back to the process environment.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_getenv(ctx: *mut c_void, name: *const c_char, len: usize) -> *mut c_char {
    guard(std::ptr::null_mut(), || match unsafe { context(ctx) } {
        Some(ctx) => ctx.request().env_lookup(unsafe { bytes(name, len) }).unwrap_or(std::ptr::null()).cast_mut(),
        None => std::ptr::null_mut(),
    })
}

#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_proto_num(ctx: *mut c_void) -> c_int {
    guard(1001, || unsafe { context(ctx) }.map_or(1001, |ctx| ctx.request().proto_num()))
}

/// PHP's log lines (error_log(), notices, warnings, fatal errors) with their syslog level.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_log(ctx: *mut c_void, message: *const c_char, syslog_level: c_int) {
    guard((), || {
        if message.is_null() {
            return;
        }
        // SAFETY: PHP passes a C string.
        let message = unsafe { std::ffi::CStr::from_ptr(message) }.to_string_lossy();
        let level = Level::from_syslog(syslog_level);
        match unsafe { context(ctx) } {
            Some(ctx) => ctx.log(level, &message),
            None => log_unattached(level, &message),
        }
    })
}

/// True when `ctx` answers an HTTP client (not a worker booting or idle).
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_is_client(ctx: *mut c_void) -> bool {
    guard(false, || unsafe { context(ctx) }.is_some_and(|ctx| ctx.sink() == Sink::Client))
}

/// fastcgi_finish_request(): the response is complete now.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_finish_early(ctx: *mut c_void) -> bool {
    guard(false, || unsafe { context(ctx) }.is_some_and(|ctx| ctx.finish_early()))
}

/// headers_send() with a 1xx status.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_informational(ctx: *mut c_void, status: c_int) -> bool {
    guard(false, || unsafe { context(ctx) }.is_some_and(|ctx| ctx.informational(status)))
}

/// The request's own `$_SERVER` pairs, without the configured env.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_request_vars(ctx: *mut c_void, vars: *mut ShimVars) {
    guard((), || {
        if let Some(ctx) = unsafe { context(ctx) } {
            let request = ctx.request();
            let (spans, pairs) = request.var_spans();
            let own = pairs - request.env_pairs();
            // SAFETY: the shim passes a writable struct.
            unsafe { *vars = ShimVars { block: request.block().as_ptr().cast(), spans: spans.as_ptr(), pairs: own } };
        }
    })
}
