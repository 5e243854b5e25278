//! One HTTP request on its way through PHP: the immutable description the host handed
//! over ([`Request`]) and the state of its response while a PHP thread runs it
//! ([`RequestContext`]).

use std::cell::Cell;
use std::ffi::{c_char, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::engine::Shared;
use crate::error::{Error, Result};
use crate::ffi::{
    Field, Header, PHP_WORKER_REQUEST_BODY_COMPLETE, PHP_WORKER_RESPONSE_DONE, PHP_WORKER_RESPONSE_FLUSH,
    PHP_WORKER_RESPONSE_INFORMATIONAL,
};
use crate::host::Level;

/// Output is handed to the host in chunks of at least this size, unless PHP flushes.
pub const STREAM_CHUNK: usize = 64 * 1024;

/// A request as the host described it, copied into Rust memory.
///
/// `block` holds every string (each followed by a NUL, so C can use it in place) and,
/// at its end, the part of the body the host read ahead. `spans` holds an (offset,
/// length) pair per string: the [`Field`]s first, then (name, value) pairs for
/// `$_SERVER`, the last `env_pairs` of which are also what `getenv()` answers.
pub struct Request {
    block: Box<[u8]>,
    spans: Box<[u32]>,
    env_pairs: usize,
    body_start: usize,
    body_complete: bool,
    content_length: i64,
    handle: usize,
    pool: u32,
    state: RunState,
    finished: Cell<bool>,
    shared: Arc<Shared>,
}

impl Request {
    /// Copies and checks a request description. `strings` ends with `body_len` bytes of
    /// body; every span must point at a string followed by a NUL before the body.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        shared: Arc<Shared>,
        pool: u32,
        strings: &[u8],
        spans: &[u32],
        env_pairs: u32,
        body_len: usize,
        content_length: i64,
        flags: u32,
        handle: usize,
    ) -> Result<Box<Request>> {
        let fields = Field::Count as usize;
        if spans.len() < 2 * fields || (spans.len() - 2 * fields) % 4 != 0 {
            return Err(Error::InvalidRequest("span count"));
        }
        let pairs = (spans.len() - 2 * fields) / 4;
        let env_pairs = env_pairs as usize;
        if env_pairs > pairs {
            return Err(Error::InvalidRequest("env pair count"));
        }
        let body_start = strings.len().checked_sub(body_len).ok_or(Error::InvalidRequest("body length"))?;
        for span in spans.chunks_exact(2) {
            let (start, len) = (span[0] as usize, span[1] as usize);
            let end = start.checked_add(len).ok_or(Error::InvalidRequest("span overflow"))?;
            if end >= body_start || strings[end] != 0 {
                return Err(Error::InvalidRequest("span out of bounds or not NUL-terminated"));
            }
        }
        Ok(Box::new(Request {
            block: strings.into(),
            spans: spans.into(),
            env_pairs,
            body_start,
            body_complete: flags & PHP_WORKER_REQUEST_BODY_COMPLETE != 0,
            content_length,
            handle,
            pool,
            state: RunState(AtomicU8::new(RunState::QUEUED)),
            finished: Cell::new(false),
            shared,
        }))
    }

    pub fn pool(&self) -> u32 {
        self.pool
    }

    pub fn handle(&self) -> usize {
        self.handle
    }

    pub fn content_length(&self) -> i64 {
        self.content_length
    }

    /// How many of the trailing `$_SERVER` pairs are the configured env.
    pub fn env_pairs(&self) -> usize {
        self.env_pairs
    }

    /// What `php_worker_request_cancel` acts on.
    pub fn run_state(&self) -> &RunState {
        &self.state
    }

    fn span(&self, index: usize) -> (usize, usize) {
        (self.spans[2 * index] as usize, self.spans[2 * index + 1] as usize)
    }

    /// The bytes of a fixed field, without its NUL.
    pub fn field(&self, field: Field) -> &[u8] {
        let (start, len) = self.span(field as usize);
        &self.block[start..start + len]
    }

    /// A fixed field as a C string that lives as long as the request.
    pub fn field_ptr(&self, field: Field) -> *const c_char {
        let (start, _) = self.span(field as usize);
        self.block[start..].as_ptr().cast()
    }

    /// Like [`Request::field_ptr`], but NULL when the field is empty.
    pub fn field_ptr_or_null(&self, field: Field) -> *const c_char {
        if self.field(field).is_empty() { std::ptr::null() } else { self.field_ptr(field) }
    }

    /// The `$_SERVER` pairs as (spans, pair count), four u32 per pair.
    pub fn var_spans(&self) -> (&[u32], usize) {
        let vars = &self.spans[2 * Field::Count as usize..];
        (vars, vars.len() / 4)
    }

    pub fn block(&self) -> &[u8] {
        &self.block[..self.body_start]
    }

    /// The value `getenv(name)` gets from the configured environment, as a C string.
    pub fn env_lookup(&self, name: &[u8]) -> Option<*const c_char> {
        // Values are NUL-terminated in the block.
        self.env_value(name).map(|v| v.as_ptr().cast())
    }

    /// The configured env value of `name` (the last one set), without its NUL.
    pub fn env_value(&self, name: &[u8]) -> Option<&[u8]> {
        let (vars, pairs) = self.var_spans();
        (pairs - self.env_pairs..pairs).rev().find_map(|i| {
            let s = &vars[4 * i..4 * i + 4];
            let (n, v) = (s[0] as usize, s[2] as usize);
            (&self.block[n..n + s[1] as usize] == name).then(|| &self.block[v..v + s[3] as usize])
        })
    }

    /// Calls `f` with each configured env (name, value) pair, in order.
    pub fn for_each_env(&self, mut f: impl FnMut(&[u8], &[u8])) {
        let (vars, pairs) = self.var_spans();
        for i in pairs - self.env_pairs..pairs {
            let s = &vars[4 * i..4 * i + 4];
            f(
                &self.block[s[0] as usize..(s[0] + s[1]) as usize],
                &self.block[s[2] as usize..(s[2] + s[3]) as usize],
            );
        }
    }

    /// HTTP version as PHP counts it (1001 is HTTP/1.1).
    pub fn proto_num(&self) -> i32 {
        match self.field(Field::Protocol) {
            b"HTTP/1.0" => 1000,
            b"HTTP/2.0" | b"HTTP/2" => 2000,
            b"HTTP/3.0" | b"HTTP/3" => 3000,
            _ => 1001,
        }
    }

    /// Answers a request that will not run (cancelled, or the engine went away).
    pub fn reject(&self, status: i32) {
        self.reject_with(status, &[], "");
    }

    /// Answers a request that will not run with `headers` and a plain-text `body`.
    pub fn reject_with(&self, status: i32, headers: &[(&str, &str)], body: &str) {
        if self.finished.replace(true) {
            return;
        }
        let mut list: Vec<Header> = headers
            .iter()
            .map(|(name, value)| Header { name: name.as_ptr(), name_len: name.len(), value: value.as_ptr(), value_len: value.len() })
            .collect();
        if !body.is_empty() {
            const TEXT: (&str, &str) = ("Content-Type", "text/plain; charset=utf-8");
            list.push(Header { name: TEXT.0.as_ptr(), name_len: TEXT.0.len(), value: TEXT.1.as_ptr(), value_len: TEXT.1.len() });
        }
        self.shared.host.respond(self.handle, status, &list, body.as_bytes(), PHP_WORKER_RESPONSE_DONE);
    }

    /// Marks a request the host keeps the answering of (submission failed).
    pub fn disown(&self) {
        self.finished.set(true);
    }

    /// A request no host waits for: what a worker script sees while it boots. `fields`
    /// are in [`Field`] order; the last `env_pairs` of `vars` answer getenv().
    pub fn synthetic(shared: Arc<Shared>, fields: &[&str], vars: &[(&str, &str)], env_pairs: usize) -> Box<Request> {
        let (block, spans) = encode(fields, vars, b"");
        let request = Request::new(shared, 0, &block, &spans, env_pairs as u32, 0, 0, PHP_WORKER_REQUEST_BODY_COMPLETE, 0)
            .expect("a synthetic request follows the layout");
        request.disown();
        request
    }
}

/// Lays strings out the way the host does for php_worker_request_submit().
pub fn encode(fields: &[&str], vars: &[(&str, &str)], body: &[u8]) -> (Vec<u8>, Vec<u32>) {
    let mut block = Vec::new();
    let mut spans = Vec::new();
    let mut push = |s: &str| {
        spans.push(block.len() as u32);
        spans.push(s.len() as u32);
        block.extend_from_slice(s.as_bytes());
        block.push(0);
    };
    for f in fields {
        push(f);
    }
    for (k, v) in vars {
        push(k);
        push(v);
    }
    block.extend_from_slice(body);
    (block, spans)
}

impl Drop for Request {
    fn drop(&mut self) {
        // The host waits for exactly one DONE per submitted request: never leave it hanging.
        self.reject(503);
    }
}

/// Whether a request waits in its queue, runs, or was cancelled before it could run.
/// The host cancels from its own threads; the PHP thread claims the request when it
/// dequeues it. Exactly one of the two wins.
pub struct RunState(AtomicU8);

impl RunState {
    const QUEUED: u8 = 0;
    const RUNNING: u8 = 1;
    const CANCELLED: u8 = 2;

    /// The PHP thread takes the request. False when the host cancelled it first.
    pub fn start(&self) -> bool {
        self.0.compare_exchange(Self::QUEUED, Self::RUNNING, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// The host gives up on the request. True when it had not started and never will.
    pub fn cancel(&self) -> bool {
        self.0.compare_exchange(Self::QUEUED, Self::CANCELLED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

/// Buffers a PHP thread keeps from one request to the next.
#[derive(Default)]
pub struct Scratch {
    output: Vec<u8>,
    header_text: Vec<u8>,
    header_spans: Vec<[usize; 4]>,
    headers: Vec<Header>,
}

impl Scratch {
    fn clear(&mut self) {
        self.output.clear();
        self.header_text.clear();
        self.header_spans.clear();
        self.headers.clear();
    }

    /// Drops buffers a large response grew, so an idle thread does not hold them.
    fn trim(&mut self) {
        if self.output.capacity() > 4 * STREAM_CHUNK {
            self.output = Vec::new();
        }
        if self.header_text.capacity() > 64 * 1024 {
            self.header_text = Vec::new();
            self.header_spans = Vec::new();
            self.headers = Vec::new();
        }
    }
}

/// Where the output of a running script goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    /// To the HTTP client, through the host's `respond` callback.
    Client,
    /// To the log, line by line: a worker script booting or between requests.
    Log,
}

/// The response side of a running request. A pointer to it is PHP's
/// `SG(server_context)`; the SAPI hooks in src/sapi.rs reach it through that pointer.
pub struct RequestContext {
    request: Box<Request>,
    scratch: Scratch,
    sink: Sink,
    body_pos: usize,
    status: i32,
    headers_ready: bool,
    headers_sent: bool,
    aborted: bool,
    /// The request body could not be read to its end (client gone, or Caddy's read
    /// timeout): the script must not answer as if it had the whole body.
    body_failed: bool,
    /// DONE went to the host (fastcgi_finish_request): later output is dropped and the
    /// host's handle is no longer valid.
    detached: bool,
}

impl RequestContext {
    pub fn new(request: Box<Request>, mut scratch: Scratch, sink: Sink) -> Self {
        scratch.clear();
        let body_pos = request.body_start;
        RequestContext {
            request,
            scratch,
            sink,
            body_pos,
            status: 200,
            headers_ready: false,
            headers_sent: false,
            aborted: false,
            body_failed: false,
            detached: sink == Sink::Log,
        }
    }

    pub fn request(&self) -> &Request {
        &self.request
    }

    pub fn sink(&self) -> Sink {
        self.sink
    }

    pub fn shared(&self) -> &Shared {
        &self.request.shared
    }

    /// Logs on behalf of this request; the host's handle goes along while it is valid.
    pub fn log(&self, level: Level, message: &str) {
        let handle = if self.detached { 0 } else { self.request.handle };
        self.shared().host.log(handle, level, message);
    }

    /// Output from PHP. Returns false when the client is gone.
    pub fn write(&mut self, data: &[u8]) -> bool {
        if self.sink == Sink::Log {
            self.scratch.output.extend_from_slice(data);
            self.log_complete_lines();
            return true;
        }
        if self.detached {
            return true;
        }
        if self.aborted {
            return false;
        }
        if self.scratch.output.is_empty() && data.len() >= STREAM_CHUNK {
            return self.transmit(data, 0);
        }
        self.scratch.output.extend_from_slice(data);
        if self.scratch.output.len() >= STREAM_CHUNK {
            return self.transmit_buffered(0);
        }
        true
    }

    fn log_complete_lines(&mut self) {
        let Some(end) = self.scratch.output.iter().rposition(|&b| b == b'\n') else {
            if self.scratch.output.len() >= STREAM_CHUNK {
                self.log_rest();
            }
            return;
        };
        let lines: Vec<u8> = self.scratch.output.drain(..=end).collect();
        for line in lines[..lines.len() - 1].split(|&b| b == b'\n') {
            if !line.is_empty() {
                self.log(Level::Info, &String::from_utf8_lossy(line));
            }
        }
    }

    fn log_rest(&mut self) {
        let rest = std::mem::take(&mut self.scratch.output);
        if !rest.iter().all(u8::is_ascii_whitespace) {
            self.log(Level::Info, &String::from_utf8_lossy(&rest));
        }
    }

    /// PHP's flush(): send what is buffered, headers included. False when the client is gone.
    pub fn flush(&mut self) -> bool {
        if self.sink == Sink::Log || self.detached {
            return true;
        }
        if self.aborted {
            return false;
        }
        self.transmit_buffered(PHP_WORKER_RESPONSE_FLUSH)
    }

    /// One raw header line from PHP's list ("Name: value").
    pub fn add_header(&mut self, line: &[u8]) {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            self.log(Level::Debug, &format!("dropping header line without a colon: {:?}", String::from_utf8_lossy(line)));
            return;
        };
        let name = trim(&line[..colon]);
        let value = trim(&line[colon + 1..]);
        if name.is_empty() {
            return;
        }
        let text = &mut self.scratch.header_text;
        let name_at = text.len();
        text.extend_from_slice(name);
        let value_at = text.len();
        text.extend_from_slice(value);
        self.scratch.header_spans.push([name_at, name.len(), value_at, value.len()]);
    }

    /// PHP decided the status and headers. They leave with the first body chunk.
    pub fn headers_done(&mut self, status: i32) {
        self.status = status;
        self.headers_ready = true;
    }

    /// headers_send() with a 1xx status: an informational response (103 Early Hints)
    /// carrying the headers added since the last call. Returns false when it could not
    /// be sent (headers already sent, or the client is gone).
    pub fn informational(&mut self, status: i32) -> bool {
        if self.sink == Sink::Log || self.detached || self.headers_sent || self.aborted {
            self.scratch.header_text.clear();
            self.scratch.header_spans.clear();
            return false;
        }
        self.collect_headers();
        let delivered = self.request.shared.host.respond(
            self.request.handle,
            status,
            &self.scratch.headers,
            &[],
            PHP_WORKER_RESPONSE_INFORMATIONAL,
        );
        self.scratch.header_text.clear();
        self.scratch.header_spans.clear();
        if !delivered {
            self.aborted = true;
        }
        delivered
    }

    /// Request body for PHP: first what the host read ahead, then from the host.
    pub fn read_body(&mut self, buf: &mut [u8]) -> usize {
        let inline = &self.request.block[self.body_pos..];
        let n = inline.len().min(buf.len());
        buf[..n].copy_from_slice(&inline[..n]);
        self.body_pos += n;
        if n == buf.len() || self.request.body_complete || self.aborted || self.detached {
            return n;
        }
        let mut filled = n;
        while filled < buf.len() {
            match self.request.shared.host.read_body(self.request.handle, &mut buf[filled..]) {
                Some(0) => break,
                Some(read) => filled += read,
                None => {
                    self.log(Level::Warn, "request body could not be read (client gone or timed out); the script sees an aborted connection");
                    self.aborted = true;
                    self.body_failed = true;
                    break;
                }
            }
        }
        filled
    }

    /// The client is gone or its body could not be read: PHP's connection status must
    /// say so.
    pub fn aborted(&self) -> bool {
        self.aborted
    }

    /// fastcgi_finish_request(): the response is complete now; the client is released
    /// and the script goes on with its output discarded. False when already finished.
    pub fn finish_early(&mut self) -> bool {
        if self.detached {
            return false;
        }
        self.complete(false);
        true
    }

    /// The end of the script: sends the rest of the response with DONE, and gives the
    /// thread its buffers back. A fatal error whose output has not left yet becomes a
    /// 500, as with php-fpm and display_errors off.
    pub fn finish(mut self, fatal: bool) -> Scratch {
        if self.sink == Sink::Log {
            self.log_rest();
        } else if !self.detached {
            self.complete(fatal);
        }
        self.request.finished.set(true);
        let mut scratch = self.scratch;
        scratch.trim();
        scratch
    }

    fn complete(&mut self, fatal: bool) {
        if !self.headers_ready {
            // PHP never got to send headers: request startup failed.
            self.status = 500;
        } else if fatal && !self.headers_sent && self.status == 200 {
            self.status = 500;
        }
        if self.body_failed && !self.headers_sent {
            // What the script answered was built on part of the body; nginx answers a
            // body that stops arriving with 408 too.
            self.status = 408;
            self.scratch.header_spans.clear();
            self.scratch.output.clear();
        }
        self.transmit_buffered(PHP_WORKER_RESPONSE_DONE);
        self.detached = true;
        self.request.finished.set(true);
    }

    /// Builds the header list the host reads.
    fn collect_headers(&mut self) {
        let scratch = &mut self.scratch;
        scratch.headers.clear();
        let base = scratch.header_text.as_ptr();
        scratch.headers.extend(scratch.header_spans.iter().map(|&[n, nl, v, vl]| Header {
            // SAFETY: the spans index into header_text, which is not touched until the
            // host returns.
            name: unsafe { base.add(n) },
            name_len: nl,
            value: unsafe { base.add(v) },
            value_len: vl,
        }));
    }

    fn transmit_buffered(&mut self, flags: u32) -> bool {
        let output = std::mem::take(&mut self.scratch.output);
        let ok = self.transmit(&output, flags);
        self.scratch.output = output;
        self.scratch.output.clear();
        ok
    }

    fn transmit(&mut self, body: &[u8], flags: u32) -> bool {
        let status = if self.headers_sent { 0 } else { self.status };
        if self.headers_sent {
            self.scratch.headers.clear();
        } else {
            self.collect_headers();
        }
        self.headers_sent = true;
        let delivered =
            self.request.shared.host.respond(self.request.handle, status, &self.scratch.headers, body, flags);
        if !delivered {
            self.aborted = true;
        }
        delivered || flags & PHP_WORKER_RESPONSE_DONE != 0
    }

    /// The context as PHP's opaque `SG(server_context)`.
    pub fn as_server_context(&mut self) -> *mut c_void {
        (self as *mut Self).cast()
    }
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engine::tests::{calls_for, recording_shared};
    pub use super::encode;

    pub fn fields<'a>(method: &'a str, script: &'a str) -> Vec<&'a str> {
        let mut f = vec![""; Field::Count as usize];
        f[Field::Method as usize] = method;
        f[Field::ScriptFilename as usize] = script;
        f[Field::Protocol as usize] = "HTTP/1.1";
        f
    }

    fn request(method: &str, vars: &[(&str, &str)], env_pairs: u32, body: &[u8], complete: bool) -> (Box<Request>, usize) {
        let (shared, handle) = recording_shared();
        let (block, spans) = encode(&fields(method, "/srv/a.php"), vars, body);
        let flags = if complete { PHP_WORKER_REQUEST_BODY_COMPLETE } else { 0 };
        let r = Request::new(shared, 0, &block, &spans, env_pairs, body.len(), 8, flags, handle).unwrap();
        (r, handle)
    }

    #[test]
    fn cancel_and_start_race_has_one_winner() {
        let (r, _) = request("GET", &[], 0, b"", true);
        assert!(r.run_state().cancel());
        assert!(!r.run_state().start(), "a cancelled request never runs");
        let (r2, _) = request("GET", &[], 0, b"", true);
        assert!(r2.run_state().start());
        assert!(!r2.run_state().cancel(), "a running request cannot be withdrawn");
        r.disown();
        r2.disown();
    }

    #[test]
    fn parses_fields_vars_and_env() {
        let (r, _) = request("GET", &[("A", "1"), ("APP_ENV", "prod")], 1, b"", true);
        assert_eq!(r.field(Field::Method), b"GET");
        assert_eq!(r.field(Field::ScriptFilename), b"/srv/a.php");
        assert!(r.field_ptr_or_null(Field::Cookie).is_null());
        assert_eq!(r.var_spans().1, 2);
        assert!(r.env_lookup(b"A").is_none(), "only env pairs answer getenv");
        let v = r.env_lookup(b"APP_ENV").unwrap();
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(v) }.to_bytes(), b"prod");
        assert_eq!(r.proto_num(), 1001);
        r.disown();
    }

    #[test]
    fn rejects_malformed_layouts() {
        let (shared, h) = recording_shared();
        let (block, mut spans) = encode(&fields("GET", "/a.php"), &[], b"");
        assert!(Request::new(shared.clone(), 0, &block, &spans[..4], 0, 0, 0, 0, h).is_err());
        assert!(Request::new(shared.clone(), 0, &block, &spans, 1, 0, 0, 0, h).is_err(), "env pairs > pairs");
        assert!(Request::new(shared.clone(), 0, &block, &spans, 0, block.len() + 1, 0, 0, h).is_err());
        spans[1] = 2; // "GE": the span now ends on the non-NUL byte "T"
        assert!(Request::new(shared.clone(), 0, &block, &spans, 0, 0, 0, 0, h).is_err());
        spans[1] = 10_000;
        assert!(Request::new(shared, 0, &block, &spans, 0, 0, 0, 0, h).is_err());
        assert!(calls_for(h).is_empty(), "a refused request is never answered by Rust");
    }

    #[test]
    fn an_unanswered_request_is_answered_503_once() {
        let (r, h) = request("GET", &[], 0, b"", true);
        drop(r);
        let calls = calls_for(h);
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].status, calls[0].flags), (503, PHP_WORKER_RESPONSE_DONE));
    }

    #[test]
    fn small_output_leaves_in_one_callback_with_headers() {
        let (r, h) = request("GET", &[], 0, b"", true);
        let mut ctx = RequestContext::new(r, Scratch::default(), Sink::Client);
        ctx.add_header(b"Content-type: text/plain");
        ctx.add_header(b"X-A:  b ");
        ctx.add_header(b"no colon here");
        ctx.headers_done(201);
        assert!(ctx.write(b"hello "));
        assert!(ctx.write(b"world"));
        ctx.finish(false);
        let calls = calls_for(h);
        assert_eq!(calls.len(), 1, "finish answers once; Drop adds nothing");
        let c = &calls[0];
        assert_eq!(c.status, 201);
        assert_eq!(c.body, b"hello world");
        assert_eq!(c.flags, PHP_WORKER_RESPONSE_DONE);
        assert_eq!(c.headers, vec![("Content-type".into(), "text/plain".into()), ("X-A".into(), "b".into())]);
    }

    #[test]
    fn large_output_streams_in_chunks_and_flush_sends_headers_once() {
        let (r, h) = request("GET", &[], 0, b"", true);
        let mut ctx = RequestContext::new(r, Scratch::default(), Sink::Client);
        ctx.add_header(b"X-Once: 1");
        ctx.headers_done(200);
        assert!(ctx.flush());
        let big = vec![b'x'; STREAM_CHUNK + 10];
        assert!(ctx.write(&big));
        assert!(ctx.write(b"tail"));
        ctx.finish(false);
        let calls = calls_for(h);
        assert_eq!(calls.len(), 3);
        assert_eq!((calls[0].status, calls[0].flags, calls[0].body.len()), (200, PHP_WORKER_RESPONSE_FLUSH, 0));
        assert_eq!(calls[0].headers.len(), 1);
        assert_eq!((calls[1].status, calls[1].body.len(), calls[1].headers.len()), (0, STREAM_CHUNK + 10, 0));
        assert_eq!((calls[2].status, calls[2].body.as_slice()), (0, &b"tail"[..]));
        assert_eq!(calls[2].flags, PHP_WORKER_RESPONSE_DONE);
    }

    #[test]
    fn fatal_error_before_headers_leave_becomes_500() {
        let (r, h) = request("GET", &[], 0, b"", true);
        let mut ctx = RequestContext::new(r, Scratch::default(), Sink::Client);
        ctx.headers_done(200);
        ctx.write(b"Fatal error: boom");
        ctx.finish(true);
        assert_eq!(calls_for(h)[0].status, 500);
    }

    #[test]
    fn fatal_error_after_a_flush_keeps_the_sent_status() {
        let (r, h) = request("GET", &[], 0, b"", true);
        let mut ctx = RequestContext::new(r, Scratch::default(), Sink::Client);
        ctx.headers_done(200);
        ctx.flush();
        ctx.finish(true);
        let calls = calls_for(h);
        assert_eq!((calls[0].status, calls[1].status), (200, 0));
    }

    #[test]
    fn body_comes_from_the_inline_part_then_the_host() {
        let (r, _) = request("POST", &[], 0, b"abc", false);
        let mut ctx = RequestContext::new(r, Scratch::default(), Sink::Client);
        let mut buf = [0u8; 16];
        let n = ctx.read_body(&mut buf);
        // the test host serves "defgh" then EOF
        assert_eq!(&buf[..n], b"abcdefgh");
        assert_eq!(ctx.read_body(&mut buf), 0);
        ctx.finish(false);
    }

    #[test]
    fn a_body_that_stops_arriving_aborts_the_script_and_answers_408() {
        let (r, h) = request("POST", &[], 0, b"abc", false);
        crate::engine::tests::EXCHANGES.failing_bodies.lock().unwrap().insert(h);
        let mut ctx = RequestContext::new(r, Scratch::default(), Sink::Client);
        let mut buf = [0u8; 16];
        let mut small = [0u8; 4];
        assert_eq!(ctx.read_body(&mut small), 4);
        assert!(!ctx.aborted());
        // the test host serves "defgh", then fails: PHP gets what arrived
        assert_eq!(ctx.read_body(&mut buf), 4);
        assert!(ctx.aborted(), "PHP must see an aborted connection");
        assert_eq!(ctx.read_body(&mut buf), 0, "the host is not asked again");
        ctx.add_header(b"Set-Cookie: a=1");
        ctx.headers_done(200);
        assert!(!ctx.write(b"built on half a body"), "output is refused");
        ctx.finish(false);
        let calls = calls_for(h);
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].status, calls[0].flags), (408, PHP_WORKER_RESPONSE_DONE));
        assert!(calls[0].headers.is_empty() && calls[0].body.is_empty());
    }

    #[test]
    fn a_complete_inline_body_never_asks_the_host() {
        let (r, h) = request("POST", &[], 0, b"abc", true);
        let mut ctx = RequestContext::new(r, Scratch::default(), Sink::Client);
        let mut buf = [0u8; 2];
        assert_eq!(ctx.read_body(&mut buf), 2);
        assert_eq!(ctx.read_body(&mut buf), 1);
        assert_eq!(ctx.read_body(&mut buf), 0);
        ctx.finish(false);
        assert!(!crate::engine::tests::EXCHANGES.bodies.lock().unwrap().contains_key(&h));
    }
}
