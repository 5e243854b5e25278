//! A child process's wire to the Caddy process (`processes N`), served by the core.
//!
//! The Caddy process hands a child its requests over one Unix stream socket and reads
//! the responses back (go-module/internal/cluster). In the child, the request path is
//! the core's: a reader thread of its own takes the submissions and queues them for the
//! PHP threads (it looks again a moment before it sleeps: see [`linger`]), and the PHP
//! threads write their responses, body reads, log lines and shared table operations to
//! the socket themselves. Go's runtime in the child only serves the control calls,
//! which the reader thread queues for it (php_worker_wire_call_next()). A request thus costs the child no call into Go and no
//! wake-up of a goroutine: a process whose Go runtime idles between requests would wake
//! its scheduler and its monitor thread for each of them.
//!
//! The frames' kinds and layouts are the PHP_WORKER_WIRE_* constants of the ABI.

pub mod frame;
pub mod linger;
pub mod link;

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crossbeam_channel::{Receiver, Sender, bounded};

use crate::abi::types::{
    PHP_WORKER_ERR_INTERNAL, PHP_WORKER_ERR_INVALID, PHP_WORKER_ERR_QUEUE_FULL, PHP_WORKER_ERR_STOPPED,
    PHP_WORKER_ERR_UNKNOWN_POOL, PHP_WORKER_RESPONSE_DONE, PHP_WORKER_WIRE_BODY, PHP_WORKER_WIRE_CALL,
    PHP_WORKER_WIRE_CANCEL, PHP_WORKER_WIRE_CANCELLED, PHP_WORKER_WIRE_CLIENT_GONE, PHP_WORKER_WIRE_LOG,
    PHP_WORKER_WIRE_MAX_FRAME, PHP_WORKER_WIRE_READ_BODY, PHP_WORKER_WIRE_RESPOND, PHP_WORKER_WIRE_STORE,
    PHP_WORKER_WIRE_STORE_REPLY, PHP_WORKER_WIRE_SUBMIT, PHP_WORKER_WIRE_SUBMIT_FAILED, PHP_WORKER_WIRE_TAKEN_SLOTS,
    Response,
};
use crate::error::{Error, Result};
use crate::host::{Level, RemoteHost, block_host_signals};
use crate::request::{Request, RunState, TakenMark};
use crate::supervisor::engine::Engine;
use frame::{FrameReader, ReadEnd, RespondPart, pack_log, response_parts, unpack_submit};
use linger::LingeringSocket;
use link::{Link, Refused};

/// The largest body piece one RESPOND frame carries: a PHP write of any size
/// (readfile() of a large file) crosses in pieces, at the wire's pace.
const RESPOND_PIECE: usize = 1 << 20;

/// The longest log message, and fields, a LOG frame carries: past it the message is cut
/// and the fields dropped (a line of megabytes helps no log reader).
const MAX_LOG_PART: usize = 1 << 20;

/// The process's wire: a child has one, for its life.
static WIRE: OnceLock<Arc<Wire>> = OnceLock::new();

/// The process's wire, once php_worker_wire_open() opened it.
pub fn current() -> Option<&'static Arc<Wire>> {
    WIRE.get()
}

/// A request the Caddy process handed this child, from its submission to its DONE.
struct Held {
    state: Arc<RunState>,
    /// The Caddy process said its client left.
    gone: AtomicBool,
    /// BODY frames for the PHP thread that asked (None: the body cannot be read).
    body_tx: Sender<Option<Vec<u8>>>,
    body_rx: Receiver<Option<Vec<u8>>>,
}

/// The control calls the reader thread took, for Go.
#[derive(Default)]
struct Calls {
    queue: VecDeque<(u64, Vec<u8>)>,
    ended: bool,
}

pub struct Wire {
    link: Link,
    /// The taken table: the Caddy process reads which requests a PHP thread took.
    taken: Taken,
    requests: Mutex<HashMap<u64, Arc<Held>>>,
    stores: Mutex<HashMap<u64, Sender<Vec<u8>>>>,
    next_store: AtomicU64,
    calls: Mutex<Calls>,
    /// An eventfd, readable while calls are queued or once the wire ended.
    calls_ready: OwnedFd,
    /// The engine submissions go to; None before it started and after it was deleted.
    engine: RwLock<Option<Arc<Engine>>>,
    /// The Caddy process logs debug lines.
    debug: AtomicBool,
}

/// Opens the process's wire on `socket` (the child's descriptor 3) and the taken table
/// `taken_fd` (its descriptor 4), and starts the reader thread. Takes both descriptors.
pub fn open(socket: OwnedFd, taken_fd: OwnedFd) -> Result<&'static Arc<Wire>> {
    let (wire, reading) = Wire::new(socket, taken_fd)?;
    WIRE.set(wire.clone()).map_err(|_| Error::Startup("the wire to the Caddy process is open already".into()))?;
    wire.start(reading)?;
    WIRE.get().ok_or(Error::Startup("the wire to the Caddy process".into()))
}

fn startup(what: &str, e: std::io::Error) -> Error {
    Error::Startup(format!("the wire to the Caddy process: {what}: {e}"))
}

impl Wire {
    /// A wire on `socket` and the taken table, and the descriptor its reader reads.
    fn new(socket: OwnedFd, taken_fd: OwnedFd) -> Result<(Arc<Wire>, OwnedFd)> {
        // Blocking, close-on-exec: a program a script starts never holds the wire.
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            let flags = libc::fcntl(socket.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(socket.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK);
            libc::fcntl(socket.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC);
        }
        let reading = socket.try_clone().map_err(|e| startup("dup", e))?;
        let taken = Taken::map(&taken_fd).map_err(|e| startup("mapping the taken table", e))?;
        drop(taken_fd);
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(startup("eventfd", std::io::Error::last_os_error()));
        }
        let wire = Wire {
            link: Link::new(socket).map_err(|e| startup("its writer thread", e))?,
            taken,
            requests: Mutex::default(),
            stores: Mutex::default(),
            next_store: AtomicU64::new(0),
            calls: Mutex::default(),
            // SAFETY: `efd` was just created and is owned by nobody else.
            calls_ready: unsafe { OwnedFd::from_raw_fd(efd) },
            engine: RwLock::new(None),
            debug: AtomicBool::new(false),
        };
        Ok((Arc::new(wire), reading))
    }

    /// Starts the reader thread on `reading`.
    fn start(self: &Arc<Self>, reading: OwnedFd) -> Result<()> {
        let serving = self.clone();
        std::thread::Builder::new()
            .name("php_worker wire".into())
            .spawn(move || {
                block_host_signals();
                let end = catch_unwind(AssertUnwindSafe(|| serving.serve(FrameReader::new(LingeringSocket::new(reading)))));
                if end.is_err() {
                    serving.post_log(Level::Error, "the wire's reader failed (a panic); this PHP process ends");
                }
                serving.end();
            })
            .map(drop)
            .map_err(|e| startup("its reader thread", e))
    }

    /// Submissions go to `engine` from now on.
    pub fn attach(&self, engine: Arc<Engine>) {
        *self.engine.write().unwrap_or_else(|e| e.into_inner()) = Some(engine);
    }

    /// Submissions to `engine` fail from now on (PHP_WORKER_ERR_STOPPED). Returns once no
    /// submission is in progress, so the engine may be dropped.
    pub fn detach(&self, engine: &Arc<Engine>) {
        let mut attached = self.engine.write().unwrap_or_else(|e| e.into_inner());
        if attached.as_ref().is_some_and(|a| Arc::ptr_eq(a, engine)) {
            *attached = None;
        }
    }

    pub fn set_debug(&self, on: bool) {
        self.debug.store(on, Ordering::Relaxed);
    }

    /// Sends a frame for Go (control call replies, its log lines); false when the wire
    /// is closed or the payload too large.
    pub fn send(&self, kind: u8, id: u64, payload: &[u8]) -> bool {
        self.link.send(kind, id, |dst| dst.extend_from_slice(payload)).is_ok()
    }

    /// The eventfd Go waits on for control calls.
    pub fn calls_fd(&self) -> i32 {
        self.calls_ready.as_raw_fd()
    }

    /// The next control call; Err(()) once the wire ended and none is left.
    #[allow(clippy::result_unit_err, reason = "the one way it fails is the wire's end")]
    pub fn next_call(&self) -> std::result::Result<Option<(u64, Vec<u8>)>, ()> {
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        match calls.queue.pop_front() {
            Some(call) => Ok(Some(call)),
            None if calls.ended => Err(()),
            None => Ok(None),
        }
    }

    fn signal_calls(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local to our own eventfd.
        unsafe { libc::write(self.calls_ready.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn held(&self, handle: u64) -> Option<Arc<Held>> {
        self.requests.lock().unwrap_or_else(|e| e.into_inner()).get(&handle).cloned()
    }

    fn forget(&self, handle: u64) -> Option<Arc<Held>> {
        self.requests.lock().unwrap_or_else(|e| e.into_inner()).remove(&handle)
    }

    /// Reads frames until the wire ends.
    fn serve<R: std::io::Read>(&self, mut reader: FrameReader<R>) {
        loop {
            let (kind, id, payload) = match reader.next_frame() {
                Ok(frame) => frame,
                Err(ReadEnd::Closed(_)) => return,
                Err(ReadEnd::TooLarge(n)) => {
                    self.post_log(Level::Error, &format!("the Caddy process sent a frame of {n} bytes, past the wire's limit; this PHP process ends"));
                    return;
                }
            };
            match kind {
                PHP_WORKER_WIRE_SUBMIT => {
                    if let Err(code) = self.submit(id, payload) {
                        let _ = self.link.post(PHP_WORKER_WIRE_SUBMIT_FAILED, id, |d| d.extend_from_slice(&(code as u32).to_le_bytes()));
                    }
                }
                PHP_WORKER_WIRE_CANCEL => {
                    let withdrawn = self.held(id).is_some_and(|h| h.state.cancel());
                    let _ = self.link.post(PHP_WORKER_WIRE_CANCELLED, id, |d| d.push(u8::from(withdrawn)));
                }
                PHP_WORKER_WIRE_BODY => {
                    if let (Some(held), true) = (self.held(id), payload.len() >= 8) {
                        let count = i64::from_le_bytes(payload[0..8].try_into().unwrap_or_default());
                        let chunk = (count >= 0).then(|| payload[8..].to_vec());
                        let _ = held.body_tx.try_send(chunk);
                    }
                }
                PHP_WORKER_WIRE_CLIENT_GONE => {
                    if let Some(held) = self.held(id) {
                        held.gone.store(true, Ordering::Release);
                        held.state.mark_client_gone();
                    }
                }
                PHP_WORKER_WIRE_STORE_REPLY => {
                    if let Some(tx) = self.stores.lock().unwrap_or_else(|e| e.into_inner()).remove(&id) {
                        let _ = tx.try_send(payload.to_vec());
                    }
                }
                PHP_WORKER_WIRE_CALL => {
                    let was_empty = {
                        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
                        calls.queue.push_back((id, payload.to_vec()));
                        calls.queue.len() == 1
                    };
                    if was_empty {
                        self.signal_calls();
                    }
                }
                _ => {
                    self.post_log(Level::Error, &format!("the Caddy process sent a frame of unknown kind {kind}; this PHP process ends"));
                    return;
                }
            }
        }
    }

    /// Queues a submission for its pool; Err with a PHP_WORKER_ERR_* code when it was
    /// not taken (the Caddy process answers it).
    fn submit(&self, handle: u64, payload: &[u8]) -> std::result::Result<(), i32> {
        let s = unpack_submit(payload).ok_or(PHP_WORKER_ERR_INVALID)?;
        let engine = self.engine.read().unwrap_or_else(|e| e.into_inner());
        let engine = engine.as_ref().ok_or(PHP_WORKER_ERR_STOPPED)?;
        let mut request = Request::new(
            engine.host().clone(),
            s.strings,
            &s.spans,
            s.env_pairs,
            s.body_len,
            s.content_length,
            s.flags,
            handle as usize,
        )
        .map_err(|_| PHP_WORKER_ERR_INVALID)?;
        if let Some(mark) = self.taken.mark(s.slot) {
            request.set_taken_mark(mark);
        }
        let (body_tx, body_rx) = bounded(1);
        let held = Arc::new(Held { state: request.run_state_ref(), gone: AtomicBool::new(false), body_tx, body_rx });
        // Held before the engine has it: a PHP thread may answer before submit returns.
        self.requests.lock().unwrap_or_else(|e| e.into_inner()).insert(handle, held);
        engine.submit(s.pool, request).map_err(|e| {
            self.forget(handle);
            match e {
                Error::Stopped => PHP_WORKER_ERR_STOPPED,
                Error::QueueFull => PHP_WORKER_ERR_QUEUE_FULL,
                Error::UnknownPool(_) => PHP_WORKER_ERR_UNKNOWN_POOL,
                Error::InvalidRequest(_) => PHP_WORKER_ERR_INVALID,
                _ => PHP_WORKER_ERR_INTERNAL,
            }
        })
    }

    /// The wire ended (the Caddy process is gone or done with this child): nothing more
    /// leaves, every wait on the Caddy process ends, and Go learns it.
    fn end(&self) {
        self.link.close();
        let held: Vec<_> = self.requests.lock().unwrap_or_else(|e| e.into_inner()).drain().map(|(_, h)| h).collect();
        for h in held {
            let _ = h.body_tx.try_send(None);
        }
        self.stores.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).ended = true;
        self.signal_calls();
    }

    /// Sends one RESPOND frame of a response whose flags (DONE) are `flags`; on a
    /// refusal, what the `respond` call returns, once nothing more may be sent of it.
    fn respond_part(&self, handle: u64, part: &RespondPart<'_>, flags: u32) -> std::result::Result<(), bool> {
        match self.link.send(PHP_WORKER_WIRE_RESPOND, handle, |d| part.pack(d)) {
            Ok(()) => Ok(()),
            Err(Refused::Closed) => Err(false),
            Err(Refused::TooLarge) => {
                // Only headers of tens of MiB make one: the request still ends, as a 500
                // if nothing left yet, with the response's DONE.
                self.log(handle as usize, Level::Error, "a response part is too large to cross to the Caddy process; the response ends here",
                    &format!("{{\"headers\":{},\"limit\":{}}}", part.headers.len(), PHP_WORKER_WIRE_MAX_FRAME));
                let end = RespondPart {
                    status: if part.status != 0 { 500 } else { 0 },
                    flags: flags & PHP_WORKER_RESPONSE_DONE,
                    refusal: 0,
                    retry_after_ms: 0,
                    thread: -1,
                    queued_us: 0,
                    headers: &[],
                    body: &[],
                };
                let _ = self.link.send(PHP_WORKER_WIRE_RESPOND, handle, |d| end.pack(d));
                Err(false)
            }
        }
    }

    /// A LOG frame: sent (the caller waits until it left) or, from the reader thread,
    /// posted.
    fn log_frame(&self, handle: usize, level: Level, message: &str, fields: &str, post: bool) {
        if level == Level::Debug && !self.debug.load(Ordering::Relaxed) {
            return;
        }
        let cut;
        let message = if message.len() > MAX_LOG_PART {
            let mut end = MAX_LOG_PART;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            cut = format!("{}… [{} bytes cut]", &message[..end], message.len() - end);
            &cut
        } else {
            message
        };
        let fields = if fields.len() > MAX_LOG_PART { "" } else { fields };
        let fill = |d: &mut Vec<u8>| pack_log(d, level, message, fields);
        let _ = if post { self.link.post(PHP_WORKER_WIRE_LOG, handle as u64, fill) } else { self.link.send(PHP_WORKER_WIRE_LOG, handle as u64, fill) };
    }

    /// A log line of the reader thread's, which never waits on the Caddy process.
    fn post_log(&self, level: Level, message: &str) {
        self.log_frame(0, level, message, "", true);
    }
}

impl RemoteHost for Wire {
    fn respond(&self, handle: usize, r: &Response) -> bool {
        let handle = handle as u64;
        // Forgotten before the DONE leaves: the Caddy process may reuse the handle once
        // it has it.
        let held = if r.flags & PHP_WORKER_RESPONSE_DONE != 0 { self.forget(handle) } else { self.held(handle) };
        let gone = || held.as_ref().is_some_and(|h| h.gone.load(Ordering::Acquire));
        // SAFETY: the `respond` contract: the response's pointers are valid for the call.
        let (headers, body) = unsafe { response_parts(r) };
        let mut part = RespondPart {
            status: r.status,
            flags: r.flags,
            refusal: r.refusal,
            retry_after_ms: r.retry_after_ms,
            thread: r.thread,
            queued_us: r.queued_us,
            headers: &headers,
            body,
        };
        // The status, the headers and the thread go with the first piece, the flags (DONE,
        // a flush) with the last.
        while part.body.len() > RESPOND_PIECE {
            let first = RespondPart { flags: 0, body: &part.body[..RESPOND_PIECE], ..part };
            if let Err(ret) = self.respond_part(handle, &first, r.flags) {
                return ret;
            }
            part = RespondPart { status: 0, headers: &[], thread: -1, queued_us: 0, body: &part.body[RESPOND_PIECE..], ..part };
            if gone() {
                part.body = &[]; // nobody reads the rest; the flags still go
            }
        }
        if let Err(ret) = self.respond_part(handle, &part, r.flags) {
            return ret;
        }
        !gone()
    }

    fn read_body(&self, handle: usize, buf: &mut [u8]) -> Option<usize> {
        let handle = handle as u64;
        let held = self.held(handle)?;
        let want = buf.len().min(PHP_WORKER_WIRE_MAX_FRAME as usize - 8) as u32;
        self.link.send(PHP_WORKER_WIRE_READ_BODY, handle, |d| d.extend_from_slice(&want.to_le_bytes())).ok()?;
        let chunk = held.body_rx.recv().ok()??;
        let n = chunk.len().min(buf.len());
        buf[..n].copy_from_slice(&chunk[..n]);
        Some(n)
    }

    fn log(&self, handle: usize, level: Level, message: &str, fields: &str) {
        self.log_frame(handle, level, message, fields, false);
    }

    fn shared_store(&self, request: &[u8]) -> Option<Vec<u8>> {
        if request.len() > PHP_WORKER_WIRE_MAX_FRAME as usize {
            // One frame carries the operation; in one process the table takes values up
            // to its capacity, here up to the wire's frame.
            self.log(0, Level::Warn, "a shared table value is too large to cross to the Caddy process; the write fails",
                &format!("{{\"bytes\":{},\"limit\":{}}}", request.len(), PHP_WORKER_WIRE_MAX_FRAME));
            return None;
        }
        let id = self.next_store.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = bounded(1);
        self.stores.lock().unwrap_or_else(|e| e.into_inner()).insert(id, tx);
        if self.link.send(PHP_WORKER_WIRE_STORE, id, |d| d.extend_from_slice(request)).is_err() {
            self.stores.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            return None;
        }
        rx.recv().ok().filter(|reply| !reply.is_empty())
    }
}

/// The taken table, mapped (see PHP_WORKER_WIRE_TAKEN_SLOTS).
struct Taken {
    words: *mut u64,
}

// SAFETY: the mapping lives as long as the process's wire (never unmapped), and its
// words are only accessed atomically (TakenMark).
unsafe impl Send for Taken {}
// SAFETY: as for Send.
unsafe impl Sync for Taken {}

impl Taken {
    fn map(fd: &OwnedFd) -> std::io::Result<Taken> {
        let len = PHP_WORKER_WIRE_TAKEN_SLOTS as usize * 8;
        // SAFETY: a new shared mapping of the memfd; the result is checked.
        let mem = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if mem == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Taken { words: mem.cast() })
    }

    /// The mark of a request in `slot`; None for a request without one.
    fn mark(&self, slot: u32) -> Option<TakenMark> {
        if slot >= PHP_WORKER_WIRE_TAKEN_SLOTS {
            return None;
        }
        // SAFETY: within the mapping, 8-byte aligned (a page-aligned mapping of u64s),
        // valid for the process's life; the Caddy process only reads it meanwhile.
        unsafe { TakenMark::new(self.words.add(slot as usize)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::types::{Header, PHP_WORKER_RESPONSE_FLUSH, PHP_WORKER_WIRE_REPLY, PHP_WORKER_WIRE_RESPOND_HEAD, PHP_WORKER_WIRE_SUBMIT_HEAD};
    use std::io::{Read, Write};

    /// A wire served by its reader thread, and the Caddy process's end of it.
    fn wire() -> (Arc<Wire>, std::fs::File) {
        let (ours, theirs) = link::tests::socket_pair();
        // SAFETY: memfd_create takes a NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(c"taken".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: `fd` was just created and is owned by nobody else.
        let taken = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate on our own memfd.
        assert_eq!(unsafe { libc::ftruncate(fd, PHP_WORKER_WIRE_TAKEN_SLOTS as i64 * 8) }, 0);
        let (wire, reading) = Wire::new(ours, taken).unwrap();
        wire.start(reading).unwrap();
        (wire, theirs)
    }

    fn send(to: &mut std::fs::File, kind: u8, id: u64, payload: &[u8]) {
        let mut frame = vec![0u8; 16];
        frame[0..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        frame[4] = kind;
        frame[8..16].copy_from_slice(&id.to_le_bytes());
        frame.extend_from_slice(payload);
        to.write_all(&frame).unwrap();
    }

    fn read(from: &mut std::fs::File) -> (u8, u64, Vec<u8>) {
        let mut head = [0u8; 16];
        from.read_exact(&mut head).unwrap();
        let mut payload = vec![0; u32::from_le_bytes(head[0..4].try_into().unwrap()) as usize];
        from.read_exact(&mut payload).unwrap();
        (head[4], u64::from_le_bytes(head[8..16].try_into().unwrap()), payload)
    }

    fn next_call(w: &Wire) -> std::result::Result<Option<(u64, Vec<u8>)>, ()> {
        for _ in 0..500 {
            match w.next_call() {
                Ok(None) => std::thread::sleep(std::time::Duration::from_millis(10)),
                other => return other,
            }
        }
        Ok(None)
    }

    #[test]
    fn calls_go_to_go_and_requests_without_an_engine_are_refused() {
        let (w, mut caddy) = wire();
        send(&mut caddy, PHP_WORKER_WIRE_CALL, 5, br#"{"op":"ping"}"#);
        assert_eq!(next_call(&w), Ok(Some((5, br#"{"op":"ping"}"#.to_vec()))));
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a local from the wire's eventfd.
        assert_eq!(unsafe { libc::read(w.calls_fd(), (&mut count as *mut u64).cast(), 8) }, 8, "the call signalled Go");
        assert!(w.send(PHP_WORKER_WIRE_REPLY, 5, b"{}"));
        assert_eq!(read(&mut caddy), (PHP_WORKER_WIRE_REPLY, 5, b"{}".to_vec()));

        // A well-formed submission of request 9 while no engine runs, then a malformed one.
        let mut submit = vec![0u8; PHP_WORKER_WIRE_SUBMIT_HEAD];
        submit[28..32].copy_from_slice(&u32::MAX.to_le_bytes());
        send(&mut caddy, PHP_WORKER_WIRE_SUBMIT, 9, &submit);
        assert_eq!(read(&mut caddy), (PHP_WORKER_WIRE_SUBMIT_FAILED, 9, (PHP_WORKER_ERR_STOPPED as u32).to_le_bytes().to_vec()));
        send(&mut caddy, PHP_WORKER_WIRE_SUBMIT, 10, b"short");
        assert_eq!(read(&mut caddy), (PHP_WORKER_WIRE_SUBMIT_FAILED, 10, (PHP_WORKER_ERR_INVALID as u32).to_le_bytes().to_vec()));
        send(&mut caddy, PHP_WORKER_WIRE_CANCEL, 11, &[]);
        assert_eq!(read(&mut caddy), (PHP_WORKER_WIRE_CANCELLED, 11, vec![0]), "an unknown request is not withdrawn");
    }

    /// A 200 with one header and a body, as a PHP thread's `respond` call gives it.
    fn response_200(header: &Header, body: &[u8], flags: u32) -> Response {
        Response {
            status: 200,
            headers: header,
            headers_len: 1,
            body: body.as_ptr(),
            body_len: body.len(),
            flags,
            refusal: 0,
            retry_after_ms: 0,
            thread: 1,
            queued_us: 0,
        }
    }

    #[test]
    fn a_large_body_crosses_in_pieces_and_the_last_carries_done() {
        let (w, mut caddy) = wire();
        let body: Vec<u8> = (0..(2 * RESPOND_PIECE + 5)).map(|i| i as u8).collect();
        let (name, value) = (b"X-A", b"b");
        let header = Header { name: name.as_ptr(), name_len: 3, value: value.as_ptr(), value_len: 1 };
        let response = Response { thread: 2, queued_us: 7, ..response_200(&header, &body, PHP_WORKER_RESPONSE_DONE | PHP_WORKER_RESPONSE_FLUSH) };
        let reading = std::thread::spawn(move || (0..3).map(|_| read(&mut caddy)).collect::<Vec<_>>());
        assert!(RemoteHost::respond(&*w, 3, &response), "a client nobody said gone is there");
        let frames = reading.join().unwrap();
        let field = |p: &[u8], at: usize| u32::from_le_bytes(p[at..at + 4].try_into().unwrap());
        let mut got = Vec::new();
        for (i, (kind, id, p)) in frames.iter().enumerate() {
            assert_eq!((*kind, *id), (PHP_WORKER_WIRE_RESPOND, 3));
            let (status, flags, headers, thread) = (field(p, 0), field(p, 4), field(p, 28), field(p, 16) as i32);
            let head = PHP_WORKER_WIRE_RESPOND_HEAD + if i == 0 { 8 + 4 } else { 0 };
            assert_eq!(field(p, 32) as usize, p.len() - head);
            got.extend_from_slice(&p[head..]);
            if i == 0 {
                assert_eq!((status, headers, thread, flags), (200, 1, 2, 0), "the first piece has the status and headers");
            } else {
                assert_eq!((status, headers, thread), (0, 0, -1));
                assert_eq!(flags, if i == 2 { response.flags } else { 0 }, "only the last piece has the flags");
            }
        }
        assert_eq!(got, body);
    }

    #[test]
    fn a_response_whose_headers_cannot_cross_ends_once_with_a_500() {
        let (w, mut caddy) = wire();
        let value = vec![b'v'; PHP_WORKER_WIRE_MAX_FRAME as usize];
        let header = Header { name: b"X-Big".as_ptr(), name_len: 5, value: value.as_ptr(), value_len: value.len() };
        let body = vec![b'b'; 2 * RESPOND_PIECE + 1];
        let response = response_200(&header, &body, PHP_WORKER_RESPONSE_DONE);
        assert!(!RemoteHost::respond(&*w, 4, &response), "the script learns its response ended");
        assert!(w.send(PHP_WORKER_WIRE_REPLY, 99, b"{}"), "the wire goes on");
        let mut frames = Vec::new();
        loop {
            let frame = read(&mut caddy);
            if frame.0 == PHP_WORKER_WIRE_REPLY {
                break;
            }
            frames.push(frame);
        }
        let respond: Vec<_> = frames.iter().filter(|f| f.0 == PHP_WORKER_WIRE_RESPOND).collect();
        let kinds: Vec<_> = frames.iter().map(|f| (f.0, f.2.len())).collect();
        assert_eq!(respond.len(), 1, "one frame ends the response: {kinds:?}");
        let p = &respond[0].2;
        let field = |at: usize| u32::from_le_bytes(p[at..at + 4].try_into().unwrap());
        assert_eq!((field(0), field(4), field(28), field(32)), (500, PHP_WORKER_RESPONSE_DONE, 0, 0));
    }

    #[test]
    fn the_wires_end_ends_every_wait_on_the_caddy_process() {
        let (w, mut caddy) = wire();
        let store = {
            let w = w.clone();
            std::thread::spawn(move || w.shared_store(b"op"))
        };
        let (kind, id, op) = read(&mut caddy);
        assert_eq!((kind, op.as_slice()), (PHP_WORKER_WIRE_STORE, &b"op"[..]));
        send(&mut caddy, PHP_WORKER_WIRE_STORE_REPLY, id, b"reply");
        assert_eq!(store.join().unwrap(), Some(b"reply".to_vec()));

        let waiting = {
            let w = w.clone();
            std::thread::spawn(move || w.shared_store(b"op"))
        };
        assert_eq!(read(&mut caddy).0, PHP_WORKER_WIRE_STORE);
        drop(caddy); // the Caddy process is gone
        assert_eq!(waiting.join().unwrap(), None, "a store waiting for its reply fails");
        assert_eq!(next_call(&w), Err(()), "Go learns the wire ended");
        assert_eq!(w.shared_store(b"op"), None);
        assert!(!w.send(PHP_WORKER_WIRE_REPLY, 1, b"{}"));
    }
}
