//! Stopping PHP threads before any of them started a request. PHP installs its SIGRTMIN
//! handler (the timeout signal the engine stops scripts with) at a thread's first
//! request startup; before that the signal's default action ends the process. An engine
//! that stops right after it started (a config whose worker the core refuses, a stop
//! during start) must not send it. Its own test binary: a process where no PHP request
//! ever started.

use std::sync::Arc;
use std::time::{Duration, Instant};

use php_worker::abi::types::{Callbacks, Response};
use php_worker::config::EngineConfig;
use php_worker::supervisor::engine::{CLASSIC, Engine};
use php_worker::host::Host;
use php_worker::layout::Strings;
use php_worker::runtime::info::ThreadState;

unsafe extern "C" fn respond(_handle: usize, _response: *const Response) -> i32 {
    0
}

unsafe extern "C" fn read_body(_handle: usize, _buf: *mut u8, _len: usize) -> i64 {
    0
}

unsafe extern "C" fn log(_handle: usize, _level: i32, _msg: *const u8, _len: usize, _fields: *const u8, _fields_len: usize) {}

#[test]
fn threads_that_never_started_a_request_are_not_signalled() {
    let callbacks = Callbacks { respond: Some(respond), read_body: Some(read_body), log: Some(log), shared_store: None };
    // SAFETY: the callbacks above follow the contract (they touch nothing).
    let host = Arc::new(unsafe { Host::new(callbacks, Strings::from_process_env()) });
    let engine = Engine::start(&EngineConfig::from_json(b"{}").unwrap(), host).unwrap();
    engine.pool(CLASSIC).unwrap().resize(3, false).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while engine.threads().iter().filter(|t| t.state() == ThreadState::Ready).count() < 3 {
        assert!(Instant::now() < deadline, "the classic threads did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Before the fix, the first of these ended the test process with signal 34.
    let signalled = engine.threads().iter().filter(|t| t.kill()).count();
    assert_eq!(signalled, 0, "no thread has a script to stop, and PHP has no handler for the signal yet");
    engine.shutdown(Duration::ZERO);
}
