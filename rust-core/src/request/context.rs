//! The response side of a request while a PHP thread runs it. A pointer to the
//! [`RequestContext`] is PHP's `SG(server_context)`; the SAPI hooks in src/request/sapi.rs
//! reach it through that pointer.

use std::ffi::c_void;
use std::sync::Arc;

use super::task::{TaskError, TaskResult};
use super::{Refusal, Request};
use super::expiry::Expiry;
use crate::abi::types::{Header, PHP_WORKER_RESPONSE_DONE, PHP_WORKER_RESPONSE_FLUSH, PHP_WORKER_RESPONSE_INFORMATIONAL};
use crate::host::completions::Completion;
use crate::host::{Host, Level, LogField, RunInfo};
use crate::layout::Strings;
use crate::php::sys::ShimRequest;

/// Output is handed to the host in chunks of at least this size, unless PHP flushes.
pub const STREAM_CHUNK: usize = 64 * 1024;

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
    /// To the log, line by line, for a task: its answer is what its handler returns
    /// (see [`RequestContext::set_task_result`]), sent to the PHP thread that waits.
    Task,
}

/// The response side of a running request. A pointer to it is PHP's
/// `SG(server_context)`; the SAPI hooks in src/request/sapi.rs reach it through that
/// pointer.
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
    /// Lets the watchdog end the request from outside (src/request/expiry.rs).
    expiry: Option<Arc<Expiry>>,
    /// The env of the worker pool the request runs in, sent once for the pool: it
    /// follows the request's own pairs in `$_SERVER` and answers getenv() after them.
    inherited_env: Option<Arc<Strings>>,
    /// A task's answer, once its handler gave one.
    task_result: Option<TaskResult>,
    /// The worker whose log lines these are (its boot, background run or tasks).
    worker: Option<Arc<str>>,
    /// The thread running it and how long it waited for one, for every response call.
    run: RunInfo,
}

impl RequestContext {
    pub fn new(request: Box<Request>, mut scratch: Scratch, sink: Sink) -> Self {
        scratch.clear();
        let body_pos = request.body_start;
        let run = RunInfo { thread: -1, queued_us: request.created().elapsed().as_micros() as u64 };
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
            detached: sink != Sink::Client,
            expiry: None,
            inherited_env: None,
            task_result: None,
            worker: None,
            run,
        }
    }

    /// The request runs on PHP thread `index`; the host hears of it if it asked.
    pub fn on_thread(mut self, index: usize) -> Self {
        self.run.thread = i32::try_from(index).unwrap_or(-1);
        self.request.report_taken();
        self
    }

    /// The request runs in a worker pool whose env is `env`.
    pub fn inherit_env(mut self, env: Arc<Strings>) -> Self {
        self.inherited_env = Some(env);
        self
    }

    /// Its log lines name `worker`.
    pub fn logging_as(mut self, worker: Arc<str>) -> Self {
        self.worker = Some(worker);
        self
    }

    /// The pool's env (see `inherited_env`), if the request runs in a worker pool.
    pub fn inherited_env(&self) -> Option<&Strings> {
        self.inherited_env.as_deref()
    }

    /// The env value getenv(name) finds for the request: its own pairs, then its pool's.
    pub fn env_value(&self, name: &[u8]) -> Option<&[u8]> {
        self.request.env_value(name).or_else(|| self.inherited_env()?.value_of(name))
    }

    /// The watchdog may expire this request through `expiry` until its DONE.
    pub fn watch(&mut self, expiry: Arc<Expiry>) {
        if self.sink == Sink::Client {
            expiry.arm(self.request.handle);
            self.expiry = Some(expiry);
        }
    }

    pub fn request(&self) -> &Request {
        &self.request
    }

    pub fn sink(&self) -> Sink {
        self.sink
    }

    pub fn host(&self) -> &Host {
        self.request.host()
    }

    /// Logs on behalf of this request; the host's handle goes along while it is valid.
    pub fn log(&self, level: Level, message: &str) {
        self.event(level, message, &[]);
    }

    /// Logs on behalf of this request, with structured fields.
    pub fn event(&self, level: Level, message: &str, fields: &[LogField<'_>]) {
        let handle = if self.detached { 0 } else { self.request.handle };
        match &self.worker {
            Some(worker) => {
                let mut named: Vec<LogField<'_>> = Vec::with_capacity(fields.len() + 1);
                named.push(("worker", worker.as_ref().into()));
                named.extend_from_slice(fields);
                self.host().event(handle, level, message, &named);
            }
            None => self.host().event(handle, level, message, fields),
        }
    }

    /// Output from PHP. Returns false when the client is gone.
    pub fn write(&mut self, data: &[u8]) -> bool {
        if self.sink != Sink::Client {
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
        if self.sink != Sink::Client || self.detached {
            return true;
        }
        if self.aborted {
            return false;
        }
        self.transmit_buffered(PHP_WORKER_RESPONSE_FLUSH)
    }

    /// One raw header line from PHP's list ("Name: value").
    pub fn add_header(&mut self, line: &[u8]) {
        let Some((name, value)) = split_header_line(line) else {
            self.log(Level::Debug, &format!("dropping header line without a name: {:?}", String::from_utf8_lossy(line)));
            return;
        };
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
        if self.sink != Sink::Client || self.detached || self.headers_sent || self.aborted {
            self.scratch.header_text.clear();
            self.scratch.header_spans.clear();
            return false;
        }
        self.collect_headers();
        let delivered = self.request.host().respond(
            self.request.handle,
            status,
            &self.scratch.headers,
            &[],
            PHP_WORKER_RESPONSE_INFORMATIONAL,
            self.run,
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
            match self.request.host().read_body(self.request.handle, &mut buf[filled..]) {
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
    /// and the script goes on with its output discarded. None when already finished;
    /// else whether the client had left by then (the script's connection_status() says
    /// so from then on, as under FrankenPHP).
    pub fn finish_early(&mut self) -> Option<bool> {
        if self.detached {
            return None;
        }
        // The host marks the run state when it sees the client leave: no callback asks
        // it (one callback per request of every framework that calls this, such as
        // Symfony's and Laravel's Response::send(), each costing Go a P hand-off).
        if self.request.run_state().client_gone() {
            self.aborted = true;
        }
        self.complete(false);
        Some(self.aborted)
    }

    /// The end of the script: sends the rest of the response with DONE, and gives the
    /// thread its buffers back. A fatal error whose output has not left yet becomes a
    /// 500, as with php-fpm and display_errors off.
    pub fn finish(mut self, fatal: bool) -> Scratch {
        if self.sink != Sink::Client {
            self.log_rest();
        }
        if self.sink == Sink::Task {
            let result = match self.task_result.take() {
                Some(result) if !fatal => result,
                Some(Err(e)) => Err(e),
                _ if fatal => Err(TaskError::Failed("its handler ended on a fatal error or exit(); the server log has PHP's message".into())),
                _ => Err(TaskError::Failed("its handler gave no answer".into())),
            };
            self.request.answer_task(result);
        } else if self.sink == Sink::Client && !self.detached {
            self.complete(fatal);
        }
        self.request.mark_finished();
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
        if let Some(expiry) = &self.expiry {
            expiry.disarm();
        }
        if self.body_failed && !self.headers_sent {
            // What the script answered was built on part of the body: the host answers
            // instead, knowing why the body stopped (nginx answers 408 too).
            self.scratch.output.clear();
            self.request.refuse(Refusal::Body);
        } else {
            self.hand_over_rest();
        }
        self.detached = true;
        self.request.mark_finished();
    }

    /// The last response call: what is buffered, with the headers unless they left,
    /// handed over whole (a completion owns its parts; see host/completions.rs).
    fn hand_over_rest(&mut self) {
        let scratch = &mut self.scratch;
        let (status, text) = if self.headers_sent { (0, Vec::new()) } else { (self.status, std::mem::take(&mut scratch.header_text)) };
        let spans: &[[usize; 4]] = if self.headers_sent { &[] } else { &scratch.header_spans };
        let state: Option<crate::host::completions::KeepAlive> = Some(self.request.run_state_ref());
        let completion =
            Completion::new(
            self.request.handle,
            status,
            text,
            spans,
            std::mem::take(&mut scratch.output),
            PHP_WORKER_RESPONSE_DONE,
            state,
            self.run,
        );
        scratch.header_spans.clear();
        self.headers_sent = true;
        self.request.host().complete(completion);
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
            // SAFETY: as for `name` above: `v` indexes into header_text.
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
            self.request.host().respond(self.request.handle, status, &self.scratch.headers, body, flags, self.run);
        if !delivered {
            self.aborted = true;
        }
        delivered || flags & PHP_WORKER_RESPONSE_DONE != 0
    }

    /// A task's handler answered (`Ok`: what it returned) or failed (`Err`: why).
    /// Ignored for a request that is not a task.
    pub fn set_task_result(&mut self, result: TaskResult) {
        if self.sink == Sink::Task {
            self.task_result = Some(result);
        }
    }

    /// A task's payload: its whole body.
    pub fn task_payload(&self) -> &[u8] {
        &self.request.block[self.request.body_start..]
    }

    /// The context as PHP's opaque `SG(server_context)`.
    pub fn as_server_context(&mut self) -> *mut c_void {
        (self as *mut Self).cast()
    }

    /// The C view of the request, with this context as `SG(server_context)`.
    pub fn shim(&mut self) -> ShimRequest {
        let ctx = self.as_server_context();
        self.request.shim(ctx)
    }
}

/// A header line as PHP keeps it ("Name: value") split into its name and value, both
/// trimmed of spaces and tabs; None without a colon or a name. The one parser of header
/// lines: the response's, and frankenphp_response_headers() through pw_rs_header_split.
pub fn split_header_line(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = line.iter().position(|&b| b == b':')?;
    let name = trim(&line[..colon]);
    (!name.is_empty()).then(|| (name, trim(&line[colon + 1..])))
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
mod tests {
    use super::*;
    use crate::request::tests::request;
    use crate::testing::{EXCHANGES, calls_for};

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

    /// A running GET request of a host that takes completions, and what the host's
    /// cancel handle points at.
    fn completing_request() -> (std::sync::Arc<crate::host::Host>, usize, std::sync::Arc<crate::request::RunState>, Box<Request>) {
        let host = crate::testing::completing_host();
        let handle = crate::testing::new_handle();
        let (block, spans) = crate::request::encode(&crate::request::tests::fields("GET", "/srv/a.php"), &[], b"");
        let r = Request::new(host.clone(), &block, &spans, 0, 0, 0, crate::abi::types::PHP_WORKER_REQUEST_BODY_COMPLETE, handle).unwrap();
        let state = r.run_state_ref();
        assert!(state.start());
        (host, handle, state, r)
    }

    #[test]
    fn the_last_call_becomes_a_completion_when_the_host_takes_them() {
        let (host, handle, state, r) = completing_request();
        let mut ctx = RequestContext::new(r, Scratch::default(), Sink::Client);
        ctx.add_header(b"Content-Type: text/plain");
        ctx.headers_done(202);
        assert!(ctx.write(b"queued"));
        let scratch = ctx.finish(false);
        assert!(calls_for(handle).is_empty(), "no respond callback");
        assert_eq!(std::sync::Arc::strong_count(&state), 2, "the queued completion keeps the run state alive");
        assert!(!state.cancel(), "a cancel before the host took the completion finds a finished request");
        let batch = host.completions().unwrap().take();
        assert_eq!(batch.len(), 1);
        let entry = batch[0].entry();
        assert_eq!((entry.handle, entry.response.status, entry.response.flags), (handle, 202, PHP_WORKER_RESPONSE_DONE));
        // SAFETY: the entry's pointers live as long as batch[0].
        let (name, body) = unsafe {
            let h = &*entry.response.headers;
            (std::slice::from_raw_parts(h.name, h.name_len), std::slice::from_raw_parts(entry.response.body, entry.response.body_len))
        };
        assert_eq!((name, body), (&b"Content-Type"[..], &b"queued"[..]));
        assert!(scratch.output.is_empty() && scratch.header_spans.is_empty(), "the thread's buffers start the next request empty");
        drop(batch);
        assert_eq!(std::sync::Arc::strong_count(&state), 1, "the deleted batch let go of the run state");
    }

    #[test]
    fn finishing_early_asks_the_host_nothing_and_reports_the_client_it_marked_gone() {
        for gone in [false, true] {
            let (host, handle, state, r) = completing_request();
            if gone {
                // What php_worker_request_client_gone() does from the host's thread.
                state.mark_client_gone();
            }
            let mut ctx = RequestContext::new(r, Scratch::default(), Sink::Client);
            ctx.headers_done(200);
            assert!(ctx.write(b"sent"));
            assert_eq!(ctx.finish_early(), Some(gone), "fastcgi_finish_request() says whether the client left");
            assert_eq!(ctx.aborted(), gone, "connection_status() follows");
            assert!(calls_for(handle).is_empty(), "no respond callback: the answer is queued");
            assert_eq!(ctx.finish_early(), None, "a second call finds the request finished");
            assert!(ctx.write(b"discarded"), "output after the finish is dropped quietly");
            let batch = host.completions().unwrap().take();
            assert_eq!(batch.len(), 1, "one completion");
            let entry = batch[0].entry();
            assert_eq!(entry.response.flags, PHP_WORKER_RESPONSE_DONE);
            // SAFETY: the entry's pointers live as long as batch[0].
            let body = unsafe { std::slice::from_raw_parts(entry.response.body, entry.response.body_len) };
            assert_eq!(body, b"sent", "what the script wrote before finishing, and nothing after");
            drop(ctx);
        }
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
    fn a_body_that_stops_arriving_aborts_the_script_and_is_handed_back() {
        let (r, h) = request("POST", &[], 0, b"abc", false);
        EXCHANGES.failing_bodies.lock().unwrap().insert(h);
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
        assert_eq!((calls[0].status, calls[0].flags), (0, PHP_WORKER_RESPONSE_DONE | crate::abi::types::PHP_WORKER_RESPONSE_REFUSED));
        assert_eq!(calls[0].refusal, crate::abi::types::PHP_WORKER_REFUSED_BODY);
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
        assert!(!EXCHANGES.bodies.lock().unwrap().contains_key(&h));
    }
}

/// Property tests of the header lines PHP hands over ("Name: value").
#[cfg(test)]
mod proptests {
    use super::*;
    use crate::request::tests::request;
    use crate::testing::calls_for;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// The (name, value) a line must give, written independently of add_header: split
    /// at the first colon, spaces and tabs trimmed from both ends of each side; None for
    /// a line without a colon or with an empty name.
    fn model(line: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
        let colon = line.iter().position(|&b| b == b':')?;
        let strip = |s: &[u8]| -> Vec<u8> {
            let blank = |b: &u8| *b == b' ' || *b == b'\t';
            match (s.iter().position(|b| !blank(b)), s.iter().rposition(|b| !blank(b))) {
                (Some(a), Some(z)) => s[a..=z].to_vec(),
                _ => Vec::new(),
            }
        };
        let (name, value) = (strip(&line[..colon]), strip(&line[colon + 1..]));
        (!name.is_empty()).then_some((name, value))
    }

    /// What add_header recorded, in order.
    fn recorded(ctx: &RequestContext) -> Vec<(Vec<u8>, Vec<u8>)> {
        let text = &ctx.scratch.header_text;
        ctx.scratch.header_spans.iter().map(|&[n, nl, v, vl]| (text[n..n + nl].to_vec(), text[v..v + vl].to_vec())).collect()
    }

    /// Header lines rich in the bytes that matter: colons, blanks, NUL, CR, LF.
    fn line() -> impl Strategy<Value = Vec<u8>> {
        vec(prop_oneof![3 => Just(b':'), 3 => Just(b' '), 1 => Just(b'\t'), 1 => Just(0u8), 1 => Just(b'\r'), 1 => Just(b'\n'),
                        8 => any::<u8>(), 8 => b'a'..=b'z'], 0..40)
    }

    /// A header name as PHP scripts write them: no colon, no blank at either end.
    fn name() -> impl Strategy<Value = String> {
        "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,16}"
    }

    /// A value with no blank at either end; colons and inner blanks allowed.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof!["", "[!-~]", "[!-~][ -~\t]{0,30}[!-~]"]
    }

    proptest! {
        /// Any lines: no panic, and what is kept is exactly what the model keeps, in
        /// order (lines without a colon or with an empty name are dropped).
        #[test]
        fn proptest_header_lines_parse_like_the_model(lines in vec(line(), 0..12)) {
            let (r, _) = request("GET", &[], 0, b"", true);
            let mut ctx = RequestContext::new(r, Scratch::default(), Sink::Client);
            for l in &lines {
                ctx.add_header(l);
            }
            let want: Vec<_> = lines.iter().filter_map(|l| model(l)).collect();
            prop_assert_eq!(recorded(&ctx), want);
            ctx.finish(false);
        }

        /// "Name:<blanks>value<blanks>" gives back (name, value), with the colons the
        /// value may hold; the host receives them in order.
        #[test]
        fn proptest_name_value_round_trips(
            headers in vec((name(), value(), "[ \t]{0,3}", "[ \t]{0,3}", "[ \t]{0,2}"), 1..8),
        ) {
            let (r, h) = request("GET", &[], 0, b"", true);
            let mut ctx = RequestContext::new(r, Scratch::default(), Sink::Client);
            for (n, v, before, after, before_colon) in &headers {
                ctx.add_header(format!("{n}{before_colon}:{before}{v}{after}").as_bytes());
            }
            let want: Vec<(String, String)> = headers.iter().map(|(n, v, ..)| (n.clone(), v.clone())).collect();
            let got: Vec<_> = recorded(&ctx).into_iter().map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap())).collect();
            prop_assert_eq!(&got, &want);
            ctx.headers_done(200);
            ctx.finish(false);
            let calls = calls_for(h);
            prop_assert_eq!(calls.len(), 1);
            prop_assert_eq!(&calls[0].headers, &want);
        }

        /// A line without a colon is dropped, whatever else it holds.
        #[test]
        fn proptest_lines_without_a_colon_are_dropped(lines in vec(vec(any::<u8>().prop_filter("no colon", |b| *b != b':'), 0..40), 1..8)) {
            let (r, h) = request("GET", &[], 0, b"", true);
            let mut ctx = RequestContext::new(r, Scratch::default(), Sink::Client);
            for l in &lines {
                ctx.add_header(l);
            }
            prop_assert!(ctx.scratch.header_spans.is_empty() && ctx.scratch.header_text.is_empty());
            ctx.headers_done(200);
            ctx.finish(false);
            prop_assert!(calls_for(h)[0].headers.is_empty());
        }
    }
}
