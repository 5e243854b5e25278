//! The hooks behind the php_worker_local_* and php_worker_shared_* PHP functions
//! (csrc/store.c), on the calling PHP thread, whose local store they reach: the stores
//! themselves are src/store/. The C side checks the arguments and turns PHP values into
//! a [`StoreValue`] and back; these hooks run in the panic guard and never call PHP.
//!
//! A value read from a store is copied, under the shard's lock for the shared table, into
//! the calling thread's buffer; C copies it again into PHP memory before it decodes it,
//! because decoding an object can run PHP code that uses the stores again.

use std::ffi::c_char;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::info::since_epoch;
use super::thread::try_with_thread;
use crate::host::{Level, RemoteHost, log_unattached, with_thread_host};
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

// ---- the shared table of another process ---------------------------------------------
//
// With the host's `shared_store` callback (php_worker's child processes), the shared
// table is the Caddy process's: each operation is encoded, handed to the host, and run
// there by php_worker_shared_store_run() ([`run_shared`]). Little-endian:
//   operation: op u8, 3 bytes of padding, kind i32, integer i64, ttl i64, key length
//              u32, the key, then the value's bytes;
//   reply:     status i32, kind i32, integer i64, then the value's bytes.
// The status is what the hook returns (found, stored, an increment's result...); an
// increment's `by` and its result travel as `integer`, a count as the reply's integer.

const OP_GET: u8 = 1;
const OP_PUT: u8 = 2;
const OP_ADD: u8 = 3;
const OP_INCREMENT: u8 = 4;
const OP_TOUCH: u8 = 5;
const OP_FORGET: u8 = 6;
const OP_FLUSH: u8 = 7;
const OP_COUNT: u8 = 8;

const OP_HEAD: usize = 28;
const REPLY_HEAD: usize = 16;

type RemoteFn = unsafe extern "C" fn(*const u8, usize, *mut *mut u8, *mut usize) -> i32;

/// The host's `shared_store` callback, as an address; 0 when the table is local.
static REMOTE: AtomicUsize = AtomicUsize::new(0);

/// Sets where the shared table lives, from an engine's callbacks (a process has one).
pub fn set_remote(f: Option<RemoteFn>) {
    REMOTE.store(f.map_or(0, |f| f as usize), Ordering::Release);
}

/// Where the shared table of another process is reached.
enum Remote {
    /// The host's `shared_store` callback.
    Callback(RemoteFn),
    /// The calling thread's host in another process (a child's wire).
    Host(Arc<dyn RemoteHost>),
}

fn remote() -> Option<Remote> {
    if let Some(host) = with_thread_host(|h| h.remote().cloned()).flatten() {
        return Some(Remote::Host(host));
    }
    match REMOTE.load(Ordering::Acquire) {
        0 => None,
        // SAFETY: a non-zero value is a RemoteFn stored by set_remote.
        addr => Some(Remote::Callback(unsafe { std::mem::transmute::<usize, RemoteFn>(addr) })),
    }
}

/// An encoded operation.
fn encode_op(op: u8, key: &[u8], kind: i32, integer: i64, ttl: i64, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(OP_HEAD + key.len() + data.len());
    out.extend_from_slice(&[op, 0, 0, 0]);
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&integer.to_le_bytes());
    out.extend_from_slice(&ttl.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(data);
    out
}

/// A reply: status, kind, integer, the value's bytes.
struct Reply {
    status: i32,
    kind: i32,
    integer: i64,
    data: Vec<u8>,
}

fn encode_reply(status: i32, kind: i32, integer: i64, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(REPLY_HEAD + data.len());
    out.extend_from_slice(&status.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&integer.to_le_bytes());
    out.extend_from_slice(data);
    out
}

fn decode_reply(b: &[u8]) -> Option<Reply> {
    if b.len() < REPLY_HEAD {
        return None;
    }
    Some(Reply {
        status: i32::from_le_bytes(b[0..4].try_into().ok()?),
        kind: i32::from_le_bytes(b[4..8].try_into().ok()?),
        integer: i64::from_le_bytes(b[8..16].try_into().ok()?),
        data: b[REPLY_HEAD..].to_vec(),
    })
}

/// Sends an operation to the host's table; None when it cannot be reached.
fn call_remote(f: Remote, op: u8, key: &[u8], kind: i32, integer: i64, ttl: i64, data: &[u8]) -> Option<Reply> {
    let request = encode_op(op, key, kind, integer, ttl, data);
    let f = match f {
        Remote::Host(host) => return decode_reply(&host.shared_store(&request)?),
        Remote::Callback(f) => f,
    };
    let mut reply: *mut u8 = std::ptr::null_mut();
    let mut len = 0usize;
    // SAFETY: the callback's contract (php_worker_callbacks_t.shared_store): it reads
    // `request` for the call and writes a malloc'd reply, or returns -1.
    let rc = unsafe { f(request.as_ptr(), request.len(), &mut reply, &mut len) };
    crate::host::block_host_signals();
    if rc != 0 || reply.is_null() {
        return None;
    }
    // SAFETY: the callback's contract: `reply` is valid for `len` bytes until freed.
    let decoded = decode_reply(unsafe { std::slice::from_raw_parts(reply, len) });
    // SAFETY: the callback allocated it with malloc, and it is freed once.
    unsafe { libc::free(reply.cast()) };
    decoded
}

/// Runs an encoded operation on this process's shared table (for another process's PHP
/// threads): the encoded reply, or None for a malformed operation.
pub fn run_shared(b: &[u8]) -> Option<Vec<u8>> {
    if b.len() < OP_HEAD {
        return None;
    }
    let op = b[0];
    let kind = i32::from_le_bytes(b[4..8].try_into().ok()?);
    let integer = i64::from_le_bytes(b[8..16].try_into().ok()?);
    let ttl = i64::from_le_bytes(b[16..24].try_into().ok()?);
    let key_len = u32::from_le_bytes(b[24..28].try_into().ok()?) as usize;
    let key = b.get(OP_HEAD..OP_HEAD.checked_add(key_len)?)?;
    let data = &b[OP_HEAD + key_len..];
    let now = since_epoch();
    Some(match op {
        OP_GET => {
            let found = SHARED.get(key, now, |v| match v {
                Value::Int(n) => encode_reply(1, PW_STORE_INT, *n, &[]),
                Value::Encoded(e) => encode_reply(1, PW_STORE_ENCODED, 0, e),
            });
            found.unwrap_or_else(|| encode_reply(0, 0, 0, &[]))
        }
        OP_PUT | OP_ADD => {
            let value = if kind == PW_STORE_INT { Value::Int(integer) } else { Value::Encoded(data.into()) };
            let status = match SHARED.insert(key, value, expiry(now, ttl), op == OP_ADD, now) {
                Stored::Yes => PW_STORE_STORED,
                Stored::Exists => PW_STORE_EXISTS,
                Stored::Full => {
                    warn_full(true, key);
                    PW_STORE_FULL
                }
            };
            encode_reply(status, 0, 0, &[])
        }
        OP_INCREMENT => match SHARED.increment(key, integer, now) {
            Ok(n) => encode_reply(PW_INCREMENT_OK, 0, n, &[]),
            Err(e) => encode_reply(increment_status(true, key, e), 0, 0, &[]),
        },
        OP_TOUCH => encode_reply(SHARED.touch(key, expiry(now, ttl), now) as i32, 0, 0, &[]),
        OP_FORGET => encode_reply(SHARED.forget(key, now) as i32, 0, 0, &[]),
        OP_FLUSH => {
            SHARED.flush();
            encode_reply(0, 0, 0, &[])
        }
        OP_COUNT => encode_reply(0, 0, SHARED.count(now) as i64, &[]),
        _ => return None,
    })
}

fn increment_status(shared: bool, key: &[u8], e: NotIncremented) -> i32 {
    match e {
        NotIncremented::NotInteger => PW_INCREMENT_NOT_INTEGER,
        NotIncremented::Overflow => PW_INCREMENT_OVERFLOW,
        NotIncremented::Full => {
            warn_full(shared, key);
            PW_INCREMENT_FULL
        }
    }
}

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
            if let (true, Some(f)) = (shared, remote()) {
                let Some(reply) = call_remote(f, OP_GET, key, 0, 0, 0, &[]).filter(|r| r.status == 1) else {
                    return false;
                };
                out.kind = reply.kind;
                out.integer = reply.integer;
                if reply.kind == PW_STORE_ENCODED {
                    *buffer = reply.data;
                    out.data = buffer.as_ptr();
                    out.len = buffer.len();
                }
                return true;
            }
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
        if let (true, Some(f)) = (shared, remote()) {
            let op = if add { OP_ADD } else { OP_PUT };
            let data: &[u8] = if value.kind == PW_STORE_INT {
                &[]
            } else {
                // SAFETY: an ENCODED value's `data` is valid for `len` bytes for the call (the seam's contract).
                unsafe { bytes(value.data.cast(), value.len) }
            };
            return call_remote(f, op, key, value.kind, value.integer, ttl, data).map_or(PW_STORE_FULL, |r| r.status);
        }
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
        if let (true, Some(f)) = (shared, remote()) {
            let Some(reply) = call_remote(f, OP_INCREMENT, key, 0, by, 0, &[]) else {
                return PW_INCREMENT_FULL;
            };
            if reply.status == PW_INCREMENT_OK {
                // SAFETY: the function's contract: `out` is writable.
                unsafe { *out = reply.integer };
            }
            return reply.status;
        }
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
            Err(e) => increment_status(shared, key, e),
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
        if let (true, Some(f)) = (shared, remote()) {
            return call_remote(f, OP_TOUCH, key, 0, 0, ttl, &[]).is_some_and(|r| r.status == 1);
        }
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
        if let (true, Some(f)) = (shared, remote()) {
            return call_remote(f, OP_FORGET, key, 0, 0, 0, &[]).is_some_and(|r| r.status == 1);
        }
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
        if let (true, Some(f)) = (shared, remote()) {
            call_remote(f, OP_FLUSH, &[], 0, 0, 0, &[]);
        } else if shared {
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
        if let (true, Some(f)) = (shared, remote()) {
            return call_remote(f, OP_COUNT, &[], 0, 0, 0, &[]).map_or(0, |r| r.integer.max(0) as usize);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run(op: u8, key: &[u8], kind: i32, integer: i64, ttl: i64, data: &[u8]) -> Reply {
        decode_reply(&run_shared(&encode_op(op, key, kind, integer, ttl, data)).expect("well formed")).expect("a reply")
    }

    /// Every operation another process sends runs on this process's table and answers
    /// what the local hook would return.
    #[test]
    fn encoded_operations_run_on_the_shared_table() {
        let key = b"remote-test:key";
        assert_eq!(run(OP_GET, key, 0, 0, 0, &[]).status, 0, "missing");
        assert_eq!(run(OP_PUT, key, PW_STORE_ENCODED, 0, 0, b"abc").status, PW_STORE_STORED);
        let got = run(OP_GET, key, 0, 0, 0, &[]);
        assert_eq!((got.status, got.kind, got.data.as_slice()), (1, PW_STORE_ENCODED, &b"abc"[..]));
        assert_eq!(run(OP_ADD, key, PW_STORE_INT, 5, 0, &[]).status, PW_STORE_EXISTS);
        assert_eq!(run(OP_INCREMENT, key, 0, 1, 0, &[]).status, PW_INCREMENT_NOT_INTEGER);

        let counter = b"remote-test:counter";
        assert_eq!(run(OP_INCREMENT, counter, 0, 2, 0, &[]).integer, 2);
        let inc = run(OP_INCREMENT, counter, 0, 3, 0, &[]);
        assert_eq!((inc.status, inc.integer), (PW_INCREMENT_OK, 5));
        let got = run(OP_GET, counter, 0, 0, 0, &[]);
        assert_eq!((got.kind, got.integer), (PW_STORE_INT, 5));

        assert_eq!(run(OP_TOUCH, counter, 0, 0, 60, &[]).status, 1);
        assert!(run(OP_COUNT, &[], 0, 0, 0, &[]).integer >= 2);
        assert_eq!(run(OP_FORGET, counter, 0, 0, 0, &[]).status, 1);
        assert_eq!(run(OP_FORGET, counter, 0, 0, 0, &[]).status, 0, "gone");
        assert_eq!(run(OP_TOUCH, counter, 0, 0, 60, &[]).status, 0);

        assert!(run_shared(&[OP_GET]).is_none(), "a truncated operation");
        let mut long_key = encode_op(OP_GET, b"k", 0, 0, 0, &[]);
        long_key[24] = 200; // a key longer than the operation
        assert!(run_shared(&long_key).is_none());
        assert!(run_shared(&encode_op(99, b"k", 0, 0, 0, &[])).is_none(), "an unknown operation");
        assert!(decode_reply(&[0; 3]).is_none());
    }
}
