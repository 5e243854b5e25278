//! The PHP context of one OS thread (TSRM's per-thread state), as a value.

use std::ffi::CStr;
use std::marker::PhantomData;

use super::sys::{self, KillSlot};

/// The calling thread's PHP context: created by [`PhpContext::new`], freed on drop.
/// Neither `Send` nor `Sync`: it belongs to the thread that made it.
pub struct PhpContext {
    kill: KillSlot,
    _thread_bound: PhantomData<*mut ()>,
}

impl PhpContext {
    /// Creates the calling thread's PHP context and names the thread.
    ///
    /// # Safety
    /// The engine has started (pw_shim_engine_startup returned) and stays up until this
    /// context is dropped; the thread has no other live context.
    pub unsafe fn new(name: &CStr) -> PhpContext {
        let mut kill = KillSlot { thread: 0, timer: std::ptr::null_mut(), tid: 0, timed_out: std::ptr::null_mut(), vm_interrupt: std::ptr::null_mut() };
        // SAFETY: per the function contract; `kill` is writable.
        unsafe { sys::pw_shim_thread_init(name.as_ptr(), &mut kill) };
        PhpContext { kill, _thread_bound: PhantomData }
    }

    /// What another thread needs to stop this thread's script; valid until the context
    /// is dropped.
    pub fn kill_slot(&self) -> KillSlot {
        self.kill
    }
}

impl Drop for PhpContext {
    fn drop(&mut self) {
        // SAFETY: created on this thread by `new`; no request runs while the owner
        // drops it (the loops only drop it between scripts).
        unsafe { sys::pw_shim_thread_shutdown() };
    }
}
