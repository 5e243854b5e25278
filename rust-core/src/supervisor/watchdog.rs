//! The watchdog: a hard deadline for every request, enforced from outside PHP.
//!
//! PHP's `max_execution_time` (and `set_time_limit()`) ends a script at its next
//! instruction once its timer fires, and interrupts `sleep()`; but a script blocked in a
//! call that retries on EINTR (curl to a server that never answers, a socket read, a
//! child process) stays blocked, and holds its thread and its client for as long. The
//! watchdog thread (`php-watchdog`) looks at busy threads four times a second. When a
//! thread's request passed its PHP time limit (the thread's `EG(timed_out)` is set) and
//! is still running `grace` later:
//! - its client is answered now (504, or a cut-off response when the headers already
//!   left; src/request/expiry.rs), with a log line naming the request, the thread and
//!   the system call it is blocked in;
//! - its pool gets a replacement thread at once (up to `max_stuck` stuck threads), and
//!   the stuck one leaves the pool when it comes back;
//! - the thread is woken: PHP's timer signal again, and what the call waits on is ended
//!   (unblock.rs), every second, until the call returns and PHP ends the request as a
//!   timeout.

pub mod unblock;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::pool::Pool;
use super::scaling::Pools;
use super::service::{Rounds, Service};
use crate::host::{Host, Level};
use crate::runtime::info::ThreadInfo;
use crate::runtime::registry::Registry;

/// How often busy threads are looked at.
const TICK: Duration = Duration::from_millis(250);
/// How often a stuck thread is woken again.
const WAKE_EVERY: Duration = Duration::from_secs(1);

/// The deadline settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// How long past its PHP time limit a request may run before the watchdog ends it;
    /// None: never.
    pub grace: Option<Duration>,
    /// At most this many stuck threads get a replacement.
    pub max_stuck: usize,
}

impl Default for Deadlines {
    fn default() -> Deadlines {
        Deadlines { grace: Some(Duration::from_secs(5)), max_stuck: 16 }
    }
}

/// The watchdog thread of an engine. Dropping it stops the thread.
pub struct Watchdog {
    service: Service<Deadlines>,
    /// Requests the watchdog answered.
    expired: Arc<AtomicU64>,
}

/// What the watchdog knows of one thread.
struct Watch {
    /// The thread's served-requests count when its current request was first seen.
    request: u64,
    /// When the request was first seen past its time limit, and whether a later tick saw
    /// it so again: the flag counts once two ticks saw it. A thread marks a request busy
    /// a moment before it clears the flag an idle worker script's running timer may have
    /// set (csrc/worker.c, pw_worker_next); a tick in that moment sees a stale flag, and
    /// on its own it would expire a healthy request `grace` later.
    timed_out_at: Option<Instant>,
    timed_out_confirmed: bool,
    /// It was given up on; when it was last woken.
    stuck_since: Option<Instant>,
    last_wake: Instant,
}

impl Watch {
    fn new(request: u64, now: Instant) -> Watch {
        Watch { request, timed_out_at: None, timed_out_confirmed: false, stuck_since: None, last_wake: now }
    }

    /// Notes this tick's sighting of the thread's timeout flag: since when the request
    /// has been past its time limit, once two ticks in a row saw it so.
    fn timed_out_since(&mut self, timed_out: bool, now: Instant) -> Option<Instant> {
        if !self.timed_out_confirmed {
            match (self.timed_out_at, timed_out) {
                (None, true) => self.timed_out_at = Some(now),
                (Some(_), true) => self.timed_out_confirmed = true,
                (Some(_), false) => self.timed_out_at = None, // a stale flag, cleared since
                (None, false) => {}
            }
        }
        self.timed_out_at.filter(|_| self.timed_out_confirmed)
    }
}

impl Watchdog {
    pub fn start(pools: Pools, registry: Arc<Registry>, host: Arc<Host>) -> std::io::Result<Watchdog> {
        let expired = Arc::new(AtomicU64::new(0));
        let count = expired.clone();
        let service =
            Service::start("php-watchdog", Deadlines::default(), move |rounds| run(&rounds, &count, &pools, &registry, &host))?;
        Ok(Watchdog { service, expired })
    }

    pub fn set(&self, deadlines: Deadlines) {
        self.service.set(deadlines);
    }

    pub fn deadlines(&self) -> Deadlines {
        self.service.settings()
    }

    /// Requests answered because they ran past their deadline.
    pub fn expired(&self) -> u64 {
        self.expired.load(Ordering::Relaxed)
    }
}

fn run(rounds: &Rounds<Deadlines>, expired: &AtomicU64, pools: &Pools, registry: &Registry, host: &Host) {
    let mut watches: HashMap<usize, Watch> = HashMap::new();
    while let Some(deadlines) = rounds.next(|_| TICK) {
        let threads = registry.threads();
        stop_overdue(&threads, host);
        let Some(grace) = deadlines.grace else {
            watches.clear();
            continue;
        };
        let now = Instant::now();
        let mut stuck = threads.iter().filter(|t| t.is_stuck()).count();
        watches.retain(|index, _| threads.iter().any(|t| t.index == *index));
        // Woken once every client due this tick is answered: waking one thread can end
        // another's call too (a program that thread started inherited the first one's
        // pipe), and that script must not answer its client before its 504 goes.
        let mut given_up = Vec::new();
        for info in &threads {
            let Some((request, method, uri, script)) = info.current_request() else {
                watches.remove(&info.index);
                continue;
            };
            let watch = watches.entry(info.index).or_insert_with(|| Watch::new(request, now));
            if watch.request != request {
                *watch = Watch::new(request, now);
            }
            if watch.stuck_since.is_some() {
                if now.duration_since(watch.last_wake) >= WAKE_EVERY {
                    watch.last_wake = now;
                    wake(info, host, false);
                }
                continue;
            }
            let Some(at) = watch.timed_out_since(info.timed_out(), now) else { continue };
            if now.duration_since(at) < grace {
                continue;
            }
            // Given up on: answer the client, replace the thread, wake it.
            let answered = info.expiry.expire(host);
            if answered {
                expired.fetch_add(1, Ordering::Relaxed);
            }
            watch.stuck_since = Some(now);
            watch.last_wake = now;
            info.set_stuck(true);
            stuck += 1;
            let replaced = stuck <= deadlines.max_stuck && replace(pools, info);
            let blocked = info.tid().and_then(unblock::inspect_settled);
            host.event(0, Level::Error, "request ran past its time limit: its client got 504 and its thread is stuck", &[
                ("method", method.into()),
                ("uri", uri.into()),
                ("script", script.into()),
                ("thread", info.name().into()),
                ("worker", info.snapshot().worker.map_or(String::new(), |w| w.to_string()).into()),
                ("grace_ms", (grace.as_millis() as u64).into()),
                ("answered", answered.into()),
                ("replaced", replaced.into()),
                ("stuck_threads", stuck.into()),
                ("syscall", blocked.as_ref().map_or_else(|| "none".to_owned(), |b| b.call.clone()).into()),
                ("waits_on", blocked.as_ref().map_or_else(Vec::new, |b| b.describe_fds()).join(" ").into()),
            ]);
            if !replaced && stuck > deadlines.max_stuck {
                host.event(0, Level::Error, "too many stuck PHP threads: no replacement; the pool serves with fewer threads", &[
                    ("stuck_threads", stuck.into()),
                    ("max_stuck_threads", deadlines.max_stuck.into()),
                ]);
            }
            given_up.push(info);
        }
        for info in given_up {
            wake(info, host, true);
        }
    }
}

/// Stops the background scripts told to stop that are still running past their stop
/// timeout (src/runtime/background.rs), the way a timeout stops a script.
fn stop_overdue(threads: &[Arc<ThreadInfo>], host: &Host) {
    let now = crate::runtime::info::since_epoch();
    for info in threads.iter().filter(|t| t.take_stop_overdue(now)) {
        host.event(0, Level::Warn, "background worker did not stop within its stop timeout: stopping it", &[
            ("thread", info.name().into()),
            ("worker", info.snapshot().worker.map_or(String::new(), |w| w.to_string()).into()),
        ]);
        wake(info, host, true);
    }
}

/// Gives the pool of a stuck thread a replacement.
fn replace(pools: &Pools, info: &ThreadInfo) -> bool {
    let pool: Option<Arc<Pool>> = pools.read().unwrap_or_else(|e| e.into_inner()).iter().find(|p| p.id == info.pool()).cloned();
    pool.is_some_and(|p| p.replace_stuck(info))
}

/// Ends what the thread's call waits on, and interrupts the call. (In that order: right
/// after the signal the thread runs for a moment, retrying its call, and /proc shows no
/// call to inspect.)
fn wake(info: &ThreadInfo, host: &Host, first: bool) {
    let blocked = info.tid().and_then(|tid| unblock::inspect_settled(tid).map(|b| (tid, b)));
    let done = blocked.as_ref().map_or_else(Vec::new, |(tid, b)| unblock::release(*tid, b));
    info.kill();
    let Some((_, blocked)) = blocked else { return };
    if !done.is_empty() || first {
        host.event(0, if done.is_empty() { Level::Debug } else { Level::Warn }, "waking a stuck PHP thread", &[
            ("thread", info.name().into()),
            ("syscall", blocked.call.as_str().into()),
            ("done", done.join("; ").into()),
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_counts_once_two_ticks_saw_it() {
        let t0 = Instant::now();
        let tick = |n: u32| t0 + TICK * n;
        let mut w = Watch::new(7, t0);
        assert_eq!(w.timed_out_since(false, tick(0)), None);
        assert_eq!(w.timed_out_since(true, tick(1)), None, "one sighting is not enough");
        assert_eq!(w.timed_out_since(true, tick(2)), Some(tick(1)), "the second confirms it, from the first");
        assert_eq!(w.timed_out_since(false, tick(3)), Some(tick(1)), "confirmed: PHP clearing it later changes nothing");
    }

    #[test]
    fn a_stale_flag_seen_once_is_forgotten() {
        // A worker thread marked its request busy a moment before it cleared the flag
        // its idle timer set: one tick saw it, the next does not.
        let t0 = Instant::now();
        let mut w = Watch::new(7, t0);
        assert_eq!(w.timed_out_since(true, t0 + TICK), None);
        assert_eq!(w.timed_out_since(false, t0 + TICK * 2), None);
        for n in 3..100 {
            assert_eq!(w.timed_out_since(false, t0 + TICK * n), None, "never expired");
        }
        // A real timeout later in the same request still counts, from its own start.
        assert_eq!(w.timed_out_since(true, t0 + TICK * 100), None);
        assert_eq!(w.timed_out_since(true, t0 + TICK * 101), Some(t0 + TICK * 100));
    }
}
