//! A worker generation: the settings a set of worker threads boots with, and whether
//! they take requests yet (src/supervisor/pool.rs starts, activates and retires generations).

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};

use crossbeam_channel::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::abi::types::Field;
use crate::config::WorkerSpec;
use crate::host::Host;
use crate::layout::Strings;
use crate::request::Request;
use crate::request::task::{TaskChain, TaskReply};

/// How a scheduled job's run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobOutcome {
    /// Its exit status: exit(n), 255 after a fatal error.
    pub exit_status: i32,
    /// It ended on a fatal error or an uncaught exception.
    pub fatal: bool,
    /// PHP failed around the script (request startup or shutdown): it may not have run.
    pub failed_to_run: bool,
    pub duration: Duration,
}

/// The first pause after a worker script failed to boot; it doubles up to the spec's cap.
pub const FIRST_BOOT_BACKOFF: Duration = Duration::from_millis(100);

/// The settings a set of worker threads boots with, and whether they take requests.
pub struct Generation {
    pub id: u32,
    /// The worker's name, for logs and the thread list.
    pub name: Arc<str>,
    pub spec: WorkerSpec,
    /// The spec's env, in the layout C registers `$_SERVER` from; every request context
    /// of the generation shares it.
    pub env: Arc<Strings>,
    pub max_boot_backoff: Duration,
    /// A scheduled job's `$argv` (the spec's), empty for workers.
    pub argv: Vec<CString>,
    /// For a scheduled job: it runs once, and how it ended goes here (see src/runtime/background.rs).
    pub once: Option<Sender<JobOutcome>>,
    active: AtomicBool,
    /// Whether OPcache was checked against the files on disk for it (see
    /// begin_opcache_revalidation).
    revalidation: Mutex<Revalidation>,
    revalidated: Condvar,
}

/// Where a generation's OPcache revalidation is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Revalidation {
    Pending,
    Running,
    Done,
}

/// How long a booting thread waits for another to revalidate OPcache, at most (it
/// takes milliseconds; a thread that died doing it must not hold the others).
const REVALIDATION_WAIT: Duration = Duration::from_secs(10);

impl Generation {
    pub fn new(id: u32, spec: WorkerSpec, active: bool) -> Generation {
        let max_boot_backoff = Duration::from_millis(spec.max_boot_backoff_ms).max(FIRST_BOOT_BACKOFF);
        Generation {
            id,
            name: spec.name.as_str().into(),
            env: Arc::new(Strings::from_pairs(spec.env.iter().map(|(k, v)| (k, v)))),
            // The spec was checked: no NUL in its strings.
            argv: spec.argv.iter().filter_map(|a| CString::new(a.as_str()).ok()).collect(),
            once: None,
            spec,
            max_boot_backoff,
            active: AtomicBool::new(active),
            revalidation: Mutex::new(Revalidation::Pending),
            revalidated: Condvar::new(),
        }
    }

    /// True for the first boot of the generation only: that boot has OPcache drop the
    /// scripts whose files changed before the worker script runs, then calls
    /// end_opcache_revalidation. The generation's other boots wait here until it did, so
    /// that none compiles from the stale cache meanwhile. OPcache looks at a file's time
    /// only every revalidate_freq seconds, to the second, and never with
    /// validate_timestamps off, so a deploy that reloads at once would otherwise boot,
    /// and serve, the code it replaced.
    pub fn begin_opcache_revalidation(&self) -> bool {
        let mut state = self.revalidation_state();
        match *state {
            Revalidation::Pending => {
                *state = Revalidation::Running;
                true
            }
            Revalidation::Running => {
                let _ = self
                    .revalidated
                    .wait_timeout_while(state, REVALIDATION_WAIT, |s| *s == Revalidation::Running)
                    .unwrap_or_else(|e| e.into_inner());
                false
            }
            Revalidation::Done => false,
        }
    }

    /// The boot that began the revalidation is done with it (or died trying).
    pub fn end_opcache_revalidation(&self) {
        *self.revalidation_state() = Revalidation::Done;
        self.revalidated.notify_all();
    }

    fn revalidation_state(&self) -> MutexGuard<'_, Revalidation> {
        self.revalidation.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A scheduled job's run: its script runs once, on a thread of its own, and `outcome`
    /// gets how it ended.
    pub fn job(spec: WorkerSpec, outcome: Sender<JobOutcome>) -> Generation {
        Generation { once: Some(outcome), ..Generation::new(1, spec, true) }
    }

    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// From now on its threads take requests (the pool wakes them).
    pub fn activate(&self) {
        self.active.store(true, Ordering::Release);
    }

    /// The request a worker script sees while it boots and between requests: the
    /// spec's boot request, as the host wrote it (Go builds it as it builds every
    /// request), or a bare GET of the script.
    pub(super) fn idle_request(&self, host: &Arc<Host>) -> Box<Request> {
        let (fields, vars) = self.boot_parts();
        Request::synthetic(host.clone(), &fields, &vars, self.spec.boot.env_pairs)
    }

    /// A task for this generation's script: its boot request with the method TASK and
    /// the payload as body (src/request/task.rs), sent through the task workers of `chain`.
    pub fn task_request(&self, host: &Arc<Host>, payload: &[u8], reply: TaskReply, chain: TaskChain) -> Box<Request> {
        let (mut fields, boot_vars) = self.boot_parts();
        fields[Field::Method as usize] = "TASK";
        fields[Field::ContentType as usize] = "application/octet-stream";
        // $_SERVER says so too; the env pairs stay last.
        let length = payload.len().to_string();
        let (own, env) = boot_vars.split_at(boot_vars.len() - self.spec.boot.env_pairs);
        let mut vars: Vec<(&str, &str)> =
            own.iter().copied().filter(|(k, _)| !matches!(*k, "REQUEST_METHOD" | "CONTENT_LENGTH" | "CONTENT_TYPE")).collect();
        vars.extend([("REQUEST_METHOD", "TASK"), ("CONTENT_LENGTH", length.as_str()), ("CONTENT_TYPE", "application/octet-stream")]);
        vars.extend_from_slice(env);
        Request::task(host.clone(), &fields, &vars, env.len(), payload, reply, chain)
    }

    /// The boot request's fixed fields and `$_SERVER` pairs, as the host wrote them, or
    /// a bare GET of the script.
    fn boot_parts(&self) -> (Vec<&str>, Vec<(&str, &str)>) {
        let boot = &self.spec.boot;
        let mut fields: Vec<&str> = boot.fields.iter().map(String::as_str).collect();
        if fields.is_empty() {
            fields = vec![""; Field::Count as usize];
            fields[Field::Method as usize] = "GET";
            fields[Field::ScriptFilename as usize] = &self.spec.file;
            fields[Field::Protocol as usize] = "HTTP/1.1";
        }
        let vars = boot.vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        (fields, vars)
    }
}
