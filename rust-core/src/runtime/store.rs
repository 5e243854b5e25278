//! The hooks behind the php_worker_local_* and php_worker_shared_* PHP functions
//! (csrc/store.c), on the calling PHP thread, whose local store they reach: the stores
//! themselves are src/store/. The C side checks the arguments and turns PHP values into
//! a [`StoreValue`] and back; these hooks run in the panic guard and never call PHP.
//!
//! A value read from a store is copied, under the shard's lock for the shared table, into
//! the calling thread's buffer; C copies it again into PHP memory before it decodes it,
//! because decoding an object can run PHP code that uses the stores again.

use std::ffi::c_char;
use std::sync::atomic::{AtomicU64, Ordering};

use super::info::since_epoch;
use super::thread::try_with_thread;
use crate::host::{Level, log_unattached};
use crate::php::guard::guard;
use crate::store::shared::SHARED;
use crate::store::table::{NotIncremented, Stored, Value};

/// A value crossing the seam. `kind` is one of the PW_STORE_* constants; `data` and
/// `len` are the encoded bytes of an ENCODED value, valid for the duration of the call
/// (a put) or until the thread's next store call (a get).
#[repr(C)]
pub struct StoreValue {
    pub kind: i32,
    pub integer: i64,
    pub data: *const u8,
    pub len: usize,
}

/// StoreValue kinds.
pub const PW_STORE_INT: i32 = 1;
pub const PW_STORE_ENCODED: i32 = 2;

/// pw_rs_store_put results.
pub const PW_STORE_STORED: i32 = 1;
pub const PW_STORE_EXISTS: i32 = 0;
pub const PW_STORE_FULL: i32 = -1;

/// pw_rs_store_increment results.
pub const PW_INCREMENT_OK: i32 = 0;
pub const PW_INCREMENT_NOT_INTEGER: i32 = 1;
pub const PW_INCREMENT_OVERFLOW: i32 = 2;
pub const PW_INCREMENT_FULL: i32 = 3;

/// # Safety
/// `ptr` is valid for `len` bytes (or `len` is 0).
unsafe fn bytes<'a>(ptr: *const c_char, len: usize) -> &'a [u8] {
    // SAFETY: the caller's contract: valid for `len` bytes.
    if len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(ptr.cast(), len) } }
}

fn expiry(now: u64, ttl_seconds: i64) -> u64 {
    if ttl_seconds <= 0 { 0 } else { now.saturating_add((ttl_seconds as u64).saturating_mul(1000)).max(1) }
}

/// Copies a stored value into `out`; encoded bytes go to `buffer`.
fn copy_out(value: &Value, buffer: &mut Vec<u8>, out: &mut StoreValue) {
    match value {
        Value::Int(n) => {
            out.kind = PW_STORE_INT;
            out.integer = *n;
        }
        Value::Encoded(b) => {
            buffer.clear();
            buffer.extend_from_slice(b);
            out.kind = PW_STORE_ENCODED;
        }
    }
}

/// Reads `key`: true and `*out` filled when a live entry has it.
///
/// # Safety
/// `key` is valid for `key_len` bytes; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pw_rs_store_get(shared: bool, key: *const c_char, key_len: usize, out: *mut StoreValue) -> bool {
    guard(false, || {
        // SAFETY: the function's contract: `key` is valid for `key_len` bytes.
        let key = unsafe { bytes(key, key_len) };
        // SAFETY: the function's contract: `out` is writable, and nothing else refers to it.
        let out = unsafe { &mut *out };
        let now = since_epoch();
        try_with_thread(|t| {
            let buffer = &mut t.store_out;
            let found = if shared {
                SHARED.get(key, now, |v| copy_out(v, buffer, out)).is_some()
            } else {
                let (table, budget) = t.local_store.parts();
                table.get(key, now, budget).map(|v| copy_out(v, buffer, out)).is_some()
            };
            if found && out.kind == PW_STORE_ENCODED {
                out.data = t.store_out.as_ptr();
                out.len = t.store_out.len();
            }
            found
        })
        .unwrap_or(false)
    })
}

/// put, or with `add` add: PW_STORE_STORED, PW_STORE_EXISTS (add found a live entry)
/// or PW_STORE_FULL. `ttl` is in seconds, 0 for no expiry.
///
/// # Safety
/// `key` is valid for `key_len` bytes; `value` and its bytes are readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pw_rs_store_put(
    shared: bool,
    key: *const c_char,
    key_len: usize,
    value: *const StoreValue,
    ttl: i64,
    add: bool,
) -> i32 {
    guard(PW_STORE_FULL, || {
        // SAFETY: the function's contract: `key` is valid for `key_len` bytes.
        let key = unsafe { bytes(key, key_len) };
        // SAFETY: the function's contract: `value` is readable for the call.
        let value = unsafe { &*value };
        // The copy is made before any lock is taken.
        let value = match value.kind {
            PW_STORE_INT => Value::Int(value.integer),
            // SAFETY: an ENCODED value's `data` is valid for `len` bytes for the call (the seam's contract).
            _ => Value::Encoded(unsafe { bytes(value.data.cast(), value.len) }.into()),
        };
        let now = since_epoch();
        let expires = expiry(now, ttl);
        let stored = if shared {
            SHARED.insert(key, value, expires, add, now)
        } else {
            try_with_thread(|t| {
                let (table, budget) = t.local_store.parts();
                table.insert(key, value, expires, add, now, budget)
            })
            .unwrap_or(Stored::Full)
        };
        match stored {
            Stored::Yes => PW_STORE_STORED,
            Stored::Exists => PW_STORE_EXISTS,
            Stored::Full => {
                warn_full(shared, key);
                PW_STORE_FULL
            }
        }
    })
}

/// Adds `by` to an integer entry (a missing one starts at 0); the result goes to `*out`.
///
/// # Safety
/// `key` is valid for `key_len` bytes; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pw_rs_store_increment(shared: bool, key: *const c_char, key_len: usize, by: i64, out: *mut i64) -> i32 {
    guard(PW_INCREMENT_FULL, || {
        // SAFETY: the function's contract: `key` is valid for `key_len` bytes.
        let key = unsafe { bytes(key, key_len) };
        let now = since_epoch();
        let result = if shared {
            SHARED.increment(key, by, now)
        } else {
            try_with_thread(|t| {
                let (table, budget) = t.local_store.parts();
                table.increment(key, by, now, budget)
            })
            .unwrap_or(Err(NotIncremented::Full))
        };
        match result {
            Ok(n) => {
                // SAFETY: the function's contract: `out` is writable.
                unsafe { *out = n };
                PW_INCREMENT_OK
            }
            Err(NotIncremented::NotInteger) => PW_INCREMENT_NOT_INTEGER,
            Err(NotIncremented::Overflow) => PW_INCREMENT_OVERFLOW,
            Err(NotIncremented::Full) => {
                warn_full(shared, key);
                PW_INCREMENT_FULL
            }
        }
    })
}

/// Gives the live entry of `key` a new time to live (`ttl` seconds from now, 0 for
/// never), keeping its value; true when there was one.
///
/// # Safety
/// `key` is valid for `key_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pw_rs_store_touch(shared: bool, key: *const c_char, key_len: usize, ttl: i64) -> bool {
    guard(false, || {
        // SAFETY: the function's contract: `key` is valid for `key_len` bytes.
        let key = unsafe { bytes(key, key_len) };
        let now = since_epoch();
        let expires = expiry(now, ttl);
        if shared {
            SHARED.touch(key, expires, now)
        } else {
            try_with_thread(|t| t.local_store.parts().0.touch(key, expires, now)).unwrap_or(false)
        }
    })
}

/// Removes `key`; true when a live entry had it.
///
/// # Safety
/// `key` is valid for `key_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pw_rs_store_forget(shared: bool, key: *const c_char, key_len: usize) -> bool {
    guard(false, || {
        // SAFETY: the function's contract: `key` is valid for `key_len` bytes.
        let key = unsafe { bytes(key, key_len) };
        let now = since_epoch();
        if shared {
            SHARED.forget(key, now)
        } else {
            try_with_thread(|t| {
                let (table, budget) = t.local_store.parts();
                table.forget(key, now, budget)
            })
            .unwrap_or(false)
        }
    })
}

/// Removes every entry.
#[unsafe(no_mangle)]
pub extern "C" fn pw_rs_store_flush(shared: bool) {
    guard((), || {
        if shared {
            SHARED.flush();
        } else {
            try_with_thread(|t| {
                let (table, budget) = t.local_store.parts();
                table.flush(budget);
            });
        }
    })
}

/// Live entries.
#[unsafe(no_mangle)]
pub extern "C" fn pw_rs_store_count(shared: bool) -> usize {
    guard(0, || {
        let now = since_epoch();
        if shared { SHARED.count(now) } else { try_with_thread(|t| t.local_store.table.count(now)).unwrap_or(0) }
    })
}

/// Warns that a store is full, at most once every 10 s per store: a full store refuses
/// every put, and one line says it.
fn warn_full(shared: bool, key: &[u8]) {
    static LAST: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
    let now = since_epoch() + 10_000;
    let last = &LAST[shared as usize];
    let previous = last.load(Ordering::Relaxed);
    if previous != 0 && now < previous + 10_000 {
        return;
    }
    if last.compare_exchange(previous, now, Ordering::Relaxed, Ordering::Relaxed).is_err() {
        return;
    }
    let (store, setting) = if shared { ("shared", "shared_store_size") } else { ("local", "local_store_size") };
    log_unattached(Level::Warn, "a store is full: puts are refused until entries expire or are forgotten", &[
        ("store", store.into()),
        ("key", String::from_utf8_lossy(key).into_owned().into()),
        ("setting", setting.into()),
    ]);
}
