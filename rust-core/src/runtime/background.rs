//! Background workers and scheduled jobs: scripts that run a loop of their own, or run
//! once, on a PHP thread of their own, and take no requests.
//!
//! A background worker's thread runs its script and, when the script ends, runs it
//! again: 100 ms later after a run that lasted, after a pause that doubles up to
//! max_boot_backoff while runs keep ending early (a crash loop). The script's output
//! goes to the log under the worker's name. It runs with no time limit, and learns
//! that it must stop (a restart, a reload, its removal, an OPcache restart, the
//! server stopping) through php_worker_stopping(), php_worker_wait_stop() and a
//! php_worker_on_stop() callback (see ThreadInfo::request_stop). One that does not end
//! within its stop timeout is stopped from outside by the watchdog, the way a timeout
//! stops a script.
//!
//! A scheduled job (Engine::run_job) is the same run, done once on a thread of its own,
//! with a command line (`$argv`); how it ended goes back to its caller.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::generation::{Generation, JobOutcome};
use super::info::ThreadState;
use super::protocol::{Leave, Next};
use super::thread::{try_with_thread, with_thread};
use super::worker::{boot_backoff, run_script};
use crate::host::{Level, LogField};
use crate::php::guard::guard;
use crate::php::sys::RunResult;

/// A run at least this long was not a crash loop: the next one starts after the
/// shortest pause.
const HEALTHY_RUN: Duration = Duration::from_secs(1);

/// Runs the generation's script on this thread until the thread is told to leave (a
/// background worker), or once (a scheduled job).
pub fn serve(generation: &Arc<Generation>) -> Next {
    let (host, info, counters, events) = with_thread(|t| {
        let a = &t.assignment;
        (t.host.clone(), t.info.clone(), a.counters.clone(), a.events.clone())
    });
    let (worker, thread) = (generation.spec.name.as_str(), info.name());
    let event = |level, message: &str, mut fields: Vec<LogField<'_>>| {
        fields.splice(0..0, [("worker", worker.into()), ("thread", thread.as_str().into())]);
        host.event(0, level, message, &fields)
    };
    let mut failures = 0u32;
    loop {
        // Only a stop asked from now on counts; one asked before is a command waiting.
        info.clear_stop();
        if let Some(leave) = with_thread(|t| t.wait_for_leave(Duration::ZERO)) {
            return Next::Leave(leave);
        }
        let file = generation.spec.file.as_bytes();
        info.begin_request(b"RUN", file, file);
        if generation.once.is_none() {
            // A running background script counts as a ready thread of its generation.
            events.booted(&info);
        }
        let started = Instant::now();
        let end = run_script(generation, false);
        let ran = started.elapsed();
        info.end_request(end.outcome.memory, Instant::now());
        let status = end.outcome.exit_status;
        let crashed = end.result != RunResult::Ok || end.outcome.fatal || status != 0 || end.request_failed;
        if let Some(outcome) = &generation.once {
            let _ = outcome.send(JobOutcome {
                exit_status: status,
                fatal: end.outcome.fatal,
                failed_to_run: end.result != RunResult::Ok,
                duration: ran,
            });
            return Next::Leave(Leave::Exit);
        }
        if end.result != RunResult::Ok {
            counters.crashed();
            event(Level::Error, "PHP failed outside the background script; the thread gets a fresh PHP context", vec![
                ("failure", format!("{:?}", end.result).into()),
            ]);
            return Next::FreshContext;
        }
        if let Some(leave) = with_thread(|t| t.wait_for_leave(Duration::ZERO)) {
            event(Level::Debug, "background worker stopped", vec![("exit_status", status.into())]);
            return Next::Leave(leave);
        }
        // Told to stop without leaving: OPcache restarts, and the script runs again after.
        let recycled = info.stop_requested();
        if ran >= HEALTHY_RUN {
            failures = 0;
        }
        if crashed || ran < HEALTHY_RUN {
            failures += 1;
        }
        if crashed {
            counters.crashed();
        } else {
            counters.restarted(1);
        }
        let backoff = boot_backoff(failures.max(1), generation.max_boot_backoff);
        let (level, message) = match (crashed, recycled) {
            (true, _) => (Level::Warn, "background worker crashed; restarting it"),
            (false, true) => (Level::Debug, "background worker ended for an OPcache restart; restarting it"),
            (false, false) => (Level::Info, "background worker ended; restarting it"),
        };
        event(level, message, vec![
            ("exit_status", status.into()),
            ("ran_ms", (ran.as_millis() as u64).into()),
            ("retry_in_ms", (backoff.as_millis() as u64).into()),
        ]);
        info.set_state(ThreadState::Backoff);
        if let Some(leave) = with_thread(|t| t.wait_for_leave(backoff)) {
            return Next::Leave(leave);
        }
    }
}

/// php_worker_stopping(): whether the script on this thread was told to stop.
#[unsafe(no_mangle)]
pub extern "C" fn pw_rs_thread_stopping() -> bool {
    guard(false, || try_with_thread(|t| t.info.stop_requested()).unwrap_or(false))
}

/// php_worker_wait_stop(): waits up to `ms` milliseconds for the script on this thread
/// to be told to stop; true when it was. Returns false at once when the script was
/// stopped from outside (PHP then ends it).
#[unsafe(no_mangle)]
pub extern "C" fn pw_rs_thread_wait_stop(ms: u64) -> bool {
    guard(false, || {
        // Not under the thread state's borrow: this blocks.
        let Some(info) = try_with_thread(|t| t.info.clone()) else { return false };
        info.wait_stop(Duration::from_millis(ms))
    })
}
