//! A PHP thread's state: what other threads may read ([`ThreadInfo`], atomics the thread
//! list and the engine read without calling PHP), what its pool tells it ([`Command`],
//! [`Assignment`]), and its thread-local state ([`PhpThread`]): how it takes work from its
//! pool and obeys its pool's commands.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, select};

use super::counters::{PoolCounters, RouteGrowth};
use super::generation::Generation;
use crate::host::{Host, Level};
use crate::layout::Strings;
use crate::php::sys::{self, KillSlot};
use crate::request::expiry::Expiry;
use crate::request::{Refusal, Request, RequestContext, Scratch};
use crate::store::LocalStore;

/// Names a pool; chosen by the host, stable across engine restarts. 0 is the classic pool.
pub type PoolId = u32;

/// Stack of every PHP thread: PHP 8.2 has no stack-overflow guard, so give deep
/// recursion the room a main thread would have.
pub const PHP_THREAD_STACK: usize = 8 * 1024 * 1024;

/// How long an idle thread waits on its pool's queue alone before it waits on its
/// commands too.
const QUEUE_FIRST: Duration = Duration::from_millis(10);

/// Longest URI kept for the thread list.
const MAX_SHOWN_URI: usize = 1024;

/// What a thread is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ThreadState {
    /// Creating its PHP context.
    Starting = 0,
    /// Running a worker script up to its first frankenphp_handle_request().
    Booting,
    /// A booted worker whose generation does not take requests yet.
    Standby,
    /// Waiting for a request.
    Ready,
    /// Running a request.
    Busy,
    /// A worker whose script failed to boot, waiting before it tries again.
    Backoff,
    /// Finishing its script before it leaves its pool.
    Stopping,
    /// Gone.
    Done,
}

impl ThreadState {
    const ALL: [ThreadState; 8] = [
        ThreadState::Starting,
        ThreadState::Booting,
        ThreadState::Standby,
        ThreadState::Ready,
        ThreadState::Busy,
        ThreadState::Backoff,
        ThreadState::Stopping,
        ThreadState::Done,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ThreadState::Starting => "starting",
            ThreadState::Booting => "booting",
            ThreadState::Standby => "standby",
            ThreadState::Ready => "ready",
            ThreadState::Busy => "busy",
            ThreadState::Backoff => "backoff",
            ThreadState::Stopping => "stopping",
            ThreadState::Done => "done",
        }
    }
}

/// The state of one PHP thread that other threads may read: atomics written only by
/// the thread itself, and its current request behind a lock it holds for a copy.
pub struct ThreadInfo {
    pub index: usize,
    state: AtomicU8,
    pool: AtomicU32,
    generation: AtomicU32,
    requests: AtomicU64,
    memory: AtomicU64,
    /// PHP's memory from the system (memory_get_usage(true)) when a worker script last
    /// asked for a request: what max_memory compares.
    real_memory: AtomicU64,
    /// When it last ended a request or joined its pool, in ms since [`epoch`].
    idle_since: AtomicU64,
    current: Mutex<CurrentRequest>,
    /// The worker it runs; None for a classic thread.
    worker: Mutex<Option<Arc<str>>>,
    /// Set while the thread has a PHP context.
    kill: Mutex<Option<KillSlot>>,
    /// Lets the watchdog answer the thread's request from outside (src/watchdog.rs).
    pub expiry: Arc<Expiry>,
    /// The watchdog gave up on the thread's request: it is stuck in a call that does not
    /// return, and a replacement serves its pool.
    stuck: AtomicBool,
}

#[derive(Default, Clone)]
struct CurrentRequest {
    method: String,
    uri: String,
    /// The script it runs (for the watchdog's log line).
    script: String,
}

/// A copy of a thread's state.
#[derive(Clone, Debug)]
pub struct ThreadSnapshot {
    pub index: usize,
    pub state: ThreadState,
    pub pool: PoolId,
    pub generation: u32,
    pub requests: u64,
    pub memory: u64,
    pub real_memory: u64,
    pub method: String,
    pub uri: String,
    pub worker: Option<Arc<str>>,
    pub stuck: bool,
}

static EPOCH: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

/// Milliseconds since the first call: a clock threads can keep in an atomic.
pub fn since_epoch() -> u64 {
    ms_since_epoch(Instant::now())
}

fn ms_since_epoch(at: Instant) -> u64 {
    at.saturating_duration_since(*EPOCH).as_millis() as u64
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ThreadInfo {
    pub(super) fn new(index: usize, pool: PoolId, generation: u32) -> ThreadInfo {
        ThreadInfo {
            index,
            state: AtomicU8::new(ThreadState::Starting as u8),
            pool: AtomicU32::new(pool),
            generation: AtomicU32::new(generation),
            requests: AtomicU64::new(0),
            memory: AtomicU64::new(0),
            real_memory: AtomicU64::new(0),
            idle_since: AtomicU64::new(since_epoch()),
            current: Mutex::new(CurrentRequest::default()),
            worker: Mutex::new(None),
            kill: Mutex::new(None),
            expiry: Arc::default(),
            stuck: AtomicBool::new(false),
        }
    }

    pub fn name(&self) -> String {
        format!("php-{}", self.index)
    }

    pub fn state(&self) -> ThreadState {
        ThreadState::ALL[self.state.load(Ordering::Relaxed) as usize]
    }

    pub fn set_state(&self, state: ThreadState) {
        self.state.store(state as u8, Ordering::Relaxed);
    }

    pub fn pool(&self) -> PoolId {
        self.pool.load(Ordering::Relaxed)
    }

    /// A request starts: busy, showing its method and URI.
    pub fn begin_request(&self, method: &[u8], uri: &[u8], script: &[u8]) {
        self.set_state(ThreadState::Busy);
        let mut current = lock(&self.current);
        current.method.clear();
        current.method.push_str(&String::from_utf8_lossy(method));
        current.uri.clear();
        current.uri.push_str(&String::from_utf8_lossy(&uri[..uri.len().min(MAX_SHOWN_URI)]));
        current.script.clear();
        current.script.push_str(&String::from_utf8_lossy(script));
    }

    /// A request ended; `memory` is what PHP used when it ended. The thread stays busy
    /// until it waits for the next one.
    pub fn end_request(&self, memory: usize, at: Instant) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.memory.store(memory as u64, Ordering::Relaxed);
        self.idle_since.store(ms_since_epoch(at), Ordering::Relaxed);
    }

    /// A worker script asks for its next request, using `real` bytes from the system.
    pub fn set_real_memory(&self, real: usize) {
        self.real_memory.store(real as u64, Ordering::Relaxed);
    }

    /// How long the thread has been without a request (meaningful while it is ready).
    pub fn idle_for(&self, now_ms: u64) -> Duration {
        Duration::from_millis(now_ms.saturating_sub(self.idle_since.load(Ordering::Relaxed)))
    }

    /// The thread serves this pool, generation and worker from now on.
    pub(super) fn assign(&self, assignment: &Assignment) {
        self.idle_since.store(since_epoch(), Ordering::Relaxed);
        self.pool.store(assignment.pool, Ordering::Relaxed);
        self.generation.store(assignment.generation(), Ordering::Relaxed);
        *lock(&self.worker) = match &assignment.role {
            Role::Classic => None,
            Role::Worker(g) => Some(g.name.clone()),
        };
    }

    pub fn snapshot(&self) -> ThreadSnapshot {
        let state = self.state();
        // The request shown is the one a busy thread runs; it is not cleared when the
        // request ends, which would cost the request path a second lock.
        let current = if state == ThreadState::Busy { lock(&self.current).clone() } else { CurrentRequest::default() };
        ThreadSnapshot {
            index: self.index,
            state,
            pool: self.pool(),
            generation: self.generation.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            memory: self.memory.load(Ordering::Relaxed),
            real_memory: self.real_memory.load(Ordering::Relaxed),
            method: current.method,
            uri: current.uri,
            worker: lock(&self.worker).clone(),
            stuck: self.is_stuck(),
        }
    }

    /// Records what the thread's script needs to be stopped; None once its PHP context
    /// is freed.
    pub(super) fn set_kill(&self, slot: Option<KillSlot>) {
        *lock(&self.kill) = slot;
    }

    /// Whether the watchdog gave up on the request the thread runs.
    pub fn is_stuck(&self) -> bool {
        self.stuck.load(Ordering::Relaxed)
    }

    pub fn set_stuck(&self, stuck: bool) -> bool {
        self.stuck.swap(stuck, Ordering::Relaxed)
    }

    /// The request the thread runs, if busy: (requests served before it, method, URI,
    /// script).
    pub fn current_request(&self) -> Option<(u64, String, String, String)> {
        if self.state() != ThreadState::Busy {
            return None;
        }
        let current = lock(&self.current).clone();
        Some((self.requests.load(Ordering::Relaxed), current.method, current.uri, current.script))
    }

    /// Whether the script passed its time limit; false without a PHP context.
    pub fn timed_out(&self) -> bool {
        let slot = lock(&self.kill);
        // SAFETY: as in kill(): the slot's context lives while the slot is set.
        slot.as_ref().is_some_and(|slot| unsafe { sys::pw_shim_timed_out(slot) })
    }

    /// The thread's kernel id while it has a PHP context.
    pub fn tid(&self) -> Option<libc::pid_t> {
        lock(&self.kill).as_ref().map(|slot| slot.tid)
    }

    /// Stops the thread's script the way a timeout does. False when it has no PHP
    /// context or the signal could not be sent.
    pub fn kill(&self) -> bool {
        let slot = lock(&self.kill);
        // SAFETY: the slot is set only while the thread's PHP context lives; the thread
        // clears it (under this lock) before freeing the context.
        slot.as_ref().is_some_and(|slot| unsafe { sys::pw_shim_kill(slot) })
    }
}

/// What a pool tells its threads.
pub enum Command {
    /// Finish the current request (and worker script), then end.
    Stop,
    /// Serve what is queued, then end: the pool takes no more requests.
    Drain,
    /// The thread's generation takes requests now.
    Activate,
    /// Finish the current request (and worker script), then serve this other pool.
    Join(Assignment),
    /// OPcache restarts: a worker script that entered PHP at or before this restart epoch
    /// (src/runtime/opcache.rs) finishes its request and ends, and boots again once the
    /// cache restarted. Classic threads ignore it.
    Recycle(u64),
}

/// What a thread serves: one pool's queue, as a classic thread or as a thread of a
/// worker generation.
#[derive(Clone)]
pub struct Assignment {
    pub pool: PoolId,
    pub queue: Receiver<Box<Request>>,
    pub role: Role,
    pub events: Arc<dyn PoolEvents>,
    pub counters: Arc<PoolCounters>,
}

#[derive(Clone)]
pub enum Role {
    Classic,
    Worker(Arc<Generation>),
}

impl Assignment {
    pub(super) fn generation(&self) -> u32 {
        match &self.role {
            Role::Classic => 0,
            Role::Worker(g) => g.id,
        }
    }

    /// Whether the thread may take requests from the queue now.
    pub fn takes_requests(&self) -> bool {
        match &self.role {
            Role::Classic => true,
            Role::Worker(g) => g.is_active(),
        }
    }
}

/// What a thread tells its pool. Implemented by the pool (src/pool.rs).
pub trait PoolEvents: Send + Sync {
    /// The thread's worker script reached frankenphp_handle_request() for the first time
    /// in its generation.
    fn booted(&self, thread: &ThreadInfo);
    /// The thread's worker script failed to boot (`failing`), or booted after failing.
    /// Returns true when no thread of the pool can serve its queue.
    fn boot_failing(&self, thread: &ThreadInfo, failing: bool) -> bool;
    /// The thread left the pool: it ended or moved to another one.
    fn left(&self, thread: &ThreadInfo);
}

/// A thread as its pool knows it.
#[derive(Clone)]
pub struct ThreadHandle {
    pub info: Arc<ThreadInfo>,
    ctl: Sender<Command>,
}

impl ThreadHandle {
    pub(super) fn new(info: Arc<ThreadInfo>, ctl: Sender<Command>) -> ThreadHandle {
        ThreadHandle { info, ctl }
    }

    /// Sends a command; false when the thread is gone.
    pub fn send(&self, command: Command) -> bool {
        self.ctl.send(command).is_ok()
    }
}

/// Why a thread leaves what it serves.
pub enum Leave {
    /// It ends.
    Exit,
    /// It serves another pool.
    Join(Assignment),
}

/// The next thing a thread does.
pub enum Job {
    Request(Box<Request>),
    Leave(Leave),
    /// End the worker script and boot it again (an OPcache restart).
    Recycle,
}

/// How a loop (classic or worker) handed the thread back.
pub enum Next {
    Leave(Leave),
    /// PHP's state on this thread may be damaged: free the context and make a new one.
    FreshContext,
}

/// The thread-local state of a PHP thread: everything its loops and PHP's hooks keep
/// between calls. It lives in [`CURRENT`]; code reaches it with short borrows through
/// [`with_thread`], never held across a call into PHP (the hooks borrow it too).
pub struct PhpThread {
    pub info: Arc<ThreadInfo>,
    pub host: Arc<Host>,
    ctl: Receiver<Command>,
    pub assignment: Assignment,
    draining: bool,
    leaving: Option<Leave>,
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
}

/// A thread's putenv() calls (src/runtime/env.rs), and the last merged environment
/// handed to C.
#[derive(Default)]
pub struct EnvOverrides {
    /// A value, or None for a name putenv() unset.
    pub(super) set: HashMap<Vec<u8>, Option<Vec<u8>>>,
    pub(super) merged: Strings,
}

impl EnvOverrides {
    /// Forgets the thread's putenv() calls.
    pub fn reset(&mut self) {
        self.set.clear();
    }
}

/// The worker state of a thread during one run of its script (src/runtime/worker.rs).
pub struct WorkerRun {
    pub(super) generation: Arc<Generation>,
    /// The boot/idle context; its output goes to the log. Owned here, lent to PHP.
    pub(super) idle: *mut RequestContext,
    /// The HTTP request PHP is handling, if any. Owned here, lent to PHP.
    pub(super) in_flight: *mut RequestContext,
    pub(super) handled: u64,
    pub(super) reached_handle_request: bool,
    /// A request ended badly (exit() or a failure in its startup, handler or shutdown).
    pub(super) request_failed: bool,
    /// Why frankenphp_handle_request() returned false, when the thread must leave.
    pub(super) leave: Option<Leave>,
    /// When the script started.
    pub(super) started: Instant,
    /// It restarts after a max_requests end: its boot is logged at debug level.
    pub(super) restarts_quietly: bool,
    /// The OPcache restart epoch when the script entered PHP (src/runtime/opcache.rs).
    pub(super) gate_epoch: u64,
    /// It ends because OPcache restarts.
    pub(super) recycled: bool,
    /// It ends because it reached max_requests or max_memory.
    pub(super) limit: Option<Limit>,
    /// PHP's memory when the request in flight began.
    pub(super) began_memory: usize,
    /// The routes that grew the script's memory during this run.
    pub(super) growth: RouteGrowth,
    /// It began its generation's OPcache revalidation and has not ended it.
    pub(super) revalidating: bool,
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

enum Message {
    Command(Command),
    Request(Box<Request>),
    Closed,
}

impl PhpThread {
    /// Makes the calling OS thread a PHP thread with this state.
    pub(super) fn install(info: Arc<ThreadInfo>, host: Arc<Host>, ctl: Receiver<Command>, assignment: Assignment) {
        CURRENT.with(|t| {
            *t.borrow_mut() = Some(PhpThread {
                info,
                host,
                ctl,
                assignment,
                draining: false,
                leaving: None,
                recycle: None,
                scratch: Scratch::default(),
                env: EnvOverrides::default(),
                run: None,
                request_started: Instant::now(),
                local_store: LocalStore::default(),
                store_out: Vec::new(),
            })
        });
    }

    /// Frees the calling thread's state.
    pub(super) fn uninstall() {
        CURRENT.with(|t| t.borrow_mut().take());
    }

    /// Serves another assignment (the thread moved pools); returns the previous one.
    pub(super) fn switch(&mut self, assignment: Assignment) -> Assignment {
        self.draining = false;
        std::mem::replace(&mut self.assignment, assignment)
    }

    /// Blocks for the next request of the thread's pool, or for a command that makes it
    /// leave. Commands that do not (Activate, Drain) are handled here.
    pub fn next_job(&mut self) -> Job {
        loop {
            if let Some(leave) = self.leaving.take() {
                return Job::Leave(leave);
            }
            if let Some(epoch) = self.recycle.take()
                && self.run.as_ref().is_some_and(|run| run.gate_epoch <= epoch)
            {
                return Job::Recycle;
            }
            if self.draining {
                match self.assignment.queue.try_recv() {
                    Ok(request) if request.run_state().start() => return Job::Request(request),
                    Ok(request) => request.refuse(Refusal::Withdrawn),
                    Err(_) => return Job::Leave(Leave::Exit),
                }
                continue;
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
                    Ok(request) => {
                        request.refuse(Refusal::Withdrawn);
                        continue;
                    }
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
                Message::Request(request) => request.refuse(Refusal::Withdrawn),
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
            if let Some(leave) = self.leaving.take() {
                return Some(leave);
            }
            if self.draining {
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
            Command::Stop => self.leaving = Some(Leave::Exit),
            Command::Drain => self.draining = true,
            Command::Activate => {}
            Command::Join(assignment) => self.leaving = Some(Leave::Join(assignment)),
            Command::Recycle(epoch) => self.recycle = Some(self.recycle.map_or(epoch, |e| e.max(epoch))),
        }
        if self.leaving.is_some() {
            self.info.set_state(ThreadState::Stopping);
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
    /// used when it ended.
    pub fn end_request(&mut self, memory: usize) {
        let now = Instant::now();
        self.assignment.counters.duration.observe(now.saturating_duration_since(self.request_started));
        self.info.end_request(memory, now);
        if self.info.set_stuck(false) {
            let stuck_for = now.saturating_duration_since(self.request_started).as_secs_f64();
            self.host.event(0, Level::Warn, "a stuck PHP thread came back: its request ended, and the thread leaves its pool", &[
                ("thread", self.info.name().into()),
                ("request_seconds", ((stuck_for * 10.0).round() / 10.0).into()),
            ]);
        }
    }

    /// Logs on behalf of this thread, outside any request.
    pub fn log(&self, level: Level, message: &str) {
        self.host.log(0, level, message);
    }
}
