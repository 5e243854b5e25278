//! PHP threads and what they run: the thread registry and the life of a thread
//! (thread.rs), the classic loop (classic.rs), worker scripts (worker.rs), and the
//! per-thread environment (env.rs).

pub mod classic;
pub mod env;
pub mod thread;
pub mod worker;
