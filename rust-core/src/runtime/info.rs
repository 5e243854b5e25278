//! What other threads may know of a PHP thread: its [`ThreadState`] and the
//! [`ThreadInfo`] of atomics that the thread list, the watchdog, the autoscaler and the
//! engine read without calling PHP. Only the thread itself writes them, but for the
//! profiler's pending weight, which the sampler adds to (src/runtime/profile.rs).

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::profile::{PendingWeight, Weight};
use crate::abi::types::PoolId;
use crate::php::sys::{self, KillSlot};
use crate::request::expiry::Expiry;

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
    pub const ALL: [ThreadState; 8] = [
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
    /// Lets the watchdog answer the thread's request from outside (src/supervisor/watchdog.rs).
    pub expiry: Arc<Expiry>,
    /// The watchdog gave up on the thread's request: it is stuck in a call that does not
    /// return, and a replacement serves its pool.
    stuck: AtomicBool,
    /// Whether the thread was told to leave what it runs (see [`ThreadInfo::request_stop`]).
    stop: StopSignal,
    /// When a background script told to stop is stopped from outside, in ms since
    /// [`since_epoch`]'s epoch; 0 for never.
    stop_deadline: AtomicU64,
    /// Profile weight the sampler gave the thread and the thread has not reported.
    pub profile: PendingWeight,
}

/// How often a script waiting in php_worker_wait_stop() looks at its time limit.
const TIME_LIMIT_CHECK: Duration = Duration::from_millis(100);

/// A stop request, and a condition variable its waiters (php_worker_wait_stop()) sleep on.
#[derive(Default)]
struct StopSignal {
    requested: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

#[derive(Default, Clone)]
struct CurrentRequest {
    method: String,
    uri: String,
    /// When it began (since_epoch()).
    started_ms: u64,
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
    /// How long the request shown has run (0 without one).
    pub running: Duration,
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
            stop: StopSignal::default(),
            stop_deadline: AtomicU64::new(0),
            profile: PendingWeight::default(),
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
        current.started_ms = since_epoch();
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

    /// The thread serves this pool, generation (0 for classic) and worker from now on.
    pub(super) fn assign(&self, pool: PoolId, generation: u32, worker: Option<Arc<str>>) {
        self.idle_since.store(since_epoch(), Ordering::Relaxed);
        self.pool.store(pool, Ordering::Relaxed);
        self.generation.store(generation, Ordering::Relaxed);
        *lock(&self.worker) = worker;
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
            running: if current.method.is_empty() {
                Duration::ZERO
            } else {
                Duration::from_millis(since_epoch().saturating_sub(current.started_ms))
            },
            method: current.method,
            uri: current.uri,
            worker: lock(&self.worker).clone(),
            stuck: self.is_stuck(),
        }
    }

    /// Records what the thread's script needs to be stopped, until the registration is
    /// dropped. Create it right after the PHP context and drop it before: then no path,
    /// a panic's unwinding included (locals drop in reverse order), leaves the slot
    /// pointing into a freed context for the watchdog or the profiler to use.
    pub(super) fn register_kill(&self, slot: KillSlot) -> KillRegistration<'_> {
        *lock(&self.kill) = Some(slot);
        KillRegistration(self)
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

    /// The URI of the request the thread runs, if busy.
    pub fn current_uri(&self) -> Option<String> {
        (self.state() == ThreadState::Busy).then(|| lock(&self.current).uri.clone())
    }

    /// Whether the thread may be running PHP code: a request, a worker script booting or
    /// finishing, a background script (which runs as a request). The profiler samples
    /// these.
    pub fn runs_php(&self) -> bool {
        matches!(self.state(), ThreadState::Busy | ThreadState::Booting | ThreadState::Stopping)
    }

    /// The tag of profile weight: the request the thread runs (its count of requests
    /// served changes when one ends).
    fn profile_tag(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Whether the sampler gave the thread weight for what it runs now.
    pub fn profile_pending(&self) -> bool {
        self.profile.pending(self.profile_tag())
    }

    /// Takes the weight the sampler gave the thread for what it runs now.
    pub fn take_profile_weight(&self) -> Weight {
        self.profile.take(self.profile_tag())
    }

    /// The sampler gives the thread one tick of `ns` nanoseconds and has it take a
    /// sample at its next instruction (the way request_stop interrupts it).
    pub fn add_profile_weight(&self, ns: u64) {
        self.profile.add(self.profile_tag(), ns);
        let slot = lock(&self.kill);
        if let Some(slot) = slot.as_ref() {
            // SAFETY: as in kill(): the slot's context lives while the slot is set.
            unsafe { sys::pw_shim_interrupt(slot) };
        }
    }

    /// The CPU time the thread used, in nanoseconds; None without a PHP context.
    pub fn cpu_time(&self) -> Option<u64> {
        let slot = lock(&self.kill);
        let slot = slot.as_ref()?;
        let mut clock: libc::clockid_t = 0;
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: the slot is set only while its thread lives (it clears it, under this
        // lock, before it ends), so its pthread_t is valid; both outputs are locals.
        let ok = unsafe { libc::pthread_getcpuclockid(slot.thread, &mut clock) == 0 && libc::clock_gettime(clock, &mut ts) == 0 };
        ok.then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
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
        let sent = slot.as_ref().is_some_and(|slot| unsafe { sys::pw_shim_kill(slot) });
        drop(slot);
        // A script waiting in php_worker_wait_stop() returns, and PHP ends it.
        self.wake_stop_waiters();
        sent
    }

    /// The thread is told to leave what it runs (its pool stops, drains, restarts its
    /// script or hands the thread to another pool; the engine stops). Its script sees it:
    /// php_worker_stopping() answers true, php_worker_wait_stop() returns, and a
    /// php_worker_on_stop() callback runs at its next instruction.
    pub fn request_stop(&self) {
        self.request_stop_with(None, || true);
    }

    /// Tells the thread to stop together with `queue`, which queues the command that
    /// makes it leave (and returns whether it was queued): the command, the flag and the
    /// stop deadline (`stop_within`) are set under the lock a new run's
    /// [`ThreadInfo::clear_stop`] takes, so that a run starting meanwhile either finds
    /// the command or keeps the flag, never clears a stop whose command it missed.
    pub fn request_stop_with(&self, stop_within: Option<Duration>, queue: impl FnOnce() -> bool) -> bool {
        let ordered = lock(&self.stop.lock);
        if !queue() {
            return false;
        }
        if let Some(after) = stop_within {
            self.set_stop_deadline(after);
        }
        let already = self.stop.requested.swap(true, Ordering::SeqCst);
        drop(ordered);
        if already {
            return true;
        }
        self.stop.wake.notify_all();
        let slot = lock(&self.kill);
        if let Some(slot) = slot.as_ref() {
            // SAFETY: as in kill(): the slot's context lives while the slot is set.
            unsafe { sys::pw_shim_interrupt(slot) };
        }
        true
    }

    fn wake_stop_waiters(&self) {
        // Taking the lock orders this with a waiter between its check and its sleep.
        drop(lock(&self.stop.lock));
        self.stop.wake.notify_all();
    }

    /// Whether the thread was told to stop since its script last started.
    pub fn stop_requested(&self) -> bool {
        self.stop.requested.load(Ordering::SeqCst)
    }

    /// A new run of the thread's script: only a stop asked from now on counts.
    pub(super) fn clear_stop(&self) {
        let _ordered = lock(&self.stop.lock);
        self.stop.requested.store(false, Ordering::SeqCst);
        self.stop_deadline.store(0, Ordering::Relaxed);
    }

    /// Waits up to `timeout` for the thread to be told to stop; true when it was. Returns
    /// early, false, when the script passed its time limit (PHP's own timer, which does
    /// not wake the wait, is looked at every [`TIME_LIMIT_CHECK`]) or was stopped from
    /// outside: PHP then ends it.
    pub fn wait_stop(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut guard = lock(&self.stop.lock);
        loop {
            if self.stop_requested() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline || self.timed_out() {
                return false;
            }
            let slice = (deadline - now).min(TIME_LIMIT_CHECK);
            guard = self.stop.wake.wait_timeout(guard, slice).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// A background script told to stop must have ended `after` from now, or the
    /// watchdog stops it (an earlier deadline stays).
    fn set_stop_deadline(&self, after: Duration) {
        let at = (since_epoch() + after.as_millis() as u64).max(1);
        let _ = self.stop_deadline.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| (d == 0 || at < d).then_some(at));
    }

    /// True once, when the stop deadline passed at `now_ms`: the caller stops the script.
    pub fn take_stop_overdue(&self, now_ms: u64) -> bool {
        let d = self.stop_deadline.load(Ordering::Relaxed);
        d != 0 && now_ms >= d && self.stop_deadline.compare_exchange(d, 0, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}


/// A thread's kill slot while its PHP context lives (ThreadInfo::register_kill).
pub(super) struct KillRegistration<'a>(&'a ThreadInfo);

impl Drop for KillRegistration<'_> {
    fn drop(&mut self) {
        *lock(&self.0.kill) = None;
    }
}

