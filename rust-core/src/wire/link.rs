//! The child's side of the wire, for writing: frames from many threads (PHP threads
//! answering, the reader thread's verdicts, Go's replies) leave through one socket.
//!
//! A sender appends its frame to a buffer under a lock, then either writes out the
//! whole buffer, its own frame and every frame queued before it, or, when a write is in
//! progress, waits for a write that carries its frame. Under load many frames leave in
//! one write(2) (group commit), and no thread ever writes for others more than once
//! after its own frame left: a script's thread is never kept writing for others.
//!
//! The reader thread posts instead ([`Link::post`]): it must never wait on the Caddy
//! process, which may be waiting for it to read (a withdraw holds a request's lock
//! while its CANCEL waits to be written to us; the Caddy process's read loop may wait
//! for that lock). A posted frame is queued past the bound on what waits, and a
//! flusher thread of the link's own writes it when no sender is writing.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::abi::types::{PHP_WORKER_WIRE_HEAD, PHP_WORKER_WIRE_MAX_FRAME};

/// How many bytes may wait for the writer before senders wait for them to leave: the
/// pace of a PHP thread that writes a large body is the wire's.
const PENDING_LIMIT: usize = 4 << 20;

/// Buffers larger than this are not kept for the next write.
const KEEP_SPARE: usize = 1 << 20;

pub struct Link {
    shared: Arc<Shared>,
}

struct Shared {
    fd: OwnedFd,
    out: Mutex<Out>,
    /// Signalled when a write ends or the link closes: for senders.
    written: Condvar,
    /// Signalled when a posted frame waits with no write in progress, or the link
    /// closes: for the flusher alone, which no sender's write wakes.
    flush: Condvar,
}

struct Out {
    pending: Vec<u8>,
    spare: Vec<u8>,
    /// Frames appended so far, and frames written so far (in order).
    queued: u64,
    sent: u64,
    writing: bool,
    closed: bool,
    /// A posted frame waits that no write has taken yet, and no sender waits for.
    unowned: bool,
}

/// Why a frame did not leave.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The link is closed: the Caddy process is gone or done with this child.
    Closed,
    /// The payload is past PHP_WORKER_WIRE_MAX_FRAME; nothing was queued.
    TooLarge,
}

impl Link {
    /// A link on `fd`, with its flusher thread (which ends when the link closes).
    pub fn new(fd: OwnedFd) -> std::io::Result<Link> {
        let shared = Arc::new(Shared {
            fd,
            out: Mutex::new(Out {
                pending: Vec::new(),
                spare: Vec::new(),
                queued: 0,
                sent: 0,
                writing: false,
                closed: false,
                unowned: false,
            }),
            written: Condvar::new(),
            flush: Condvar::new(),
        });
        let flushing = shared.clone();
        std::thread::Builder::new().name("php_worker wire writer".into()).spawn(move || {
            crate::host::block_host_signals();
            flushing.flush_posts();
        })?;
        Ok(Link { shared })
    }

    /// Sends one frame whose payload `fill` appends, and returns once it was written.
    pub fn send(&self, kind: u8, id: u64, fill: impl FnOnce(&mut Vec<u8>)) -> Result<(), Refused> {
        let sh = &self.shared;
        let mut out = sh.lock();
        while out.pending.len() > PENDING_LIMIT && !out.closed {
            out = sh.written.wait(out).unwrap_or_else(|e| e.into_inner());
        }
        let mine = sh.append(&mut out, kind, id, fill)?;
        loop {
            if out.sent >= mine {
                return Ok(());
            }
            if out.closed {
                return Err(Refused::Closed);
            }
            if !out.writing {
                out = sh.write_batch(out);
                continue;
            }
            out = sh.written.wait(out).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Queues one frame and returns at once, whatever the socket's state: the flusher
    /// thread writes it unless a sender's write takes it first.
    pub fn post(&self, kind: u8, id: u64, fill: impl FnOnce(&mut Vec<u8>)) -> Result<(), Refused> {
        let sh = &self.shared;
        let mut out = sh.lock();
        sh.append(&mut out, kind, id, fill)?;
        out.unowned = true;
        if !out.writing {
            sh.flush.notify_one(); // else the write in progress hands it on at its end
        }
        Ok(())
    }

    /// Whether the link ended.
    pub fn is_closed(&self) -> bool {
        self.shared.lock().closed
    }

    /// Ends the link for senders: queued frames are dropped, and every sender gets
    /// [`Refused::Closed`].
    pub fn close(&self) {
        let mut out = self.shared.lock();
        out.closed = true;
        out.pending = Vec::new();
        self.shared.written.notify_all();
        self.shared.flush.notify_all();
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.close(); // the flusher ends, and with it the last reference to the socket
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Out> {
        self.out.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a frame; its number in the queue.
    fn append(&self, out: &mut Out, kind: u8, id: u64, fill: impl FnOnce(&mut Vec<u8>)) -> Result<u64, Refused> {
        if out.closed {
            return Err(Refused::Closed);
        }
        let at = out.pending.len();
        let mut head = [0u8; PHP_WORKER_WIRE_HEAD];
        head[4] = kind;
        head[8..16].copy_from_slice(&id.to_le_bytes());
        out.pending.extend_from_slice(&head);
        fill(&mut out.pending);
        let n = out.pending.len() - at - PHP_WORKER_WIRE_HEAD;
        if n > PHP_WORKER_WIRE_MAX_FRAME as usize {
            out.pending.truncate(at);
            return Err(Refused::TooLarge);
        }
        out.pending[at..at + 4].copy_from_slice(&(n as u32).to_le_bytes());
        out.queued += 1;
        Ok(out.queued)
    }

    /// The flusher: writes posted frames that no write took, until the link closes.
    fn flush_posts(&self) {
        let mut out = self.lock();
        while !out.closed {
            if !out.unowned || out.writing {
                out = self.flush.wait(out).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            out = self.write_batch(out);
        }
    }

    /// Writes everything queued, with the lock released meanwhile.
    fn write_batch<'a>(&'a self, mut out: MutexGuard<'a, Out>) -> MutexGuard<'a, Out> {
        out.writing = true;
        out.unowned = false; // the batch takes every posted frame
        let spare = std::mem::take(&mut out.spare);
        let batch = std::mem::replace(&mut out.pending, spare);
        let last = out.queued;
        drop(out);
        let ok = write_all(self.fd.as_raw_fd(), &batch);
        let mut out = self.lock();
        out.writing = false;
        if !ok {
            // The batch's senders learn it from `closed`: their frames did not leave.
            out.closed = true;
            out.pending = Vec::new();
        } else {
            out.sent = last;
            if batch.capacity() <= KEEP_SPARE {
                let mut batch = batch;
                batch.clear();
                out.spare = batch;
            }
        }
        self.written.notify_all();
        if out.unowned && !out.closed {
            self.flush.notify_one(); // posted during this write
        }
        out
    }
}

/// Writes all of `buf`, through interruptions; false when the socket failed.
fn write_all(fd: i32, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        // SAFETY: `buf` is valid for reads of its length; `fd` is the link's socket.
        let n = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        buf = &buf[n as usize..];
    }
    true
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::FromRawFd;

    pub(crate) fn socket_pair() -> (OwnedFd, std::fs::File) {
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two new descriptors into `fds`.
        assert_eq!(unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) }, 0);
        // SAFETY: both descriptors were just created and are owned by nobody else.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) }
    }

    fn frames(mut bytes: &[u8]) -> Vec<(u8, u64, Vec<u8>)> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let n = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
            let id = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
            out.push((bytes[4], id, bytes[16..16 + n].to_vec()));
            bytes = &bytes[16 + n..];
        }
        out
    }

    #[test]
    fn frames_from_many_threads_arrive_whole() {
        let (ours, mut theirs) = socket_pair();
        let link = Arc::new(Link::new(ours).unwrap());
        let senders: Vec<_> = (0..8u64)
            .map(|t| {
                let link = link.clone();
                std::thread::spawn(move || {
                    for i in 0..200u64 {
                        let id = t * 1000 + i;
                        link.send(65, id, |dst| dst.extend(std::iter::repeat_n(t as u8, (i as usize * 37) % 5000))).unwrap();
                    }
                })
            })
            .collect();
        let reader = std::thread::spawn(move || {
            let mut all = Vec::new();
            theirs.read_to_end(&mut all).unwrap();
            all
        });
        for s in senders {
            s.join().unwrap();
        }
        drop(link); // closes our end: the reader sees the end
        let got = frames(&reader.join().unwrap());
        assert_eq!(got.len(), 8 * 200);
        let mut next = [0u64; 8];
        for (kind, id, payload) in got {
            let (t, i) = ((id / 1000) as usize, id % 1000);
            assert_eq!(kind, 65);
            assert_eq!(i, next[t], "a thread's frames keep their order");
            next[t] += 1;
            assert_eq!(payload.len(), (i as usize * 37) % 5000);
            assert!(payload.iter().all(|&b| b == t as u8), "no frame is torn by another");
        }
    }

    #[test]
    fn a_post_never_waits_for_the_peer() {
        let (ours, mut theirs) = socket_pair();
        let link = Link::new(ours).unwrap();
        // Ten MiB against a socket nobody reads yet (it holds a few hundred KiB): every
        // post returns, as the reader thread's must while the peer waits for it.
        for id in 0..100u64 {
            link.post(69, id, |dst| dst.resize(dst.len() + (100 << 10), id as u8)).unwrap();
        }
        let reader = std::thread::spawn(move || {
            let mut all = vec![0u8; 100 * (16 + (100 << 10))];
            theirs.read_exact(&mut all).unwrap();
            all
        });
        let got = frames(&reader.join().unwrap());
        assert_eq!(got.len(), 100, "the writer thread wrote every posted frame");
        assert!(got.iter().enumerate().all(|(i, (kind, id, p))| *kind == 69 && *id == i as u64 && p.len() == 100 << 10));
    }

    #[test]
    fn a_frame_past_the_limit_is_refused_and_the_link_goes_on() {
        let (ours, mut theirs) = socket_pair();
        let link = Link::new(ours).unwrap();
        let big = PHP_WORKER_WIRE_MAX_FRAME as usize + 1;
        assert_eq!(link.send(67, 1, |dst| dst.resize(dst.len() + big, 0)), Err(Refused::TooLarge));
        link.send(67, 2, |dst| dst.extend_from_slice(b"after")).unwrap();
        drop(link);
        let mut all = Vec::new();
        theirs.read_to_end(&mut all).unwrap();
        assert_eq!(frames(&all), vec![(67, 2, b"after".to_vec())]);
    }

    #[test]
    fn a_closed_link_refuses_and_a_dead_peer_closes_it() {
        let (ours, theirs) = socket_pair();
        let link = Link::new(ours).unwrap();
        drop(theirs);
        assert_eq!(link.send(65, 1, |_| {}), Err(Refused::Closed), "the peer is gone: the write fails");
        assert!(link.is_closed());
        assert_eq!(link.send(65, 2, |_| {}), Err(Refused::Closed));
    }
}
