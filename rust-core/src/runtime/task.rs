//! Sending tasks: php_worker_task() and php_worker_tasks(), on any PHP thread, queue
//! payloads for the threads of a task worker and wait for every answer, or for the
//! timeout. Tasks sent together run on as many free threads at once, so the sender
//! waits for the slowest, not for the sum.
//!
//! No sender waits on itself. Every task carries the chain of task workers it was sent
//! through (src/request/task.rs): the chain of the task its sender is running, then the
//! sender's own task worker. A task to a worker already in its chain is refused at once:
//! it would close a cycle, a → b → a, in which every thread of a can be waiting on b
//! while every thread of b waits on a. A thread sending to its own worker is the
//! shortest such cycle. The rule refuses every cycle, also one that would finish because
//! a has a free thread when b's task comes back: whether a cycle deadlocks depends on
//! how busy its workers are at that moment, so it would pass tests and hang under load;
//! refused always, it fails the first time it runs. Chains without a cycle are never
//! refused (a → b from one request, b → a from another; a → b and a → c → b). Only task
//! workers are in chains: no task waits on a thread of any other kind.
//!
//! A task that finds its worker's queue full is refused at once rather than waited for.
//! A task worker that stops (removed by a reload, PHP restarting) takes no more tasks:
//! those it queued before are served by its last threads or refused when they end
//! (src/supervisor/engine.rs queues tasks as it queues requests). Every wait ends at the
//! sender's timeout; a task still queued then is withdrawn and never runs, one already
//! running finishes and its answer is dropped.

use std::ffi::c_char;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;

use super::info::ThreadInfo;
use super::protocol::TaskRouter;
use super::thread::{try_with_thread, with_thread};
use crate::php::guard::guard;
use crate::request::task::{TaskChain, TaskError, TaskReply, TaskResult};

/// One payload, as C hands it over: `len` bytes at `data`.
#[repr(C)]
pub struct TaskPayload {
    pub data: *const c_char,
    pub len: usize,
}

/// One answer: a PW_TASK_* status, and the result (PW_TASK_OK) or why it failed, as
/// `len` bytes at `data`.
#[repr(C)]
pub struct TaskAnswer {
    pub status: i32,
    pub data: *const c_char,
    pub len: usize,
}

/// The task's handler returned a string: `data` is it.
pub const PW_TASK_OK: i32 = 0;
/// It ran and failed (its handler threw, returned no string, or its script ended).
pub const PW_TASK_FAILED: i32 = 1;
/// It did not finish within the timeout.
pub const PW_TASK_TIMEOUT: i32 = 2;
/// It never ran (no such task worker, the sender's own worker, a full queue...).
pub const PW_TASK_REFUSED: i32 = 3;

/// The answer of a task whose sending failed inside php_worker (a bug; the log says which).
const INTERNAL_ERROR: &str = "an internal error of php_worker (the server log says which)";

/// How often a waiting sender checks whether its own script was stopped from outside.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// Sends `n` payloads to the task worker `worker` and waits up to `timeout_ms` for their
/// answers, which fill `answers` in order. Their bytes stay valid until the thread's
/// next call.
///
/// # Safety
/// `worker` is readable for `worker_len` bytes; `payloads` holds `n` payloads, each
/// readable for its length; `answers` is writable for `n` answers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn pw_rs_tasks_run(
    worker: *const c_char,
    worker_len: usize,
    payloads: *const TaskPayload,
    n: usize,
    timeout_ms: u64,
    answers: *mut TaskAnswer,
) {
    // Filled first: on a contained panic C reads these, never uninitialised answers.
    for i in 0..n {
        // SAFETY: the function's contract: `answers` is writable for `n` answers.
        unsafe { *answers.add(i) = TaskAnswer { status: PW_TASK_FAILED, data: INTERNAL_ERROR.as_ptr().cast(), len: INTERNAL_ERROR.len() } };
    }
    guard((), || {
        // SAFETY: the function's contract: `worker` is readable for `worker_len` bytes.
        let worker = String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(worker.cast::<u8>(), worker_len) });
        // SAFETY: the function's contract: `payloads` holds `n` readable payloads.
        let payloads: Vec<&[u8]> = unsafe { std::slice::from_raw_parts(payloads, n) }
            .iter()
            // SAFETY: as above: each payload is readable for its length.
            .map(|p| if p.len == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(p.data.cast::<u8>(), p.len) } })
            .collect();
        let sender = try_with_thread(|t| (t.tasks.clone(), t.info.clone(), t.task_chain()));
        let results = match sender {
            Some((Some(router), info, chain)) => {
                run(&*router, &worker, &chain, &payloads, Duration::from_millis(timeout_ms), &info)
            }
            _ => payloads.iter().map(|_| Err(TaskError::Refused("tasks can be sent only from a PHP thread of php_worker".into()))).collect(),
        };
        with_thread(|t| {
            t.task_answers = results;
            for (i, result) in t.task_answers.iter().enumerate() {
                let (status, bytes): (i32, &[u8]) = match result {
                    Ok(data) => (PW_TASK_OK, data),
                    Err(e @ TaskError::Failed(_)) => (PW_TASK_FAILED, e.message().as_bytes()),
                    Err(e @ TaskError::Timeout) => (PW_TASK_TIMEOUT, e.message().as_bytes()),
                    Err(e @ TaskError::Refused(_)) => (PW_TASK_REFUSED, e.message().as_bytes()),
                };
                // SAFETY: the function's contract: `answers` is writable for `n` answers,
                // and there is one result per payload.
                unsafe { *answers.add(i) = TaskAnswer { status, data: bytes.as_ptr().cast(), len: bytes.len() } };
            }
        });
    })
}

/// Queues every payload, then collects the answers until all came, the timeout passed,
/// or the sender's own script was stopped.
fn run(router: &dyn TaskRouter, worker: &str, chain: &TaskChain, payloads: &[&[u8]], timeout: Duration, info: &ThreadInfo) -> Vec<TaskResult> {
    let mut results: Vec<Option<TaskResult>> = payloads.iter().map(|_| None).collect();
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut queued = Vec::with_capacity(payloads.len());
    for (i, payload) in payloads.iter().enumerate() {
        match router.submit_task(worker, chain, payload, TaskReply::new(i, tx.clone())) {
            Ok(state) => queued.push(Some(state)),
            Err(why) => {
                results[i] = Some(Err(TaskError::Refused(why)));
                queued.push(None);
            }
        }
    }
    drop(tx);
    let deadline = Instant::now() + timeout;
    let mut pending = results.iter().filter(|r| r.is_none()).count();
    while pending > 0 {
        let now = Instant::now();
        if now >= deadline || info.timed_out() {
            break;
        }
        match rx.recv_timeout((deadline - now).min(CHECK_EVERY)) {
            Ok((i, result)) => {
                if results[i].is_none() {
                    results[i] = Some(result);
                    pending -= 1;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            // Every task answered or was dropped: those without an answer were lost.
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    results
        .into_iter()
        .zip(queued)
        .map(|(result, state)| {
            result.unwrap_or_else(|| {
                // Still queued: it never runs. Running: its answer will be dropped.
                if let Some(state) = state {
                    state.cancel();
                }
                Err(TaskError::Timeout)
            })
        })
        .collect()
}
