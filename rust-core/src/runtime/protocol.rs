//! The protocol between a pool and its threads: what a pool tells a thread
//! ([`Command`]), what a thread serves ([`Assignment`]), what a thread tells its pool
//! ([`PoolEvents`]), and how a thread's loops hand it back ([`Job`], [`Leave`], [`Next`]).

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::counters::PoolCounters;
use super::generation::Generation;
use super::info::ThreadInfo;
use crate::abi::types::PoolId;
use crate::request::task::{TaskChain, TaskReply};
use crate::request::{Request, RunState};

/// What a pool tells its threads.
pub enum Command {
    /// Finish the current request (and worker script), then end.
    Stop,
    /// Serve what is queued, then end: the pool takes no more requests.
    Drain,
    /// The thread's generation takes requests now.
    Activate,
    /// Finish the current request (and worker script), then serve this other pool.
    Join(Assignment),
    /// OPcache restarts: a worker script that entered PHP at or before this restart epoch
    /// (src/runtime/opcache.rs) finishes its request and ends, and boots again once the
    /// cache restarted. Classic threads ignore it.
    Recycle(u64),
}

/// What a thread serves: one pool's queue, as a classic thread or as a thread of a
/// worker generation.
#[derive(Clone)]
pub struct Assignment {
    pub pool: PoolId,
    pub queue: Receiver<Box<Request>>,
    pub role: Role,
    pub events: Arc<dyn PoolEvents>,
    pub counters: Arc<PoolCounters>,
}

#[derive(Clone)]
pub enum Role {
    Classic,
    Worker(Arc<Generation>),
}

impl Assignment {
    pub(super) fn generation(&self) -> u32 {
        match &self.role {
            Role::Classic => 0,
            Role::Worker(g) => g.id,
        }
    }

    /// The worker's name; None for a classic thread.
    pub(super) fn worker_name(&self) -> Option<Arc<str>> {
        match &self.role {
            Role::Classic => None,
            Role::Worker(g) => Some(g.name.clone()),
        }
    }

    /// Whether the thread may take requests from the queue now.
    pub fn takes_requests(&self) -> bool {
        match &self.role {
            Role::Classic => true,
            Role::Worker(g) => g.is_active(),
        }
    }
}

/// What a thread tells its pool. Implemented by the pool (src/supervisor/pool.rs).
pub trait PoolEvents: Send + Sync {
    /// The thread's worker script reached frankenphp_handle_request() for the first time
    /// in its generation.
    fn booted(&self, thread: &ThreadInfo);
    /// The thread's worker script failed to boot (`failing`), or booted after failing.
    /// Returns true when no thread of the pool can serve its queue.
    fn boot_failing(&self, thread: &ThreadInfo, failing: bool) -> bool;
    /// The thread left the pool: it ended or moved to another one.
    fn left(&self, thread: &ThreadInfo);
}

/// Where PHP threads send tasks: the engine's table of pools (src/supervisor/engine.rs).
pub trait TaskRouter: Send + Sync {
    /// Queues a task sent along `chain` (the sender's: see PhpThread::task_chain) for the
    /// task worker named `worker`, unless that worker is in the chain (threads could all
    /// wait for each other). Returns the task's run state, to withdraw it if the sender
    /// stops waiting; on error the task was not queued: why, in words.
    fn submit_task(&self, worker: &str, chain: &TaskChain, payload: &[u8], reply: TaskReply) -> Result<Arc<RunState>, String>;
}

/// A thread as its pool knows it.
#[derive(Clone)]
pub struct ThreadHandle {
    pub info: Arc<ThreadInfo>,
    ctl: Sender<Command>,
}

impl ThreadHandle {
    pub(super) fn new(info: Arc<ThreadInfo>, ctl: Sender<Command>) -> ThreadHandle {
        ThreadHandle { info, ctl }
    }

    /// Sends a command; false when the thread is gone. A command that makes the thread
    /// leave what it runs tells its script too (see ThreadInfo::request_stop): a
    /// background script learns it must stop only that way.
    pub fn send(&self, command: Command) -> bool {
        self.send_within(command, None)
    }

    /// [`ThreadHandle::send`], and a background script told to leave must have ended
    /// `stop_within` from now, or the watchdog stops it.
    pub fn send_within(&self, command: Command, stop_within: Option<Duration>) -> bool {
        if matches!(command, Command::Stop | Command::Drain | Command::Join(_)) {
            // Queued first, under the stop lock: see ThreadInfo::request_stop_with.
            self.info.request_stop_with(stop_within, || self.ctl.send(command).is_ok())
        } else {
            self.ctl.send(command).is_ok()
        }
    }
}

/// Why a thread leaves what it serves.
pub enum Leave {
    /// It ends.
    Exit,
    /// It serves another pool.
    Join(Assignment),
}

/// The next thing a thread does.
pub enum Job {
    Request(Box<Request>),
    Leave(Leave),
    /// End the worker script and boot it again (an OPcache restart).
    Recycle,
    /// A request the host withdrew while it was queued: the caller hands it back
    /// (Refusal::Withdrawn) once it holds no borrow of the thread state, and asks again.
    Withdrawn(Box<Request>),
}

/// How a loop (classic or worker) handed the thread back.
pub enum Next {
    Leave(Leave),
    /// PHP's state on this thread may be damaged: free the context and make a new one.
    FreshContext,
    /// The context served the engine's max_requests: free it and make a new one.
    Renew,
}


#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};
    use std::thread;

    use super::*;

    /// A background thread starts a run (it clears the stop flag, then looks for a
    /// command that makes it leave) while its pool sends it Stop. Whatever the
    /// interleaving, the run sees the command or keeps the flag: a stop is never lost.
    #[test]
    fn a_stop_sent_while_a_run_starts_is_never_lost() {
        let info = Arc::new(ThreadInfo::new(0, 1, 1));
        let (tx, rx) = crossbeam_channel::unbounded();
        let handle = ThreadHandle::new(info.clone(), tx);
        let start = Arc::new(Barrier::new(2));
        for round in 0..20_000 {
            let sender = {
                let (handle, start) = (handle.clone(), start.clone());
                thread::spawn(move || {
                    start.wait();
                    assert!(handle.send_within(Command::Stop, Some(Duration::from_secs(5))));
                })
            };
            start.wait();
            info.clear_stop();
            let found = rx.try_recv().is_ok();
            sender.join().unwrap();
            if !found {
                assert!(info.stop_requested(), "round {round}: the run missed the command and lost the flag");
                assert!(info.take_stop_overdue(u64::MAX), "round {round}: the stop deadline was lost");
                rx.try_recv().expect("the command is queued");
            }
            info.clear_stop();
        }
    }
}
