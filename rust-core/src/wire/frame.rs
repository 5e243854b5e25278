//! The wire's frames as the child reads and writes them: the layouts are documented
//! with the PHP_WORKER_WIRE_* constants (src/abi/types.rs), which the Caddy process's Go
//! side uses too.

use std::io::{BufReader, Read};

use crate::abi::types::{
    PHP_WORKER_WIRE_HEAD, PHP_WORKER_WIRE_MAX_FRAME, PHP_WORKER_WIRE_RESPOND_HEAD, PHP_WORKER_WIRE_SUBMIT_HEAD, Response,
};
use crate::host::Level;

/// Reads frames; a payload is valid until the next read.
pub struct FrameReader<R: Read> {
    r: BufReader<R>,
    buf: Vec<u8>,
}

/// Why the reading ended.
#[derive(Debug)]
pub enum ReadEnd {
    /// The end of the stream, or a failed read.
    Closed(std::io::Error),
    /// A frame past PHP_WORKER_WIRE_MAX_FRAME.
    TooLarge(u32),
}

impl<R: Read> FrameReader<R> {
    pub fn new(r: R) -> FrameReader<R> {
        FrameReader { r: BufReader::with_capacity(256 << 10, r), buf: Vec::new() }
    }

    /// The next frame: kind, id, payload.
    pub fn next_frame(&mut self) -> Result<(u8, u64, &[u8]), ReadEnd> {
        let mut head = [0u8; PHP_WORKER_WIRE_HEAD];
        self.r.read_exact(&mut head).map_err(ReadEnd::Closed)?;
        let n = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        if n > PHP_WORKER_WIRE_MAX_FRAME {
            return Err(ReadEnd::TooLarge(n));
        }
        self.buf.resize(n as usize, 0);
        self.r.read_exact(&mut self.buf).map_err(ReadEnd::Closed)?;
        let id = u64::from_le_bytes(head[8..16].try_into().unwrap_or_default());
        Ok((head[4], id, &self.buf))
    }
}

/// A SUBMIT payload, read: its strings and spans borrow the payload.
#[derive(Debug, PartialEq, Eq)]
pub struct Submission<'a> {
    pub pool: u32,
    pub flags: u32,
    pub env_pairs: u32,
    pub body_len: usize,
    pub content_length: i64,
    pub slot: u32,
    pub spans: Vec<u32>,
    pub strings: &'a [u8],
}

fn u32_at(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]])
}

fn u64_at(p: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(p[at..at + 8].try_into().unwrap_or_default())
}

/// Reads a SUBMIT payload; None when it is truncated.
pub fn unpack_submit(p: &[u8]) -> Option<Submission<'_>> {
    if p.len() < PHP_WORKER_WIRE_SUBMIT_HEAD {
        return None;
    }
    let count = u32_at(p, 24) as usize;
    let rest = &p[PHP_WORKER_WIRE_SUBMIT_HEAD..];
    let spans_len = count.checked_mul(4).filter(|&n| n <= rest.len())?;
    Some(Submission {
        pool: u32_at(p, 0),
        flags: u32_at(p, 4),
        env_pairs: u32_at(p, 8),
        body_len: u32_at(p, 12) as usize,
        content_length: u64_at(p, 16) as i64,
        slot: u32_at(p, 28),
        spans: rest[..spans_len].chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        strings: &rest[spans_len..],
    })
}

/// A header's name and value.
pub type HeaderPair<'a> = (&'a [u8], &'a [u8]);

/// The parts of a RESPOND frame: the response's numbers, its headers and a piece of its
/// body. Headers go with the first piece only.
pub struct RespondPart<'a> {
    pub status: i32,
    pub flags: u32,
    pub refusal: u32,
    pub retry_after_ms: u32,
    pub thread: i32,
    pub queued_us: u64,
    pub headers: &'a [HeaderPair<'a>],
    pub body: &'a [u8],
}

impl RespondPart<'_> {
    /// The payload's length.
    pub fn payload_len(&self) -> usize {
        PHP_WORKER_WIRE_RESPOND_HEAD + self.headers.iter().map(|(n, v)| 8 + n.len() + v.len()).sum::<usize>() + self.body.len()
    }

    /// Appends the payload.
    pub fn pack(&self, dst: &mut Vec<u8>) {
        dst.reserve(self.payload_len());
        dst.extend_from_slice(&self.status.to_le_bytes());
        dst.extend_from_slice(&self.flags.to_le_bytes());
        dst.extend_from_slice(&self.refusal.to_le_bytes());
        dst.extend_from_slice(&self.retry_after_ms.to_le_bytes());
        dst.extend_from_slice(&self.thread.to_le_bytes());
        dst.extend_from_slice(&self.queued_us.to_le_bytes());
        dst.extend_from_slice(&(self.headers.len() as u32).to_le_bytes());
        dst.extend_from_slice(&(self.body.len() as u32).to_le_bytes());
        dst.extend_from_slice(&[0; 4]);
        for (name, value) in self.headers {
            dst.extend_from_slice(&(name.len() as u32).to_le_bytes());
            dst.extend_from_slice(&(value.len() as u32).to_le_bytes());
            dst.extend_from_slice(name);
            dst.extend_from_slice(value);
        }
        dst.extend_from_slice(self.body);
    }
}

/// The headers of a `respond` call, as slices.
///
/// # Safety
/// `r`'s header and body pointers are valid as the `respond` callback's contract says.
pub unsafe fn response_parts(r: &Response) -> (Vec<HeaderPair<'_>>, &[u8]) {
    let slice = |p: *const u8, n: usize| -> &[u8] {
        if p.is_null() || n == 0 {
            &[]
        } else {
            // SAFETY: the function's contract: valid for `n` bytes.
            unsafe { std::slice::from_raw_parts(p, n) }
        }
    };
    let headers = if r.headers.is_null() || r.headers_len == 0 {
        Vec::new()
    } else {
        // SAFETY: the function's contract: `headers_len` headers at `headers`.
        unsafe { std::slice::from_raw_parts(r.headers, r.headers_len) }
            .iter()
            .map(|h| (slice(h.name, h.name_len), slice(h.value, h.value_len)))
            .collect()
    };
    (headers, slice(r.body, r.body_len))
}

/// A LOG payload: zap's level, the message, the fields.
pub fn pack_log(dst: &mut Vec<u8>, level: Level, message: &str, fields: &str) {
    let zap: i8 = match level {
        Level::Debug => -1,
        Level::Info => 0,
        Level::Warn => 1,
        Level::Error => 2,
    };
    dst.push(zap as u8);
    dst.extend_from_slice(&(message.len() as u32).to_le_bytes());
    dst.extend_from_slice(message.as_bytes());
    dst.extend_from_slice(fields.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_submission_reads_back_and_a_short_one_is_refused() {
        let mut p = Vec::new();
        for v in [7u32, 1, 2, 3] {
            p.extend_from_slice(&v.to_le_bytes());
        }
        p.extend_from_slice(&(-1i64).to_le_bytes());
        p.extend_from_slice(&2u32.to_le_bytes());
        p.extend_from_slice(&9u32.to_le_bytes());
        p.extend_from_slice(&5u32.to_le_bytes());
        p.extend_from_slice(&6u32.to_le_bytes());
        p.extend_from_slice(b"abc\0");
        let s = unpack_submit(&p).unwrap();
        assert_eq!(
            s,
            Submission { pool: 7, flags: 1, env_pairs: 2, body_len: 3, content_length: -1, slot: 9, spans: vec![5, 6], strings: b"abc\0" }
        );
        assert!(unpack_submit(&p[..PHP_WORKER_WIRE_SUBMIT_HEAD + 4]).is_none(), "spans past the end");
        assert!(unpack_submit(&p[..10]).is_none());
    }

    #[test]
    fn a_respond_part_has_the_layout_the_go_side_reads() {
        let headers: [(&[u8], &[u8]); 1] = [(b"X-A", b"bc")];
        let part = RespondPart { status: 201, flags: 2, refusal: 0, retry_after_ms: 0, thread: 3, queued_us: 1500, headers: &headers, body: b"hi" };
        let mut p = Vec::new();
        part.pack(&mut p);
        assert_eq!(p.len(), part.payload_len());
        assert_eq!(u32_at(&p, 0), 201);
        assert_eq!(u32_at(&p, 16), 3);
        assert_eq!(u64_at(&p, 20), 1500);
        assert_eq!((u32_at(&p, 28), u32_at(&p, 32)), (1, 2));
        assert_eq!(&p[PHP_WORKER_WIRE_RESPOND_HEAD..], b"\x03\0\0\0\x02\0\0\0X-Abchi");
    }

    #[test]
    fn frames_read_back_and_a_huge_one_ends_the_reading() {
        let mut bytes = Vec::new();
        let mut head = [0u8; 16];
        head[0..4].copy_from_slice(&3u32.to_le_bytes());
        head[4] = 2;
        head[8..16].copy_from_slice(&42u64.to_le_bytes());
        bytes.extend_from_slice(&head);
        bytes.extend_from_slice(b"abc");
        head[0..4].copy_from_slice(&(PHP_WORKER_WIRE_MAX_FRAME + 1).to_le_bytes());
        bytes.extend_from_slice(&head);
        let mut r = FrameReader::new(&bytes[..]);
        let (kind, id, payload) = r.next_frame().unwrap();
        assert_eq!((kind, id, payload), (2, 42, &b"abc"[..]));
        assert!(matches!(r.next_frame(), Err(ReadEnd::TooLarge(_))));
    }
}
