//! The loop of a classic thread: take a request from the pool's queue, run its script
//! (request startup, script, request shutdown), repeat.

use super::opcache;
use super::protocol::{Job, Next};
use super::thread::{end_request, with_thread};
use crate::host::Level;
use crate::php::sys::{self, RunOutcome, RunResult};
use crate::request::context::{RequestContext, Sink};
use crate::request::{Refusal, Request};

/// Serves the pool's queue until the thread leaves it or needs a fresh PHP context.
pub fn serve() -> Next {
    loop {
        let request = match with_thread(|t| t.next_job()) {
            Job::Request(request) => request,
            Job::Leave(leave) => return Next::Leave(leave),
            Job::Recycle => continue, // a worker's command; a classic thread keeps its context
            Job::Withdrawn(request) => {
                request.refuse(Refusal::Withdrawn);
                continue;
            }
        };
        if !run(request) {
            return Next::FreshContext;
        }
        if with_thread(|t| t.context_spent()) {
            return Next::Renew;
        }
    }
}

/// Runs one request; false when the thread's PHP state may be damaged.
fn run(request: Box<Request>) -> bool {
    let mode = if request.one_shot_worker() { sys::RunMode::OneShotWorker } else { sys::RunMode::Request };
    let (info, scratch) = with_thread(|t| {
        t.info.clear_stop(); // php_worker_stopping() answers for this request's run
        t.begin_request(&request);
        (t.info.clone(), std::mem::take(&mut t.scratch))
    });
    let mut ctx = Box::new(RequestContext::new(request, scratch, Sink::Client).on_thread(info.index));
    ctx.watch(info.expiry.clone());
    let req = ctx.shim();
    let mut outcome = RunOutcome::default();
    let inside = opcache::gate().enter();
    // SAFETY: `req` points into `ctx`, which outlives the call; PHP reaches `ctx` only
    // through the pointer in `req`.
    let result = unsafe { sys::pw_shim_run_script(&req, mode, &mut outcome) };
    drop(inside);
    if result != RunResult::Ok {
        ctx.event(Level::Error, "PHP request failed outside the script; the thread gets a fresh PHP context", &[
            ("failure", format!("{result:?}").into()),
            ("thread", info.name().into()),
        ]);
    }
    if result == RunResult::Ok {
        with_thread(|t| t.mark_free()); // before the response completes: see PhpThread::mark_free
    }
    end_request(outcome.memory, ctx.finish(outcome.fatal));
    with_thread(|t| t.env.reset());
    result == RunResult::Ok
}
