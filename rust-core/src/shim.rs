//! Declarations of the C shim (csrc/shim.h). Only src/engine.rs and src/thread.rs call
//! these; the hooks the shim calls back are in src/sapi.rs.

use std::ffi::{c_char, c_int, c_void};

#[repr(C)]
pub struct ShimRequest {
    pub ctx: *mut c_void,
    pub method: *const c_char,
    pub request_uri: *const c_char,
    pub query_string: *const c_char,
    pub content_type: *const c_char,
    pub path_translated: *const c_char,
    pub script_filename: *const c_char,
    pub authorization: *const c_char,
    pub content_length: i64,
    pub proto_num: c_int,
}

#[repr(C)]
pub struct ShimVars {
    pub block: *const c_char,
    pub spans: *const u32,
    pub pairs: usize,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)] // values are produced by C
pub enum RunResult {
    Ok = 0,
    StartupFailed = 1,
    Unhealthy = 2,
}

unsafe extern "C" {
    /// # Safety
    /// Call once per engine, on the engine's main thread; `ini_entries` must outlive the
    /// engine, `module` must be an ext-php-rs module entry and `env` valid during the call.
    pub fn pw_shim_engine_startup(ini_entries: *const c_char, module: *mut c_void, env: *const ShimVars) -> c_int;
    /// # Safety
    /// On the thread that called `pw_shim_engine_startup`, after every PHP thread exited.
    pub fn pw_shim_engine_shutdown();
    /// # Safety
    /// Once per OS thread, after engine startup; `name` is a C string or NULL.
    pub fn pw_shim_thread_init(name: *const c_char);
    /// # Safety
    /// On a thread that called `pw_shim_thread_init`, outside any request.
    pub fn pw_shim_thread_shutdown();
    /// # Safety
    /// On an initialised PHP thread; every pointer in `req` valid until it returns; with
    /// `worker`, the worker hooks in src/worker.rs must be armed.
    pub fn pw_shim_run_script(req: *const ShimRequest, worker: bool, fatal: *mut bool, exit_status: *mut c_int) -> RunResult;
    /// # Safety
    /// On an initialised PHP thread; `slot` is writable.
    pub fn pw_shim_kill_slot(slot: *mut KillSlot);
    /// # Safety
    /// `slot` was filled by a PHP thread that is still alive.
    pub fn pw_shim_kill(slot: *const KillSlot) -> bool;
}

/// A PHP thread and its execution timer (csrc/shim.h `pw_kill_slot`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KillSlot {
    pub thread: libc::pthread_t,
    pub timer: *mut c_void,
}

// SAFETY: a pthread id and an address only used as a signal's payload.
unsafe impl Send for KillSlot {}
