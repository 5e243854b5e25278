//! One HTTP request on its way through PHP: the immutable description the host handed
//! over ([`Request`]), and the state of its response while a PHP thread runs it
//! ([`context::RequestContext`]).

pub mod context;
pub mod expiry;
pub mod sapi;
pub mod task;

use std::cell::Cell;
use std::ffi::c_char;
use std::sync::Arc;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::abi::types::{
    Field, PHP_WORKER_REFUSED_BODY, PHP_WORKER_REFUSED_BOOT_FAILING, PHP_WORKER_REFUSED_LOST, PHP_WORKER_REFUSED_STOPPED,
    PHP_WORKER_REFUSED_WITHDRAWN, PHP_WORKER_REQUEST_BODY_COMPLETE, PHP_WORKER_REQUEST_ONE_SHOT_WORKER,
};
use crate::error::{Error, Result};
use crate::host::Host;
use crate::layout::{self, Strings};
use crate::php::sys::ShimRequest;

use task::{TaskChain, TaskError, TaskReply, TaskResult};

/// A request as the host described it, copied into Rust memory.
///
/// `block` holds every string in the layout of src/layout.rs and, at its end, the part
/// of the body the host read ahead. The spans are the [`Field`]s first, then (name,
/// value) pairs for `$_SERVER`, the last `env_pairs` of which are also what `getenv()`
/// answers.
pub struct Request {
    block: Box<[u8]>,
    spans: Box<[u32]>,
    env_pairs: usize,
    body_start: usize,
    body_complete: bool,
    /// The script is a worker script serving only this request (PHP_WORKER_REQUEST_ONE_SHOT_WORKER).
    one_shot_worker: bool,
    /// Where the host wants the handle stored when a thread takes it (the `taken_mark`
    /// of php_worker_request_submit()).
    taken_mark: Option<TakenMark>,
    content_length: i64,
    handle: usize,
    /// Shared with the host's cancel handle, which must stay valid until the request's
    /// DONE reached the host: a completion keeps a reference after the request is gone.
    state: Arc<RunState>,
    finished: Cell<bool>,
    host: Arc<Host>,
    /// When the host submitted it: the start of its wait for a thread.
    created: Instant,
    /// For a task (src/request/task.rs), where its answer goes instead of to the host.
    reply: Option<TaskReply>,
    /// For a task, the task workers it was sent through; empty for a request.
    chain: TaskChain,
}

impl Request {
    /// Copies and checks a request description. `strings` ends with `body_len` bytes of
    /// body; every span must point at a string followed by a NUL before the body.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        host: Arc<Host>,
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
        layout::check(strings, spans, body_start)?;
        Ok(Box::new(Request {
            block: strings.into(),
            spans: spans.into(),
            env_pairs,
            body_start,
            body_complete: flags & PHP_WORKER_REQUEST_BODY_COMPLETE != 0,
            one_shot_worker: flags & PHP_WORKER_REQUEST_ONE_SHOT_WORKER != 0,
            taken_mark: None,
            content_length,
            handle,
            state: Arc::new(RunState::queued()),
            finished: Cell::new(false),
            host,
            created: Instant::now(),
            reply: None,
            chain: TaskChain::default(),
        }))
    }

    /// Whether the script is a worker script serving only this request, in a request of
    /// its own (PHP_WORKER_REQUEST_ONE_SHOT_WORKER).
    pub fn one_shot_worker(&self) -> bool {
        self.one_shot_worker
    }

    /// A request no host waits for: what a worker script sees while it boots. `fields`
    /// are in [`Field`] order; the last `env_pairs` of `vars` answer getenv().
    pub fn synthetic(host: Arc<Host>, fields: &[&str], vars: &[(&str, &str)], env_pairs: usize) -> Box<Request> {
        let (block, spans) = encode(fields, vars, b"");
        let request = Request::new(host, &block, &spans, env_pairs as u32, 0, 0, PHP_WORKER_REQUEST_BODY_COMPLETE, 0)
            .expect("a synthetic request follows the layout");
        request.disown();
        request
    }

    /// A task for a task worker: `fields` and `vars` as for [`Request::synthetic`], the
    /// payload as the request body (php://input reads it too), where the answer goes, and
    /// the task workers it was sent through.
    pub fn task(
        host: Arc<Host>,
        fields: &[&str],
        vars: &[(&str, &str)],
        env_pairs: usize,
        payload: &[u8],
        reply: TaskReply,
        chain: TaskChain,
    ) -> Box<Request> {
        let (block, spans) = encode(fields, vars, payload);
        let mut request = Request::new(
            host,
            &block,
            &spans,
            env_pairs as u32,
            payload.len(),
            payload.len() as i64,
            PHP_WORKER_REQUEST_BODY_COMPLETE,
            0,
        )
        .expect("a task request follows the layout");
        request.reply = Some(reply);
        request.chain = chain;
        request
    }

    /// Whether it is a task, whose answer goes to the PHP thread that sent it.
    pub fn is_task(&self) -> bool {
        self.reply.is_some()
    }

    /// The task workers a task was sent through (empty for a request).
    pub fn task_chain(&self) -> &TaskChain {
        &self.chain
    }

    /// Answers a task (once; later answers are dropped). False for an HTTP request.
    pub fn answer_task(&self, result: TaskResult) -> bool {
        let Some(reply) = &self.reply else { return false };
        if !self.finished.replace(true) {
            reply.send(result);
        }
        true
    }

    pub fn handle(&self) -> usize {
        self.handle
    }

    /// When the host submitted it.
    pub fn created(&self) -> Instant {
        self.created
    }

    pub fn host(&self) -> &Arc<Host> {
        &self.host
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

    /// A reference to the run state that outlives the request (see `state`).
    pub fn run_state_ref(&self) -> Arc<RunState> {
        self.state.clone()
    }

    /// The bytes of a fixed field, without its NUL.
    pub fn field(&self, field: Field) -> &[u8] {
        layout::get(&self.block, &self.spans, field as usize)
    }

    /// A fixed field as a C string that lives as long as the request.
    pub fn field_ptr(&self, field: Field) -> *const c_char {
        self.block[self.spans[2 * field as usize] as usize..].as_ptr().cast()
    }

    /// Like [`Request::field_ptr`], but NULL when the field is empty.
    pub fn field_ptr_or_null(&self, field: Field) -> *const c_char {
        if self.field(field).is_empty() { std::ptr::null() } else { self.field_ptr(field) }
    }

    /// The `$_SERVER` pairs as (spans, pair count), four u32 per pair.
    /// How many of the last variables are the configured env.
    pub fn env_pair_count(&self) -> usize {
        self.env_pairs
    }

    pub fn var_spans(&self) -> (&[u32], usize) {
        let vars = &self.spans[2 * Field::Count as usize..];
        (vars, vars.len() / 4)
    }

    /// The strings, without the read-ahead body.
    pub fn block(&self) -> &[u8] {
        &self.block[..self.body_start]
    }

    fn var(&self, i: usize) -> (&[u8], &[u8]) {
        let (vars, _) = self.var_spans();
        (layout::get(&self.block, vars, 2 * i), layout::get(&self.block, vars, 2 * i + 1))
    }

    /// The value `getenv(name)` gets from the configured environment, as a C string.
    /// The configured env value of `name` (the last one set), without its NUL.
    pub fn env_value(&self, name: &[u8]) -> Option<&[u8]> {
        let (_, pairs) = self.var_spans();
        (pairs - self.env_pairs..pairs).rev().map(|i| self.var(i)).find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// Calls `f` with each configured env (name, value) pair, in order.
    pub fn for_each_env(&self, mut f: impl FnMut(&[u8], &[u8])) {
        let (_, pairs) = self.var_spans();
        for i in pairs - self.env_pairs..pairs {
            let (n, v) = self.var(i);
            f(n, v);
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

    /// The C view of the request, with `ctx` as PHP's `SG(server_context)`.
    pub fn shim(&self, ctx: *mut std::ffi::c_void) -> ShimRequest {
        let c = |f: Field| self.field_ptr(f);
        ShimRequest {
            ctx,
            method: c(Field::Method),
            request_uri: c(Field::RequestUri),
            query_string: c(Field::QueryString),
            content_type: self.field_ptr_or_null(Field::ContentType),
            path_translated: c(Field::PathTranslated),
            script_filename: c(Field::ScriptFilename),
            authorization: self.field_ptr_or_null(Field::Authorization),
            content_length: self.content_length.max(0),
            argc: 0,
            argv: std::ptr::null(),
        }
    }

    /// Hands a request that will not be served back to the host, which answers it.
    pub fn refuse(&self, refusal: Refusal) {
        if self.reply.is_some() {
            self.answer_task(Err(TaskError::Refused(refusal.reason().into())));
            return;
        }
        if self.finished.replace(true) {
            return;
        }
        let (code, retry_after_ms) = refusal.wire();
        self.host.refuse(self.handle, code, retry_after_ms);
    }

    /// Hands back a request taken from a queue that will not run: withdrawn by the host
    /// (which answers it), or refused for `otherwise`. True in the second case.
    pub fn refuse_unless_withdrawn(&self, otherwise: Refusal) -> bool {
        let started = self.state.start();
        self.refuse(if started { otherwise } else { Refusal::Withdrawn });
        started
    }

    /// Asks for the handle to be stored at `mark` when a PHP thread takes the request.
    pub fn set_taken_mark(&mut self, mark: TakenMark) {
        self.taken_mark = Some(mark);
    }

    /// Tells the host a PHP thread took the request, if it asked: a store in its memory,
    /// made on the PHP thread before the script starts. No callback: a host that asks
    /// for this on every request (a child process) would pay a crossing into Go each time.
    pub fn report_taken(&self) {
        if let (Some(mark), None) = (&self.taken_mark, &self.reply) {
            mark.store(self.handle as u64);
        }
    }

    /// Marks a request the host keeps the answering of (submission failed).
    pub fn disown(&self) {
        self.finished.set(true);
    }

    fn mark_finished(&self) {
        self.finished.set(true);
    }
}

/// A word of the host's memory where a PHP thread stores the request's handle when it
/// takes the request: php_worker's child processes mark their requests in a table the
/// Caddy process shares, so that after a crash it knows which ones never started.
pub struct TakenMark(NonNull<AtomicU64>);

// SAFETY: the word is the host's, which keeps it valid and writable from any thread until
// the request's DONE (the contract of php_worker_request_submit()); it is only ever
// written atomically.
unsafe impl Send for TakenMark {}
// SAFETY: as for Send: a shared reference only makes atomic stores.
unsafe impl Sync for TakenMark {}

impl TakenMark {
    /// A mark at `word`; None for NULL.
    ///
    /// # Safety
    /// `word` is NULL, or 8-byte aligned, writable and valid until the request that
    /// carries the mark is done, and only accessed atomically by others meanwhile.
    pub unsafe fn new(word: *mut u64) -> Option<TakenMark> {
        NonNull::new(word.cast::<AtomicU64>()).map(TakenMark)
    }

    fn store(&self, handle: u64) {
        // SAFETY: valid and aligned until the request is done (`new`'s contract), and the
        // request that holds this mark is not done while its thread reports it taken.
        unsafe { self.0.as_ref() }.store(handle, Ordering::Release);
    }
}

/// Lays strings out the way the host does for php_worker_request_submit().
pub fn encode(fields: &[&str], vars: &[(&str, &str)], body: &[u8]) -> (Vec<u8>, Vec<u32>) {
    let mut strings = Strings::default();
    for f in fields {
        strings.push(f.as_bytes());
    }
    for (k, v) in vars {
        strings.push(k.as_bytes());
        strings.push(v.as_bytes());
    }
    strings.append_raw(body);
    strings.into_parts()
}

impl Drop for Request {
    fn drop(&mut self) {
        // The host waits for exactly one DONE per submitted request: never leave it hanging.
        self.refuse(Refusal::Lost);
    }
}

/// Why the core did not serve a request. The host turns each into its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its pool stopped before a thread took it.
    Stopped,
    /// No thread of its worker can boot the script; the next attempt is this far off.
    BootFailing { retry_after: Duration },
    /// Its body could not be read before the headers left.
    Body,
    /// The host withdrew it and answers it itself.
    Withdrawn,
    /// Dropped without an answer.
    Lost,
}

impl Refusal {
    /// Why, in words: what a task's sender is told.
    fn reason(self) -> &'static str {
        match self {
            Refusal::Stopped => "its task worker stopped before a thread took it",
            Refusal::BootFailing { .. } => "no thread of its task worker can start the script (the server log says why)",
            Refusal::Body => "its payload could not be read",
            Refusal::Withdrawn => "it was withdrawn",
            Refusal::Lost => "its task worker dropped it without an answer",
        }
    }

    /// The PHP_WORKER_REFUSED_* code and `retry_after_ms` of the ABI.
    fn wire(self) -> (u32, u32) {
        match self {
            Refusal::Stopped => (PHP_WORKER_REFUSED_STOPPED, 0),
            Refusal::BootFailing { retry_after } => {
                (PHP_WORKER_REFUSED_BOOT_FAILING, u32::try_from(retry_after.as_millis()).unwrap_or(u32::MAX))
            }
            Refusal::Body => (PHP_WORKER_REFUSED_BODY, 0),
            Refusal::Withdrawn => (PHP_WORKER_REFUSED_WITHDRAWN, 0),
            Refusal::Lost => (PHP_WORKER_REFUSED_LOST, 0),
        }
    }
}

/// Whether a request waits in its queue, runs, or was cancelled before it could run,
/// and whether the host saw its client leave. The host cancels from its own threads; the
/// PHP thread claims the request when it dequeues it. Exactly one of the two wins.
pub struct RunState {
    phase: AtomicU8,
    client_gone: AtomicBool,
}

impl RunState {
    const QUEUED: u8 = 0;
    const RUNNING: u8 = 1;
    const CANCELLED: u8 = 2;

    /// A request waiting in its queue, its client there.
    pub fn queued() -> RunState {
        RunState { phase: AtomicU8::new(Self::QUEUED), client_gone: AtomicBool::new(false) }
    }

    /// The PHP thread takes the request. False when the host cancelled it first.
    pub fn start(&self) -> bool {
        self.phase.compare_exchange(Self::QUEUED, Self::RUNNING, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// The host gives up on the request. True when it had not started and never will.
    pub fn cancel(&self) -> bool {
        self.phase.compare_exchange(Self::QUEUED, Self::CANCELLED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// The host saw the client leave (php_worker_request_client_gone): the PHP thread
    /// learns it without asking the host through a callback.
    pub fn mark_client_gone(&self) {
        self.client_gone.store(true, Ordering::Release);
    }

    /// Whether the host said the client left.
    pub fn client_gone(&self) -> bool {
        self.client_gone.load(Ordering::Acquire)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::abi::types::{PHP_WORKER_RESPONSE_DONE, PHP_WORKER_RESPONSE_REFUSED};
    use crate::testing::{calls_for, recording_host};

    pub fn fields<'a>(method: &'a str, script: &'a str) -> Vec<&'a str> {
        let mut f = vec![""; Field::Count as usize];
        f[Field::Method as usize] = method;
        f[Field::ScriptFilename as usize] = script;
        f[Field::Protocol as usize] = "HTTP/1.1";
        f
    }

    pub fn request(method: &str, vars: &[(&str, &str)], env_pairs: u32, body: &[u8], complete: bool) -> (Box<Request>, usize) {
        let (host, handle) = recording_host();
        let (block, spans) = encode(&fields(method, "/srv/a.php"), vars, body);
        let flags = if complete { PHP_WORKER_REQUEST_BODY_COMPLETE } else { 0 };
        let r = Request::new(host, &block, &spans, env_pairs, body.len(), 8, flags, handle).unwrap();
        (r, handle)
    }

    /// A request dropped unanswered answers its host (Refusal::Lost), except inside the
    /// exports Go calls with #cgo nocallback, where a call back into Go would crash the
    /// process: there, not even a panic's unwinding reaches the host.
    #[test]
    fn a_request_dropped_where_go_allows_no_callback_never_calls_back() {
        let (lost, lost_handle) = request("GET", &[], 0, b"", true);
        drop(lost);
        assert_eq!(calls_for(lost_handle).len(), 1, "an unanswered request is refused as lost");

        let (request_a, a) = request("GET", &[], 0, b"", true);
        crate::host::without_callbacks(|| drop(request_a));
        assert!(calls_for(a).is_empty(), "no call back into the host");

        let (request_b, b) = request("GET", &[], 0, b"", true);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::host::without_callbacks(move || {
                let _held = request_b;
                panic!("a bug inside the export");
            })
        }));
        assert!(unwound.is_err());
        assert!(calls_for(b).is_empty(), "nor while a panic unwinds");

        let (after, after_handle) = request("GET", &[], 0, b"", true);
        drop(after);
        assert_eq!(calls_for(after_handle).len(), 1, "callbacks are back once the export returns");
    }

    /// A host that asked (a taken mark) finds the handle in its word once a thread took
    /// the request, and hears of it through no callback; one that did not ask, nothing.
    #[test]
    fn a_taken_request_is_marked_only_when_asked() {
        let (mut marked, handle) = request("GET", &[], 0, b"", true);
        let mut word = 0u64;
        // SAFETY: `word` outlives the request, which is disowned below, in this frame.
        marked.set_taken_mark(unsafe { TakenMark::new(&mut word) }.unwrap());
        marked.report_taken();
        assert!(calls_for(handle).is_empty(), "no callback");
        marked.disown();
        assert_eq!(word, handle as u64);

        let (quiet, quiet_handle) = request("GET", &[], 0, b"", true);
        quiet.report_taken();
        assert!(calls_for(quiet_handle).is_empty());
        quiet.disown();
        // SAFETY: NULL is allowed.
        assert!(unsafe { TakenMark::new(std::ptr::null_mut()) }.is_none());
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
        assert!(r.env_value(b"A").is_none(), "only env pairs answer getenv");
        let v = r.env_value(b"APP_ENV").unwrap();
        assert_eq!(v, b"prod");
        // SAFETY: the block keeps a NUL after each value (getenv hands it to C as is).
        assert_eq!(unsafe { *v.as_ptr().add(v.len()) }, 0);
        assert_eq!(r.proto_num(), 1001);
        r.disown();
    }

    #[test]
    fn rejects_malformed_layouts() {
        let (host, h) = recording_host();
        let (block, mut spans) = encode(&fields("GET", "/a.php"), &[], b"");
        assert!(Request::new(host.clone(), &block, &spans[..4], 0, 0, 0, 0, h).is_err());
        assert!(Request::new(host.clone(), &block, &spans, 1, 0, 0, 0, h).is_err(), "env pairs > pairs");
        assert!(Request::new(host.clone(), &block, &spans, 0, block.len() + 1, 0, 0, h).is_err());
        spans[1] = 2; // "GE": the span now ends on the non-NUL byte "T"
        assert!(Request::new(host.clone(), &block, &spans, 0, 0, 0, 0, h).is_err());
        spans[1] = 10_000;
        assert!(Request::new(host, &block, &spans, 0, 0, 0, 0, h).is_err());
        assert!(calls_for(h).is_empty(), "a refused request is never answered by Rust");
    }

    #[test]
    fn an_unanswered_request_is_handed_back_once() {
        let (r, h) = request("GET", &[], 0, b"", true);
        drop(r);
        let calls = calls_for(h);
        assert_eq!(calls.len(), 1);
        assert_eq!((calls[0].status, calls[0].flags), (0, PHP_WORKER_RESPONSE_DONE | PHP_WORKER_RESPONSE_REFUSED));
        assert_eq!((calls[0].refusal, calls[0].retry_after_ms), (PHP_WORKER_REFUSED_LOST, 0));
    }

    #[test]
    fn a_refusal_carries_its_code_and_pause_and_ends_the_request() {
        let (r, h) = request("GET", &[], 0, b"", true);
        assert!(r.run_state().start());
        r.refuse(Refusal::BootFailing { retry_after: Duration::from_millis(1600) });
        r.refuse(Refusal::Stopped);
        drop(r);
        let calls = calls_for(h);
        assert_eq!(calls.len(), 1, "the first refusal is the last call");
        assert_eq!((calls[0].refusal, calls[0].retry_after_ms), (PHP_WORKER_REFUSED_BOOT_FAILING, 1600));
        let (withdrawn, h) = request("GET", &[], 0, b"", true);
        assert!(withdrawn.run_state().cancel());
        withdrawn.refuse_unless_withdrawn(Refusal::Stopped);
        assert_eq!(calls_for(h)[0].refusal, PHP_WORKER_REFUSED_WITHDRAWN, "the host answers what it withdrew");
    }
}
