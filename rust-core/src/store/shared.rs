//! The table every PHP thread shares: one per process, outliving worker restarts,
//! reloads and PHP restarts, emptied only by flush or the process's end.
//!
//! Keys hash to one of [`SHARDS`] tables, each behind its own lock, so threads that use
//! different keys rarely wait for each other. A lock is held only for a lookup and a
//! copy: the caller builds PHP values after releasing it (design.md §8, the store rule).

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use super::table::{Budget, NotIncremented, Stored, Table, Value};

/// Shards of the shared table: well above the thread counts of a 2–64 core machine.
pub const SHARDS: usize = 64;

/// The default capacity of the shared table (shared_store_size).
pub const DEFAULT_CAPACITY: usize = 64 << 20;

/// Milliseconds between two sweeps of every shard by a write that found the table full:
/// a table full of live entries would otherwise scan all of them on every write.
const FULL_SWEEP_INTERVAL_MS: u64 = 100;

pub struct SharedTable {
    shards: Box<[Mutex<Table>]>,
    hasher: std::hash::RandomState,
    budget: Budget,
    /// When a full table was last swept (ms since the epoch; 0: never).
    last_full_sweep: AtomicU64,
}

/// The process's shared table.
pub static SHARED: LazyLock<SharedTable> = LazyLock::new(|| SharedTable::new(DEFAULT_CAPACITY));

impl SharedTable {
    pub fn new(capacity: usize) -> SharedTable {
        SharedTable {
            shards: (0..SHARDS).map(|_| Mutex::new(Table::default())).collect(),
            hasher: std::hash::RandomState::new(),
            budget: Budget::new(capacity),
            last_full_sweep: AtomicU64::new(0),
        }
    }

    pub fn set_capacity(&self, bytes: usize) {
        self.budget.set_capacity(bytes);
    }

    /// Bytes the entries take, overhead included.
    pub fn used(&self) -> usize {
        self.budget.used()
    }

    fn shard(&self, key: &[u8]) -> MutexGuard<'_, Table> {
        let i = (self.hasher.hash_one(key) as usize) % SHARDS;
        // Nothing under these locks panics or calls PHP; a poisoned lock holds a
        // consistent table.
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the live value of `key`, under its shard's lock: `f` copies it out.
    pub fn get<T>(&self, key: &[u8], now: u64, f: impl FnOnce(&Value) -> T) -> Option<T> {
        self.shard(key).get(key, now, &self.budget).map(f)
    }

    /// put (or, with `add`, add). When the table is full, expired entries of every
    /// shard are swept (at most every 100 ms) and the put is tried once more.
    pub fn insert(&self, key: &[u8], value: Value, expires: u64, add: bool, now: u64) -> Stored {
        let value = match self.shard(key).try_insert(key, value, expires, add, now, &self.budget) {
            Ok(done) => return done,
            Err(value) => value,
        };
        if self.sweep_full(now) == 0 {
            return Stored::Full;
        }
        self.shard(key).insert(key, value, expires, add, now, &self.budget)
    }

    pub fn increment(&self, key: &[u8], by: i64, now: u64) -> Result<i64, NotIncremented> {
        match self.shard(key).increment(key, by, now, &self.budget) {
            Err(NotIncremented::Full) if self.sweep_full(now) > 0 => self.shard(key).increment(key, by, now, &self.budget),
            done => done,
        }
    }

    pub fn touch(&self, key: &[u8], expires: u64, now: u64) -> bool {
        self.shard(key).touch(key, expires, now)
    }

    pub fn forget(&self, key: &[u8], now: u64) -> bool {
        self.shard(key).forget(key, now, &self.budget)
    }

    pub fn flush(&self) {
        for shard in self.shards.iter() {
            shard.lock().unwrap_or_else(|e| e.into_inner()).flush(&self.budget);
        }
    }

    pub fn count(&self, now: u64) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).count(now)).sum()
    }

    /// Removes the expired entries of every shard for a write that found the table
    /// full, unless that was done less than FULL_SWEEP_INTERVAL_MS ago; returns the
    /// bytes freed.
    fn sweep_full(&self, now: u64) -> usize {
        let last = self.last_full_sweep.load(Ordering::Relaxed);
        if last != 0 && now < last.saturating_add(FULL_SWEEP_INTERVAL_MS) {
            return 0;
        }
        self.last_full_sweep.store(now.max(1), Ordering::Relaxed);
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).sweep(now, &self.budget)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::table::ENTRY_OVERHEAD;

    #[test]
    fn concurrent_increments_and_adds_are_atomic() {
        let table = SharedTable::new(1 << 20);
        let (threads, each) = (8, 10_000);
        std::thread::scope(|s| {
            for t in 0..threads {
                let table = &table;
                s.spawn(move || {
                    for i in 0..each {
                        table.increment(b"counter", 1, 0).unwrap();
                        table.insert(format!("once-{}", i % 100).as_bytes(), Value::Int(t), 0, true, 0);
                    }
                });
            }
        });
        assert_eq!(table.get(b"counter", 0, |v| v.clone()), Some(Value::Int(threads * each)));
        assert_eq!(table.count(0), 101, "each add'ed key exists once");
    }

    #[test]
    fn a_full_table_refuses_and_sweeps_expired_entries_first() {
        let entry = ENTRY_OVERHEAD + 2 + 8;
        let table = SharedTable::new(3 * entry);
        for (i, expires) in [(0, 1000), (1, 0), (2, 0)] {
            assert_eq!(table.insert(format!("k{i}").as_bytes(), Value::Int(i), expires, false, 500), Stored::Yes);
        }
        assert_eq!(table.insert(b"k3", Value::Int(3), 0, false, 950), Stored::Full, "no live entry is evicted");
        assert_eq!(
            table.insert(b"k3", Value::Int(3), 0, false, 1010),
            Stored::Full,
            "a full table is swept at most every 100 ms"
        );
        assert_eq!(table.insert(b"k3", Value::Int(3), 0, false, 1050), Stored::Yes, "the expired one made room");
        assert_eq!(table.get(b"k1", 1050, |v| v.clone()), Some(Value::Int(1)));
        table.flush();
        assert_eq!((table.count(1050), table.used()), (0, 0));
    }
}
