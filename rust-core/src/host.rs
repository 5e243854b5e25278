//! The host side of the ABI: the callbacks the embedding program (Caddy's Go module)
//! registered when it created the engine, wrapped so the rest of the crate calls safe
//! methods, and the process environment the host had when PHP started.

pub mod completions;

use std::cell::{Cell, RefCell};
use std::sync::Arc;

pub use completions::RunInfo;
use completions::{Completion, Completions};

use crate::abi::types::{Callbacks, Header, PHP_WORKER_RESPONSE_DONE, PHP_WORKER_RESPONSE_REFUSED, Response};
use crate::layout::Strings;

/// Severity of a log line sent to the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Level {
    Debug = 0,
    Info = 1,
    Warn = 2,
    Error = 3,
}

impl Level {
    /// Maps a syslog priority (what PHP passes to the SAPI's log_message) to a level:
    /// emerg..err are errors, warning is a warning, notice and info are info.
    pub fn from_syslog(priority: i32) -> Level {
        match priority {
            i32::MIN..=3 => Level::Error,
            4 => Level::Warn,
            5 | 6 => Level::Info,
            _ => Level::Debug,
        }
    }
}

/// A structured field of a log line: a name and a JSON value.
pub type LogField<'a> = (&'a str, serde_json::Value);

/// The fields as one JSON object, in their order ("" for none): the wire form of the
/// `log` callback's fields.
pub fn fields_json(fields: &[LogField<'_>]) -> String {
    if fields.is_empty() {
        return String::new();
    }
    let mut out = String::from("{");
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::Value::from(*name).to_string());
        out.push(':');
        out.push_str(&value.to_string());
    }
    out.push('}');
    out
}

/// A host in another process, reached over a wire rather than through callbacks: what a
/// php_worker child process's engine answers to (src/wire/). Its calls take the place
/// of the `respond`, `read_body`, `log` and `shared_store` callbacks, with their
/// contracts, on any thread, with no call into Go.
pub trait RemoteHost: Send + Sync {
    /// The `respond` callback: false when the client is gone.
    fn respond(&self, handle: usize, response: &Response) -> bool;
    /// The `read_body` callback: the count read, or None when the body cannot be read.
    fn read_body(&self, handle: usize, buf: &mut [u8]) -> Option<usize>;
    /// The `log` callback; `fields` is empty or a JSON object.
    fn log(&self, handle: usize, level: Level, message: &str, fields: &str);
    /// The `shared_store` callback: the encoded reply, or None when the table cannot be
    /// reached.
    fn shared_store(&self, request: &[u8]) -> Option<Vec<u8>>;
}

/// The embedding program: its callbacks, copied out of the C struct at engine creation,
/// and its environment, the base of every `$_SERVER` and getenv().
pub struct Host {
    callbacks: Callbacks,
    pub process_env: Strings,
    /// Where requests' last response calls go, when the host asked for completions.
    completions: Option<Completions>,
    /// The host in another process every call goes to instead of the callbacks.
    remote: Option<Arc<dyn RemoteHost>>,
}

// SAFETY: the ABI requires the callbacks to be callable from any thread.
unsafe impl Send for Host {}
// SAFETY: as for Send: the callbacks may be called from several threads at once, and `process_env` is read-only.
unsafe impl Sync for Host {}

impl Host {
    /// # Safety
    /// Every callback in `callbacks` must follow the contract documented on
    /// [`Callbacks`] for as long as the host is alive.
    pub unsafe fn new(callbacks: Callbacks, process_env: Strings) -> Host {
        Host { callbacks, process_env, completions: None, remote: None }
    }

    /// Sends every call to `remote` from now on, the completions' included.
    pub fn set_remote(&mut self, remote: Arc<dyn RemoteHost>) {
        self.remote = Some(remote);
    }

    /// The host in another process, when calls go there.
    pub fn remote(&self) -> Option<&Arc<dyn RemoteHost>> {
        self.remote.as_ref()
    }

    /// Requests' last response calls go to a completion queue from now on (see
    /// host/completions.rs) instead of the `respond` callback.
    pub fn enable_completions(&mut self) -> std::io::Result<()> {
        self.completions = Some(Completions::new()?);
        Ok(())
    }

    /// The completion queue, if the host asked for one.
    pub fn completions(&self) -> Option<&Completions> {
        self.completions.as_ref()
    }

    /// Hands a request's last response call to the host: queued as a completion, or
    /// through the `respond` callback when the host takes no completions.
    pub fn complete(&self, completion: Completion) {
        match &self.completions {
            Some(queue) if self.remote.is_none() => queue.push(completion),
            _ => {
                let entry = completion.entry();
                self.call_respond(entry.handle, &entry.response);
            }
        }
    }

    /// Hands response data to the host. Returns false when the client is gone.
    pub fn respond(&self, handle: usize, status: i32, headers: &[Header], body: &[u8], flags: u32, run: RunInfo) -> bool {
        self.call_respond(handle, &Response {
            status,
            headers: headers.as_ptr(),
            headers_len: headers.len(),
            body: body.as_ptr(),
            body_len: body.len(),
            flags,
            refusal: 0,
            retry_after_ms: 0,
            thread: run.thread,
            queued_us: run.queued_us,
        })
    }

    /// Tells the host it must answer the request itself, and why (a PHP_WORKER_REFUSED_*
    /// code): the request's last call.
    pub fn refuse(&self, handle: usize, refusal: u32, retry_after_ms: u32) {
        self.call_respond(handle, &Response {
            status: 0,
            headers: std::ptr::null(),
            headers_len: 0,
            body: std::ptr::null(),
            body_len: 0,
            flags: PHP_WORKER_RESPONSE_DONE | PHP_WORKER_RESPONSE_REFUSED,
            refusal,
            retry_after_ms,
            thread: RunInfo::NONE.thread,
            queued_us: RunInfo::NONE.queued_us,
        });
    }

    fn call_respond(&self, handle: usize, response: &Response) -> bool {
        if let Some(remote) = &self.remote {
            return remote.respond(handle, response);
        }
        if callbacks_refused() {
            return false;
        }
        match self.callbacks.respond {
            // SAFETY: the pointers in `response` are valid for the duration of the call,
            // which is all the contract of `respond` asks.
            Some(respond) => {
                // SAFETY: as above.
                let gone = unsafe { respond(handle, response) };
                block_host_signals();
                gone == 0
            }
            None => false,
        }
    }

    /// Reads request body bytes into `buf`: the count read (short only at the end of the
    /// body), or None when the body cannot be read (client gone, timeout).
    pub fn read_body(&self, handle: usize, buf: &mut [u8]) -> Option<usize> {
        if let Some(remote) = &self.remote {
            return remote.read_body(handle, buf).map(|n| n.min(buf.len()));
        }
        if callbacks_refused() {
            return None;
        }
        let read_body = self.callbacks.read_body?;
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes during the call.
        let n = unsafe { read_body(handle, buf.as_mut_ptr(), buf.len()) };
        block_host_signals();
        usize::try_from(n).ok().map(|n| n.min(buf.len()))
    }

    /// Sends a log line to the host's logger. `handle` names the request it belongs to,
    /// or is 0.
    pub fn log(&self, handle: usize, level: Level, message: &str) {
        self.event(handle, level, message, &[]);
    }

    /// Sends a log line with structured fields (see [`fields_json`]).
    pub fn event(&self, handle: usize, level: Level, message: &str, fields: &[LogField<'_>]) {
        if let Some(remote) = &self.remote {
            remote.log(handle, level, message, &fields_json(fields));
            return;
        }
        if callbacks_refused() {
            return;
        }
        if let Some(log) = self.callbacks.log {
            let fields = fields_json(fields);
            // SAFETY: `message` and `fields` are valid for the duration of the call.
            unsafe { log(handle, level as i32, message.as_ptr(), message.len(), fields.as_ptr(), fields.len()) };
            block_host_signals();
        }
    }
}

thread_local! {
    /// Set while the calling thread runs an export the host calls with `#cgo nocallback`
    /// (see [`without_callbacks`]).
    static NO_CALLBACKS: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with every call into the host skipped: for the exports Go calls with
/// `#cgo nocallback`, where a call back into Go would crash the process. Whatever `f`
/// drops on any path, a panic's unwinding included (a Request's Drop answers its host),
/// stays on this side; those exports report failure by their return value instead.
pub fn without_callbacks<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            NO_CALLBACKS.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(NO_CALLBACKS.with(|c| c.replace(true)));
    f()
}

fn callbacks_refused() -> bool {
    NO_CALLBACKS.with(Cell::get)
}

/// The signals the host's runtime owns, which a thread running PHP blocks: those a
/// process gets from outside or from its children (the kernel hands them to any thread
/// that does not block them) and Go's preemption signal. On a PHP thread they would
/// interrupt a blocking call (stream_select(), a database wait) with EINTR, and Go's
/// handler re-raises one it does not watch for with its default action on a thread Go
/// did not create: SIGALRM or SIGUSR2 would end the process. A script never receives a
/// process signal (csrc/stop.c). Left alone: the synchronous faults (csrc/crash.c
/// catches them) and the real-time signals (PHP's execution timer and the interrupt
/// use them).
const HOST_SIGNALS: [libc::c_int; 22] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGPIPE,
    libc::SIGALRM,
    libc::SIGTERM,
    libc::SIGSTKFLT,
    libc::SIGCHLD,
    libc::SIGCONT,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
    libc::SIGURG,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGWINCH,
    libc::SIGIO,
    libc::SIGPWR,
];

/// Blocks the host's signals ([`HOST_SIGNALS`]) on the calling thread: when a thread
/// that runs PHP starts, and again after each call into the host, since Go keeps its
/// own signal mask on a foreign thread that called into it (it binds a Go M to the
/// thread for the next calls).
pub fn block_host_signals() {
    // SAFETY: plain libc calls on a local sigset; changes only this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in HOST_SIGNALS {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// [`block_host_signals`] for C: csrc/thread.c, when a PHP thread starts.
#[unsafe(no_mangle)]
pub extern "C" fn pw_rs_block_host_signals() {
    block_host_signals();
}

thread_local! {
    /// The host of the engine the calling thread works for (a PHP thread or the engine's
    /// main thread): what PHP says outside any request goes to its log.
    static THREAD_HOST: RefCell<Option<Arc<Host>>> = const { RefCell::new(None) };
}

/// Attaches the calling thread to a host (None detaches it).
pub fn attach_thread(host: Option<Arc<Host>>) {
    THREAD_HOST.with(|h| *h.borrow_mut() = host);
}

/// Runs `f` with the calling thread's host, if it has one.
pub fn with_thread_host<T>(f: impl FnOnce(&Host) -> T) -> Option<T> {
    THREAD_HOST.with(|h| h.borrow().as_deref().map(f))
}

/// Logs a line that belongs to no request, through the calling thread's host.
pub fn log_unattached(level: Level, message: &str, fields: &[LogField<'_>]) {
    with_thread_host(|h| h.event(0, level, message, fields));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syslog_priorities_map_to_levels() {
        assert_eq!(Level::from_syslog(0), Level::Error);
        assert_eq!(Level::from_syslog(3), Level::Error);
        assert_eq!(Level::from_syslog(4), Level::Warn);
        assert_eq!(Level::from_syslog(5), Level::Info);
        assert_eq!(Level::from_syslog(6), Level::Info);
        assert_eq!(Level::from_syslog(7), Level::Debug);
    }

    #[test]
    fn fields_are_one_json_object_in_order() {
        assert_eq!(fields_json(&[]), "");
        let json = fields_json(&[("worker", "a\"b".into()), ("line", 3.into()), ("boot_ms", 1.5.into()), ("ok", true.into())]);
        assert_eq!(json, r#"{"worker":"a\"b","line":3,"boot_ms":1.5,"ok":true}"#);
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed["worker"], "a\"b");
    }
}
