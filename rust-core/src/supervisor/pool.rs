//! A pool: a queue of requests and the PHP threads that serve it.
//!
//! The classic pool runs one script per request; its size changes in place. A worker
//! pool runs a worker script on each of its threads, in generations: restarting the
//! workers (a config reload, the admin API) starts a new generation beside the old one.
//! Both serve the same queue, so no request is lost or refused meanwhile: each thread of
//! the new generation that boots retires one thread of the old, which finishes its
//! request and ends. A new generation that cannot boot never retires anything, so the
//! old one keeps serving. A generation can also be staged (booted but not taking
//! requests) until the config that asked for it is committed, or discarded.
//!
//! A pool has a base size (the classic pool's configured threads, a worker's `num`) and
//! may run more: the autoscaler (src/scaling.rs) adds threads while requests wait and
//! removes extra ones that stay idle.

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use serde::Serialize;

use crate::config::{WorkerKind, WorkerSpec};
use crate::error::{Error, Result};
use crate::host::{Host, Level};
use crate::request::task::{TaskChain, TaskReply};
use crate::request::{Refusal, Request, RunState};
use crate::runtime::counters::{HistogramSnapshot, PoolCounters, Route};
use crate::runtime::generation::Generation;
use crate::runtime::registry::Registry;
use crate::abi::types::PoolId;
use crate::runtime::info::{ThreadInfo, ThreadState, since_epoch};
use crate::runtime::protocol::{Assignment, Command, PoolEvents, Role, ThreadHandle};

pub struct Pool {
    pub id: PoolId,
    /// What its scripts do (Http for the classic pool); a pool keeps its kind.
    pub kind: WorkerKind,
    /// The worker's name ("" for the classic pool): task workers are found by it.
    pub name: String,
    tx: Sender<Box<Request>>,
    rx: Receiver<Box<Request>>,
    host: Arc<Host>,
    registry: Arc<Registry>,
    me: Weak<Pool>,
    counters: Arc<PoolCounters>,
    state: Mutex<PoolState>,
}

/// The id of a worker pool's first generation unless its spec names one; each restart
/// makes the next unless its spec names a later one.
const FIRST_GENERATION: u32 = 1;

struct PoolState {
    members: Vec<Member>,
    /// None for the classic pool.
    workers: Option<Workers>,
    /// The pool was removed from its engine: it serves what is queued, then its threads end.
    draining: bool,
    /// The classic pool's configured threads (a worker pool's is its generation's num).
    classic_base: usize,
}

struct Workers {
    /// The newest active generation.
    current: Arc<Generation>,
    /// A generation booting beside the current one that takes no requests yet.
    staged: Option<Arc<Generation>>,
    next_generation: u32,
    /// The pool's first generation, which restarts nothing.
    first: u32,
}

struct Member {
    thread: ThreadHandle,
    /// None for a classic thread.
    generation: Option<Arc<Generation>>,
    /// Reached frankenphp_handle_request() in its generation.
    booted: bool,
    /// Its last boot attempt failed.
    failing: bool,
    /// Told to stop or to move: no longer counted.
    leaving: bool,
}

impl Member {
    fn generation_id(&self) -> u32 {
        self.generation.as_ref().map_or(0, |g| g.id)
    }

    /// Takes requests from the queue (or will once booted).
    fn pulls(&self) -> bool {
        !self.leaving && self.generation.as_ref().is_none_or(|g| g.is_active())
    }

    /// How soon retiring it costs nothing: threads that serve nothing first, busy ones last.
    fn retire_rank(&self) -> u8 {
        match self.thread.info.state() {
            ThreadState::Backoff | ThreadState::Starting | ThreadState::Booting | ThreadState::Standby => 0,
            ThreadState::Ready => 1,
            _ => 2,
        }
    }
}

/// A pool's state for the thread list, the metrics and the host.
#[derive(Serialize, Debug, Clone)]
pub struct PoolStats {
    pub id: PoolId,
    /// What its scripts do: "http" (the classic pool too), "task" or "background".
    pub kind: WorkerKind,
    /// The worker's name; None for the classic pool.
    pub worker: Option<String>,
    /// The current generation (0 for the classic pool).
    pub generation: u32,
    /// A generation booted but not taking requests yet.
    pub staged: Option<u32>,
    /// Threads, leaving ones excluded.
    pub threads: usize,
    /// Threads of the current generation that booted (all threads for the classic pool).
    pub ready: usize,
    /// Threads told to stop that have not ended yet (an old generation running out).
    pub leaving: usize,
    /// A restart is under way: threads leave, a generation is staged, or threads of an
    /// older generation serve while the current one boots. The probes do not fail on it.
    pub restarting: bool,
    /// Threads whose worker script fails to boot.
    pub failing: usize,
    /// Threads running a request.
    pub busy: usize,
    /// Threads waiting for a request.
    pub idle: usize,
    /// The configured threads; more run while autoscaling adds them.
    pub base: usize,
    /// The most threads the pool may have (0: only the engine's limit).
    pub max_threads: usize,
    /// Requests waiting for a thread.
    pub queued: usize,
    /// Requests served, with their durations.
    pub duration: HistogramSnapshot,
    /// How long requests waited for a thread.
    pub wait: HistogramSnapshot,
    /// Worker scripts that ended on an error.
    pub crashes: u64,
    /// Worker scripts ended on purpose and started again.
    pub restarts: u64,
    /// The routes whose requests left the worker's scripts using more memory, most
    /// first (since the pool started; see RouteGrowth).
    pub memory_growth: Vec<Route>,
}

/// Routes shown per pool.
const SHOWN_ROUTES: usize = 10;

/// What the autoscaler needs to know of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolLoad {
    /// Requests waiting for a thread.
    pub queued: usize,
    /// Threads that take (or will take, once booted) requests.
    pub threads: usize,
    /// Of those, threads still starting or booting: capacity on its way.
    pub starting: usize,
    /// Of those, threads whose worker script fails to boot: more threads would fail too.
    pub failing: usize,
    /// How many more threads the pool's own limit allows.
    pub room: usize,
}

/// The pool in log lines and answers: "worker <name>" or "the classic pool".
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pool {
    fn new(id: PoolId, capacity: usize, host: &Arc<Host>, registry: &Arc<Registry>, workers: Option<Workers>) -> Arc<Pool> {
        let (tx, rx) = crossbeam_channel::bounded(capacity);
        let (kind, name) = workers.as_ref().map_or((WorkerKind::Http, String::new()), |w| (w.current.spec.kind, w.current.spec.name.clone()));
        Arc::new_cyclic(|me| Pool {
            id,
            kind,
            name,
            tx,
            rx,
            host: host.clone(),
            registry: registry.clone(),
            me: me.clone(),
            counters: PoolCounters::new(),
            state: Mutex::new(PoolState { members: Vec::new(), workers, draining: false, classic_base: 0 }),
        })
    }

    /// A classic pool, with no threads until [`Pool::resize`].
    pub fn classic(id: PoolId, capacity: usize, host: &Arc<Host>, registry: &Arc<Registry>) -> Arc<Pool> {
        Pool::new(id, capacity, host, registry, None)
    }

    /// A worker pool whose first generation boots at once and takes requests as its
    /// threads are ready.
    pub fn worker(id: PoolId, spec: WorkerSpec, capacity: usize, host: &Arc<Host>, registry: &Arc<Registry>) -> Result<Arc<Pool>> {
        let number = if spec.generation == 0 { FIRST_GENERATION } else { spec.generation };
        let first = Arc::new(Generation::new(number, spec, true));
        let workers = Workers { current: first.clone(), staged: None, next_generation: number.saturating_add(1), first: number };
        let pool = Pool::new(id, capacity, host, registry, Some(workers));
        let mut state = lock(&pool.state);
        if let Err(e) = pool.spawn(&mut state, first.spec.num, Some(&first)) {
            pool.stop_members(&mut state, |_| true);
            return Err(e);
        }
        drop(state);
        Ok(pool)
    }

    /// Queues a request. On error the request was not taken: the caller answers it.
    pub fn submit(&self, request: Box<Request>) -> Result<()> {
        self.tx.try_send(request).map_err(|e| match e {
            TrySendError::Full(r) => {
                r.disown();
                Error::QueueFull
            }
            TrySendError::Disconnected(r) => {
                r.disown();
                Error::Stopped
            }
        })
    }

    /// A task (src/request/task.rs) for the current generation's script, sent through
    /// the task workers of `chain`, to queue with [`Pool::submit_task`]; on error, why it
    /// cannot be one, in words.
    pub fn task_request(&self, payload: &[u8], reply: TaskReply, chain: TaskChain) -> std::result::Result<Box<Request>, String> {
        let generation = match lock(&self.state).workers.as_ref() {
            Some(w) if self.kind == WorkerKind::Task => w.current.clone(),
            _ => return Err(format!("{} is not a task worker", self.name)),
        };
        Ok(generation.task_request(&self.host, payload, reply, chain))
    }

    /// Queues a task. The caller holds the engine's pool table, as [`Pool::submit`]'s
    /// does, with the pool in it: a pool leaves the table before it drains, so the task
    /// is in the queue its draining threads serve, or that is handed back when they end.
    /// Returns its run state, to withdraw it; on error it was not queued: why, in words.
    pub fn submit_task(&self, request: Box<Request>) -> std::result::Result<Arc<RunState>, String> {
        let state = request.run_state_ref();
        self.submit(request).map_err(|e| match e {
            Error::QueueFull => format!("task worker {}: every thread is busy and its queue is full", self.name),
            _ => format!("task worker {} is stopping", self.name),
        })?;
        Ok(state)
    }

    fn assignment(&self, generation: Option<&Arc<Generation>>) -> Assignment {
        let events: Arc<dyn PoolEvents> = self.me.upgrade().expect("a pool acts only while alive");
        Assignment {
            pool: self.id,
            queue: self.rx.clone(),
            role: generation.map_or(Role::Classic, |g| Role::Worker(g.clone())),
            events,
            counters: self.counters.clone(),
        }
    }

    fn spawn(&self, state: &mut PoolState, n: usize, generation: Option<&Arc<Generation>>) -> Result<()> {
        for _ in 0..n {
            let thread = self.registry.spawn(&self.host, self.assignment(generation))?;
            state.members.push(Member { thread, generation: generation.cloned(), booted: false, failing: false, leaving: false });
        }
        Ok(())
    }

    /// Tells the members `which` selects to finish what they run and end.
    fn stop_members(&self, state: &mut PoolState, which: impl Fn(&Member) -> bool) {
        for m in state.members.iter_mut().filter(|m| !m.leaving && which(m)) {
            m.leaving = true;
            Pool::tell(m, Command::Stop);
        }
    }

    /// Sends a member a command that makes it leave. A background script, which runs
    /// until it ends on its own, must end within its stop timeout or the watchdog stops
    /// it.
    fn tell(m: &Member, command: Command) {
        let background = m.generation.as_ref().filter(|g| g.spec.kind == WorkerKind::Background);
        m.thread.send_within(command, background.map(|g| Duration::from_millis(g.spec.stop_timeout_ms)));
    }

    /// Sets the number of threads of the classic pool: new ones start at once. Extra
    /// ones finish their request and end, unless `keep_extra` (autoscaling is on: idle
    /// ones end after the idle time, so a reload under load keeps its capacity).
    pub fn resize(&self, threads: usize, keep_extra: bool) -> Result<()> {
        let mut state = lock(&self.state);
        if state.draining {
            return Err(Error::Stopped);
        }
        if state.workers.is_some() {
            return Err(Error::Pool(self.id, "a worker pool's size is set by its worker's num".into()));
        }
        state.classic_base = threads;
        let alive = state.members.iter().filter(|m| !m.leaving).count();
        if threads > alive {
            return self.spawn(&mut state, threads - alive, None);
        }
        if keep_extra {
            return Ok(());
        }
        let mut extra: Vec<usize> = (0..state.members.len()).filter(|&i| !state.members[i].leaving).collect();
        extra.sort_by_key(|&i| state.members[i].retire_rank());
        for i in extra.into_iter().take(alive - threads) {
            state.members[i].leaving = true;
            state.members[i].thread.send(Command::Stop);
        }
        Ok(())
    }

    /// Starts a new generation of workers (with `spec`, or the current one's), beside the
    /// current one. With `activate` it takes over as its threads boot; otherwise it is
    /// staged until [`Pool::activate`] (a staged generation it replaces is discarded).
    /// Returns the generation's id.
    pub fn restart(&self, spec: Option<WorkerSpec>, activate: bool) -> Result<u32> {
        let mut state = lock(&self.state);
        if state.draining {
            return Err(Error::Stopped);
        }
        let Some(workers) = state.workers.as_mut() else {
            return Err(Error::Pool(self.id, "the classic pool has no worker script to restart".into()));
        };
        let spec = spec.unwrap_or_else(|| WorkerSpec { generation: 0, ..workers.current.spec.clone() });
        let number = match spec.generation {
            0 => workers.next_generation,
            g if g < workers.next_generation => {
                return Err(Error::Pool(self.id, format!("generation {g} is not newer than generation {}", workers.next_generation - 1)));
            }
            number => number,
        };
        if let Some(staged) = workers.staged.take() {
            self.stop_members(&mut state, |m| m.generation_id() == staged.id);
        }
        let workers = state.workers.as_mut().expect("checked above");
        if spec.kind != self.kind {
            return Err(Error::Pool(self.id, format!(
                "worker {} is a {} worker and cannot become a {} worker: give it another name",
                self.name,
                self.kind.name(),
                spec.kind.name()
            )));
        }
        let generation = Arc::new(Generation::new(number, spec, false));
        workers.next_generation = number.saturating_add(1);
        if self.kind == WorkerKind::Background {
            // Its threads start when the running ones have stopped: never more copies of
            // the script at once than its num (see start_background).
            if activate {
                self.activate_locked(&mut state, &generation);
            } else {
                state.workers.as_mut().expect("checked above").staged = Some(generation.clone());
            }
            return Ok(generation.id);
        }
        // As many threads as the running generation has now (autoscaling may have added
        // some), so the pool keeps its capacity while the new threads take over.
        let current = workers.current.id;
        let running = state.members.iter().filter(|m| m.pulls() && m.generation_id() == current).count();
        let mut n = running.max(generation.spec.num);
        if generation.spec.max_threads != 0 {
            n = n.min(generation.spec.max_threads);
        }
        if let Err(e) = self.spawn(&mut state, n, Some(&generation)) {
            self.stop_members(&mut state, |m| m.generation_id() == generation.id);
            return Err(e);
        }
        if activate {
            self.activate_locked(&mut state, &generation);
        } else {
            state.workers.as_mut().expect("checked above").staged = Some(generation.clone());
        }
        Ok(generation.id)
    }

    /// Lets a staged generation take requests; it retires the old threads as it boots.
    pub fn activate(&self, generation: u32) -> Result<()> {
        let mut state = lock(&self.state);
        let staged = state.workers.as_mut().and_then(|w| w.staged.take_if(|g| g.id == generation));
        let Some(staged) = staged else {
            return Err(Error::Pool(self.id, format!("no staged generation {generation}")));
        };
        self.activate_locked(&mut state, &staged);
        Ok(())
    }

    fn activate_locked(&self, state: &mut PoolState, generation: &Arc<Generation>) {
        generation.activate();
        state.workers.as_mut().expect("a worker pool").current = generation.clone();
        if self.kind == WorkerKind::Background {
            self.counters.restarted(state.members.iter().filter(|m| !m.leaving).count() as u64);
            self.stop_members(state, |m| m.generation_id() != generation.id);
            self.start_background(state);
            return;
        }
        for m in state.members.iter().filter(|m| m.generation_id() == generation.id) {
            m.thread.send(Command::Activate);
        }
        self.rebalance(state);
    }

    /// Starts the current generation of a background pool once no thread of an older
    /// one runs.
    fn start_background(&self, state: &mut PoolState) {
        let Some(current) = state.workers.as_ref().map(|w| w.current.clone()) else { return };
        if state.draining || state.members.iter().any(|m| m.generation_id() != current.id) {
            return;
        }
        let running = state.members.iter().filter(|m| !m.leaving).count();
        if running < current.spec.num
            && let Err(e) = self.spawn(state, current.spec.num - running, Some(&current))
        {
            self.host.log(0, Level::Error, &format!("background worker {}: cannot start its threads: {e}", self.name));
        }
    }

    /// Stops a staged generation that never took requests.
    pub fn discard(&self, generation: u32) -> Result<()> {
        let mut state = lock(&self.state);
        let staged = state.workers.as_mut().and_then(|w| w.staged.take_if(|g| g.id == generation));
        if staged.is_none() {
            return Err(Error::Pool(self.id, format!("no staged generation {generation}")));
        }
        self.stop_members(&mut state, |m| m.generation_id() == generation);
        Ok(())
    }

    /// Retires threads of older generations one for one as the current one's boot: the
    /// old ones keep serving for the new threads that are not ready yet.
    fn rebalance(&self, state: &mut PoolState) {
        if self.kind == WorkerKind::Background {
            return; // activate_locked stops the old generation at once
        }
        let Some(current) = state.workers.as_ref().map(|w| w.current.clone()) else { return };
        let keep = state.members.iter().filter(|m| !m.leaving && !m.booted && m.generation_id() == current.id).count();
        let mut old: Vec<usize> = (0..state.members.len())
            .filter(|&i| {
                let m = &state.members[i];
                m.pulls() && m.generation_id() != current.id
            })
            .collect();
        if old.len() <= keep {
            return;
        }
        old.sort_by_key(|&i| state.members[i].retire_rank());
        let retire = old.len() - keep;
        self.counters.restarted(retire as u64);
        for i in old.into_iter().take(retire) {
            let m = &mut state.members[i];
            m.leaving = true;
            m.thread.send(Command::Stop);
        }
    }

    /// The size the pool returns to when idle: the classic pool's configured threads,
    /// or the current generation's num.
    fn base(state: &PoolState) -> usize {
        state.workers.as_ref().map_or(state.classic_base, |w| w.current.spec.num)
    }

    /// The pool's own limit on its threads; 0 for none.
    fn own_max(state: &PoolState) -> usize {
        state.workers.as_ref().map_or(0, |w| w.current.spec.max_threads)
    }

    /// What the autoscaler looks at.
    pub fn load(&self) -> PoolLoad {
        let state = lock(&self.state);
        let pulling = || state.members.iter().filter(|m| m.pulls());
        let threads = pulling().count();
        let max = Pool::own_max(&state);
        PoolLoad {
            queued: self.rx.len(),
            threads,
            starting: pulling().filter(|m| matches!(m.thread.info.state(), ThreadState::Starting | ThreadState::Booting)).count(),
            failing: pulling().filter(|m| m.failing).count(),
            room: if state.draining || self.kind == WorkerKind::Background {
                0
            } else if max == 0 {
                usize::MAX
            } else {
                max.saturating_sub(threads)
            },
        }
    }

    /// Adds up to `n` threads (of the current generation, for a worker pool) within the
    /// pool's own limit. Returns how many started.
    pub fn grow(&self, n: usize) -> Result<usize> {
        let mut state = lock(&self.state);
        if state.draining {
            return Ok(0);
        }
        let max = Pool::own_max(&state);
        let threads = state.members.iter().filter(|m| m.pulls()).count();
        let n = if max == 0 { n } else { n.min(max.saturating_sub(threads)) };
        let generation = state.workers.as_ref().map(|w| w.current.clone());
        self.spawn(&mut state, n, generation.as_ref())?;
        Ok(n)
    }

    /// Stops threads above the base size that have waited for a request longer than
    /// `max_idle`. Returns how many were told to stop.
    ///
    /// Only threads that serve count: one that is booting, or failing to, may never
    /// serve. So while a new generation takes over, the old one's threads (the only ones
    /// serving if the new one cannot boot) go down to the base size and no further. Old
    /// idle threads go first, as the pool moves to the new generation; each takes with it
    /// one of the new threads still booting that it stood in for (see rebalance), failing
    /// ones first, so the takeover stays one for one.
    pub fn shrink_idle(&self, max_idle: std::time::Duration) -> usize {
        let mut state = lock(&self.state);
        let base = Pool::base(&state);
        let serves = |m: &Member| m.pulls() && (m.booted || m.generation.is_none());
        let mut serving = state.members.iter().filter(|m| serves(m)).count();
        if serving <= base || state.draining {
            return 0;
        }
        let current = state.workers.as_ref().map(|w| w.current.id);
        let old = |m: &Member| m.pulls() && current.is_some_and(|id| m.generation_id() != id);
        let mut olds = state.members.iter().filter(|m| old(m)).count();
        let mut booting: Vec<usize> = (0..state.members.len())
            .filter(|&i| {
                let m = &state.members[i];
                m.pulls() && !m.booted && m.generation.is_some() && !old(m)
            })
            .collect();
        // Failing ones last, to be popped first.
        booting.sort_by_key(|&i| state.members[i].failing);
        let now = since_epoch();
        let mut idle: Vec<usize> = (0..state.members.len())
            .filter(|&i| {
                let m = &state.members[i];
                serves(m) && m.thread.info.state() == ThreadState::Ready && m.thread.info.idle_for(now) > max_idle
            })
            .collect();
        idle.sort_by_key(|&i| !old(&state.members[i]));
        let mut stopped = Vec::new();
        for i in idle {
            if serving <= base {
                break;
            }
            serving -= 1;
            stopped.push(i);
            if old(&state.members[i]) {
                if olds <= booting.len() {
                    stopped.extend(booting.pop());
                }
                olds -= 1;
            }
        }
        for &i in &stopped {
            state.members[i].leaving = true;
            state.members[i].thread.send(Command::Stop);
        }
        stopped.len()
    }

    /// A thread of the pool is stuck past its request's deadline: it leaves the pool when
    /// it comes back, and a new thread (of the current generation) takes its place now.
    /// False when it is not a member that counts, or the pool drains.
    pub fn replace_stuck(&self, thread: &ThreadInfo) -> bool {
        let mut state = lock(&self.state);
        if state.draining {
            return false;
        }
        let Some(m) = Pool::member(&mut state, thread).filter(|m| !m.leaving) else { return false };
        m.leaving = true;
        m.thread.send(Command::Stop);
        let generation = state.workers.as_ref().map(|w| w.current.clone());
        self.spawn(&mut state, 1, generation.as_ref()).is_ok()
    }

    /// The pool's name in log fields: the worker's, or "" for the classic pool.
    pub fn worker_name(&self) -> String {
        lock(&self.state).workers.as_ref().map_or_else(String::new, |w| w.current.spec.name.clone())
    }

    /// Stops taking part: the pool (already out of its engine's table, so nothing new is
    /// queued) serves what is queued, then its threads end. A pool without threads
    /// returns its queue instead, for the engine to hand back from a PHP thread: the
    /// caller is a thread of the host's, on which the host takes no callbacks.
    #[must_use = "the requests returned must be refused"]
    #[allow(clippy::vec_box, reason = "as MainJob::Refuse")]
    pub fn drain(&self) -> Vec<Box<Request>> {
        let mut state = lock(&self.state);
        state.draining = true;
        for m in &state.members {
            Pool::tell(m, Command::Drain);
        }
        let idle = state.members.is_empty();
        drop(state);
        if idle { self.rx.try_iter().collect() } else { Vec::new() }
    }

    /// Moves up to `n` threads of this pool to `to` (a classic thread becomes a worker
    /// thread of `to`'s current generation, or the reverse): each finishes its request
    /// and script first. Returns how many were sent.
    ///
    /// A staged generation's threads stay: activating it without them would retire the
    /// old threads for nothing. During a takeover an old thread goes only after the new
    /// ones still booting, so none leaves while it stands in for one (see rebalance).
    pub fn hand_over(&self, n: usize, to: &Arc<Pool>) -> usize {
        let moving: Vec<ThreadHandle> = {
            let mut state = lock(&self.state);
            let current = state.workers.as_ref().map_or(0, |w| w.current.id);
            let mut candidates: Vec<usize> = (0..state.members.len()).filter(|&i| state.members[i].pulls()).collect();
            candidates.sort_by_key(|&i| (state.members[i].retire_rank(), state.members[i].generation_id() != current));
            candidates
                .into_iter()
                .take(n)
                .map(|i| {
                    state.members[i].leaving = true;
                    state.members[i].thread.clone()
                })
                .collect()
        };
        for thread in &moving {
            let assignment = to.adopt(thread);
            thread.send(Command::Join(assignment));
        }
        moving.len()
    }

    /// Takes a thread that is on its way from another pool.
    fn adopt(&self, thread: &ThreadHandle) -> Assignment {
        let mut state = lock(&self.state);
        let generation = state.workers.as_ref().map(|w| w.current.clone());
        state.members.push(Member { thread: thread.clone(), generation: generation.clone(), booted: false, failing: false, leaving: false });
        self.assignment(generation.as_ref())
    }

    /// Hands what is left in the queue of a pool no thread will serve again back to the
    /// host. Called on the pool's last PHP thread.
    fn refuse_queue(&self) {
        while let Ok(request) = self.rx.try_recv() {
            request.refuse_unless_withdrawn(Refusal::Stopped);
        }
    }

    /// Threads blocked on the queue now (see PoolCounters::waiting).
    pub fn waiting(&self) -> usize {
        self.counters.waiting.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn stats(&self) -> PoolStats {
        let state = lock(&self.state);
        let current = state.workers.as_ref().map(|w| w.current.clone());
        let living = || state.members.iter().filter(|m| !m.leaving);
        PoolStats {
            id: self.id,
            kind: self.kind,
            worker: current.as_ref().map(|g| g.spec.name.clone()),
            generation: current.as_ref().map_or(0, |g| g.id),
            staged: state.workers.as_ref().and_then(|w| w.staged.as_ref().map(|g| g.id)),
            threads: living().count(),
            ready: match &current {
                Some(g) => living().filter(|m| m.booted && m.generation_id() == g.id).count(),
                None => living().count(),
            },
            leaving: state.members.iter().filter(|m| m.leaving).count(),
            restarting: state.members.iter().any(|m| m.leaving || current.as_ref().is_some_and(|g| m.generation_id() != g.id))
                || state.workers.as_ref().is_some_and(|w| w.staged.is_some())
                || self.background_replacing(&state, current.as_ref()),
            failing: living().filter(|m| m.failing).count(),
            busy: living().filter(|m| m.thread.info.state() == ThreadState::Busy).count(),
            idle: living().filter(|m| m.thread.info.state() == ThreadState::Ready).count(),
            base: Pool::base(&state),
            max_threads: Pool::own_max(&state),
            queued: self.rx.len(),
            duration: self.counters.duration.snapshot(),
            wait: self.counters.wait.snapshot(),
            crashes: self.counters.crashes.load(std::sync::atomic::Ordering::Relaxed),
            restarts: self.counters.restarts.load(std::sync::atomic::Ordering::Relaxed),
            memory_growth: lock(&self.counters.memory_growth).top(SHOWN_ROUTES),
        }
    }

    /// Whether a background pool's new copies, started once the old ones ended, are still
    /// starting: the restart is not over. (An HTTP or task worker's new generation boots
    /// beside the old one, which serves meanwhile; a background script's cannot, so
    /// between the old copies' end and the new ones' start the pool has nothing booted.)
    fn background_replacing(&self, state: &PoolState, current: Option<&Arc<Generation>>) -> bool {
        let first = state.workers.as_ref().map_or(FIRST_GENERATION, |w| w.first);
        self.kind == WorkerKind::Background
            && current.is_some_and(|g| g.id != first && state.members.iter().any(|m| !m.leaving && !m.booted))
    }

    fn member<'a>(state: &'a mut PoolState, thread: &ThreadInfo) -> Option<&'a mut Member> {
        state.members.iter_mut().find(|m| std::ptr::eq(Arc::as_ptr(&m.thread.info), thread))
    }
}

impl PoolEvents for Pool {
    fn booted(&self, thread: &ThreadInfo) {
        let mut state = lock(&self.state);
        if let Some(m) = Pool::member(&mut state, thread) {
            m.booted = true;
        }
        self.rebalance(&mut state);
    }

    fn boot_failing(&self, thread: &ThreadInfo, failing: bool) -> bool {
        let mut state = lock(&self.state);
        if let Some(m) = Pool::member(&mut state, thread) {
            m.failing = failing;
        }
        let mut pullers = state.members.iter().filter(|m| m.pulls()).peekable();
        pullers.peek().is_some() && pullers.all(|m| m.failing)
    }

    fn left(&self, thread: &ThreadInfo) {
        let mut state = lock(&self.state);
        state.members.retain(|m| !std::ptr::eq(Arc::as_ptr(&m.thread.info), thread));
        if self.kind == WorkerKind::Background {
            self.start_background(&mut state);
        }
        if state.draining && state.members.is_empty() {
            drop(state);
            self.refuse_queue();
            self.host.log(0, Level::Debug, &format!("pool {}: drained", self.id));
        }
    }
}
