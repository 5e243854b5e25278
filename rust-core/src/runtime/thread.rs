//! A PHP thread's thread-local state ([`PhpThread`]): what its loops and PHP's hooks
//! keep between calls, and how it takes work from its pool and obeys its commands.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, select};

use super::counters::RouteGrowth;
use super::generation::Generation;
use super::info::{ThreadInfo, ThreadState};
use super::protocol::{Assignment, Command, Job, Leave, TaskRouter};
use crate::host::{Host, Level};
use crate::layout::Strings;

use crate::config::WorkerKind;
use crate::request::task::{TaskChain, TaskResult};
use crate::request::Request;
use crate::request::context::{RequestContext, Scratch};
use crate::store::LocalStore;

/// How long an idle thread waits on its pool's queue alone before it waits on its
/// commands too.
const QUEUE_FIRST: Duration = Duration::from_millis(10);

/// The thread-local state of a PHP thread: everything its loops and PHP's hooks keep
/// between calls. It lives in [`CURRENT`]; code reaches it with short borrows through
/// [`with_thread`], never held across a call into PHP (the hooks borrow it too).
pub struct PhpThread {
    pub info: Arc<ThreadInfo>,
    pub host: Arc<Host>,
    ctl: Receiver<Command>,
    pub assignment: Assignment,
    /// What its pool last told it about staying.
    standing: Standing,
    /// The newest restart epoch a Recycle command named.
    recycle: Option<u64>,
    /// Response buffers reused by every request of the thread.
    pub scratch: Scratch,
    /// The thread's putenv() calls.
    pub env: EnvOverrides,
    /// The worker script running on the thread, if any.
    pub run: Option<WorkerRun>,
    /// When the request the thread runs started.
    request_started: Instant,
    /// The thread's local store: it outlives worker script restarts and pool moves.
    pub local_store: LocalStore,
    /// Where a value read from a store is copied for the C shim to decode.
    pub store_out: Vec<u8>,
    /// Where the thread sends tasks (php_worker_task()); None outside an engine.
    pub tasks: Option<Arc<dyn TaskRouter>>,
    /// The answers of the thread's last php_worker_task() call, for the C shim to copy.
    pub task_answers: Vec<TaskResult>,
    /// Its pool counts it among its free threads (see PhpThread::mark_free).
    counted_free: bool,
    /// Requests served on the thread's current PHP context.
    pub(super) context_requests: u64,
    /// After this many, the thread starts a fresh PHP context (0: never).
    pub(super) context_max_requests: u64,
}

/// A thread's putenv() calls (src/runtime/env.rs), and the last merged environment
/// handed to C.
#[derive(Default)]
pub struct EnvOverrides {
    /// A value, or None for a name putenv() unset.
    pub(super) set: HashMap<Vec<u8>, Option<Vec<u8>>>,
    pub(super) merged: Strings,
    /// In a worker's requests: the calls its script made before its loop, which each
    /// request starts from.
    baseline: Option<HashMap<Vec<u8>, Option<Vec<u8>>>>,
    /// A putenv() since the baseline was taken or put back.
    changed: bool,
}

impl EnvOverrides {
    /// Forgets the thread's putenv() calls, and a worker's baseline.
    pub fn reset(&mut self) {
        self.set.clear();
        self.baseline = None;
        self.changed = false;
    }

    /// Records putenv(name[=value]).
    pub(super) fn put(&mut self, name: Vec<u8>, value: Option<Vec<u8>>) {
        self.set.insert(name, value);
        self.changed = true;
    }

    /// The calls so far are the worker script's own: requests start from them.
    pub(super) fn keep_baseline(&mut self) {
        self.baseline = Some(self.set.clone());
        self.changed = false;
    }

    /// Drops what the request's putenv() calls did.
    pub(super) fn back_to_baseline(&mut self) {
        if let Some(baseline) = self.baseline.as_ref().filter(|_| self.changed) {
            self.set = baseline.clone();
            self.changed = false;
        }
    }
}

/// A request context lent to PHP as a raw pointer (SG(server_context) holds it while
/// the script runs). The box is owned here and freed on every path: [`LentContext::take`]
/// takes it back once PHP is done with it; dropped without that (a panic unwinding
/// through the worker loop), the context is freed and its request answered as lost by
/// `Request`'s drop, never left waiting.
pub struct LentContext(std::ptr::NonNull<RequestContext>);

impl LentContext {
    pub fn new(ctx: Box<RequestContext>) -> LentContext {
        LentContext(std::ptr::NonNull::from(Box::leak(ctx)))
    }

    /// The pointer lent to PHP, valid while `self` lives.
    pub fn as_ptr(&self) -> *mut RequestContext {
        self.0.as_ptr()
    }

    /// Takes the context back.
    ///
    /// # Safety
    /// PHP no longer uses the pointer (its request or script ended).
    pub unsafe fn take(self) -> Box<RequestContext> {
        let ptr = self.0.as_ptr();
        std::mem::forget(self);
        // SAFETY: from Box::leak in new(), and not freed since (take consumes self, and
        // drop did not run); the caller vouches PHP is done with it.
        unsafe { Box::from_raw(ptr) }
    }
}

impl Drop for LentContext {
    fn drop(&mut self) {
        // SAFETY: from Box::leak in new(). Only a panic's unwinding gets here (the loops
        // take every context back), after PHP returned: nothing uses the pointer.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// The worker state of a thread during one run of its script (src/runtime/worker.rs).
pub struct WorkerRun {
    pub(super) generation: Arc<Generation>,
    /// The boot/idle context; its output goes to the log.
    pub(super) idle: LentContext,
    /// The HTTP request PHP is handling, if any.
    pub(super) in_flight: Option<LentContext>,
    pub(super) handled: u64,
    pub(super) reached_handle_request: bool,
    /// A request ended badly (exit() or a failure in its startup, handler or shutdown).
    pub(super) request_failed: bool,
    /// Why frankenphp_handle_request() returned false: the script must end.
    pub(super) ending: Option<Ending>,
    /// When the script started.
    pub(super) started: Instant,
    /// It restarts after a max_requests end: its boot is logged at debug level.
    pub(super) restarts_quietly: bool,
    /// The OPcache restart epoch when the script entered PHP (src/runtime/opcache.rs).
    pub(super) gate_epoch: u64,
    /// PHP's memory when the request in flight began.
    pub(super) began_memory: usize,
    /// The routes that grew the script's memory during this run.
    pub(super) growth: RouteGrowth,
    /// It began its generation's OPcache revalidation and has not ended it.
    pub(super) revalidating: bool,
    /// The chain of the task in flight (src/request/task.rs); empty for a request, and
    /// between tasks.
    pub(super) task_chain: TaskChain,
}

/// Why a worker script is told to end (the first reason found wins).
pub enum Ending {
    /// The thread leaves its pool.
    Leave(Leave),
    /// OPcache restarts; the script boots again afterwards.
    Recycle,
    /// It reached max_requests or max_memory; it boots again.
    Limit(Limit),
}

/// The limit a worker script reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    MaxRequests,
    /// PHP's memory from the system when it was found past max_memory.
    MaxMemory(usize),
}

thread_local! {
    static CURRENT: RefCell<Option<PhpThread>> = const { RefCell::new(None) };
}

/// Runs `f` with the calling PHP thread's state. Panics on another thread.
pub fn with_thread<T>(f: impl FnOnce(&mut PhpThread) -> T) -> T {
    CURRENT.with(|t| f(t.borrow_mut().as_mut().expect("called on a PHP thread")))
}

/// Runs `f` with the calling thread's state, if it is a PHP thread.
pub fn try_with_thread<T>(f: impl FnOnce(&mut PhpThread) -> T) -> Option<T> {
    CURRENT.with(|t| t.borrow_mut().as_mut().map(f))
}

/// Ends the calling thread's request (see [`PhpThread::end_request`]) and gives the
/// thread its response buffers back. Its log line, if any, leaves after the thread state's
/// borrow ends, as every host callback does.
pub fn end_request(memory: usize, scratch: Scratch) {
    let came_back = with_thread(|t| {
        t.scratch = scratch;
        t.end_request(memory).map(|ran| (t.host.clone(), t.info.name(), ran))
    });
    if let Some((host, thread, ran)) = came_back {
        host.event(0, Level::Warn, "a stuck PHP thread came back: its request ended, and the thread leaves its pool", &[
            ("thread", thread.into()),
            ("request_seconds", ((ran.as_secs_f64() * 10.0).round() / 10.0).into()),
        ]);
    }
}

/// Whether a thread stays with its pool.
enum Standing {
    Serving,
    /// Serve what is queued, then leave.
    Draining,
    /// Leave after the current request (and worker script).
    Leaving(Leave),
}

enum Message {
    Command(Command),
    Request(Box<Request>),
    Closed,
}

impl PhpThread {
    /// Makes the calling OS thread a PHP thread with this state.
    pub(super) fn install(
        info: Arc<ThreadInfo>,
        host: Arc<Host>,
        ctl: Receiver<Command>,
        assignment: Assignment,
        tasks: Option<Arc<dyn TaskRouter>>,
    ) {
        CURRENT.with(|t| {
            *t.borrow_mut() = Some(PhpThread {
                info,
                host,
                ctl,
                assignment,
                standing: Standing::Serving,
                recycle: None,
                scratch: Scratch::default(),
                env: EnvOverrides::default(),
                run: None,
                request_started: Instant::now(),
                local_store: LocalStore::default(),
                store_out: Vec::new(),
                tasks,
                task_answers: Vec::new(),
                counted_free: false,
                context_requests: 0,
                context_max_requests: 0,
            })
        });
    }

    /// The chain a task sent from this thread carries: the chain of the task it runs,
    /// then its own task worker. Only task workers are in chains: no task waits for a
    /// thread of any other kind.
    pub fn task_chain(&self) -> TaskChain {
        match &self.run {
            Some(run) if run.generation.spec.kind == WorkerKind::Task => run.task_chain.then(self.assignment.pool, &run.generation.name),
            _ => TaskChain::default(),
        }
    }

    /// Whether the thread's PHP context served its engine's max_requests: the thread
    /// starts a fresh one, freeing what extensions keep in the thread's own storage.
    pub fn context_spent(&self) -> bool {
        self.context_max_requests != 0 && self.context_requests >= self.context_max_requests
    }

    /// Frees the calling thread's state.
    pub(super) fn uninstall() {
        if let Some(mut t) = CURRENT.with(|t| t.borrow_mut().take()) {
            t.mark_taken(); // an ending thread is nobody's free thread
        }
    }

    /// Serves another assignment (the thread moved pools); returns the previous one.
    pub(super) fn switch(&mut self, assignment: Assignment) -> Assignment {
        self.mark_taken(); // free for its old pool, not yet for the new one
        self.standing = Standing::Serving;
        std::mem::replace(&mut self.assignment, assignment)
    }

    /// Counts the thread among its pool's free threads, from the moment its request's
    /// response is complete (before the host can send the next request) until it takes
    /// its next job: a request queued meanwhile is this thread's soon, and
    /// max_wait_time does not count that hand-over. Not a thread of a staged generation,
    /// which takes no requests yet.
    pub fn mark_free(&mut self) {
        if !self.counted_free && self.assignment.takes_requests() {
            self.assignment.counters.waiting.fetch_add(1, Ordering::Relaxed);
            self.counted_free = true;
        }
    }

    /// Its pool no longer counts it free: it took a job, boots its script again, starts a
    /// fresh PHP context, moves to another pool (switch) or ends (uninstall). A thread
    /// marked free when its last response completed keeps that mark until one of these:
    /// left set through a reboot, it would tell max_wait_time a thread is free for as
    /// long as the boot (and a failing boot's backoff) lasts.
    pub(super) fn mark_taken(&mut self) {
        if std::mem::take(&mut self.counted_free) {
            self.assignment.counters.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Blocks for the next request of the thread's pool, or for a command that makes it
    /// leave. Commands that do not (Activate, Drain) are handled here.
    pub fn next_job(&mut self) -> Job {
        self.mark_free();
        let job = self.wait_for_job();
        self.mark_taken();
        job
    }

    fn wait_for_job(&mut self) -> Job {
        loop {
            if let Some(leave) = self.take_leave() {
                return Job::Leave(leave);
            }
            if let Some(epoch) = self.recycle.take()
                && self.run.as_ref().is_some_and(|run| run.gate_epoch <= epoch)
            {
                return Job::Recycle;
            }
            if matches!(self.standing, Standing::Draining) {
                return match self.assignment.queue.try_recv() {
                    Ok(request) if request.run_state().start() => Job::Request(request),
                    Ok(request) => Job::Withdrawn(request),
                    Err(_) => Job::Leave(Leave::Exit),
                };
            }
            let message = if self.assignment.takes_requests() {
                self.info.set_state(ThreadState::Ready);
                if let Ok(command) = self.ctl.try_recv() {
                    self.obey(command);
                    continue;
                }
                // Wait on the queue alone first: a plain receive spins on the queue before
                // it sleeps, and catches the next request of a busy pool without a
                // futex wake-up, which a select over two channels mostly needs (25% of
                // the hello-world throughput). Commands wait for it at most this long.
                match self.assignment.queue.recv_timeout(QUEUE_FIRST) {
                    Ok(request) if request.run_state().start() => return Job::Request(request),
                    Ok(request) => return Job::Withdrawn(request),
                    Err(RecvTimeoutError::Disconnected) => return Job::Leave(Leave::Exit),
                    Err(RecvTimeoutError::Timeout) => {}
                }
                select! {
                    recv(self.ctl) -> c => c.map_or(Message::Closed, Message::Command),
                    recv(self.assignment.queue) -> r => r.map_or(Message::Closed, Message::Request),
                }
            } else {
                self.info.set_state(ThreadState::Standby);
                self.ctl.recv().map_or(Message::Closed, Message::Command)
            };
            match message {
                Message::Request(request) if request.run_state().start() => return Job::Request(request),
                Message::Request(request) => return Job::Withdrawn(request),
                Message::Command(command) => self.obey(command),
                Message::Closed => return Job::Leave(Leave::Exit),
            }
        }
    }

    /// Waits up to `timeout` for a command that makes the thread leave (a worker backing
    /// off between boot attempts); returns it, or None after the wait.
    pub fn wait_for_leave(&mut self, timeout: Duration) -> Option<Leave> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(leave) = self.take_leave() {
                return Some(leave);
            }
            if matches!(self.standing, Standing::Draining) {
                return Some(Leave::Exit);
            }
            match self.ctl.recv_deadline(deadline) {
                Ok(command) => self.obey(command),
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => return Some(Leave::Exit),
            }
        }
    }

    fn obey(&mut self, command: Command) {
        match command {
            Command::Stop => self.standing = Standing::Leaving(Leave::Exit),
            // A thread told to leave leaves, drained or not.
            Command::Drain if matches!(self.standing, Standing::Serving) => self.standing = Standing::Draining,
            Command::Drain | Command::Activate => {}
            Command::Join(assignment) => self.standing = Standing::Leaving(Leave::Join(assignment)),
            Command::Recycle(epoch) => self.recycle = Some(self.recycle.map_or(epoch, |e| e.max(epoch))),
        }
        if matches!(self.standing, Standing::Leaving(_)) {
            self.info.set_state(ThreadState::Stopping);
        }
    }

    /// The leave a command asked for, once.
    fn take_leave(&mut self) -> Option<Leave> {
        match std::mem::replace(&mut self.standing, Standing::Serving) {
            Standing::Leaving(leave) => Some(leave),
            other => {
                self.standing = other;
                None
            }
        }
    }

    /// A request taken from the queue starts: it stops waiting, and the thread list
    /// shows it.
    pub fn begin_request(&mut self, request: &Request) {
        self.request_started = Instant::now();
        self.assignment.counters.wait.observe(self.request_started.saturating_duration_since(request.created()));
        use crate::abi::types::Field;
        self.info.begin_request(request.field(Field::Method), request.field(Field::RequestUri), request.field(Field::ScriptFilename));
    }

    /// The request started by [`PhpThread::begin_request`] ended; `memory` is what PHP
    /// used when it ended. Returns how long it ran when the watchdog had given up on it.
    fn end_request(&mut self, memory: usize) -> Option<Duration> {
        self.context_requests += 1;
        let now = Instant::now();
        let ran = now.saturating_duration_since(self.request_started);
        self.assignment.counters.duration.observe(ran);
        self.info.end_request(memory, now);
        self.info.set_stuck(false).then_some(ran)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::types::{PHP_WORKER_REFUSED_LOST, PHP_WORKER_RESPONSE_REFUSED};
    use crate::request::context::Sink;
    use crate::testing::wait_done;

    /// A context lent to PHP and never taken back (a panic unwound through the worker
    /// loop) still answers its request: the host is never left waiting for it.
    #[test]
    fn a_lent_context_dropped_unreturned_answers_its_request() {
        let (request, handle) = crate::request::tests::request("GET", &[], 0, b"", true);
        let lent = LentContext::new(Box::new(RequestContext::new(request, Scratch::default(), Sink::Client)));
        assert!(!lent.as_ptr().is_null());
        drop(lent);
        let calls = wait_done(handle, "the dropped context's request");
        assert_eq!(calls.len(), 1);
        assert!(calls[0].flags & PHP_WORKER_RESPONSE_REFUSED != 0 && calls[0].refusal == PHP_WORKER_REFUSED_LOST, "{:?}", calls[0].refusal);
    }

    /// Taken back, it is the caller's: nothing is answered until the caller finishes it.
    #[test]
    fn a_lent_context_taken_back_is_not_answered_twice() {
        let (request, handle) = crate::request::tests::request("GET", &[], 0, b"", true);
        let lent = LentContext::new(Box::new(RequestContext::new(request, Scratch::default(), Sink::Client)));
        // SAFETY: no PHP ever saw the pointer.
        let ctx = unsafe { lent.take() };
        assert!(crate::testing::calls_for(handle).is_empty(), "taking it back answers nothing");
        drop(ctx.finish(false));
        let calls = wait_done(handle, "the finished request");
        assert_eq!(calls.iter().filter(|c| c.flags & PHP_WORKER_RESPONSE_REFUSED != 0).count(), 0);
    }
}
