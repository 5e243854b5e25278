//! The PHP core of php_worker.
//!
//! A Caddy module (go-module/) hands HTTP requests to this crate through a small C ABI
//! (include/php_worker.h, generated from src/ffi.rs). The crate embeds a thread-safe PHP:
//! it starts the engine on a thread of its own, runs requests on a pool of PHP threads
//! fed by a crossbeam queue, and answers through callbacks the host registered.
//!
//! Layout:
//! - `ffi`: every `extern "C"` export and ABI type; nothing else is exported.
//! - `engine`: engine lifetime (main PHP thread, pools, shutdown).
//! - `thread`: the loop of one classic PHP thread.
//! - `worker`: worker mode: a script booted once serving requests through
//!   `frankenphp_handle_request()`.
//! - `request`: a request's description and its response state.
//! - `sapi`: the hooks PHP's SAPI callbacks (in csrc/shim.c) forward to.
//! - `env`: the per-thread environment behind getenv(), putenv() and `$_ENV`.
//! - `functions`: the PHP extension (functions visible to scripts).
//! - `host`: the host's callbacks behind a safe API.
//!
//! Bailouts (PHP's longjmp) never cross Rust frames: every PHP call that can bail out
//! sits in csrc/shim.c inside zend_try, and the Rust hooks called from PHP never call PHP.

pub mod config;
pub mod engine;
mod env;
pub mod error;
pub mod ffi;
mod functions;
pub mod host;
pub mod request;
mod sapi;
mod shim;
mod thread;
mod worker;

/// Version of the PHP this crate was built against.
pub const PHP_VERSION: &str = env!("PHP_WORKER_PHP_VERSION");
