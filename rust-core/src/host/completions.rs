//! The last response call of each request, handed to the host through a queue instead
//! of the `respond` callback.
//!
//! A callback from a PHP thread into Go needs one of Go's Ps (its scheduler slots), and
//! Go leaves that P parked on the PHP thread after the callback returns, until its
//! monitor takes it back: under load the HTTP goroutines wait for Ps held by PHP threads
//! and the PHP threads wait for Ps held by HTTP goroutines. A completion is a plain
//! memory handoff instead: the PHP thread queues it (an owned copy of status, headers
//! and body) and, when the queue was empty, writes to an eventfd that one Go goroutine
//! waits on through Go's poller. That goroutine takes every queued completion at once.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use crate::abi::types::{CompletionEntry, Header, Response};

/// Which thread runs a request and how long it waited for it, as every response call
/// tells the host (for its traces).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunInfo {
    /// The thread's index, or -1.
    pub thread: i32,
    pub queued_us: u64,
}

impl RunInfo {
    /// A request no thread took.
    pub const NONE: RunInfo = RunInfo { thread: -1, queued_us: 0 };
}

/// Something a completion keeps alive until the host deleted its batch.
pub type KeepAlive = Arc<dyn std::any::Any + Send + Sync>;

/// One request's last response call, owned.
pub struct Completion {
    handle: usize,
    status: i32,
    /// The header names and values, back to back: `headers` point into it.
    #[cfg_attr(not(test), allow(dead_code, reason = "owns the bytes `headers` point into"))]
    header_text: Vec<u8>,
    headers: Vec<Header>,
    body: Vec<u8>,
    flags: u32,
    run: RunInfo,
    /// Keeps alive what the host's cancel handle points at (the request's run state):
    /// the request itself is gone once its completion is queued, and the host may cancel
    /// until it took the completion.
    _keep_alive: Option<KeepAlive>,
}

// SAFETY: the raw pointers in `headers` point into `header_text`, owned by the same
// completion, whose heap buffer does not move when the completion does.
unsafe impl Send for Completion {}

impl Completion {
    /// Takes ownership of a response's parts; `spans` are (name, name length, value,
    /// value length) offsets into `header_text`.
    #[allow(clippy::too_many_arguments, reason = "one per field of the response call it stands for")]
    pub fn new(
        handle: usize,
        status: i32,
        header_text: Vec<u8>,
        spans: &[[usize; 4]],
        body: Vec<u8>,
        flags: u32,
        keep_alive: Option<KeepAlive>,
        run: RunInfo,
    ) -> Completion {
        let base = header_text.as_ptr();
        let headers = spans
            .iter()
            .map(|&[n, nl, v, vl]| Header {
                // SAFETY: the spans index into header_text (RequestContext::add_header).
                name: unsafe { base.add(n) },
                name_len: nl,
                // SAFETY: as for `name`.
                value: unsafe { base.add(v) },
                value_len: vl,
            })
            .collect();
        Completion { handle, status, header_text, headers, body, flags, run, _keep_alive: keep_alive }
    }

    /// The host's view: the handle and the response, valid while the completion lives.
    pub fn entry(&self) -> CompletionEntry {
        CompletionEntry {
            handle: self.handle,
            response: Response {
                status: self.status,
                headers: self.headers.as_ptr(),
                headers_len: self.headers.len(),
                body: self.body.as_ptr(),
                body_len: self.body.len(),
                flags: self.flags,
                refusal: 0,
                retry_after_ms: 0,
                thread: self.run.thread,
                queued_us: self.run.queued_us,
            },
        }
    }

    /// The header buffer, for a test to compare.
    #[cfg(test)]
    pub fn header_text(&self) -> &[u8] {
        &self.header_text
    }
}

/// The queue and the eventfd that says it is not empty.
pub struct Completions {
    queue: Mutex<Vec<Completion>>,
    ready: OwnedFd,
}

impl Completions {
    pub fn new() -> std::io::Result<Completions> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nobody else.
        let ready = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Completions { queue: Mutex::new(Vec::new()), ready })
    }

    /// The eventfd the host waits on: readable while completions are queued (the host
    /// reads it, then takes them).
    pub fn fd(&self) -> i32 {
        self.ready.as_raw_fd()
    }

    /// Queues a completion; signals the host when the queue was empty (it takes all of
    /// them at once, so a busy queue costs one signal per batch).
    pub fn push(&self, completion: Completion) {
        let was_empty = {
            let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            queue.push(completion);
            queue.len() == 1
        };
        if was_empty {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a local to our own eventfd. It cannot fail
            // short of the counter's limit (2^64 - 2), which reads reset.
            unsafe { libc::write(self.ready.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }

    /// Takes every queued completion.
    pub fn take(&self) -> Vec<Completion> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eventfd_count(c: &Completions) -> u64 {
        let mut n: u64 = 0;
        // SAFETY: reads 8 bytes into a local from our own non-blocking eventfd.
        let r = unsafe { libc::read(c.fd(), (&mut n as *mut u64).cast(), 8) };
        if r == 8 { n } else { 0 }
    }

    #[test]
    fn a_batch_signals_once_and_keeps_its_parts() {
        let c = Completions::new().unwrap();
        let text = b"Content-Typetext/plainX-Ab".to_vec();
        let run = RunInfo { thread: 3, queued_us: 1500 };
        c.push(Completion::new(7, 201, text.clone(), &[[0, 12, 12, 10], [22, 3, 25, 1]], b"hello".to_vec(), 2, None, run));
        c.push(Completion::new(8, 200, Vec::new(), &[], Vec::new(), 2, None, RunInfo::NONE));
        assert_eq!(eventfd_count(&c), 1, "one signal for a queue that was empty");
        assert_eq!(eventfd_count(&c), 0);
        let batch = c.take();
        assert_eq!(batch.len(), 2);
        let e = batch[0].entry();
        assert_eq!((e.handle, e.response.status, e.response.headers_len, e.response.flags), (7, 201, 2, 2));
        assert_eq!((e.response.thread, e.response.queued_us), (3, 1500));
        // SAFETY: the entry's pointers live as long as batch[0].
        let (name, value, body) = unsafe {
            let h = &*e.response.headers.add(1);
            (
                std::slice::from_raw_parts(h.name, h.name_len),
                std::slice::from_raw_parts(h.value, h.value_len),
                std::slice::from_raw_parts(e.response.body, e.response.body_len),
            )
        };
        assert_eq!((name, value, body), (&b"X-A"[..], &b"b"[..], &b"hello"[..]));
        assert_eq!(batch[0].header_text(), &text[..]);
        assert!(c.take().is_empty());
        c.push(Completion::new(9, 200, Vec::new(), &[], Vec::new(), 2, None, RunInfo::NONE));
        assert_eq!(eventfd_count(&c), 1, "an emptied queue signals again");
    }
}
