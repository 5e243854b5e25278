//! PHP threads and what they run, each module using only the ones before it:
//! opcache.rs (the gate every request passes, which decides when OPcache restarts),
//! counters.rs (what a pool's threads count), generation.rs (a worker generation's settings), thread.rs (a thread's state, commands
//! and thread-local state), env.rs (the per-thread environment's hooks), classic.rs and
//! worker.rs (the two loops, with the worker hooks), registry.rs (starting, running and
//! joining threads).

pub mod opcache;
pub mod counters;
pub mod generation;
pub mod thread;
pub mod env;
pub mod classic;
pub mod worker;
pub mod registry;
