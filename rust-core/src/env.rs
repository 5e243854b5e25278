//! The environment a PHP thread sees through getenv(), putenv() and `$_ENV`.
//!
//! One process-wide environment cannot be shared by threads that change it (setenv()
//! while another thread reads is undefined behaviour, and Laravel's Dotenv putenv()s on
//! every worker thread at boot). So each PHP thread sees, in order of precedence: its
//! own putenv() calls, the running request's configured env, then the process
//! environment as it was when the engine started. A classic thread forgets its putenv()
//! calls after each request; a worker thread when its script ends.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_void};

use crate::engine::{VarBlock, with_thread_shared};
use crate::request::RequestContext;
use crate::sapi::guard;
use crate::shim::ShimVars;

thread_local! {
    /// This thread's putenv() calls: a value, or None for an unset name.
    static OVERRIDES: RefCell<HashMap<Vec<u8>, Option<Vec<u8>>>> = RefCell::new(HashMap::new());
    /// The last merged environment handed to C, alive until the next call.
    static MERGED: RefCell<VarBlock> = RefCell::new(VarBlock::default());
}

/// Forgets this thread's putenv() calls.
pub fn reset() {
    OVERRIDES.with(|o| o.borrow_mut().clear());
}

/// # Safety
/// `ctx` is NULL or the live request context of this thread.
unsafe fn request<'a>(ctx: *mut c_void) -> Option<&'a RequestContext> {
    unsafe { ctx.cast::<RequestContext>().as_ref() }
}

/// getenv(name) for C; see csrc/shim.h.
///
/// # Safety
/// `name` is valid for `len` bytes; the out-pointers are writable.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_env_get(
    ctx: *mut c_void,
    name: *const c_char,
    len: usize,
    value: *mut *const c_char,
    value_len: *mut usize,
) -> bool {
    guard(false, || {
        let name = unsafe { std::slice::from_raw_parts(name.cast::<u8>(), len) };
        let mut found: Option<(*const c_char, usize)> = None;
        let overridden = OVERRIDES.with(|o| {
            o.borrow().get(name).map(|v| {
                found = v.as_ref().map(|v| (v.as_ptr().cast(), v.len()));
            })
        });
        if overridden.is_none() {
            let as_raw = |v: &[u8]| (v.as_ptr().cast::<c_char>(), v.len());
            found = unsafe { request(ctx) }.and_then(|ctx| ctx.request().env_value(name)).map(as_raw);
            if found.is_none() {
                // The engine outlives every PHP call on this thread.
                found = with_thread_shared(|s| s.process_env.get(name).map(as_raw)).flatten();
            }
        }
        match found {
            Some((ptr, n)) => {
                // SAFETY: the value lives in this thread's map, the request or the
                // engine, all alive during the call.
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
unsafe extern "C" fn pw_rs_env_put(setting: *const c_char, len: usize) {
    guard((), || {
        let setting = unsafe { std::slice::from_raw_parts(setting.cast::<u8>(), len) };
        let (name, value) = match setting.iter().position(|&b| b == b'=') {
            Some(eq) => (&setting[..eq], Some(setting[eq + 1..].to_vec())),
            None => (setting, None),
        };
        OVERRIDES.with(|o| o.borrow_mut().insert(name.to_vec(), value));
    })
}

/// The whole environment as this thread sees it.
///
/// # Safety
/// `vars` is writable.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_env_all(ctx: *mut c_void, vars: *mut ShimVars) {
    guard((), || {
        let mut merged: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut set = |k: &[u8], v: Option<&[u8]>| match (index.get(k), v) {
            (Some(&i), Some(v)) => merged[i].1 = v.to_vec(),
            (Some(&i), None) => merged[i].1.clear(),
            (None, Some(v)) => {
                index.insert(k.to_vec(), merged.len());
                merged.push((k.to_vec(), v.to_vec()));
            }
            (None, None) => {}
        };
        with_thread_shared(|s| s.process_env.for_each(|k, v| set(k, Some(v))));
        if let Some(ctx) = unsafe { request(ctx) } {
            ctx.request().for_each_env(|k, v| set(k, Some(v)));
        }
        let unset: Vec<Vec<u8>> = OVERRIDES.with(|o| {
            let o = o.borrow();
            for (k, v) in o.iter() {
                set(k, v.as_deref());
            }
            o.iter().filter(|(_, v)| v.is_none()).map(|(k, _)| k.clone()).collect()
        });
        merged.retain(|(k, _)| !unset.contains(k));
        MERGED.with(|m| {
            let mut m = m.borrow_mut();
            *m = VarBlock::from_pairs(merged);
            // SAFETY: MERGED keeps the block alive until the next call on this thread.
            unsafe { *vars = m.as_shim() };
        });
    })
}
