//! A key-value table with expiry and a byte budget: one shard of the shared table, or a
//! thread's whole local store. Plain Rust: no PHP value is made here (the C shim encodes
//! and decodes values, csrc/store.c), so nothing can bail out while a caller holds
//! the table's lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes an entry costs beyond its key and value: the map's slot, the entry, the boxes.
pub const ENTRY_OVERHEAD: usize = 64;

/// A stored value: an integer (so increment works on it under the lock), or a value
/// the C shim encoded (csrc/store.c describes the encoding; only C reads it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Int(i64),
    Encoded(Box<[u8]>),
}

impl Value {
    fn len(&self) -> usize {
        match self {
            Value::Int(_) => 8,
            Value::Encoded(b) => b.len(),
        }
    }
}

#[derive(Debug)]
struct Entry {
    value: Value,
    /// Milliseconds on the caller's clock after which the entry is gone; 0 for never.
    expires: u64,
}

impl Entry {
    fn live(&self, now: u64) -> bool {
        self.expires == 0 || now < self.expires
    }
}

fn cost(key: &[u8], value: &Value) -> usize {
    ENTRY_OVERHEAD + key.len() + value.len()
}

/// How many bytes a store may hold, shared by the tables that draw on it.
#[derive(Debug)]
pub struct Budget {
    used: AtomicUsize,
    capacity: AtomicUsize,
}

impl Budget {
    pub const fn new(capacity: usize) -> Budget {
        Budget { used: AtomicUsize::new(0), capacity: AtomicUsize::new(capacity) }
    }

    pub fn set_capacity(&self, capacity: usize) {
        self.capacity.store(capacity, Ordering::Relaxed);
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Takes `n` bytes if the capacity allows.
    fn reserve(&self, n: usize) -> bool {
        let capacity = self.capacity.load(Ordering::Relaxed);
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |used| used.checked_add(n).filter(|&u| u <= capacity))
            .is_ok()
    }

    fn release(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// What a put or an add did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    Yes,
    /// add: a live entry has the key.
    Exists,
    /// The budget has no room for it.
    Full,
}

/// Why an increment did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotIncremented {
    /// The value is not an integer.
    NotInteger,
    /// The result does not fit in an integer.
    Overflow,
    /// A new entry does not fit in the budget.
    Full,
}

#[derive(Default, Debug)]
pub struct Table {
    map: HashMap<Box<[u8]>, Entry>,
    /// Writes since the last sweep of expired entries.
    writes: u32,
}

/// Writes between two sweeps of expired entries: expiry frees memory even for keys
/// nobody reads again, at a cost spread over the writes.
const SWEEP_EVERY: u32 = 256;

impl Table {
    /// The value of a live entry. An expired one is removed (its bytes go back to `budget`).
    pub fn get(&mut self, key: &[u8], now: u64, budget: &Budget) -> Option<&Value> {
        if self.map.get(key).is_some_and(|e| !e.live(now)) {
            self.remove(key, budget);
            return None;
        }
        self.map.get(key).map(|e| &e.value)
    }

    /// Stores `value` under `key` (with `add`, only if no live entry has it), expiring at
    /// `expires` (0 for never).
    pub fn insert(&mut self, key: &[u8], value: Value, expires: u64, add: bool, now: u64, budget: &Budget) -> Stored {
        self.try_insert(key, value, expires, add, now, budget).unwrap_or(Stored::Full)
    }

    /// [`Table::insert`], handing the value back when the budget has no room for it.
    pub fn try_insert(&mut self, key: &[u8], value: Value, expires: u64, add: bool, now: u64, budget: &Budget) -> Result<Stored, Value> {
        self.maybe_sweep(now, budget);
        let old = match self.map.get(key) {
            Some(e) if add && e.live(now) => return Ok(Stored::Exists),
            Some(e) => cost(key, &e.value),
            None => 0,
        };
        let new = cost(key, &value);
        if new > old && !budget.reserve(new - old) {
            return Err(value);
        }
        if old > new {
            budget.release(old - new);
        }
        match self.map.get_mut(key) {
            Some(e) => *e = Entry { value, expires },
            None => {
                self.map.insert(key.into(), Entry { value, expires });
            }
        }
        Ok(Stored::Yes)
    }

    /// Adds `by` to an integer entry, or creates it at `by` (no expiry) when there is none;
    /// an entry keeps its expiry. Returns the new value.
    pub fn increment(&mut self, key: &[u8], by: i64, now: u64, budget: &Budget) -> Result<i64, NotIncremented> {
        if let Some(e) = self.map.get_mut(key).filter(|e| e.live(now)) {
            let Value::Int(n) = &mut e.value else { return Err(NotIncremented::NotInteger) };
            *n = n.checked_add(by).ok_or(NotIncremented::Overflow)?;
            return Ok(*n);
        }
        match self.insert(key, Value::Int(by), 0, false, now, budget) {
            Stored::Yes => Ok(by),
            _ => Err(NotIncremented::Full),
        }
    }

    /// Gives a live entry a new expiry (0 for never), keeping its value; false when there
    /// is none.
    pub fn touch(&mut self, key: &[u8], expires: u64, now: u64) -> bool {
        match self.map.get_mut(key).filter(|e| e.live(now)) {
            Some(e) => {
                e.expires = expires;
                true
            }
            None => false,
        }
    }

    /// Removes an entry; true when a live one was there.
    pub fn forget(&mut self, key: &[u8], now: u64, budget: &Budget) -> bool {
        self.remove(key, budget).is_some_and(|e| e.live(now))
    }

    /// Removes every entry.
    pub fn flush(&mut self, budget: &Budget) {
        let freed: usize = self.map.iter().map(|(k, e)| cost(k, &e.value)).sum();
        self.map = HashMap::new();
        budget.release(freed);
    }

    /// Live entries.
    pub fn count(&self, now: u64) -> usize {
        self.map.values().filter(|e| e.live(now)).count()
    }

    /// Removes expired entries; returns how many bytes that freed.
    pub fn sweep(&mut self, now: u64, budget: &Budget) -> usize {
        let mut freed = 0;
        self.map.retain(|k, e| {
            let keep = e.live(now);
            if !keep {
                freed += cost(k, &e.value);
            }
            keep
        });
        budget.release(freed);
        self.writes = 0;
        if self.map.capacity() > 64 && self.map.len() < self.map.capacity() / 4 {
            self.map.shrink_to_fit();
        }
        freed
    }

    fn maybe_sweep(&mut self, now: u64, budget: &Budget) {
        self.writes += 1;
        if self.writes >= SWEEP_EVERY {
            self.sweep(now, budget);
        }
    }

    fn remove(&mut self, key: &[u8], budget: &Budget) -> Option<Entry> {
        let (k, e) = self.map.remove_entry(key)?;
        budget.release(cost(&k, &e.value));
        Some(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(s: &str) -> Value {
        Value::Encoded(s.as_bytes().into())
    }

    #[test]
    fn put_get_add_forget_and_expiry() {
        let budget = Budget::new(1 << 20);
        let mut t = Table::default();
        assert_eq!(t.insert(b"a", bytes("1"), 0, false, 0, &budget), Stored::Yes);
        assert_eq!(t.get(b"a", 0, &budget), Some(&bytes("1")));
        assert_eq!(t.insert(b"a", bytes("2"), 0, true, 0, &budget), Stored::Exists, "add keeps a live entry");
        assert_eq!(t.insert(b"e", bytes("x"), 100, false, 0, &budget), Stored::Yes);
        assert_eq!(t.count(99), 2);
        assert_eq!(t.count(100), 1, "expired entries are not counted");
        assert_eq!(t.insert(b"e", bytes("y"), 0, true, 100, &budget), Stored::Yes, "add replaces an expired entry");
        assert_eq!(t.get(b"e", 100, &budget), Some(&bytes("y")));
        assert!(t.forget(b"a", 100, &budget));
        assert!(!t.forget(b"a", 100, &budget));
        t.flush(&budget);
        assert_eq!((t.count(0), budget.used()), (0, 0));
    }

    #[test]
    fn touch_moves_the_expiry_of_live_entries_only() {
        let budget = Budget::new(1 << 20);
        let mut t = Table::default();
        t.insert(b"a", bytes("x"), 100, false, 0, &budget);
        assert!(t.touch(b"a", 500, 50));
        assert_eq!(t.get(b"a", 200, &budget), Some(&bytes("x")), "alive past its old expiry");
        assert_eq!(t.get(b"a", 500, &budget), None, "gone at its new one");
        assert!(!t.touch(b"a", 900, 600), "an expired entry is not brought back");
        assert!(!t.touch(b"none", 900, 0));
        t.insert(b"b", bytes("y"), 100, false, 0, &budget);
        assert!(t.touch(b"b", 0, 10));
        assert!(t.get(b"b", u64::MAX - 1, &budget).is_some(), "0 is for never");
    }

    #[test]
    fn expired_entries_are_never_returned_and_their_bytes_come_back() {
        let budget = Budget::new(1 << 20);
        let mut t = Table::default();
        t.insert(b"k", bytes("value"), 10, false, 0, &budget);
        let used = budget.used();
        assert_eq!(used, ENTRY_OVERHEAD + 1 + 5);
        assert_eq!(t.get(b"k", 10, &budget), None);
        assert_eq!(budget.used(), 0, "a read of an expired entry frees it");
        for i in 0..10 {
            t.insert(format!("k{i}").as_bytes(), bytes("v"), 5, false, 0, &budget);
        }
        for _ in 0..SWEEP_EVERY {
            t.insert(b"last", bytes("v"), 0, false, 10, &budget);
        }
        assert_eq!(budget.used(), ENTRY_OVERHEAD + 4 + 1, "writes sweep expired entries nobody reads");
        assert_eq!(t.count(10), 1);
    }

    #[test]
    fn a_full_budget_refuses_new_bytes_but_not_smaller_values() {
        let hundred = "x".repeat(100);
        let budget = Budget::new(2 * (ENTRY_OVERHEAD + 1 + 100));
        let mut t = Table::default();
        assert_eq!(t.insert(b"a", bytes(&hundred), 0, false, 0, &budget), Stored::Yes);
        assert_eq!(t.insert(b"b", bytes(&hundred), 0, false, 0, &budget), Stored::Yes);
        assert_eq!(t.insert(b"c", bytes("0"), 0, false, 0, &budget), Stored::Full);
        assert_eq!(t.insert(b"a", bytes(&format!("{hundred}y")), 0, false, 0, &budget), Stored::Full, "growing a value");
        assert_eq!(t.get(b"a", 0, &budget), Some(&bytes(&hundred)), "a refused put leaves the old value");
        assert_eq!(t.insert(b"a", bytes("0"), 0, false, 0, &budget), Stored::Yes, "shrinking fits");
        assert_eq!(t.increment(b"n", 1, 0, &budget), Ok(1), "the shrink freed room");
        assert_eq!(t.increment(b"m", 1, 0, &budget), Err(NotIncremented::Full));
    }

    #[test]
    fn increments_integers_only_and_keep_the_expiry() {
        let budget = Budget::new(1 << 20);
        let mut t = Table::default();
        assert_eq!(t.increment(b"n", 5, 0, &budget), Ok(5), "a missing key starts at 0");
        assert_eq!(t.increment(b"n", -2, 0, &budget), Ok(3));
        t.insert(b"s", bytes("x"), 0, false, 0, &budget);
        assert_eq!(t.increment(b"s", 1, 0, &budget), Err(NotIncremented::NotInteger));
        t.insert(b"big", Value::Int(i64::MAX), 0, false, 0, &budget);
        assert_eq!(t.increment(b"big", 1, 0, &budget), Err(NotIncremented::Overflow));
        t.insert(b"ttl", Value::Int(1), 50, false, 0, &budget);
        assert_eq!(t.increment(b"ttl", 1, 10, &budget), Ok(2));
        assert_eq!(t.get(b"ttl", 50, &budget), None, "the increment kept the expiry");
        assert_eq!(t.increment(b"ttl", 1, 60, &budget), Ok(1), "an expired entry starts again at 0");
    }
}
