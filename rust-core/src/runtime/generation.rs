//! A worker generation: the settings a set of worker threads boots with, and whether
//! they take requests yet (src/pool.rs starts, activates and retires generations).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::abi::types::Field;
use crate::config::WorkerSpec;
use crate::host::Host;
use crate::layout::Strings;
use crate::request::Request;

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
        let boot = &self.spec.boot;
        let mut fields: Vec<&str> = boot.fields.iter().map(String::as_str).collect();
        if fields.is_empty() {
            fields = vec![""; Field::Count as usize];
            fields[Field::Method as usize] = "GET";
            fields[Field::ScriptFilename as usize] = &self.spec.file;
            fields[Field::Protocol as usize] = "HTTP/1.1";
        }
        let vars: Vec<(&str, &str)> = boot.vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Request::synthetic(host.clone(), &fields, &vars, boot.env_pairs)
    }
}
