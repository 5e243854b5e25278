//! OPcache restarts with many PHP threads.
//!
//! OPcache empties its shared memory when `opcache_reset()` asks, when the memory or the
//! key table runs out, or when too much of it holds invalidated scripts. It waits for
//! other *processes* to leave the cache first, but not for other threads: under ZTS a
//! restart frees compiled code that running threads still execute. php_worker's PHP build
//! adds a hook to OPcache (scripts/php-patches/<minor>/opcache-thread-hook.patch) through which
//! this module decides when a restart may run:
//!
//! - Every PHP thread passes the [`Gate`] before it starts a request (a classic request or
//!   a worker script's boot) and leaves it after request shutdown, so the gate knows how
//!   many threads are inside PHP. A worker thread is inside for its script's whole life.
//! - A restart runs only while the thread doing it is the only one inside (OPcache asks
//!   at a request startup; until then the restart is pending and OPcache serves from no
//!   cache, as it does with several processes).
//! - When a restart is scheduled, the gate brings threads to a stop: requests about to
//!   start wait (at most [`HOLD_MAX`]), and worker scripts finish their request and end.
//!   Once no thread is inside, one waiting request starts first and restarts the cache;
//!   then everything resumes and the workers boot again on the fresh cache. Classic
//!   threads keep their PHP contexts, and the stores and counters are untouched.
//! - A thread that does not come out within [`HOLD_MAX`] (a long request) releases the
//!   hold: requests run uncached meanwhile, and the hold is tried again after a pause
//!   that doubles up to [`PAUSE_MAX`].

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::host::{Level, log_unattached};
use crate::php::guard::guard;

/// Longest time a request waits at the gate for an OPcache restart.
pub const HOLD_MAX: Duration = Duration::from_secs(2);
/// The first pause between two holds that timed out; it doubles up to [`PAUSE_MAX`].
const PAUSE_MIN: Duration = Duration::from_secs(1);
const PAUSE_MAX: Duration = Duration::from_secs(30);

/// The events of OPcache's thread hook (zend_accel_thread_event in the patch).
const EVENT_SCHEDULED: i32 = 0;
const EVENT_MAY_RESTART: i32 = 1;
const EVENT_RESTARTED: i32 = 2;

/// Why OPcache restarts (zend_accel_restart_reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    OutOfMemory,
    KeyTableFull,
    Reset,
}

impl Reason {
    fn from_raw(raw: i32) -> Reason {
        match raw {
            0 => Reason::OutOfMemory,
            1 => Reason::KeyTableFull,
            _ => Reason::Reset,
        }
    }

    /// The reason's label in logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Reason::OutOfMemory => "out_of_memory",
            Reason::KeyTableFull => "key_table_full",
            Reason::Reset => "opcache_reset",
        }
    }
}

/// Restarts done, by reason, and whether one is pending: for the stats snapshot.
#[derive(Serialize, Debug, Clone, Default)]
pub struct OpcacheStats {
    /// OPcache's thread hook is in place (false: OPcache is off, or this PHP lacks the patch).
    pub guarded: bool,
    pub restart_pending: bool,
    pub restarts_out_of_memory: u64,
    pub restarts_key_table_full: u64,
    pub restarts_opcache_reset: u64,
    /// Holds that ended before every thread came out (a long request ran).
    pub holds_timed_out: u64,
    /// OPcache's own numbers (those opcache_get_status() reports), sampled by a PHP
    /// thread at most once a second; None until a sample was taken (no request yet,
    /// OPcache off or in files only, or a PHP build without php_worker's OPcache patches).
    pub usage: Option<OpcacheUsage>,
}

/// OPcache's shared memory and hit counters, as opcache_get_status() gives them.
#[derive(Serialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpcacheUsage {
    pub memory_used: u64,
    pub memory_free: u64,
    pub memory_wasted: u64,
    pub hits: u64,
    pub misses: u64,
    pub cached_scripts: u64,
}

/// The last OPcache sample, and when it was taken (ms since the epoch of
/// runtime::info::since_epoch; 0: never).
static USAGE: Mutex<Option<OpcacheUsage>> = Mutex::new(None);
static SAMPLED_AT: AtomicU64 = AtomicU64::new(0);

/// How often PHP threads sample OPcache's numbers.
const SAMPLE_EVERY_MS: u64 = 1000;

/// Whether the calling PHP thread should sample OPcache now (csrc/opcache.c asks, between
/// requests or at a request's end): true for one thread at most once a second.
#[unsafe(no_mangle)]
pub extern "C" fn pw_rs_opcache_sample_due() -> bool {
    guard(false, || {
        let now = crate::runtime::info::since_epoch() + SAMPLE_EVERY_MS; // never 0
        let last = SAMPLED_AT.load(Ordering::Relaxed);
        now.saturating_sub(last) >= SAMPLE_EVERY_MS
            && SAMPLED_AT.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    })
}

/// A sample of OPcache's numbers (csrc/opcache.c, from the zend_accel_usage the OPcache patch
/// adds).
#[unsafe(no_mangle)]
pub extern "C" fn pw_rs_opcache_usage(
    memory_used: u64,
    memory_free: u64,
    memory_wasted: u64,
    hits: u64,
    misses: u64,
    cached_scripts: u64,
) {
    guard((), || {
        let usage = OpcacheUsage { memory_used, memory_free, memory_wasted, hits, misses, cached_scripts };
        *USAGE.lock().unwrap_or_else(|e| e.into_inner()) = Some(usage);
    })
}

/// Tells every worker thread whose script started at or before the given restart epoch
/// to end its script after its current request (installed by the engine).
pub type Recycler = Arc<dyn Fn(u64) + Send + Sync>;

/// Where PHP threads enter and leave requests; see the module doc.
pub struct Gate {
    /// Threads between [`Gate::enter`] and leaving.
    inside: AtomicUsize,
    /// A restart is scheduled and not done: entering takes the slow path.
    pending: AtomicBool,
    /// Restarts done since the process started.
    epoch: AtomicU64,
    state: Mutex<GateState>,
    changed: Condvar,
    guarded: AtomicBool,
    restarts: [AtomicU64; 3],
    holds_timed_out: AtomicU64,
}

struct GateState {
    pending: Option<Pending>,
    recycler: Option<Recycler>,
}

struct Pending {
    reason: Reason,
    since: Instant,
    /// Requests about to start wait until then; None between holds.
    hold_until: Option<Instant>,
    /// When the next hold starts, after one that timed out.
    next_hold: Instant,
    pause: Duration,
    /// A thread was let in alone to do the restart and has not left.
    leader_inside: bool,
}

thread_local! {
    /// This thread is the one let in alone to restart the cache.
    static LEADER: Cell<bool> = const { Cell::new(false) };
}

static GATE: Gate = Gate::new();

/// The process's gate (OPcache's shared memory is per process, as is PHP's engine).
pub fn gate() -> &'static Gate {
    &GATE
}

fn lock(m: &Mutex<GateState>) -> MutexGuard<'_, GateState> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A thread inside PHP; it leaves the gate when dropped.
#[must_use]
pub struct Pass {
    gate: &'static Gate,
    /// Restarts done when the thread entered: a worker script that entered at epoch `e`
    /// runs on code cached before restart `e + 1`.
    pub epoch: u64,
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.gate.leave();
    }
}

impl Gate {
    const fn new() -> Gate {
        Gate {
            inside: AtomicUsize::new(0),
            pending: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            state: Mutex::new(GateState { pending: None, recycler: None }),
            changed: Condvar::new(),
            guarded: AtomicBool::new(false),
            restarts: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            holds_timed_out: AtomicU64::new(0),
        }
    }

    /// A new engine started: `guarded` when OPcache's hook is in place. A restart pending
    /// in the previous engine's cache is gone with it.
    pub fn attach(&self, guarded: bool, recycler: Recycler) {
        let mut state = lock(&self.state);
        state.pending = None;
        state.recycler = Some(recycler);
        self.pending.store(false, Ordering::SeqCst);
        self.guarded.store(guarded, Ordering::Relaxed);
        self.changed.notify_all();
    }

    /// The engine stopped.
    pub fn detach(&self) {
        let mut state = lock(&self.state);
        state.pending = None;
        state.recycler = None;
        self.pending.store(false, Ordering::SeqCst);
        self.guarded.store(false, Ordering::Relaxed);
        self.changed.notify_all();
    }

    /// Called before a request starts on this thread. Returns at once unless an OPcache
    /// restart is pending; then it may wait (at most [`HOLD_MAX`]).
    pub fn enter(&'static self) -> Pass {
        self.inside.fetch_add(1, Ordering::SeqCst);
        if !self.pending.load(Ordering::SeqCst) {
            return self.pass();
        }
        self.inside.fetch_sub(1, Ordering::SeqCst);
        self.enter_slow();
        self.pass()
    }

    fn pass(&'static self) -> Pass {
        Pass { gate: self, epoch: self.epoch.load(Ordering::SeqCst) }
    }

    /// Enters while a restart is pending; counts the thread inside before it returns.
    fn enter_slow(&self) {
        let mut state = lock(&self.state);
        let mut recycle = None;
        loop {
            let now = Instant::now();
            let Some(p) = state.pending.as_mut() else { break };
            if p.hold_until.is_none() && now >= p.next_hold {
                p.hold_until = Some(now + HOLD_MAX);
                recycle = Some(self.epoch.load(Ordering::SeqCst));
            }
            let Some(until) = p.hold_until else { break };
            if now >= until {
                p.hold_until = None;
                p.next_hold = now + p.pause;
                let (inside, pause, reason) = (self.inside.load(Ordering::SeqCst), p.pause, p.reason);
                p.pause = (p.pause * 2).min(PAUSE_MAX);
                self.holds_timed_out.fetch_add(1, Ordering::Relaxed);
                self.changed.notify_all();
                drop(state);
                log_unattached(
                    Level::Warn,
                    "OPcache restart still waits for PHP threads to finish their requests; requests run without the cache meanwhile",
                    &[
                        ("reason", reason.name().into()),
                        ("threads_in_php", inside.into()),
                        ("next_try_ms", (pause.as_millis() as u64).into()),
                    ],
                );
                state = lock(&self.state);
                continue;
            }
            if !p.leader_inside && self.inside.load(Ordering::SeqCst) == 0 {
                p.leader_inside = true;
                LEADER.with(|l| l.set(true));
                break;
            }
            if let Some(epoch) = recycle.take() {
                let recycler = state.recycler.clone();
                drop(state);
                if let Some(recycler) = recycler {
                    recycler(epoch);
                }
                state = lock(&self.state);
                continue;
            }
            state = self.changed.wait_timeout(state, until - now).unwrap_or_else(|e| e.into_inner()).0;
        }
        self.inside.fetch_add(1, Ordering::SeqCst);
    }

    fn leave(&self) {
        let was_leader = LEADER.with(|l| l.replace(false));
        let left = self.inside.fetch_sub(1, Ordering::SeqCst) - 1;
        if !self.pending.load(Ordering::SeqCst) && !was_leader {
            return;
        }
        let mut state = lock(&self.state);
        if let Some(p) = state.pending.as_mut()
            && was_leader
        {
            // Its request start did not restart the cache (OPcache may be off for it):
            // the next waiting request tries.
            p.leader_inside = false;
        }
        if left == 0 || was_leader {
            self.changed.notify_all();
        }
    }

    /// OPcache scheduled a restart (on a thread inside PHP, maybe under OPcache's lock).
    fn scheduled(&self, reason: Reason) {
        let now = Instant::now();
        let mut state = lock(&self.state);
        if state.pending.is_some() {
            return;
        }
        state.pending = Some(Pending {
            reason,
            since: now,
            hold_until: Some(now + HOLD_MAX),
            next_hold: now,
            pause: PAUSE_MIN,
            leader_inside: false,
        });
        self.pending.store(true, Ordering::SeqCst);
        let recycler = state.recycler.clone();
        drop(state);
        log_unattached(
            Level::Info,
            "OPcache restart scheduled: PHP threads finish their requests, worker scripts restart",
            &[("reason", reason.name().into()), ("threads_in_php", self.inside.load(Ordering::SeqCst).into())],
        );
        if let Some(recycler) = recycler {
            recycler(self.epoch.load(Ordering::SeqCst));
        }
    }

    /// OPcache asks whether it may empty its memory now: only if the asking thread is the
    /// only one inside PHP.
    fn may_restart(&self) -> bool {
        self.inside.load(Ordering::SeqCst) <= 1
    }

    /// OPcache restarted.
    fn restarted(&self, reason: Reason) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.restarts[reason as usize].fetch_add(1, Ordering::Relaxed);
        let mut state = lock(&self.state);
        let waited = state.pending.take().map(|p| p.since.elapsed());
        self.pending.store(false, Ordering::SeqCst);
        self.changed.notify_all();
        drop(state);
        let waited_ms = waited.map_or(0.0, |w| (w.as_secs_f64() * 10_000.0).round() / 10.0);
        log_unattached(Level::Info, "OPcache restarted", &[("reason", reason.name().into()), ("waited_ms", waited_ms.into())]);
    }

    pub fn stats(&self) -> OpcacheStats {
        let count = |r: Reason| self.restarts[r as usize].load(Ordering::Relaxed);
        OpcacheStats {
            guarded: self.guarded.load(Ordering::Relaxed),
            restart_pending: self.pending.load(Ordering::Relaxed),
            restarts_out_of_memory: count(Reason::OutOfMemory),
            restarts_key_table_full: count(Reason::KeyTableFull),
            restarts_opcache_reset: count(Reason::Reset),
            holds_timed_out: self.holds_timed_out.load(Ordering::Relaxed),
            usage: *USAGE.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }
}

/// OPcache's thread hook (csrc/opcache.c forwards it): `event` and `reason` are
/// zend_accel_thread_event and zend_accel_restart_reason. Returns whether a restart may
/// run now (MAY_RESTART; the other events ignore it).
#[unsafe(no_mangle)]
pub extern "C" fn pw_rs_opcache_event(event: i32, reason: i32) -> bool {
    guard(false, || {
        let gate = gate();
        let reason = Reason::from_raw(reason);
        match event {
            EVENT_SCHEDULED => {
                gate.scheduled(reason);
                true
            }
            EVENT_MAY_RESTART => gate.may_restart(),
            EVENT_RESTARTED => {
                gate.restarted(reason);
                true
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gate of the test's own (the process's one is shared with the engine tests).
    fn fresh(recycled: Arc<Mutex<Vec<u64>>>) -> &'static Gate {
        let gate: &'static Gate = Box::leak(Box::new(Gate::new()));
        gate.attach(true, Arc::new(move |epoch| recycled.lock().unwrap().push(epoch)));
        gate
    }

    #[test]
    fn a_restart_may_run_only_while_its_thread_is_alone_inside() {
        let g = fresh(Arc::default());
        let a = g.enter();
        assert!(g.may_restart(), "one thread inside: it may restart");
        let b = std::thread::spawn(move || std::mem::forget(g.enter())); // leaves below
        b.join().unwrap();
        assert!(!g.may_restart(), "two threads inside: no restart");
        g.leave();
        drop(a);
        assert_eq!(g.inside.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_scheduled_restart_holds_entries_until_threads_leave_then_lets_one_in() {
        let recycled = Arc::new(Mutex::new(Vec::new()));
        let g = fresh(recycled.clone());
        let inside = g.enter(); // a worker script, say
        let epoch = inside.epoch;
        g.scheduled(Reason::Reset);
        assert_eq!(*recycled.lock().unwrap(), vec![epoch], "workers are told to end their scripts");
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let pass = g.enter();
            tx.send(LEADER.with(|l| l.get())).unwrap();
            // OPcache restarts during this thread's request startup.
            assert!(g.may_restart());
            g.restarted(Reason::Reset);
            drop(pass);
        });
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "held while a thread is inside");
        drop(inside);
        let leader = rx.recv_timeout(Duration::from_secs(1)).expect("let in once no thread is inside");
        assert!(leader, "the first one in restarts alone");
        waiter.join().unwrap();
        assert!(!g.pending.load(Ordering::SeqCst));
        assert_eq!(g.enter().epoch, epoch + 1, "a script entering now runs on the new cache");
        assert_eq!(g.stats().restarts_opcache_reset, 1);
    }

    #[test]
    fn a_hold_ends_after_hold_max_when_a_thread_stays_inside() {
        let g = fresh(Arc::default());
        let long = g.enter();
        g.scheduled(Reason::OutOfMemory);
        let started = Instant::now();
        let pass = g.enter();
        let waited = started.elapsed();
        assert!(waited >= HOLD_MAX - Duration::from_millis(50), "held up to HOLD_MAX: {waited:?}");
        assert!(!LEADER.with(|l| l.get()), "not alone: not the one to restart");
        assert!(!g.may_restart());
        assert_eq!(g.stats().holds_timed_out, 1);
        assert!(g.stats().restart_pending);
        // Between holds requests pass at once.
        let started = Instant::now();
        drop(g.enter());
        assert!(started.elapsed() < Duration::from_millis(500));
        drop(pass);
        drop(long);
        g.detach();
        assert!(!g.stats().restart_pending);
    }
}
