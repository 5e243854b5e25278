//! Worker mode: a PHP thread boots a script once and serves many requests through it.
//!
//! The thread runs the worker script (`pw_shim_run_script` in worker mode). The script
//! calls `frankenphp_handle_request($handler)` in a loop; that C function asks the hooks
//! below for the next request (blocking on the pool's queue, outside any PHP call),
//! sets the request up, calls the handler and reports back when it is done. When the
//! script ends, the thread starts it again: at once if it had served requests, after a
//! growing pause if it failed before its first `frankenphp_handle_request()`.
//!
//! A thread belongs to one [`Generation`] of its pool: the settings its script boots
//! with. A pool restarts its workers by starting a new generation beside the old one
//! (src/supervisor/pool.rs); a generation takes requests once it is active.

use std::ffi::c_char;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::generation::{FIRST_BOOT_BACKOFF, Generation};
use super::opcache;
use super::counters::RouteGrowth;
use super::info::ThreadState;
use super::protocol::{Job, Next};
use super::thread::{Ending, LentContext, Limit, PhpThread, WorkerRun, end_request, try_with_thread, with_thread};
use crate::abi::types::Field;
use crate::config::WorkerKind;
use crate::host::{Host, Level, LogField, log_unattached};
use crate::php::guard::guard;
use crate::php::sys::{self, RunMode, RunOutcome, RunResult, ShimRequest};
use crate::request::task::TaskChain;
use crate::request::context::{RequestContext, Scratch, Sink};
use crate::request::{Refusal, Request};

/// How one run of the script ended.
pub(super) struct ScriptEnd {
    pub(super) result: RunResult,
    pub(super) outcome: RunOutcome,
    reached_handle_request: bool,
    pub(super) request_failed: bool,
    handled: u64,
    /// Why it was told to end, if it was.
    ending: Option<Ending>,
    /// The routes that grew its memory.
    growth: RouteGrowth,
}

/// Routes named in the max_memory log line.
const LOGGED_ROUTES: usize = 3;

/// Runs the generation's script on this thread, again and again, until the thread
/// leaves the pool or needs a fresh PHP context.
pub fn serve(generation: &Arc<Generation>) -> Next {
    let (host, info, events, queue, counters) = with_thread(|t| {
        let a = &t.assignment;
        (t.host.clone(), t.info.clone(), a.events.clone(), a.queue.clone(), a.counters.clone())
    });
    let (worker, thread) = (generation.spec.name.as_str(), info.name());
    let (mut failures, mut quiet) = (0u32, false);
    loop {
        with_thread(|t| t.mark_taken()); // not free while its script boots
        info.set_state(ThreadState::Booting);
        info.clear_stop();
        let end = run_script(generation, quiet);
        quiet = false;
        let event = |level, message: &str, mut fields: Vec<LogField<'_>>| {
            fields.splice(0..0, [("worker", worker.into()), ("thread", thread.as_str().into())]);
            host.event(0, level, message, &fields)
        };
        if end.result != RunResult::Ok {
            counters.crashed();
            event(Level::Error, "PHP failed outside the worker script; the thread gets a fresh PHP context", vec![
                ("failure", format!("{:?}", end.result).into()),
            ]);
            return match end.ending {
                Some(Ending::Leave(leave)) => Next::Leave(leave),
                _ => Next::FreshContext,
            };
        }
        let (status, served) = (end.outcome.exit_status, end.handled);
        if end.reached_handle_request {
            failures = 0;
            let fields = || vec![("exit_status", status.into()), ("requests", served.into())];
            let crashed = end.request_failed || end.outcome.fatal || status != 0;
            if crashed {
                counters.crashed();
            }
            match end.ending {
                Some(Ending::Leave(leave)) => {
                    event(Level::Debug, "worker script ended: the thread leaves its pool", fields());
                    return Next::Leave(leave);
                }
                _ if crashed => event(Level::Warn, "worker script crashed; restarting it", fields()),
                Some(Ending::Recycle) => {
                    counters.restarted(1);
                    event(Level::Debug, "worker script restarts for an OPcache restart", fields());
                }
                Some(Ending::Limit(Limit::MaxMemory(real))) => {
                counters.restarted(1);
                quiet = true;
                let mut fields = fields();
                fields.extend([
                    ("memory", (real as u64).into()),
                    ("max_memory", generation.spec.max_memory.into()),
                    ("grew_most", grew_most(&end.growth).into()),
                ]);
                    event(Level::Warn, "worker script restarted (max_memory): its PHP memory passed the limit", fields);
                }
                // max_requests, or a script that returned on its own after a request
                Some(Ending::Limit(Limit::MaxRequests)) | None => {
                    counters.restarted(1);
                    quiet = true;
                    event(Level::Debug, "worker script restarted (max_requests)", fields());
                }
            }
            if with_thread(|t| t.context_spent()) {
                return Next::Renew;
            }
            continue;
        }
        if let Some(Ending::Leave(leave)) = end.ending {
            return Next::Leave(leave);
        }
        counters.crashed();
        failures += 1;
        let backoff = boot_backoff(failures, generation.max_boot_backoff);
        info.set_state(ThreadState::Backoff);
        let nobody_serves = events.boot_failing(&info, true);
        event(Level::Error, "worker script failed before reaching frankenphp_handle_request(); backing off", vec![
            ("exit_status", status.into()),
            ("attempt", failures.into()),
            ("retry_in_ms", (backoff.as_millis() as u64).into()),
            ("others_serve", (!nobody_serves).into()),
        ]);
        if nobody_serves {
            refuse_waiting_requests(&host, worker, &queue, backoff);
        }
        if let Some(leave) = with_thread(|t| t.wait_for_leave(backoff)) {
            return Next::Leave(leave);
        }
    }
}

/// A worker none of whose threads can boot would leave its requests waiting for as long
/// as their clients do: hand those queued now back to the host, which answers them 503
/// naming the worker, with the pause before the next attempt as `Retry-After`. Requests
/// arriving later wait for that attempt.
fn refuse_waiting_requests(host: &Host, worker: &str, queue: &Receiver<Box<Request>>, backoff: Duration) {
    let mut refused = 0;
    while let Ok(request) = queue.try_recv() {
        if request.refuse_unless_withdrawn(Refusal::BootFailing { retry_after: backoff }) {
            refused += 1;
        }
    }
    if refused > 0 {
        host.event(0, Level::Warn, "no thread can start the worker script: the waiting requests are refused", &[
            ("worker", worker.into()),
            ("refused", refused.into()),
        ]);
    }
}

/// The routes that grew a script's memory most, for a log line:
/// "/leak +52.4 MB in 50 requests, /report +1.2 MB in 3 requests".
fn grew_most(growth: &RouteGrowth) -> String {
    let routes = growth.top(LOGGED_ROUTES);
    if routes.is_empty() {
        return "no request left it larger (it grew between requests)".into();
    }
    let routes: Vec<String> = routes
        .iter()
        .map(|r| {
            let s = if r.requests == 1 { "" } else { "s" };
            format!("{} +{:.1} MB in {} request{s}", r.path, r.bytes as f64 / 1e6, r.requests)
        })
        .collect();
    routes.join(", ")
}

/// Pause before boot attempt `failures + 1`: 100 ms, doubling, up to `max`.
pub fn boot_backoff(failures: u32, max: Duration) -> Duration {
    let factor = 1u32.checked_shl(failures.saturating_sub(1)).unwrap_or(u32::MAX);
    FIRST_BOOT_BACKOFF.saturating_mul(factor).min(max)
}

/// One run of the worker script, from boot to its end.
pub(super) fn run_script(generation: &Arc<Generation>, quiet: bool) -> ScriptEnd {
    let (host, info) = with_thread(|t| (t.host.clone(), t.info.clone()));
    let idle = RequestContext::new(generation.idle_request(&host), Scratch::default(), Sink::Log)
        .inherit_env(generation.env.clone())
        .logging_as(generation.name.clone());
    let idle = LentContext::new(Box::new(idle));
    // SAFETY: `idle` lives in the run state until taken back below.
    let mut boot = unsafe { (*idle.as_ptr()).shim() };
    // A scheduled job's command line, alive for the call.
    let argv: Vec<*const c_char> = generation.argv.iter().map(|a| a.as_ptr()).collect();
    if !argv.is_empty() {
        boot.argc = argv.len() as i32;
        boot.argv = argv.as_ptr();
    }
    let mode = if generation.spec.kind == WorkerKind::Background { RunMode::Background } else { RunMode::Worker };
    let inside = opcache::gate().enter();
    with_thread(|t| {
        t.run = Some(WorkerRun {
            generation: generation.clone(),
            idle,
            in_flight: None,
            handled: 0,
            reached_handle_request: false,
            request_failed: false,
            ending: None,
            started: Instant::now(),
            restarts_quietly: quiet,
            gate_epoch: inside.epoch,
            began_memory: 0,
            growth: RouteGrowth::default(),
            revalidating: false,
            task_chain: TaskChain::default(),
        })
    });
    let mut outcome = RunOutcome::default();
    // SAFETY: `boot` points into `idle`, alive for the call; the hooks below reach the
    // contexts only through the pointers lent to PHP.
    let result = unsafe { sys::pw_shim_run_script(&boot, mode, &mut outcome) };
    drop(inside);
    let run = with_thread(|t| t.run.take()).expect("the worker run state outlives the script");
    if run.revalidating {
        // The script died while it revalidated OPcache: do not keep the others waiting.
        generation.end_opcache_revalidation();
    }
    let mut end = ScriptEnd {
        result,
        outcome,
        reached_handle_request: run.reached_handle_request,
        request_failed: run.request_failed,
        handled: run.handled,
        ending: run.ending,
        growth: run.growth,
    };
    if let Some(in_flight) = run.in_flight {
        end.request_failed = true;
        end.handled += 1;
        // The script ended inside the handler, on an error or exit(): the request gets
        // what PHP printed up to the end of the script's shutdown, as a 500 unless a
        // status was chosen or the response left.
        // SAFETY: the script ended: PHP no longer uses the context.
        let ctx = unsafe { in_flight.take() };
        let fields = [("worker", generation.spec.name.as_str().into()), ("thread", info.name().into())];
        if end.outcome.fatal || end.result != RunResult::Ok {
            ctx.event(Level::Error, "request failed and ended the worker script", &fields);
        } else {
            ctx.event(Level::Debug, "exit() in the handler ended the worker script", &fields);
        }
        end_request(outcome.memory, ctx.finish(true));
    }
    // SAFETY: the script ended: PHP no longer uses the context.
    unsafe { run.idle.take() }.finish(false);
    with_thread(|t| t.env.reset());
    end
}

fn with_run<T>(fallback: T, f: impl FnOnce(&mut PhpThread) -> T) -> T {
    guard(fallback, || {
        with_thread(|t| {
            assert!(t.run.is_some(), "worker hook called outside a worker script");
            f(t)
        })
    })
}

/// True when the worker script about to boot must first have OPcache revalidated, then
/// call pw_rs_worker_opcache_revalidated(); waits while another thread of its generation
/// does it (see Generation::begin_opcache_revalidation).
#[unsafe(no_mangle)]
pub extern "C" fn pw_rs_worker_revalidates_opcache() -> bool {
    guard(false, || {
        let Some(generation) = try_with_thread(|t| t.run.as_ref().map(|run| run.generation.clone())).flatten() else {
            return false;
        };
        // Not under the thread state's borrow: this may wait for another thread.
        let begins = generation.begin_opcache_revalidation();
        if begins {
            with_thread(|t| {
                if let Some(run) = t.run.as_mut() {
                    run.revalidating = true;
                }
            });
        }
        begins
    })
}

/// The revalidation pw_rs_worker_revalidates_opcache() asked for is done.
#[unsafe(no_mangle)]
pub extern "C" fn pw_rs_worker_opcache_revalidated() {
    guard((), || {
        if let Some(generation) = try_with_thread(|t| {
            t.run.as_mut().filter(|run| run.revalidating).map(|run| {
                run.revalidating = false;
                run.generation.clone()
            })
        })
        .flatten()
        {
            generation.end_opcache_revalidation();
        }
    })
}

/// [`pw_rs_worker_kind`]: not a worker script.
pub const PW_WORKER_NONE: i32 = 0;
/// [`pw_rs_worker_kind`]: an HTTP worker (frankenphp_handle_request()).
pub const PW_WORKER_HTTP: i32 = 1;
/// [`pw_rs_worker_kind`]: a task worker (php_worker_handle_task()).
pub const PW_WORKER_TASK: i32 = 2;
/// [`pw_rs_worker_kind`]: a background worker or a scheduled job.
pub const PW_WORKER_BACKGROUND: i32 = 3;

/// What the script on this thread is: a PW_WORKER_* value.
#[unsafe(no_mangle)]
pub extern "C" fn pw_rs_worker_kind() -> i32 {
    guard(PW_WORKER_NONE, || {
        try_with_thread(|t| {
            t.run.as_ref().map_or(PW_WORKER_NONE, |run| match run.generation.spec.kind {
                WorkerKind::Http => PW_WORKER_HTTP,
                WorkerKind::Task => PW_WORKER_TASK,
                WorkerKind::Background => PW_WORKER_BACKGROUND,
            })
        })
        .unwrap_or(PW_WORKER_NONE)
    })
}

/// The name of the worker whose script runs on this thread (for PHP's error messages):
/// `*name` and `*len`, valid while the script runs; false outside a worker script.
///
/// # Safety
/// `name` and `len` are writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pw_rs_worker_name(name: *mut *const c_char, len: *mut usize) -> bool {
    guard(false, || {
        try_with_thread(|t| {
            let Some(run) = t.run.as_ref() else { return false };
            // SAFETY: the function's contract: both are writable. The name lives in the
            // generation, which the run holds for the script's whole life.
            unsafe {
                *name = run.generation.name.as_ptr().cast();
                *len = run.generation.name.len();
            }
            true
        })
        .unwrap_or(false)
    })
}

/// Waits for the next request and fills `*req` with it: true. When the script must stop
/// (shutdown, restart, max_requests, max_memory) fills `*req` with the idle
/// pseudo-request: false. `memory` and `real_memory` are PHP's memory now
/// (memory_get_usage() and memory_get_usage(true)).
///
/// Host callbacks (log lines, the refusal of a withdrawn request) and the pool's events
/// run between the borrows of the thread state, never inside one.
///
/// # Safety
/// `req` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pw_rs_worker_wait(req: *mut ShimRequest, memory: usize, real_memory: usize) -> bool {
    // On a contained panic `*req` still gets a request C can start: the idle one.
    guard(None, || {
        Some(wait_for_request(req, memory, real_memory))
    })
    .unwrap_or_else(|| {
        // SAFETY: the function's contract: `req` is writable.
        unsafe { fill_idle(req) };
        false
    })
}

/// pw_rs_worker_wait() without its panic guard.
fn wait_for_request(req: *mut ShimRequest, memory: usize, real_memory: usize) -> bool {
    {
        let step = with_run(None, |t| Some(ask_for_request(t, memory, real_memory))).expect("with_run answers");
        for (level, message, fields) in &step.lines {
            step.host.event(0, *level, message, fields);
        }
        if step.first {
            step.events.boot_failing(&step.info, false);
            step.events.booted(&step.info);
        }
        let job = if step.stop {
            None
        } else {
            loop {
                match with_thread(|t| t.next_job()) {
                    Job::Withdrawn(request) => request.refuse(Refusal::Withdrawn),
                    job => break Some(job),
                }
            }
        };
        let filled = with_run(None, |t| {
            let scratch = if let Some(Job::Request(request)) = &job {
                t.begin_request(request);
                std::mem::take(&mut t.scratch)
            } else {
                Scratch::default()
            };
            let run = t.run.as_mut().expect("checked by with_run");
            let ctx = match job {
                Some(Job::Request(request)) => {
                    run.task_chain = request.task_chain().clone();
                    let ctx = if request.is_task() {
                        RequestContext::new(request, scratch, Sink::Task).logging_as(run.generation.name.clone())
                    } else {
                        RequestContext::new(request, scratch, Sink::Client)
                    };
                    let ctx = ctx.inherit_env(run.generation.env.clone()).on_thread(t.info.index);
                    let mut ctx = Box::new(ctx);
                    ctx.watch(t.info.expiry.clone());
                    run.in_flight.insert(LentContext::new(ctx)).as_ptr()
                }
                Some(Job::Leave(leave)) => {
                    run.ending = Some(Ending::Leave(leave));
                    run.idle.as_ptr()
                }
                Some(Job::Recycle) => {
                    run.ending = Some(Ending::Recycle);
                    run.idle.as_ptr()
                }
                None => run.idle.as_ptr(),
                Some(Job::Withdrawn(_)) => unreachable!("the loop above refuses withdrawn requests"),
            };
            // SAFETY: ctx is live until pw_rs_worker_done or the end of the script; `req`
            // is writable by pw_rs_worker_wait's contract.
            unsafe { *req = (*ctx).shim() };
            Some(run.in_flight.is_some())
        });
        // None: a contained panic, before `*req` was written.
        filled.unwrap_or_else(|| {
            // SAFETY: `req` is writable by pw_rs_worker_wait's contract.
            unsafe { fill_idle(req) };
            false
        })
    }
}

/// What pw_rs_worker_wait() found under the thread state's borrow, and does after it.
struct WaitStep {
    first: bool,
    stop: bool,
    lines: Vec<(Level, &'static str, Vec<LogField<'static>>)>,
    host: Arc<Host>,
    info: Arc<super::info::ThreadInfo>,
    events: Arc<dyn super::protocol::PoolEvents>,
}

/// The script asks for its next request: notes a first call (the script booted) and
/// whether the script must end (max_requests, max_memory, or an ending already set).
fn ask_for_request(t: &mut PhpThread, memory: usize, real_memory: usize) -> WaitStep {
    t.info.set_real_memory(real_memory);
    let context_spent = t.context_spent();
    let run = t.run.as_mut().expect("checked by with_run");
    let first = !run.reached_handle_request;
    run.reached_handle_request = true;
    run.began_memory = memory;
    let spec = &run.generation.spec;
    if run.ending.is_none() {
        if (spec.max_requests != 0 && run.handled >= spec.max_requests) || context_spent {
            run.ending = Some(Ending::Limit(Limit::MaxRequests));
        } else if spec.max_memory != 0 && real_memory as u64 > spec.max_memory && run.handled > 0 {
            // After a request only: a script booted past the limit still serves.
            run.ending = Some(Ending::Limit(Limit::MaxMemory(real_memory)));
        }
    }
    let mut lines = Vec::new();
    if first && !run.restarts_quietly && spec.max_memory != 0 && real_memory as u64 > spec.max_memory {
        lines.push((Level::Warn, "the worker script uses more than max_memory once booted: it restarts after every request", vec![
            ("worker", spec.name.as_str().into()),
            ("memory", (real_memory as u64).into()),
            ("max_memory", spec.max_memory.into()),
        ]));
    }
    if first {
        let boot_ms = run.started.elapsed().as_secs_f64() * 1000.0;
        let level = if run.restarts_quietly { Level::Debug } else { Level::Info };
        lines.push((level, "worker script ready", vec![
            ("worker", spec.name.as_str().into()),
            ("thread", t.info.name().into()),
            ("generation", run.generation.id.into()),
            ("boot_ms", ((boot_ms * 10.0).round() / 10.0).into()),
        ]));
    }
    WaitStep {
        first,
        stop: run.ending.is_some(),
        lines,
        host: t.host.clone(),
        info: t.info.clone(),
        events: t.assignment.events.clone(),
    }
}

/// The request from the last pw_rs_worker_wait() is over: its response is complete.
/// `failed` when it ended on an error or exit() (a 500 unless a response already left);
/// `memory` is PHP's memory usage at its end.
#[unsafe(no_mangle)]
pub extern "C" fn pw_rs_worker_done(failed: bool, memory: usize) {
    guard((), || {
        let ctx = with_run(None, |t| {
            let run = t.run.as_mut().expect("checked by with_run");
            let in_flight = run.in_flight.take()?;
            // SAFETY: the request is over (this call says so): PHP is done with it.
            let ctx = unsafe { in_flight.take() };
            run.task_chain = TaskChain::default();
            run.handled += 1;
            run.request_failed |= failed;
            if memory > run.began_memory {
                let (uri, grew) = (ctx.request().field(Field::RequestUri), (memory - run.began_memory) as u64);
                run.growth.record(uri, grew);
                t.assignment.counters.grew(uri, grew);
            }
            if !failed {
                t.mark_free(); // before the response completes: see PhpThread::mark_free
            }
            Some(ctx)
        });
        if let Some(ctx) = ctx {
            end_request(memory, ctx.finish(failed));
        }
    })
}

/// Fills `*req` with the idle pseudo-request: output goes to the log.
///
/// # Safety
/// `req` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pw_rs_worker_idle(req: *mut ShimRequest) {
    // SAFETY: the function's contract: `req` is writable.
    unsafe { fill_idle(req) }
}

/// Fills `*req` with the run's idle pseudo-request. C goes on to start whatever `*req`
/// holds, so when no worker script runs on this thread (a bug: the hooks are called only
/// from one) the process ends, with a log line, rather than start an uninitialised one.
///
/// # Safety
/// `req` is writable.
unsafe fn fill_idle(req: *mut ShimRequest) {
    let idle = guard(None, || {
        try_with_thread(|t| t.run.as_ref().map(|run| {
            // SAFETY: idle is live for the whole run.
            unsafe { (*run.idle.as_ptr()).shim() }
        }))
        .flatten()
    });
    match idle {
        // SAFETY: the function's contract: `req` is writable.
        Some(idle) => unsafe { *req = idle },
        None => {
            log_unattached(Level::Error, "internal error: a worker hook ran outside a worker script; the process ends", &[]);
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_backoff_doubles_from_100ms_to_the_cap() {
        let max = Duration::from_secs(2);
        let waits: Vec<u128> = (1..=7).map(|n| boot_backoff(n, max).as_millis()).collect();
        assert_eq!(waits, vec![100, 200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(boot_backoff(100, max), max, "no overflow");
    }
}
