//! The life of one classic PHP thread: take a request from the pool's queue, run its
//! script, repeat.

use std::ffi::CString;
use std::sync::Arc;

use crossbeam_channel::Receiver;

use crate::engine::{Shared, ThreadSlots, set_thread_shared};
use crate::ffi::Field;
use crate::host::Level;
use crate::request::{Request, RequestContext, Scratch, Sink};
use crate::shim::{self, RunResult, ShimRequest};

/// Serves requests from `jobs` until the queue is closed and empty. A thread whose PHP
/// state may be damaged (a bailout escaped PHP's own handlers) gets a fresh PHP context.
pub fn serve(name: &str, jobs: &Receiver<Box<Request>>, shared: &Arc<Shared>, slots: &ThreadSlots) {
    let cname = CString::new(name).unwrap_or_default();
    set_thread_shared(Some(shared.clone()));
    let mut scratch = Scratch::default();
    loop {
        // SAFETY: engine startup finished before pools start; paired with the shutdown below.
        unsafe { shim::pw_shim_thread_init(cname.as_ptr()) };
        let slot = slots.register();
        let healthy = serve_until_unhealthy(jobs, &mut scratch);
        slots.unregister(slot);
        // SAFETY: no request is running on this thread.
        unsafe { shim::pw_shim_thread_shutdown() };
        if healthy {
            break;
        }
        shared.host.log(0, Level::Warn, &format!("PHP thread {name} restarted after an unrecoverable error"));
    }
    set_thread_shared(None);
}

/// True when the queue closed, false when this thread's PHP state must be rebuilt.
fn serve_until_unhealthy(jobs: &Receiver<Box<Request>>, scratch: &mut Scratch) -> bool {
    while let Ok(request) = jobs.recv() {
        if !request.run_state().start() {
            request.reject(503);
            continue;
        }
        let mut ctx = Box::new(RequestContext::new(request, std::mem::take(scratch), Sink::Client));
        let req = shim_request(&mut ctx);
        let (mut fatal, mut exit_status) = (false, 0);
        // SAFETY: `req`'s strings live in the request inside `ctx`, which outlives the
        // call; the hooks reach `ctx` only through the pointer in `req`.
        let result = unsafe { shim::pw_shim_run_script(&req, false, &mut fatal, &mut exit_status) };
        if result != RunResult::Ok {
            ctx.log(Level::Error, &format!("PHP request failed outside the script ({result:?})"));
        }
        *scratch = ctx.finish(fatal);
        crate::env::reset();
        if result != RunResult::Ok {
            return false;
        }
    }
    true
}

/// The C view of a request; `ctx` becomes PHP's `SG(server_context)`.
pub fn shim_request(ctx: &mut RequestContext) -> ShimRequest {
    let server_context = ctx.as_server_context();
    let r = ctx.request();
    let c = |f: Field| r.field_ptr(f);
    ShimRequest {
        ctx: server_context,
        method: c(Field::Method),
        request_uri: c(Field::RequestUri),
        query_string: c(Field::QueryString),
        content_type: r.field_ptr_or_null(Field::ContentType),
        path_translated: c(Field::PathTranslated),
        script_filename: c(Field::ScriptFilename),
        authorization: r.field_ptr_or_null(Field::Authorization),
        content_length: r.content_length().max(0),
        proto_num: r.proto_num(),
    }
}
