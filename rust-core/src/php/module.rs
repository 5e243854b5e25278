//! php_worker's PHP extension: the module entry passed to `php_module_startup`, and the
//! PHP functions it registers, with FrankenPHP's names so existing worker scripts
//! (Laravel Octane, Symfony Runtime) run unchanged.
//!
//! The functions and their signatures are C's (csrc/module.c), as are their bodies
//! (csrc/functions.c, csrc/worker.c, csrc/stop.c, csrc/task.c, csrc/store.c) and the
//! module's hooks (module startup in csrc/module.c, the request's end in csrc/request.c):
//! they call back into PHP and can bail out, which must not happen across Rust frames,
//! and only PHP calls the functions, so Rust holds no declaration of them to keep in step.

use std::ffi::c_void;

use ext_php_rs::prelude::*;
use ext_php_rs::zend::ModuleEntry;

unsafe extern "C" {
    fn pw_shim_module_startup(type_: i32, module_number: i32) -> i32;
    /// The module's request shutdown: frees what a request left with the module (a
    /// php_worker_on_stop() callback).
    fn pw_shim_request_shutdown(type_: i32, module_number: i32) -> i32;
    /// After every module's request shutdown: closes a session a failed save handler
    /// left open (and locked).
    fn pw_shim_post_deactivate() -> i32;
    /// The module's function table (a `zend_function_entry` array ended by an empty entry),
    /// static in csrc/module.c: every PHP function the module adds, with its arginfo.
    fn pw_shim_functions() -> *const c_void;
}

#[php_module]
pub fn get_module(module: ModuleBuilder) -> ModuleBuilder {
    module
        .name("php_worker")
        .startup_function(pw_shim_module_startup)
        .request_shutdown_function(pw_shim_request_shutdown)
        .post_deactivate_function(pw_shim_post_deactivate)
}

/// The module entry for the SAPI's startup: built once per process, with C's function
/// table in place of the empty one ext-php-rs builds (and leaks, as it leaks the entry:
/// it hands PHP raw pointers it never takes back). PHP uses
/// the entry in place and resets it at shutdown, as it does with its built-in modules'
/// static entries, so one serves every engine start.
pub fn module_entry() -> *mut ModuleEntry {
    static ENTRY: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *ENTRY.get_or_init(|| {
        let entry = get_module();
        // SAFETY: get_module() returns a valid entry that nothing else refers to yet;
        // pw_shim_functions() has no precondition and returns a static table.
        unsafe { (*entry).functions = pw_shim_functions().cast() };
        entry as usize
    }) as *mut ModuleEntry
}
