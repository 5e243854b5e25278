//! The environment a PHP thread sees through getenv(), putenv() and `$_ENV`.
//!
//! One process-wide environment cannot be shared by threads that change it (setenv()
//! while another thread reads is undefined behaviour, and Laravel's Dotenv putenv()s on
//! every worker thread at boot). So each PHP thread sees, in order of precedence: its
//! own putenv() calls, the running request's configured env (its own pairs, then its
//! worker pool's), then the process
//! environment as it was when the engine started. A classic thread forgets its putenv()
//! calls after each request; a worker thread forgets those of each request at its end,
//! and those its script made before its loop when the script ends.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};

use super::thread::try_with_thread;
use crate::host::with_thread_host;
use crate::layout::Strings;
use crate::php::guard::guard;
use crate::php::sys::ShimVars;
use crate::request::context::RequestContext;

/// # Safety
/// `ctx` is NULL or the live request context of this thread.
unsafe fn request<'a>(ctx: *mut c_void) -> Option<&'a RequestContext> {
    // SAFETY: the caller's contract: NULL or the live request context of this thread.
    unsafe { ctx.cast::<RequestContext>().as_ref() }
}

/// getenv(name) for C, the one lookup behind both getenv() and PHP's own sapi_getenv():
/// the thread's putenv()s, the request's env, then the process environment. The value
/// is followed by a NUL and lives until the thread's next putenv() or the request's end.
///
/// # Safety
/// `name` is valid for `len` bytes; the out-pointers are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pw_rs_env_get(
    ctx: *mut c_void,
    name: *const c_char,
    len: usize,
    value: *mut *const c_char,
    value_len: *mut usize,
) -> bool {
    guard(false, || {
        // SAFETY: the function's contract: `name` is valid for `len` bytes.
        let name = unsafe { std::slice::from_raw_parts(name.cast::<u8>(), len) };
        let as_raw = |v: &[u8]| (v.as_ptr().cast::<c_char>(), v.len());
        // The thread's own value lives in its state until its next putenv().
        let own = try_with_thread(|t| t.env.set.get(name).map(|v| v.as_deref().map(without_nul).map(as_raw))).flatten();
        let found = match own {
            Some(found) => found,
            // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
            None => unsafe { request(ctx) }
                .and_then(|ctx| ctx.env_value(name))
                .map(as_raw)
                // The engine outlives every PHP call on this thread.
                .or_else(|| with_thread_host(|h| h.process_env.value_of(name).map(as_raw)).flatten()),
        };
        match found {
            Some((ptr, n)) => {
                // SAFETY: per the function contract.
                unsafe {
                    *value = ptr;
                    *value_len = n;
                }
                true
            }
            None => false,
        }
    })
}

/// putenv(setting) for C: "NAME=value" sets, "NAME" unsets, for this thread.
///
/// # Safety
/// `setting` is valid for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pw_rs_env_put(setting: *const c_char, len: usize) {
    guard((), || {
        // SAFETY: the function's contract: `setting` is valid for `len` bytes.
        let setting = unsafe { std::slice::from_raw_parts(setting.cast::<u8>(), len) };
        let (name, value) = match setting.iter().position(|&b| b == b'=') {
            // NUL-terminated as every other value getenv finds (see pw_rs_env_get).
            Some(eq) => (&setting[..eq], Some([&setting[eq + 1..], b"\0"].concat())),
            None => (setting, None),
        };
        try_with_thread(|t| t.env.put(name.to_vec(), value));
    })
}

/// A worker script enters its loop: its putenv() calls so far are its own, and every
/// request starts from them (see csrc/worker_reset.c).
#[unsafe(no_mangle)]
pub extern "C" fn pw_rs_env_keep_baseline() {
    guard((), || {
        try_with_thread(|t| t.env.keep_baseline());
    })
}

/// A worker request ended: its putenv() calls are undone, as PHP undoes a request's
/// at its end, back to what the script set before its loop.
#[unsafe(no_mangle)]
pub extern "C" fn pw_rs_env_back_to_baseline() {
    guard((), || {
        try_with_thread(|t| t.env.back_to_baseline());
    })
}

/// A putenv() value without the NUL it is stored with.
fn without_nul(v: &[u8]) -> &[u8] {
    v.strip_suffix(b"\0").unwrap_or(v)
}

/// Environment pairs merged in order of precedence, later sets winning.
#[derive(Default)]
struct Merged {
    pairs: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    index: HashMap<Vec<u8>, usize>,
}

impl Merged {
    /// Sets `name` (None unsets it).
    fn set(&mut self, name: &[u8], value: Option<&[u8]>) {
        let value = value.map(<[u8]>::to_vec);
        match self.index.get(name) {
            Some(&i) => self.pairs[i].1 = value,
            None => {
                self.index.insert(name.to_vec(), self.pairs.len());
                self.pairs.push((name.to_vec(), value));
            }
        }
    }

    fn into_strings(self) -> Strings {
        Strings::from_pairs(self.pairs.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))))
    }
}

/// The whole environment as this thread sees it, valid until the next call on this
/// thread.
///
/// # Safety
/// `vars` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pw_rs_env_all(ctx: *mut c_void, vars: *mut ShimVars) {
    guard((), || {
        let mut merged = Merged::default();
        with_thread_host(|h| {
            for i in 0..h.process_env.pair_count() {
                let (k, v) = h.process_env.pair(i);
                merged.set(k, Some(v));
            }
        });
        // SAFETY: `ctx` is SG(server_context): the live context of this thread's request, or NULL.
        if let Some(ctx) = unsafe { request(ctx) } {
            if let Some(env) = ctx.inherited_env() {
                (0..env.pair_count()).map(|i| env.pair(i)).for_each(|(k, v)| merged.set(k, Some(v)));
            }
            ctx.request().for_each_env(|k, v| merged.set(k, Some(v)));
        }
        try_with_thread(|t| {
            for (k, v) in &t.env.set {
                merged.set(k, v.as_deref().map(without_nul));
            }
            t.env.merged = merged.into_strings();
            let m = &t.env.merged;
            // SAFETY: the thread's state keeps the strings alive until the next call.
            unsafe { *vars = ShimVars { block: m.bytes().as_ptr().cast(), spans: m.spans().as_ptr(), pairs: m.pair_count() } };
        });
    })
}
