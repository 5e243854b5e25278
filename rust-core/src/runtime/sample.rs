//! A sample of the sampling profiler, on the PHP thread's side: the hooks csrc/profile.c
//! calls when the sampler interrupted the thread (src/runtime/profile.rs says how). They
//! read the thread's state for the sample's labels, so they sit above thread.rs, and add
//! to the profile of profile.rs.

use std::ffi::c_char;
use std::sync::Arc;

use super::profile::{self, Labels, RawFrame, ThreadKind, active, route_of};
use super::thread::try_with_thread;
use crate::abi::types::Field;
use crate::config::WorkerKind;
use crate::php::guard::guard;
use crate::php::sys::ProfileFrame;

/// Whether the calling thread has weight to report in a sample: C walks its stack only
/// then. Clears weight left from a profile that ended.
#[unsafe(no_mangle)]
pub extern "C" fn pw_rs_profile_pending() -> bool {
    guard(false, || {
        try_with_thread(|t| {
            if !active() {
                t.info.profile.clear();
                return false;
            }
            t.info.profile_pending()
        })
        .unwrap_or(false)
    })
}

/// The calling thread's sample: `n` frames, innermost first (`truncated` when the stack
/// went deeper), valid for the call. Adds the thread's pending weight to the profile
/// under the thread's labels.
///
/// # Safety
/// `frames` is readable for `n` frames, each of whose strings is NULL (length 0) or
/// readable for its length.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pw_rs_profile_sample(frames: *const ProfileFrame, n: usize, truncated: bool) {
    guard((), || {
        let Some((weight, worker, route, kind)) = try_with_thread(|t| {
            let weight = t.info.take_profile_weight();
            if weight.ticks == 0 || !active() {
                return None;
            }
            let (worker, kind, route) = match &t.run {
                Some(run) => {
                    let kind = match run.generation.spec.kind {
                        WorkerKind::Http => ThreadKind::Worker,
                        WorkerKind::Task => ThreadKind::Task,
                        WorkerKind::Background => ThreadKind::Background,
                    };
                    // A task or a background script has no HTTP request, so no route.
                    let route = match &run.in_flight {
                        Some(in_flight) if kind == ThreadKind::Worker => {
                            // SAFETY: in_flight is live until pw_rs_worker_done or the end
                            // of the script, and only read here, on its own thread.
                            let uri = unsafe { (*in_flight.as_ptr()).request().field(Field::RequestUri) };
                            route_of(&String::from_utf8_lossy(uri)).to_owned()
                        }
                        _ => String::new(),
                    };
                    (run.generation.name.clone(), kind, route)
                }
                // A classic thread runs PHP only for a request; its URI is in the list.
                None => (Arc::from(""), ThreadKind::Classic, t.info.current_uri().map(|u| route_of(&u).to_owned()).unwrap_or_default()),
            };
            Some((weight, worker, route, kind))
        })
        .flatten() else {
            return;
        };
        let raw: &[ProfileFrame] = if frames.is_null() || n == 0 {
            &[]
        } else {
            // SAFETY: the function's contract.
            unsafe { std::slice::from_raw_parts(frames, n) }
        };
        let mut frames = Vec::with_capacity(raw.len());
        for f in raw {
            // SAFETY: the function's contract: each string is NULL or readable for its length.
            let (function, class, file) = unsafe { (str_of(f.function, f.function_len), str_of(f.scope, f.scope_len), str_of(f.file, f.file_len)) };
            frames.push(RawFrame { function, class, file, line: f.line });
        }
        profile::add(&frames, truncated, Labels { worker: &worker, route: &route, kind }, weight);
    })
}

/// # Safety
/// `ptr` is NULL or readable for `len` bytes, for `'a`.
unsafe fn str_of<'a>(ptr: *const c_char, len: usize) -> &'a [u8] {
    if ptr.is_null() {
        return &[];
    }
    // SAFETY: the function's contract.
    unsafe { std::slice::from_raw_parts(ptr.cast(), len) }
}
