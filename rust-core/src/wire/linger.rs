//! The child's side of the wire, for reading: a socket reader that, finding nothing to
//! read, tries again for a moment before it sleeps in read(2).
//!
//! Under load the Caddy process sends a child a request every few microseconds. A reader
//! asleep in read(2) must be woken for each, and the waking is paid by the sender: its
//! write(2) wakes the reader's thread (a scheduler call and, on another CPU, an
//! interrupt), then the reader's thread is switched in. Measured on 2 cores with hello
//! world, that was one sleep of the reader per request, and the Caddy process's share
//! of a request grew by a quarter. A reader that looks again a few times before it
//! sleeps (spins, then gives way to other threads with sched_yield(2), as crossbeam's
//! channels do before they park) finds most frames already there: no wake-up on
//! either side. When nothing comes, it sleeps after about ten tries, a few
//! microseconds of CPU; an idle child costs nothing more.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};

use crossbeam_utils::Backoff;

/// A blocking socket, read with a moment of retries before each wait.
pub struct LingeringSocket {
    socket: std::fs::File,
}

impl LingeringSocket {
    /// Reads `socket`, a blocking stream socket (the reader owns it).
    pub fn new(socket: OwnedFd) -> LingeringSocket {
        LingeringSocket { socket: std::fs::File::from(socket) }
    }

    /// What is there to read now, without waiting: None when nothing is.
    fn try_read(&self, buf: &mut [u8]) -> Option<std::io::Result<usize>> {
        loop {
            // SAFETY: recv(2) into `buf`, at most its length; the descriptor is ours.
            let n = unsafe { libc::recv(self.socket.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if n >= 0 {
                return Some(Ok(n as usize));
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => return None,
                _ => return Some(Err(e)),
            }
        }
    }
}

impl Read for LingeringSocket {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let backoff = Backoff::new();
        while !backoff.is_completed() {
            if let Some(read) = self.try_read(buf) {
                return read;
            }
            backoff.snooze();
        }
        self.socket.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Duration;

    #[test]
    fn reads_what_is_there_waits_for_what_comes_and_sees_the_end() {
        let (ours, mut theirs) = super::super::link::tests::socket_pair();
        let mut r = LingeringSocket::new(ours);
        let mut buf = [0u8; 16];
        theirs.write_all(b"now").unwrap();
        assert_eq!(r.read(&mut buf).unwrap(), 3, "what was there");
        assert_eq!(&buf[..3], b"now");

        // Written long after the reader stopped retrying: its blocking read gets it.
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            theirs.write_all(b"later").unwrap();
            theirs
        });
        assert_eq!(r.read(&mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"later");

        drop(writer.join().unwrap());
        assert_eq!(r.read(&mut buf).unwrap(), 0, "the peer's close is the end of the stream");
    }
}
