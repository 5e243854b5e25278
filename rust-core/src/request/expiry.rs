//! A request ended from outside its PHP thread: the watchdog (src/supervisor/watchdog.rs) answers
//! the client of a request stuck past its deadline while the PHP thread still holds it.
//!
//! The host's handle of a request is valid until the PHP thread sends DONE. [`Expiry`]
//! makes the watchdog's one call (PHP_WORKER_RESPONSE_EXPIRED) and that DONE exclusive:
//! the thread waits for an expiry in progress before it sends DONE, and the watchdog
//! expires only a request whose DONE has not started.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crate::abi::types::PHP_WORKER_RESPONSE_EXPIRED;
use crate::host::{Host, RunInfo};

const IDLE: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;
const EXPIRING: u8 = 3;
const EXPIRED: u8 = 4;

/// The expiry state of the request a PHP thread runs; one per thread, reused.
#[derive(Default)]
pub struct Expiry {
    state: AtomicU8,
    handle: AtomicUsize,
}

impl Expiry {
    /// The thread starts running the request `handle`.
    pub fn arm(&self, handle: usize) {
        self.handle.store(handle, Ordering::Relaxed);
        self.state.store(RUNNING, Ordering::Release);
    }

    /// The thread is about to send DONE: from now on the request cannot expire. Waits
    /// for an expiry in progress (one callback, short).
    pub fn disarm(&self) {
        loop {
            match self.state.compare_exchange(RUNNING, DONE, Ordering::AcqRel, Ordering::Acquire) {
                Err(EXPIRING) => std::thread::yield_now(),
                _ => return,
            }
        }
    }

    /// Whether the request expired (its client got 504 or a cut-off response).
    pub fn expired(&self) -> bool {
        self.state.load(Ordering::Acquire) == EXPIRED
    }

    /// The watchdog gives up on the request: the host answers its client (504, or cuts
    /// the response off) and drops what PHP sends later. False when the request is
    /// already done, or was not running.
    pub fn expire(&self, host: &Host) -> bool {
        if self.state.compare_exchange(RUNNING, EXPIRING, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return false;
        }
        host.respond(self.handle.load(Ordering::Relaxed), 0, &[], &[], PHP_WORKER_RESPONSE_EXPIRED, RunInfo::NONE);
        self.state.store(EXPIRED, Ordering::Release);
        true
    }

    /// The thread ran no request since.
    pub fn reset(&self) {
        self.state.store(IDLE, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{calls_for, recording_host};

    #[test]
    fn a_running_request_expires_once_and_a_done_one_never() {
        let (host, handle) = recording_host();
        let e = Expiry::default();
        assert!(!e.expire(&host), "nothing runs");
        e.arm(handle);
        assert!(e.expire(&host));
        assert!(!e.expire(&host), "once");
        assert!(e.expired());
        e.disarm(); // returns at once: the expiry is over
        let calls = calls_for(handle);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].flags, PHP_WORKER_RESPONSE_EXPIRED);

        e.arm(handle);
        e.disarm();
        assert!(!e.expire(&host), "DONE started: the handle may be gone");
        assert_eq!(calls_for(handle).len(), 1);
    }
}
