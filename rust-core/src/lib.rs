//! The PHP core of php_worker.
//!
//! A Caddy module (go-module/) hands HTTP requests to this crate through a small C ABI
//! (include/php_worker.h, generated from src/abi/ and src/exports.rs). The crate embeds
//! a thread-safe PHP: it starts the engine on a thread of its own, runs requests on pools
//! of PHP threads fed by crossbeam queues, changes those pools while they serve, and
//! answers through callbacks the host registered.
//!
//! Layers, each using only the ones before it: no module cycles, a module counting with
//! its submodules (scripts/check-call-graphs.py checks it, at every depth):
//! - the bottom: `error`, `abi` (the ABI's types and constants), `config` (the host's
//!   JSON), `layout` (the one string/span codec), `store` (the key-value tables: the
//!   shared table and a thread's local store, plain Rust);
//! - `host` (the host's callbacks and environment) and `php` (the raw C seam: the
//!   declarations checked against csrc/pw_seam.h, the panic guard every hook runs in,
//!   the per-thread PHP context, the PHP extension module);
//! - `request`: a request as copied from the host, its response, the SAPI hooks;
//! - `runtime`: PHP threads (their state, registry and commands, local store), the
//!   classic and worker loops, and the hooks PHP calls on a thread (the per-thread
//!   environment, the store functions, the profiler's sample);
//! - `supervisor`: what runs off PHP threads and watches over them: `pool` (a queue and
//!   its threads, worker generations), `scaling` (the autoscaler thread: adds threads
//!   while requests wait, removes idle ones) and `watchdog` (ends requests stuck past
//!   their deadline), both on one service-thread helper, `engine` (main thread, pool
//!   table, shutdown) and `stats` (snapshots);
//! - `cli`: the command line (`caddy php-cli`), PHP run in a process with no engine;
//! - `wire`: a child process's wire to the Caddy process (`processes N`), its request
//!   path served by a reader thread and the PHP threads, with no call into Go;
//! - `exports`: every `extern "C"` function the host calls.
//!
//! Bailouts (PHP's longjmp) never cross Rust frames: every PHP call that can bail out
//! sits in csrc/ inside zend_try, and the Rust hooks PHP calls never call PHP.

// Every unsafe block says why it is sound, and every public unsafe fn what it needs
// (tests/run.sh runs clippy with warnings denied).
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

pub mod error;
pub mod config;
pub mod layout;
pub mod abi;
pub mod host;
pub mod php;
pub mod request;
pub mod runtime;
pub mod store;
pub mod supervisor;
pub mod cli;
pub mod wire;
pub mod exports;

#[cfg(test)]
mod testing;

/// Version of the PHP this crate was built against.
pub const PHP_VERSION: &str = env!("PHP_WORKER_PHP_VERSION");
