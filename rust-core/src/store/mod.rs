//! The stores PHP scripts keep values in, owned by Rust: a local store per PHP thread
//! (it outlives worker script restarts on that thread, and ends with it) and one table
//! shared by every thread of the process.
//!
//! Plain Rust, below `runtime`, whose `PhpThread` owns a [`LocalStore`]; the hooks the
//! PHP functions call (csrc/store.c) run on a PHP thread, so they are runtime's
//! (src/runtime/store.rs). The C shim encodes PHP values into bytes and decodes them;
//! Rust stores bytes and integers, and never makes a PHP value, so no PHP bailout can
//! happen while a store's lock is held.

pub mod table;
pub mod shared;

use std::sync::atomic::{AtomicUsize, Ordering};

use table::{Budget, Table};

/// The default capacity of each thread's local store (local_store_size).
pub const DEFAULT_LOCAL_CAPACITY: usize = 16 << 20;

/// The capacity of every local store, set by the host.
static LOCAL_CAPACITY: AtomicUsize = AtomicUsize::new(DEFAULT_LOCAL_CAPACITY);

/// Sets the capacities of the shared table and of each thread's local store, in bytes.
pub fn configure(shared_bytes: usize, local_bytes: usize) {
    shared::SHARED.set_capacity(shared_bytes);
    LOCAL_CAPACITY.store(local_bytes, Ordering::Relaxed);
}

/// A PHP thread's own store.
#[derive(Debug)]
pub struct LocalStore {
    pub table: Table,
    pub budget: Budget,
}

impl Default for LocalStore {
    fn default() -> LocalStore {
        LocalStore { table: Table::default(), budget: Budget::new(DEFAULT_LOCAL_CAPACITY) }
    }
}

impl LocalStore {
    /// The table and its budget, with the capacity the host set last.
    pub fn parts(&mut self) -> (&mut Table, &Budget) {
        self.budget.set_capacity(LOCAL_CAPACITY.load(Ordering::Relaxed));
        (&mut self.table, &self.budget)
    }
}
