//! A host for tests: records every callback, serves a fixed request body.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex};
use std::time::{Duration, Instant};

use crate::abi::types::{Callbacks, PHP_WORKER_RESPONSE_DONE, Response};
use crate::host::Host;
use crate::layout::Strings;

#[derive(Debug, Clone)]
pub struct Call {
    pub handle: usize,
    pub status: i32,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub flags: u32,
    pub refusal: u32,
    pub retry_after_ms: u32,
    /// The index of the PHP thread running the request (-1: none), and how long the
    /// request waited for it.
    pub thread_index: i32,
    pub queued_us: u64,
    /// The name of the thread the callback ran on.
    pub thread: String,
}

#[derive(Default)]
pub struct Exchanges {
    pub calls: Mutex<Vec<Call>>,
    /// (handle, level, message, fields JSON)
    pub logs: Mutex<Vec<(usize, i32, String, String)>>,
    pub bodies: Mutex<HashMap<usize, Vec<u8>>>,
    /// Requests whose body fails (-1) once what `bodies` holds for them is read.
    pub failing_bodies: Mutex<HashSet<usize>>,
    pub done: Condvar,
}

pub static EXCHANGES: LazyLock<Exchanges> = LazyLock::new(Exchanges::default);

impl Exchanges {
    /// Whether every one of `handles` got its last response call.
    pub fn done_handles(&self, handles: &[usize]) -> bool {
        let calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        handles.iter().all(|&h| calls.iter().any(|c| c.handle == h && c.flags & PHP_WORKER_RESPONSE_DONE != 0))
    }
}

// The callbacks below get what the core lends for the call, as php_worker_callbacks_t
// says: a response with `headers_len` headers, and strings and buffers of the lengths given.
unsafe extern "C" fn respond(handle: usize, r: *const Response) -> i32 {
    // SAFETY: the core lends the response for the call.
    let r = unsafe { &*r };
    // SAFETY: each string of the response is valid for its length for the call.
    let text = |p: *const u8, n: usize| String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(p, n) }).into_owned();
    let headers = (0..r.headers_len)
        .map(|i| {
            // SAFETY: `headers` holds `headers_len` headers.
            let h = unsafe { &*r.headers.add(i) };
            (text(h.name, h.name_len), text(h.value, h.value_len))
        })
        .collect();
    // SAFETY: the body is valid for `body_len` bytes for the call.
    let body = if r.body_len == 0 { Vec::new() } else { unsafe { std::slice::from_raw_parts(r.body, r.body_len) }.to_vec() };
    EXCHANGES.calls.lock().unwrap_or_else(|e| e.into_inner()).push(Call {
        handle,
        status: r.status,
        headers,
        body,
        flags: r.flags,
        refusal: r.refusal,
        retry_after_ms: r.retry_after_ms,
        thread_index: r.thread,
        queued_us: r.queued_us,
        thread: std::thread::current().name().unwrap_or("").to_owned(),
    });
    EXCHANGES.done.notify_all();
    0
}

unsafe extern "C" fn read_body(handle: usize, buf: *mut u8, len: usize) -> i64 {
    let mut bodies = EXCHANGES.bodies.lock().unwrap();
    let body = bodies.entry(handle).or_insert_with(|| b"defgh".to_vec());
    if body.is_empty() && EXCHANGES.failing_bodies.lock().unwrap().contains(&handle) {
        return -1;
    }
    let n = body.len().min(len);
    // SAFETY: `buf` is writable for `len` bytes, and n <= len.
    unsafe { std::ptr::copy_nonoverlapping(body.as_ptr(), buf, n) };
    body.drain(..n);
    n as i64
}

unsafe extern "C" fn log(handle: usize, level: i32, msg: *const u8, len: usize, fields: *const u8, fields_len: usize) {
    // SAFETY: the message is valid for `len` bytes for the call.
    let msg = String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(msg, len) }).into_owned();
    // SAFETY: the fields are valid for `fields_len` bytes for the call.
    let fields = String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(fields, fields_len) }).into_owned();
    EXCHANGES.logs.lock().unwrap_or_else(|e| e.into_inner()).push((handle, level, msg, fields));
}

pub fn test_host() -> Arc<Host> {
    let callbacks = Callbacks { respond: Some(respond), read_body: Some(read_body), log: Some(log), shared_store: None };
    // SAFETY: the callbacks above follow the contract.
    Arc::new(unsafe { Host::new(callbacks, Strings::from_process_env()) })
}

/// A host that takes requests' last response calls as completions.
pub fn completing_host() -> Arc<Host> {
    let callbacks = Callbacks { respond: Some(respond), read_body: Some(read_body), log: Some(log), shared_store: None };
    // SAFETY: the callbacks above follow the contract.
    let mut host = unsafe { Host::new(callbacks, Strings::from_process_env()) };
    host.enable_completions().expect("an eventfd");
    Arc::new(host)
}

/// A unique handle per test, so parallel tests read only their own calls.
pub fn new_handle() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

pub fn recording_host() -> (Arc<Host>, usize) {
    (test_host(), new_handle())
}

pub fn calls_for(handle: usize) -> Vec<Call> {
    EXCHANGES.calls.lock().unwrap().iter().filter(|c| c.handle == handle).cloned().collect()
}

/// The calls of `handle` once its DONE call came; fails after 20 s.
pub fn wait_done(handle: usize, what: &str) -> Vec<Call> {
    let mut calls = EXCHANGES.calls.lock().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !calls.iter().any(|c| c.handle == handle && c.flags & PHP_WORKER_RESPONSE_DONE != 0) {
        assert!(Instant::now() < deadline, "no response for {what}");
        calls = EXCHANGES.done.wait_timeout(calls, Duration::from_millis(100)).unwrap().0;
    }
    calls.iter().filter(|c| c.handle == handle).cloned().collect()
}

/// Whether a log line containing `text` came within `timeout`.
pub fn wait_log(text: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if EXCHANGES.logs.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|(_, _, m, f)| m.contains(text) || f.contains(text)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn body(calls: &[Call]) -> String {
    String::from_utf8_lossy(&calls.iter().flat_map(|c| c.body.clone()).collect::<Vec<_>>()).into_owned()
}

/// Writes a PHP script into this test process's temp directory.
pub fn script(name: &str, src: &str) -> String {
    let dir = std::env::temp_dir().join(format!("php_worker_engine_tests_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, src).unwrap();
    path.to_string_lossy().into_owned()
}
