//! PHP threads and what they run, each module using only the ones before it:
//! profile.rs (the sampling profiler's profile, and the weight a thread has not reported),
//! info.rs (what other threads may read of a thread), opcache.rs (the gate every request
//! passes, which decides when OPcache restarts), counters.rs (what a pool's threads
//! count), generation.rs (a worker generation's settings), protocol.rs (what a pool and
//! its threads tell each other), thread.rs (a thread's thread-local state); hooks PHP
//! calls on a thread: sample.rs (the profiler's sample), env.rs (the per-thread
//! environment), store.rs (the store functions); the loops, with their hooks:
//! classic.rs, worker.rs (HTTP and task workers) and background.rs (background workers
//! and scheduled jobs); task.rs (sending tasks and waiting for them), registry.rs
//! (starting, running and joining threads).

pub mod profile;
pub mod info;
pub mod opcache;
pub mod counters;
pub mod generation;
pub mod protocol;
pub mod thread;
pub mod sample;
pub mod env;
pub mod store;
pub mod classic;
pub mod worker;
pub mod background;
pub mod task;
pub mod registry;

/// Stack of every PHP thread: PHP 8.2 has no stack-overflow guard, so give deep
/// recursion the room a main thread would have.
pub const PHP_THREAD_STACK: usize = 8 * 1024 * 1024;

