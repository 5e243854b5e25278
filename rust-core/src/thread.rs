//! The life of one PHP thread: take a request from the pool's queue, run it, repeat.

use std::ffi::CString;
use std::sync::Arc;

use crossbeam_channel::Receiver;

use crate::engine::{Shared, set_thread_shared};
use crate::ffi::Field;
use crate::host::Level;
use crate::request::{Request, RequestContext, Scratch};
use crate::shim::{self, RunResult, ShimRequest};

/// Serves requests from `jobs` until the queue is closed and empty. A thread whose PHP
/// state may be damaged (a bailout escaped PHP's own handlers) gets a fresh PHP context.
pub fn serve(name: &str, jobs: &Receiver<Box<Request>>, shared: &Arc<Shared>) {
    let cname = CString::new(name).unwrap_or_default();
    set_thread_shared(Some(shared.clone()));
    let mut scratch = Scratch::default();
    loop {
        // SAFETY: engine startup finished before pools start; paired with the shutdown below.
        unsafe { shim::pw_shim_thread_init(cname.as_ptr()) };
        let healthy = serve_until_unhealthy(jobs, &mut scratch);
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
        match run_classic(&request, scratch) {
            RunResult::Ok => {}
            RunResult::StartupFailed | RunResult::Unhealthy => return false,
        }
    }
    true
}

/// Runs one script for one request and sends its response.
fn run_classic(request: &Request, scratch: &mut Scratch) -> RunResult {
    let c = |f: Field| request.field_ptr(f);
    let shim_request = |ctx| ShimRequest {
        ctx,
        method: c(Field::Method),
        request_uri: c(Field::RequestUri),
        query_string: c(Field::QueryString),
        content_type: request.field_ptr_or_null(Field::ContentType),
        path_translated: c(Field::PathTranslated),
        script_filename: c(Field::ScriptFilename),
        authorization: request.field_ptr_or_null(Field::Authorization),
        content_length: request.content_length(),
        proto_num: request.proto_num(),
    };
    let mut ctx = RequestContext::new(request, scratch);
    let req = shim_request(ctx.as_server_context());
    let mut fatal = false;
    // SAFETY: `req`'s strings live in `request`, and `ctx` outlives the call; the hooks
    // reach `ctx` only through the pointer in `req`, while this frame does not touch it.
    let result = unsafe { shim::pw_shim_run_script(&req, &mut fatal) };
    if result != RunResult::Ok {
        ctx.log(Level::Error, &format!("PHP request failed outside the script ({result:?})"));
    }
    ctx.finish(fatal);
    result
}

