//! Worker mode: a PHP thread boots a script once and serves many requests through it.
//!
//! The thread runs the worker script (csrc/shim.c `pw_shim_run_script` in worker mode). The script
//! calls `frankenphp_handle_request($handler)` in a loop; that C function asks the hooks
//! below for the next request (blocking on the pool's queue, outside any PHP call),
//! sets the request up, calls the handler and reports back when it is done. When the
//! script ends, the thread restarts it: at once if it had served requests, with a
//! growing pause if it failed before its first `frankenphp_handle_request()`.

use std::cell::{Cell, RefCell};
use std::ffi::CString;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, select};

use crate::config::WorkerConfig;
use crate::engine::{Shared, ThreadSlots, set_thread_shared};
use crate::ffi::Field;
use crate::host::Level;
use crate::request::{Request, RequestContext, Scratch, Sink};
use crate::shim::{self, RunResult, ShimRequest};
use crate::thread::shim_request;

const FIRST_BOOT_BACKOFF: Duration = Duration::from_millis(100);

/// A worker pool's settings, shared by its threads.
pub struct WorkerSpec {
    pub config: WorkerConfig,
    pub max_boot_backoff: Duration,
    /// Threads whose last run of the script failed before frankenphp_handle_request().
    boot_failing: AtomicUsize,
}

thread_local! {
    /// This thread is counted in its pool's `boot_failing`.
    static BOOT_FAILING: Cell<bool> = const { Cell::new(false) };
}

impl WorkerSpec {
    pub fn new(config: WorkerConfig) -> WorkerSpec {
        let max_boot_backoff = Duration::from_millis(config.max_boot_backoff_ms).max(FIRST_BOOT_BACKOFF);
        WorkerSpec { config, max_boot_backoff, boot_failing: AtomicUsize::new(0) }
    }

    /// Counts the current thread in or out of the threads that fail to boot.
    fn set_boot_failing(&self, failing: bool) {
        if BOOT_FAILING.replace(failing) != failing {
            if failing {
                self.boot_failing.fetch_add(1, Ordering::AcqRel);
            } else {
                self.boot_failing.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    fn every_thread_fails_to_boot(&self) -> bool {
        self.boot_failing.load(Ordering::Acquire) >= self.config.num
    }

    /// The request a worker script sees while it boots and between requests: a GET of
    /// the script itself, with the worker's environment.
    fn idle_request(&self, shared: &Arc<Shared>) -> Box<Request> {
        let file = self.config.file.as_str();
        let (dir, base) = file.rsplit_once('/').unwrap_or(("", file));
        let dir = if dir.is_empty() { "/" } else { dir };
        let uri = format!("/{base}");
        let mut fields = vec![""; Field::Count as usize];
        fields[Field::Method as usize] = "GET";
        fields[Field::RequestUri as usize] = &uri;
        fields[Field::ScriptFilename as usize] = file;
        fields[Field::Protocol as usize] = "HTTP/1.1";
        let mut vars: Vec<(&str, &str)> = vec![
            ("SCRIPT_FILENAME", file),
            ("SCRIPT_NAME", &uri),
            ("PHP_SELF", &uri),
            ("DOCUMENT_ROOT", dir),
            ("REQUEST_METHOD", "GET"),
            ("REQUEST_URI", &uri),
            ("SERVER_SOFTWARE", "Caddy php_worker"),
        ];
        vars.extend(self.config.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        Request::synthetic(shared.clone(), &fields, &vars, self.config.env.len())
    }
}

/// The worker state of the current thread during one run of the script.
struct Run {
    spec: Arc<WorkerSpec>,
    jobs: Receiver<Box<Request>>,
    /// The boot/idle context; its output goes to the log. Owned here, lent to PHP.
    idle: *mut RequestContext,
    /// The HTTP request PHP is handling, if any. Owned here, lent to PHP.
    in_flight: *mut RequestContext,
    scratch: Option<Scratch>,
    handled: u64,
    reached_handle_request: bool,
    /// A request ended the script (exit() or a failure inside the handler).
    request_failed: bool,
    stopping: bool,
}

thread_local! {
    static RUN: RefCell<Option<Run>> = const { RefCell::new(None) };
}

/// Serves a worker pool's queue on this thread until the queue closes.
pub fn serve(name: &str, spec: &Arc<WorkerSpec>, jobs: &Receiver<Box<Request>>, stop: &Receiver<()>, shared: &Arc<Shared>, slots: &ThreadSlots) {
    let cname = CString::new(name).unwrap_or_default();
    set_thread_shared(Some(shared.clone()));
    let worker = spec.config.name.as_str();
    let mut failures = 0u32;
    let mut scratch = Some(Scratch::default());
    'thread: loop {
        // SAFETY: engine startup finished before pools start; paired with the shutdown below.
        unsafe { shim::pw_shim_thread_init(cname.as_ptr()) };
        let slot = slots.register();
        loop {
            let outcome = run_script(spec, jobs, shared, &mut scratch);
            if outcome.stopping {
                spec.set_boot_failing(false);
                slots.unregister(slot);
                // SAFETY: no request is running on this thread.
                unsafe { shim::pw_shim_thread_shutdown() };
                break 'thread;
            }
            if outcome.result != RunResult::Ok {
                shared.host.log(0, Level::Error, &format!(
                    "worker {worker}: PHP thread {name} failed outside the script ({:?}); giving it a fresh PHP context",
                    outcome.result
                ));
                slots.unregister(slot);
                unsafe { shim::pw_shim_thread_shutdown() };
                continue 'thread;
            }
            if outcome.reached_handle_request {
                failures = 0;
                if outcome.request_failed || outcome.fatal || outcome.exit_status != 0 {
                    shared.host.log(0, Level::Warn, &format!(
                        "worker {worker}: script ended unexpectedly on thread {name} (exit status {}, {} requests served); restarting",
                        outcome.exit_status, outcome.handled
                    ));
                } else {
                    shared.host.log(0, Level::Debug, &format!(
                        "worker {worker}: script ended on thread {name} after {} requests; restarting",
                        outcome.handled
                    ));
                }
                continue;
            }
            failures += 1;
            let backoff = boot_backoff(failures, spec.max_boot_backoff);
            shared.host.log(0, Level::Error, &format!(
                "worker {worker}: script failed before reaching frankenphp_handle_request() \
                 (exit status {}, attempt {failures}); retrying in {} ms",
                outcome.exit_status,
                backoff.as_millis()
            ));
            spec.set_boot_failing(true);
            if spec.every_thread_fails_to_boot() {
                answer_waiting_requests(spec, jobs, shared, backoff);
            }
            select! {
                recv(stop) -> _ => {
                    spec.set_boot_failing(false);
                    slots.unregister(slot);
                    unsafe { shim::pw_shim_thread_shutdown() };
                    break 'thread;
                }
                default(backoff) => {}
            }
        }
    }
    set_thread_shared(None);
}

/// A worker none of whose threads can boot would leave its requests waiting for as long
/// as their clients do: answer those queued now 503, naming the worker, with the pause
/// before the next attempt as Retry-After. Requests arriving later wait for that attempt.
fn answer_waiting_requests(spec: &WorkerSpec, jobs: &Receiver<Box<Request>>, shared: &Arc<Shared>, backoff: Duration) {
    let worker = spec.config.name.as_str();
    let retry_after = backoff.as_secs().max(1).to_string();
    let body = format!("503 Service Unavailable: worker {worker} fails to start; the server log says why\n");
    let mut answered = 0;
    while let Ok(request) = jobs.try_recv() {
        if request.run_state().start() {
            request.reject_with(503, &[("Retry-After", &retry_after)], &body);
            answered += 1;
        } else {
            request.reject(503); // withdrawn: the host answered it already
        }
    }
    if answered > 0 {
        shared.host.log(0, Level::Warn, &format!(
            "worker {worker}: no thread can start the script; answered {answered} waiting requests 503"
        ));
    }
}

/// Pause before boot attempt `failures + 1`: 100 ms, doubling, up to `max`.
pub fn boot_backoff(failures: u32, max: Duration) -> Duration {
    let factor = 1u32.checked_shl(failures.saturating_sub(1)).unwrap_or(u32::MAX);
    FIRST_BOOT_BACKOFF.saturating_mul(factor).min(max)
}

struct Outcome {
    result: RunResult,
    fatal: bool,
    exit_status: i32,
    reached_handle_request: bool,
    request_failed: bool,
    handled: u64,
    stopping: bool,
}

/// One run of the worker script, from boot to its end.
fn run_script(spec: &Arc<WorkerSpec>, jobs: &Receiver<Box<Request>>, shared: &Arc<Shared>, scratch: &mut Option<Scratch>) -> Outcome {
    let idle = Box::into_raw(Box::new(RequestContext::new(spec.idle_request(shared), Scratch::default(), Sink::Log)));
    // SAFETY: `idle` is live until reclaimed below.
    let boot = unsafe { shim_request(&mut *idle) };
    RUN.with(|r| {
        *r.borrow_mut() = Some(Run {
            spec: spec.clone(),
            jobs: jobs.clone(),
            idle,
            in_flight: std::ptr::null_mut(),
            scratch: scratch.take(),
            handled: 0,
            reached_handle_request: false,
            request_failed: false,
            stopping: false,
        })
    });
    let (mut fatal, mut exit_status) = (false, 0);
    // SAFETY: `boot` points into `idle`, alive for the call; the hooks below reach the
    // contexts only through the pointers lent to PHP.
    let result = unsafe { shim::pw_shim_run_script(&boot, true, &mut fatal, &mut exit_status) };
    let run = RUN.with(|r| r.borrow_mut().take()).expect("the worker run state outlives the script");
    *scratch = run.scratch;
    let mut request_failed = run.request_failed;
    let mut handled = run.handled;
    if !run.in_flight.is_null() {
        request_failed = true;
        handled += 1; // counted like a request that failed through exit()
        // The script died inside the handler: the request gets what PHP printed, as a 500.
        // SAFETY: in_flight came from Box::into_raw in pw_rs_worker_wait.
        let ctx = unsafe { Box::from_raw(run.in_flight) };
        ctx.log(Level::Error, &format!("worker {}: request failed and ended the script", spec.config.name));
        *scratch = Some(ctx.finish(true));
    }
    // SAFETY: idle came from Box::into_raw above; PHP no longer uses it.
    unsafe { Box::from_raw(idle) }.finish(false);
    crate::env::reset();
    Outcome {
        result,
        fatal,
        exit_status,
        reached_handle_request: run.reached_handle_request,
        request_failed,
        handled,
        stopping: run.stopping,
    }
}

fn with_run<T>(fallback: T, f: impl FnOnce(&mut Run) -> T) -> T {
    crate::sapi::guard(fallback, || {
        RUN.with(|r| match r.borrow_mut().as_mut() {
            Some(run) => f(run),
            None => panic!("worker hook called outside a worker script"),
        })
    })
}

#[unsafe(no_mangle)]
extern "C" fn pw_rs_worker_active() -> bool {
    crate::sapi::guard(false, || RUN.with(|r| r.borrow().is_some()))
}

/// Blocks for the next request of this worker; see csrc/shim.h.
///
/// # Safety
/// `req` is writable.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_worker_wait(req: *mut ShimRequest) -> bool {
    with_run(false, |run| {
        if !run.reached_handle_request {
            run.spec.set_boot_failing(false);
        }
        run.reached_handle_request = true;
        let limit = run.spec.config.max_requests;
        let mut next = None;
        if !run.stopping && (limit == 0 || run.handled < limit) {
            while next.is_none() {
                match run.jobs.recv() {
                    Ok(request) if request.run_state().start() => next = Some(request),
                    Ok(request) => request.reject(503),
                    Err(_) => {
                        run.stopping = true;
                        break;
                    }
                }
            }
        }
        let ctx = match next {
            Some(request) => {
                let scratch = run.scratch.take().unwrap_or_default();
                run.in_flight = Box::into_raw(Box::new(RequestContext::new(request, scratch, Sink::Client)));
                run.in_flight
            }
            None => run.idle,
        };
        // SAFETY: ctx is live until pw_rs_worker_done or the end of the script.
        unsafe { *req = shim_request(&mut *ctx) };
        !run.in_flight.is_null()
    })
}

/// The request from the last pw_rs_worker_wait() is over.
#[unsafe(no_mangle)]
extern "C" fn pw_rs_worker_done(failed: bool) {
    with_run((), |run| {
        if run.in_flight.is_null() {
            return;
        }
        // SAFETY: in_flight came from Box::into_raw in pw_rs_worker_wait; PHP is done with it.
        let ctx = unsafe { Box::from_raw(std::mem::replace(&mut run.in_flight, std::ptr::null_mut())) };
        run.scratch = Some(ctx.finish(failed));
        run.handled += 1;
        run.request_failed |= failed;
    })
}

/// Fills `req` with the idle pseudo-request.
///
/// # Safety
/// `req` is writable.
#[unsafe(no_mangle)]
unsafe extern "C" fn pw_rs_worker_idle(req: *mut ShimRequest) {
    with_run((), |run| {
        // SAFETY: idle is live for the whole run.
        unsafe { *req = shim_request(&mut *run.idle) };
    })
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
