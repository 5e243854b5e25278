//! The PHP engine: one per process. It owns the main PHP thread (TSRM, SAPI and module
//! startup and shutdown), the registry of PHP threads and the table of pools, keyed by
//! the ids the host chose.

use std::ffi::{CString, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config::{EngineConfig, WorkerKind, WorkerSpec};
use crate::error::{Error, Result};
use crate::host::{self, Host, Level};
use crate::supervisor::pool::Pool;
use crate::request::task::{TaskChain, TaskReply};
use crate::request::{Refusal, Request, RunState};
use crate::runtime::opcache;
use crate::runtime::registry::{Registry, release_free_memory};
use crate::runtime::PHP_THREAD_STACK;
use crate::abi::types::PoolId;
use crate::runtime::info::ThreadInfo;
use crate::runtime::counters::PoolCounters;
use crate::runtime::generation::{Generation, JobOutcome};
use crate::runtime::protocol::{Assignment, Command, PoolEvents, Role, TaskRouter};
use crate::runtime::profile;
use crate::supervisor::profiler::{self, Profiler};
use crate::supervisor::scaling::{Limits, Pools, Scaler};
use crate::supervisor::watchdog::{Deadlines, Watchdog};
use crate::php::sys::{self, OpcacheHook, ShimVars};

/// The classic pool's id.
pub const CLASSIC: PoolId = 0;

/// Requests that may wait for a thread in each pool before new ones are refused (503).
const QUEUE_CAPACITY: usize = 4096;

/// After a forced stop, how long threads get to unwind before the engine gives up on them.
const AFTER_KILL_WAIT: Duration = Duration::from_secs(5);

/// True while an engine exists: PHP has a single SAPI per process.
pub(crate) static ENGINE_ALIVE: AtomicBool = AtomicBool::new(false);

struct MainThread {
    jobs: mpsc::Sender<MainJob>,
    handle: JoinHandle<()>,
}

/// What the main thread does between PHP's startup and its shutdown.
enum MainJob {
    /// Hand requests no thread will serve back to the host: callbacks run on threads of
    /// the engine's, never on the host's thread that deleted a pool.
    #[allow(clippy::vec_box, reason = "requests travel boxed through the queues; unboxing would copy each")]
    Refuse(Vec<Box<Request>>),
    /// Shut PHP down (every PHP thread has ended).
    Stop,
}

/// A running PHP engine.
pub struct Engine {
    host: Arc<Host>,
    registry: Arc<Registry>,
    /// A handful of pools, found by a scan (cheaper per request than hashing).
    pools: Pools,
    scaler: Mutex<Option<Scaler>>,
    watchdog: Mutex<Option<Watchdog>>,
    /// The profiler's sampler, while a profile is taken.
    profiler: Mutex<Option<Profiler>>,
    main: Mutex<Option<MainThread>>,
    running: AtomicBool,
    /// PHP's post_max_size in bytes (0: no limit), as PHP read it at startup.
    post_max_size: u64,
}

/// What the main thread found once PHP was up.
struct Started {
    hook: OpcacheHook,
    post_max_size: u64,
}

impl Engine {
    /// Starts PHP (TSRM, SAPI and modules) on a main thread of its own, with an empty
    /// classic pool. Returns once PHP is up.
    pub fn start(config: &EngineConfig, host: Arc<Host>) -> Result<Engine> {
        if ENGINE_ALIVE.swap(true, Ordering::AcqRel) {
            return Err(Error::AlreadyRunning);
        }
        let started = (|| {
            let nul = |_| Error::Config("NUL in php_ini".into());
            let ini = CString::new(config.ini_entries()?).map_err(nul)?;
            let defaults = CString::new(config.ini_defaults()?).map_err(nul)?;
            start_main_thread(ini, defaults, host.clone())
        })();
        let (main, Started { hook, post_max_size }) = started.inspect_err(|_| ENGINE_ALIVE.store(false, Ordering::Release))?;
        let registry = Arc::new(Registry::default());
        registry.context_max_requests.store(config.thread_max_requests, Ordering::Relaxed);
        if hook == OpcacheHook::Unpatched {
            host.log(0, Level::Warn, "this PHP's OPcache lacks php_worker's thread hook (scripts/php-patches/<minor>/opcache-thread-hook.patch): \
                an OPcache restart (opcache_reset(), a full cache) while several threads run PHP can crash the process");
        }
        let workers = Arc::downgrade(&registry);
        opcache::gate().attach(
            hook == OpcacheHook::Attached,
            Arc::new(move |epoch| {
                if let Some(registry) = workers.upgrade() {
                    registry.broadcast(|| Command::Recycle(epoch));
                }
            }),
        );
        let classic = Pool::classic(CLASSIC, QUEUE_CAPACITY, &host, &registry);
        let pools: Pools = Arc::new(RwLock::new(vec![classic]));
        registry.set_task_router(Arc::new(TaskRoutes(Arc::downgrade(&pools))));
        let scaler = match Scaler::start(pools.clone(), host.clone()) {
            Ok(scaler) => Some(scaler),
            Err(e) => {
                host.log(0, Level::Error, &format!("cannot start the autoscaler thread ({e}): PHP threads stay at their configured numbers"));
                None
            }
        };
        let watchdog = match Watchdog::start(pools.clone(), registry.clone(), host.clone()) {
            Ok(watchdog) => Some(watchdog),
            Err(e) => {
                host.log(0, Level::Error, &format!("cannot start the watchdog thread ({e}): requests stuck past their deadline keep their threads"));
                None
            }
        };
        host.log(0, Level::Info, &format!("PHP {} started", crate::PHP_VERSION));
        Ok(Engine {
            host,
            registry,
            pools,
            scaler: Mutex::new(scaler),
            watchdog: Mutex::new(watchdog),
            profiler: Mutex::new(None),
            main: Mutex::new(Some(main)),
            running: AtomicBool::new(true),
            post_max_size,
        })
    }

    /// PHP's post_max_size in bytes (0: no limit): no script can change it (it is
    /// PHP_INI_PERDIR), so the host may size what it reads ahead of PHP by it.
    pub fn post_max_size(&self) -> u64 {
        self.post_max_size
    }

    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }

    /// Queues a request for a pool. On error the request was not taken: the caller
    /// answers it.
    pub fn submit(&self, pool: PoolId, request: Box<Request>) -> Result<()> {
        if !self.running.load(Ordering::Acquire) {
            request.disown();
            return Err(Error::Stopped);
        }
        let pools = self.pools.read().unwrap_or_else(|e| e.into_inner());
        match pools.iter().find(|p| p.id == pool) {
            Some(p) => p.submit(request),
            None => {
                request.disown();
                Err(Error::UnknownPool(pool))
            }
        }
    }

    pub fn pool(&self, id: PoolId) -> Result<Arc<Pool>> {
        if !self.running.load(Ordering::Acquire) {
            return Err(Error::Stopped);
        }
        let pools = self.pools.read().unwrap_or_else(|e| e.into_inner());
        pools.iter().find(|p| p.id == id).cloned().ok_or(Error::UnknownPool(id))
    }

    pub fn pools(&self) -> Vec<Arc<Pool>> {
        let mut pools = self.pools.read().unwrap_or_else(|e| e.into_inner()).clone();
        pools.sort_by_key(|p| p.id);
        pools
    }

    /// Creates a worker pool; its threads start booting at once.
    pub fn create_worker_pool(&self, id: PoolId, spec: WorkerSpec) -> Result<()> {
        if !self.running.load(Ordering::Acquire) {
            return Err(Error::Stopped);
        }
        let mut pools = self.pools.write().unwrap_or_else(|e| e.into_inner());
        if pools.iter().any(|p| p.id == id) {
            return Err(Error::Pool(id, "a pool with this id exists".into()));
        }
        let (name, num) = (spec.name.clone(), spec.num);
        let pool = Pool::worker(id, spec, QUEUE_CAPACITY, &self.host, &self.registry)?;
        pools.push(pool);
        self.host.log(0, Level::Info, &format!("worker {name}: starting {num} threads"));
        Ok(())
    }

    /// Removes a pool: it takes no more requests, serves what is queued, and its threads
    /// end. Does not wait for them.
    pub fn delete_pool(&self, id: PoolId) -> Result<()> {
        if id == CLASSIC {
            return Err(Error::Pool(id, "the classic pool cannot be deleted".into()));
        }
        let pool = {
            let mut pools = self.pools.write().unwrap_or_else(|e| e.into_inner());
            let i = pools.iter().position(|p| p.id == id).ok_or(Error::UnknownPool(id))?;
            pools.swap_remove(i)
        };
        self.refuse_later(pool.drain());
        Ok(())
    }

    /// Has the main thread hand `requests` back to the host.
    #[allow(clippy::vec_box, reason = "as MainJob::Refuse")]
    fn refuse_later(&self, requests: Vec<Box<Request>>) {
        if requests.is_empty() {
            return;
        }
        if let Some(main) = self.main.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            // A send fails only once the main thread ended: the requests then drop, and
            // their drop refuses them.
            let _ = main.jobs.send(MainJob::Refuse(requests));
        }
    }

    /// Sets the autoscaling limits (see src/scaling.rs).
    pub fn set_limits(&self, limits: Limits) {
        if let Some(scaler) = self.scaler.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            scaler.set_limits(limits);
        }
    }

    /// The autoscaling limits in force.
    /// Sets the hard deadline of requests (src/watchdog.rs).
    pub fn set_deadlines(&self, deadlines: Deadlines) {
        if let Some(watchdog) = self.watchdog.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            watchdog.set(deadlines);
        }
    }

    /// The deadline settings, and how many requests the watchdog answered.
    pub fn deadlines(&self) -> (Deadlines, u64) {
        let watchdog = self.watchdog.lock().unwrap_or_else(|e| e.into_inner());
        watchdog.as_ref().map_or((Deadlines::default(), 0), |w| (w.deadlines(), w.expired()))
    }

    pub fn limits(&self) -> Limits {
        self.scaler.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|s| s.limits()).unwrap_or_default()
    }

    /// Starts a profile of every PHP thread, sampled `hz` times a second (1 to 1000) by
    /// wall time or, with `cpu`, by the CPU time each thread used (src/supervisor/profiler.rs).
    pub fn profile_start(&self, hz: u32, cpu: bool) -> Result<()> {
        if !profiler::HZ.contains(&hz) {
            return Err(Error::InvalidRequest("the sampling rate must be 1 to 1000 Hz"));
        }
        // Whether the engine runs is read under the sampler's lock, which shutdown takes
        // after it stops running: a profile begun here is one shutdown ends, never one
        // left behind by an engine that stopped meanwhile (every later profile of the
        // process would be refused).
        let mut sampler = self.profiler.lock().unwrap_or_else(|e| e.into_inner());
        if !self.running.load(Ordering::Acquire) {
            return Err(Error::Stopped);
        }
        if sampler.is_some() || !profile::begin(hz, cpu) {
            return Err(Error::Profile("a profile is being taken"));
        }
        match Profiler::start(self.registry.clone(), hz, cpu) {
            Ok(p) => *sampler = Some(p),
            Err(e) => {
                profile::end();
                return Err(Error::Startup(format!("cannot start the profiler thread: {e}")));
            }
        }
        Ok(())
    }

    /// Ends the profile being taken: its JSON (include/php_worker.h,
    /// php_worker_profile_stop).
    pub fn profile_stop(&self) -> Result<Vec<u8>> {
        let sampler = self.profiler.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(sampler) = sampler else {
            return Err(Error::Profile("no profile is being taken"));
        };
        drop(sampler); // stops the sampler thread: no tick after this
        profile::end().map(|p| p.to_json()).ok_or(Error::Profile("no profile is being taken"))
    }

    /// Runs a scheduled job: its script once, on a PHP thread of its own, with the
    /// spec's `$argv`, no time limit and its output to the log. Blocks until the script
    /// ended (the engine's shutdown stops it like any script).
    pub fn run_job(&self, spec: WorkerSpec) -> Result<JobOutcome> {
        if !self.running.load(Ordering::Acquire) {
            return Err(Error::Stopped);
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        let generation = Arc::new(Generation::job(spec, tx));
        let assignment = Assignment {
            pool: JOBS,
            queue: crossbeam_channel::never(),
            role: Role::Worker(generation),
            events: Arc::new(NoPool),
            counters: PoolCounters::new(),
        };
        self.registry.spawn(&self.host, assignment)?;
        // The thread sends the outcome, or drops the sender when it ends without one.
        rx.recv().map_err(|_| Error::Startup("the job's PHP thread ended on an internal error".into()))
    }

    /// Every PHP thread that has not ended.
    pub fn threads(&self) -> Vec<Arc<ThreadInfo>> {
        self.registry.threads()
    }

    /// Stops taking requests, lets queued and running ones finish for up to `grace`,
    /// stops scripts still running after it, then stops PHP. Blocks until done; calling
    /// it again does nothing.
    pub fn shutdown(&self, grace: Duration) {
        let Some(main) = self.main.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        self.running.store(false, Ordering::Release);
        drop(self.scaler.lock().unwrap_or_else(|e| e.into_inner()).take());
        drop(self.watchdog.lock().unwrap_or_else(|e| e.into_inner()).take());
        if self.profiler.lock().unwrap_or_else(|e| e.into_inner()).take().is_some() {
            profile::end();
        }
        let pools: Vec<Arc<Pool>> = std::mem::take(&mut *self.pools.write().unwrap_or_else(|e| e.into_inner()));
        for pool in &pools {
            let requests = pool.drain();
            if !requests.is_empty() {
                let _ = main.jobs.send(MainJob::Refuse(requests));
            }
        }
        // Scheduled jobs belong to no pool: tell their scripts too.
        self.registry.request_stop_all();
        if !self.registry.wait_all_done(Instant::now() + grace) {
            let killed = self.registry.kill_all();
            self.host.log(0, Level::Warn, &format!(
                "{killed} PHP scripts were still running {} ms after shutdown began: stopping them",
                grace.as_millis()
            ));
            if !self.registry.wait_all_done(Instant::now() + AFTER_KILL_WAIT) {
                // A thread stuck outside PHP (a blocking call that ignores signals) cannot
                // be stopped; PHP cannot shut down under it. Leave it to the process exit.
                self.host.log(0, Level::Error, "PHP threads did not stop; leaving PHP running until the process exits");
                std::mem::forget(main);
                return;
            }
        }
        self.registry.join_all();
        opcache::gate().detach();
        let _ = main.jobs.send(MainJob::Stop);
        let _ = main.handle.join();
        ENGINE_ALIVE.store(false, Ordering::Release);
        self.host.log(0, Level::Info, "PHP stopped");
    }
}

/// The pool id of scheduled jobs' threads, which belong to no pool.
pub const JOBS: PoolId = PoolId::MAX;

/// The events of a thread that belongs to no pool (a scheduled job's).
struct NoPool;

impl PoolEvents for NoPool {
    fn booted(&self, _: &ThreadInfo) {}
    fn boot_failing(&self, _: &ThreadInfo, _: bool) -> bool {
        false
    }
    fn left(&self, _: &ThreadInfo) {}
}

/// Routes tasks to the task worker of their name (see src/runtime/task.rs). Holds the
/// pool table weakly: the table's pools hold the registry, which holds this.
struct TaskRoutes(Weak<RwLock<Vec<Arc<Pool>>>>);

impl TaskRouter for TaskRoutes {
    fn submit_task(&self, worker: &str, chain: &TaskChain, payload: &[u8], reply: TaskReply) -> std::result::Result<Arc<RunState>, String> {
        let pools = self.0.upgrade().ok_or("PHP is stopping")?;
        let pool = {
            let pools = pools.read().unwrap_or_else(|e| e.into_inner());
            let mut named = pools.iter().filter(|p| p.name == worker && p.id != CLASSIC);
            // A reload may keep a removed pool draining beside a new one of the same name.
            named.clone().find(|p| p.kind == WorkerKind::Task).or_else(|| named.next()).cloned()
        };
        let Some(pool) = pool else {
            return Err(format!("no task worker is named {worker:?}"));
        };
        if let Some(why) = chain.refusal(pool.id, worker) {
            return Err(why);
        }
        // Built outside the table's lock: a large payload takes a while to copy.
        let request = pool.task_request(payload, reply, chain.clone())?;
        // Queued under it, as Engine::submit queues a request: a task queued here is in
        // the queue when the pool drains, and no task reaches a pool that drains.
        let pools = pools.read().unwrap_or_else(|e| e.into_inner());
        if !pools.iter().any(|p| Arc::ptr_eq(p, &pool)) {
            request.disown();
            return Err(format!("task worker {worker} is stopping"));
        }
        pool.submit_task(request)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown(Duration::from_secs(30));
    }
}

fn start_main_thread(ini: CString, defaults: CString, host: Arc<Host>) -> Result<(MainThread, Started)> {
    let (ready_tx, ready_rx) = mpsc::channel::<std::result::Result<Started, String>>();
    let (jobs_tx, jobs_rx) = mpsc::channel::<MainJob>();
    let handle = std::thread::Builder::new()
        .name("php-main".into())
        .stack_size(PHP_THREAD_STACK)
        .spawn(move || {
            // The host owns the process's signals (see os/signal, "Go programs that use
            // cgo"); the threads PHP runs on leave them to it.
            host::block_host_signals();
            host::attach_thread(Some(host.clone()));
            let module = crate::php::module::module_entry();
            let env = &host.process_env;
            let env = ShimVars { block: env.bytes().as_ptr().cast(), spans: env.spans().as_ptr(), pairs: env.pair_count() };
            // SAFETY: first PHP call of this engine, on its main thread; `ini` and
            // `defaults` live until after pw_shim_engine_shutdown below; `env` is copied.
            let rc = unsafe { sys::pw_shim_engine_startup(ini.as_ptr(), defaults.as_ptr(), module.cast::<c_void>(), &env) };
            if rc != 0 {
                let _ = ready_tx.send(Err("php_module_startup failed (see the log above)".into()));
                host::attach_thread(None);
                return;
            }
            // SAFETY: on the main thread, after startup, before any PHP thread exists.
            let hook = unsafe { sys::pw_shim_opcache_attach() };
            // SAFETY: Go's runtime is up (the host called in through cgo).
            unsafe { sys::pw_shim_crash_trail_install() };
            // SAFETY: on the main thread, after startup.
            let post_max_size = u64::try_from(unsafe { sys::pw_shim_post_max_size() }).unwrap_or(0);
            let _ = ready_tx.send(Ok(Started { hook, post_max_size }));
            while let Ok(MainJob::Refuse(requests)) = jobs_rx.recv() {
                for request in requests {
                    request.refuse_unless_withdrawn(Refusal::Stopped);
                }
            }
            // SAFETY: every PHP thread has ended (Engine::shutdown joined them).
            unsafe { sys::pw_shim_engine_shutdown() };
            release_free_memory();
            host::attach_thread(None);
            drop((ini, defaults));
        })
        .map_err(|e| Error::Startup(format!("cannot spawn the PHP main thread: {e}")))?;
    match ready_rx.recv() {
        Ok(Ok(started)) => Ok((MainThread { jobs: jobs_tx, handle }, started)),
        Ok(Err(msg)) => {
            let _ = handle.join();
            Err(Error::Startup(msg))
        }
        Err(_) => {
            let _ = handle.join();
            Err(Error::Startup("the PHP main thread died during startup".into()))
        }
    }
}


#[cfg(test)]
mod tests;
