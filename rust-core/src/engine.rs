//! The PHP engine: one per process. It owns the main PHP thread (TSRM, SAPI and module
//! startup and shutdown), the pools of PHP threads and their request queues.

use std::ffi::{CString, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::host::{Host, Level};
use crate::request::Request;
use crate::shim::{self, KillSlot, ShimVars};
use crate::thread;
use crate::worker::{self, WorkerSpec};

/// Stack of every PHP thread: PHP 8.2 has no stack-overflow guard, so give deep
/// recursion the room a main thread would have.
const PHP_THREAD_STACK: usize = 8 * 1024 * 1024;

/// True while an engine exists: PHP has a single SAPI per process.
static ENGINE_ALIVE: AtomicBool = AtomicBool::new(false);

/// What every PHP thread of an engine shares.
pub struct Shared {
    pub host: Host,
    /// The process environment at engine start, the base of every `$_SERVER`.
    pub process_env: VarBlock,
}

/// (name, value) string pairs in the layout the C shim registers: NUL-terminated
/// strings in one block, four u32 (offset, length, offset, length) per pair.
#[derive(Default)]
pub struct VarBlock {
    block: Vec<u8>,
    spans: Vec<u32>,
}

impl VarBlock {
    pub fn from_pairs<K: AsRef<[u8]>, V: AsRef<[u8]>>(pairs: impl IntoIterator<Item = (K, V)>) -> VarBlock {
        let mut vars = VarBlock::default();
        for (name, value) in pairs {
            let (name, value) = (name.as_ref(), value.as_ref());
            if name.is_empty() || name.contains(&0) || value.contains(&0) {
                continue;
            }
            for s in [name, value] {
                vars.spans.push(vars.block.len() as u32);
                vars.spans.push(s.len() as u32);
                vars.block.extend_from_slice(s);
                vars.block.push(0);
            }
        }
        vars
    }

    pub fn from_process_env() -> VarBlock {
        use std::os::unix::ffi::OsStrExt;
        VarBlock::from_pairs(std::env::vars_os().map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec())))
    }

    pub fn as_shim(&self) -> ShimVars {
        ShimVars { block: self.block.as_ptr().cast(), spans: self.spans.as_ptr(), pairs: self.spans.len() / 4 }
    }

    /// Calls `f` with each (name, value) pair, in order.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &[u8])) {
        for s in self.spans.chunks_exact(4) {
            let (n, v) = (s[0] as usize, s[2] as usize);
            f(&self.block[n..n + s[1] as usize], &self.block[v..v + s[3] as usize]);
        }
    }

    /// The last value of `name`.
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        let mut found = None;
        for s in self.spans.chunks_exact(4) {
            let n = s[0] as usize;
            if &self.block[n..n + s[1] as usize] == name {
                let v = s[2] as usize;
                found = Some(&self.block[v..v + s[3] as usize]);
            }
        }
        found
    }
}

thread_local! {
    /// The engine the current PHP thread belongs to, for hooks called outside a request.
    static THREAD_SHARED: std::cell::RefCell<Option<Arc<Shared>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with the engine of the calling PHP thread, if it has one.
pub fn with_thread_shared<T>(f: impl FnOnce(&Shared) -> T) -> Option<T> {
    THREAD_SHARED.with(|s| s.borrow().as_deref().map(f))
}

pub fn set_thread_shared(shared: Option<Arc<Shared>>) {
    THREAD_SHARED.with(|s| *s.borrow_mut() = shared);
}

/// The PHP threads alive in an engine, with what it takes to stop their scripts.
#[derive(Default)]
pub struct ThreadSlots {
    slots: Mutex<Vec<(u64, KillSlot)>>,
    next: std::sync::atomic::AtomicU64,
}

impl ThreadSlots {
    /// Registers the calling PHP thread (after pw_shim_thread_init).
    pub fn register(&self) -> u64 {
        let mut slot = KillSlot { thread: 0, timer: std::ptr::null_mut() };
        // SAFETY: called on an initialised PHP thread with a writable slot.
        unsafe { shim::pw_shim_kill_slot(&mut slot) };
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).push((id, slot));
        id
    }

    /// Unregisters a thread before it frees its PHP context.
    pub fn unregister(&self, id: u64) {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).retain(|(i, _)| *i != id);
    }

    /// Stops every registered thread's script the way a timeout does; the count.
    fn kill_all(&self) -> usize {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: a registered thread is alive: it unregisters (under this lock) first.
        slots.iter().filter(|(_, slot)| unsafe { shim::pw_shim_kill(slot) }).count()
    }
}

/// What a pool's threads run.
enum PoolKind {
    Classic,
    Worker(Arc<WorkerSpec>),
}

/// A queue and the PHP threads that serve it.
struct Pool {
    jobs: RwLock<Option<Sender<Box<Request>>>>,
    stop: Mutex<Option<Sender<()>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Pool {
    fn start(kind: PoolKind, name: &str, threads: usize, capacity: usize, shared: &Arc<Shared>, slots: &Arc<ThreadSlots>) -> Result<Pool> {
        let (tx, rx) = crossbeam_channel::bounded::<Box<Request>>(capacity);
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let kind = Arc::new(kind);
        let pool = Pool { jobs: RwLock::new(Some(tx)), stop: Mutex::new(Some(stop_tx)), threads: Mutex::new(Vec::new()) };
        for i in 0..threads {
            let (rx, stop_rx, shared, slots, kind) = (rx.clone(), stop_rx.clone(), shared.clone(), slots.clone(), kind.clone());
            let thread_name = format!("{name}-{i}");
            let spawned = std::thread::Builder::new()
                .name(thread_name.clone())
                .stack_size(PHP_THREAD_STACK)
                .spawn(move || match &*kind {
                    PoolKind::Classic => thread::serve(&thread_name, &rx, &shared, &slots),
                    PoolKind::Worker(spec) => worker::serve(&thread_name, spec, &rx, &stop_rx, &shared, &slots),
                });
            match spawned {
                Ok(handle) => pool.threads.lock().unwrap_or_else(|e| e.into_inner()).push(handle),
                Err(e) => {
                    pool.close();
                    pool.join_all();
                    return Err(Error::Startup(format!("cannot spawn a PHP thread: {e}")));
                }
            }
        }
        Ok(pool)
    }

    fn submit(&self, request: Box<Request>) -> Result<()> {
        let jobs = self.jobs.read().unwrap_or_else(|e| e.into_inner());
        let Some(tx) = jobs.as_ref() else {
            request.disown();
            return Err(Error::Stopped);
        };
        tx.try_send(request).map_err(|e| {
            let (TrySendError::Full(r) | TrySendError::Disconnected(r)) = &e;
            r.disown();
            match e {
                TrySendError::Full(_) => Error::QueueFull,
                TrySendError::Disconnected(_) => Error::Stopped,
            }
        })
    }

    /// Closes the queue: threads finish what is queued and running, then exit.
    fn close(&self) {
        self.jobs.write().unwrap_or_else(|e| e.into_inner()).take();
        self.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn all_finished(&self) -> bool {
        self.threads.lock().unwrap_or_else(|e| e.into_inner()).iter().all(JoinHandle::is_finished)
    }

    fn join_all(&self) {
        for h in std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner())) {
            let _ = h.join();
        }
    }
}

struct MainThread {
    stop: mpsc::Sender<()>,
    handle: JoinHandle<()>,
}

/// A running PHP engine.
pub struct Engine {
    shared: Arc<Shared>,
    /// Index 0 is the classic pool; worker `i` of the config is pool `i + 1`.
    pools: Vec<Pool>,
    slots: Arc<ThreadSlots>,
    grace: Duration,
    main: Mutex<Option<MainThread>>,
    running: AtomicBool,
}

/// After a forced stop, how long threads get to unwind before the engine gives up on them.
const AFTER_KILL_WAIT: Duration = Duration::from_secs(5);

impl Engine {
    /// Starts PHP: TSRM, SAPI and modules on a main thread of its own, then the pools.
    /// Returns once every thread is running.
    pub fn start(config: &Config, host: Host) -> Result<Engine> {
        if ENGINE_ALIVE.swap(true, Ordering::AcqRel) {
            return Err(Error::AlreadyRunning);
        }
        Engine::start_alive(config, host).inspect_err(|_| ENGINE_ALIVE.store(false, Ordering::Release))
    }

    fn start_alive(config: &Config, host: Host) -> Result<Engine> {
        let shared = Arc::new(Shared { host, process_env: VarBlock::from_process_env() });
        let ini = CString::new(config.ini_entries()?).map_err(|_| Error::Config("NUL in php_ini".into()))?;
        let main = start_main_thread(ini, shared.clone())?;
        let slots = Arc::new(ThreadSlots::default());
        let mut pools = Vec::with_capacity(config.workers.len() + 1);
        let mut started = Pool::start(PoolKind::Classic, "php", config.num_threads, config.queue_capacity, &shared, &slots);
        for (i, w) in config.workers.iter().enumerate() {
            let Ok(pool) = started else { break };
            pools.push(pool);
            let spec = Arc::new(WorkerSpec::new(w.clone()));
            started = Pool::start(PoolKind::Worker(spec), &format!("php-w{}", i + 1), w.num, config.queue_capacity, &shared, &slots);
        }
        match started {
            Ok(pool) => pools.push(pool),
            Err(e) => {
                for pool in &pools {
                    pool.close();
                }
                for pool in &pools {
                    pool.join_all();
                }
                stop_main_thread(main);
                return Err(e);
            }
        }
        let workers: usize = config.workers.iter().map(|w| w.num).sum();
        shared.host.log(
            0,
            Level::Info,
            &format!(
                "PHP {} started: {} classic threads, {} worker threads in {} pools",
                crate::PHP_VERSION,
                config.num_threads,
                workers,
                config.workers.len()
            ),
        );
        Ok(Engine {
            shared,
            pools,
            slots,
            grace: Duration::from_millis(config.shutdown_grace_ms),
            main: Mutex::new(Some(main)),
            running: AtomicBool::new(true),
        })
    }

    /// Queues a request. On error the request was not taken: the caller answers it.
    pub fn submit(&self, request: Box<Request>) -> Result<()> {
        if !self.running.load(Ordering::Acquire) {
            request.disown();
            return Err(Error::Stopped);
        }
        let id = request.pool();
        match self.pools.get(id as usize) {
            Some(pool) => pool.submit(request),
            None => {
                request.disown();
                Err(Error::UnknownPool(id))
            }
        }
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Stops taking requests, lets queued and running ones finish for up to the grace
    /// period, stops scripts still running after it, then stops PHP. Blocks until done;
    /// calling it again does nothing.
    pub fn shutdown(&self) {
        let Some(main) = self.main.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        self.running.store(false, Ordering::Release);
        for pool in &self.pools {
            pool.close();
        }
        let finished = |deadline: Instant| loop {
            if self.pools.iter().all(Pool::all_finished) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if !finished(Instant::now() + self.grace) {
            let killed = self.slots.kill_all();
            self.shared.host.log(0, Level::Warn, &format!(
                "{killed} PHP scripts were still running {} ms after shutdown began: stopping them",
                self.grace.as_millis()
            ));
            if !finished(Instant::now() + AFTER_KILL_WAIT) {
                // A thread stuck outside PHP (a blocking call that ignores signals) cannot
                // be stopped; PHP cannot shut down under it. Leave it to the process exit.
                self.shared.host.log(0, Level::Error, "PHP threads did not stop; leaving PHP running until the process exits");
                std::mem::forget(main);
                return;
            }
        }
        for pool in &self.pools {
            pool.join_all();
        }
        stop_main_thread(main);
        ENGINE_ALIVE.store(false, Ordering::Release);
        self.shared.host.log(0, Level::Info, "PHP stopped");
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn start_main_thread(ini: CString, shared: Arc<Shared>) -> Result<MainThread> {
    let (ready_tx, ready_rx) = mpsc::channel::<std::result::Result<(), String>>();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let handle = std::thread::Builder::new()
        .name("php-main".into())
        .stack_size(PHP_THREAD_STACK)
        .spawn(move || {
            block_sigpipe();
            set_thread_shared(Some(shared.clone()));
            let module = crate::functions::module_entry();
            // SAFETY: first PHP call of this engine, on its main thread; `ini` lives until
            // after pw_shim_engine_shutdown below.
            let env = shared.process_env.as_shim();
            let rc = unsafe { shim::pw_shim_engine_startup(ini.as_ptr(), module.cast::<c_void>(), &env) };
            if rc != 0 {
                let _ = ready_tx.send(Err("php_module_startup failed (see the log above)".into()));
                set_thread_shared(None);
                return;
            }
            let _ = ready_tx.send(Ok(()));
            let _ = stop_rx.recv();
            // SAFETY: every PHP thread has been joined by Engine::shutdown.
            unsafe { shim::pw_shim_engine_shutdown() };
            set_thread_shared(None);
            drop(ini);
        })
        .map_err(|e| Error::Startup(format!("cannot spawn the PHP main thread: {e}")))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(MainThread { stop: stop_tx, handle }),
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

fn stop_main_thread(main: MainThread) {
    let _ = main.stop.send(());
    let _ = main.handle.join();
}

/// Go handles SIGPIPE for the process; a SIGPIPE delivered to a non-Go thread with no
/// handler kills it. PHP threads block it (see os/signal, "Go programs that use cgo").
pub fn block_sigpipe() {
    // SAFETY: plain libc calls on a local sigset.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! A host for tests: records every callback, serves a fixed request body.
    use super::*;
    use crate::ffi::{Callbacks, Response};
    use std::collections::{HashMap, HashSet};
    use std::sync::{Condvar, LazyLock};

    #[derive(Debug, Clone)]
    pub struct Call {
        pub handle: usize,
        pub status: i32,
        pub headers: Vec<(String, String)>,
        pub body: Vec<u8>,
        pub flags: u32,
    }

    #[derive(Default)]
    pub struct Exchanges {
        pub calls: Mutex<Vec<Call>>,
        pub logs: Mutex<Vec<(usize, i32, String)>>,
        pub bodies: Mutex<HashMap<usize, Vec<u8>>>,
        /// Requests whose body fails (-1) once what `bodies` holds for them is read.
        pub failing_bodies: Mutex<HashSet<usize>>,
        pub done: Condvar,
    }

    pub static EXCHANGES: LazyLock<Exchanges> = LazyLock::new(Exchanges::default);

    unsafe extern "C" fn respond(handle: usize, r: *const Response) -> i32 {
        let r = unsafe { &*r };
        let headers = (0..r.headers_len)
            .map(|i| {
                let h = unsafe { &*r.headers.add(i) };
                let s = |p: *const u8, n: usize| {
                    String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(p, n) }).into_owned()
                };
                (s(h.name, h.name_len), s(h.value, h.value_len))
            })
            .collect();
        let body =
            if r.body_len == 0 { Vec::new() } else { unsafe { std::slice::from_raw_parts(r.body, r.body_len) }.to_vec() };
        EXCHANGES.calls.lock().unwrap_or_else(|e| e.into_inner()).push(Call { handle, status: r.status, headers, body, flags: r.flags });
        EXCHANGES.done.notify_all();
        0
    }

    unsafe extern "C" fn read_body(handle: usize, buf: *mut u8, len: usize) -> i64 {
        let mut bodies = EXCHANGES.bodies.lock().unwrap();
        let body = bodies.entry(handle).or_insert_with(|| b"defgh".to_vec());
        if body.is_empty() && EXCHANGES.failing_bodies.lock().unwrap().contains(&handle) {
            return -1;
        }
        let n = body.len().min(len);
        unsafe { std::ptr::copy_nonoverlapping(body.as_ptr(), buf, n) };
        body.drain(..n);
        n as i64
    }

    unsafe extern "C" fn log(handle: usize, level: i32, msg: *const u8, len: usize) {
        let msg = String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(msg, len) }).into_owned();
        EXCHANGES.logs.lock().unwrap_or_else(|e| e.into_inner()).push((handle, level, msg));
    }

    pub fn test_host() -> Host {
        let callbacks = Callbacks { respond: Some(respond), read_body: Some(read_body), log: Some(log) };
        // SAFETY: the callbacks above follow the contract.
        unsafe { Host::new(callbacks) }
    }

    /// A unique handle per test, so parallel tests read only their own calls.
    pub fn new_handle() -> usize {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    pub fn calls_for(handle: usize) -> Vec<Call> {
        EXCHANGES.calls.lock().unwrap().iter().filter(|c| c.handle == handle).cloned().collect()
    }

    pub fn recording_shared() -> (Arc<Shared>, usize) {
        (Arc::new(Shared { host: test_host(), process_env: VarBlock::default() }), new_handle())
    }

    #[test]
    fn var_block_skips_unusable_pairs() {
        let v = VarBlock::from_pairs([("A", "1"), ("", "x"), ("B\0", "y"), ("C", "3")]);
        assert_eq!(v.as_shim().pairs, 2);
        assert_eq!(v.block, b"A\01\0C\03\0");
    }

    /// Engines are one per process: engine tests take turns.
    static ENGINE_LOCK: Mutex<()> = Mutex::new(());

    fn with_engine(config: &str, f: impl FnOnce(&Engine)) {
        let _turn = ENGINE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let engine = Engine::start(&Config::from_json(config.as_bytes()).unwrap(), test_host()).unwrap();
        f(&engine);
        drop(engine);
    }

    fn script(name: &str, src: &str) -> String {
        let dir = std::env::temp_dir().join(format!("php_worker_engine_tests_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, src).unwrap();
        path.to_string_lossy().into_owned()
    }

    /// Submits a request and waits for its DONE; returns the calls made for it.
    fn run(engine: &Engine, path: &str, vars: &[(&str, &str)], env_pairs: u32, body: &[u8]) -> Vec<Call> {
        run_in(engine, 0, path, vars, env_pairs, body)
    }

    fn run_in(engine: &Engine, pool: u32, path: &str, vars: &[(&str, &str)], env_pairs: u32, body: &[u8]) -> Vec<Call> {
        use crate::request::tests::{encode, fields};
        let handle = new_handle();
        let mut f = fields(if body.is_empty() { "GET" } else { "POST" }, path);
        f[crate::ffi::Field::RequestUri as usize] = "/x?a=1";
        f[crate::ffi::Field::QueryString as usize] = "a=1";
        let (block, spans) = encode(&f, vars, body);
        let request = Request::new(
            engine.shared().clone(),
            pool,
            &block,
            &spans,
            env_pairs,
            body.len(),
            body.len() as i64,
            crate::ffi::PHP_WORKER_REQUEST_BODY_COMPLETE,
            handle,
        )
        .unwrap();
        engine.submit(request).unwrap();
        wait_done(handle, path)
    }

    fn body(calls: &[Call]) -> String {
        String::from_utf8_lossy(&calls.iter().flat_map(|c| c.body.clone()).collect::<Vec<_>>()).into_owned()
    }

    #[test]
    fn runs_scripts_with_server_vars_env_body_and_status() {
        with_engine(r#"{"num_threads":2,"php_ini":{"display_errors":"1","html_errors":"0"}}"#, |engine| {
            let hello = script("hello.php", "<?php header('X-Test: yes'); http_response_code(201); echo 'hello';");
            let calls = run(engine, &hello, &[], 0, b"");
            assert_eq!(calls.len(), 1, "a small response is one callback");
            assert_eq!(calls[0].status, 201);
            assert_eq!(body(&calls), "hello");
            assert!(calls[0].headers.contains(&("X-Test".into(), "yes".into())));

            let vars = script(
                "vars.php",
                "<?php echo $_SERVER['REQUEST_METHOD'], '|', $_SERVER['FOO'], '|', getenv('APP_ENV'), '|', \
                 $_GET['a'], '|', file_get_contents('php://input'), '|', isset($_SERVER['PATH']) ? 'env' : 'noenv';",
            );
            let calls = run(engine, &vars, &[("REQUEST_METHOD", "POST"), ("FOO", "bar"), ("APP_ENV", "prod")], 1, b"payload");
            assert_eq!(body(&calls), "POST|bar|prod|1|payload|env");

            let fatal = script("fatal.php", "<?php echo 'before '; undefined_function();");
            let calls = run(engine, &fatal, &[], 0, b"");
            assert_eq!(calls[0].status, 500);
            assert!(body(&calls).contains("Call to undefined function"), "{}", body(&calls));

            let calls = run(engine, &hello, &[], 0, b"");
            assert_eq!((calls[0].status, body(&calls).as_str()), (201, "hello"), "the thread is clean after a fatal");

            let exit = script("exit.php", "<?php echo 'a'; exit(3); echo 'b';");
            assert_eq!(body(&run(engine, &exit, &[], 0, b"")), "a");
        });
    }

    #[test]
    fn php_errors_reach_the_log_with_their_level() {
        with_engine(r#"{"num_threads":1,"php_ini":{"log_errors":"1","display_errors":"0"}}"#, |engine| {
            let s = script("log.php", "<?php error_log('custom line'); trigger_error('careful', E_USER_WARNING);");
            let calls = run(engine, &s, &[], 0, b"");
            let handle = calls[0].handle;
            let logs: Vec<_> = EXCHANGES.logs.lock().unwrap().iter().filter(|l| l.0 == handle).cloned().collect();
            assert!(logs.iter().any(|l| l.1 == Level::Info as i32 && l.2.contains("custom line")), "{logs:?}");
            assert!(logs.iter().any(|l| l.1 == Level::Warn as i32 && l.2.contains("careful")), "{logs:?}");
        });
    }

    #[test]
    fn an_engine_can_stop_and_start_again_and_refuses_a_twin() {
        with_engine(r#"{"num_threads":1}"#, |engine| {
            assert!(matches!(
                Engine::start(&Config::from_json(br#"{"num_threads":1}"#).unwrap(), test_host()),
                Err(Error::AlreadyRunning)
            ));
            let s = script("one.php", "<?php echo 1;");
            assert_eq!(body(&run(engine, &s, &[], 0, b"")), "1");
            engine.shutdown();
            let (shared, handle) = recording_shared();
            let (block, spans) = crate::request::tests::encode(&crate::request::tests::fields("GET", &s), &[], b"");
            let r = Request::new(shared, 0, &block, &spans, 0, 0, 0, 0, handle).unwrap();
            assert!(matches!(engine.submit(r), Err(Error::Stopped)));
            assert!(calls_for(handle).is_empty(), "a refused request is left to the host");
        });
        with_engine(r#"{"num_threads":1}"#, |engine| {
            let s = script("two.php", "<?php echo 2;");
            assert_eq!(body(&run(engine, &s, &[], 0, b"")), "2");
        });
    }

    fn worker_config(file: &str, extra: &str) -> String {
        format!(
            r#"{{"num_threads":1,"shutdown_grace_ms":2000,"php_ini":{{"display_errors":"1","html_errors":"0"}},
               "workers":[{{"name":"w","file":"{file}","num":1,"env":[["FRANKENPHP_WORKER","1"]]{extra}}}]}}"#
        )
    }

    #[test]
    fn a_worker_keeps_its_state_and_resets_the_request() {
        let w = script(
            "counter-worker.php",
            "<?php $n = 0; $booted = $_SERVER['FRANKENPHP_WORKER'] ?? 'no';
             while (frankenphp_handle_request(function () use (&$n, $booted) {
                 $n++; header('X-N: ' . $n);
                 echo 'requests:', $n, '|', $booted, '|', $_GET['a'] ?? '-', '|', $_SERVER['FOO'] ?? '-';
             })) {}",
        );
        with_engine(&worker_config(&w, ""), |engine| {
            let first = run_in(engine, 1, &w, &[("FOO", "one")], 0, b"");
            assert_eq!(body(&first), "requests:1|1|1|one");
            assert!(first[0].headers.contains(&("X-N".into(), "1".into())));
            let second = run_in(engine, 1, &w, &[], 0, b"");
            assert_eq!(body(&second), "requests:2|1|1|-", "$_SERVER is the new request's");
            assert!(second[0].headers.iter().all(|(k, v)| k != "X-N" || v == "2"), "headers do not carry over");
        });
    }

    #[test]
    fn a_failing_request_gets_a_500_and_the_worker_restarts() {
        let w = script(
            "crashy-worker.php",
            "<?php $n = 0; while (frankenphp_handle_request(function () use (&$n) {
                 $n++; if (($_GET['a'] ?? '') === 'boom') { throw new LogicException('boom'); }
                 echo 'n=', $n;
             })) {}",
        );
        with_engine(&worker_config(&w, ""), |engine| {
            assert_eq!(body(&run_in(engine, 1, &w, &[], 0, b"")), "n=1");
            let mut f = crate::request::tests::fields("GET", &w);
            f[crate::ffi::Field::QueryString as usize] = "a=boom";
            let calls = run_fields(engine, 1, &f);
            assert_eq!(calls[0].status, 500);
            assert!(body(&calls).contains("Uncaught LogicException: boom"), "{}", body(&calls));
            assert_eq!(body(&run_in(engine, 1, &w, &[], 0, b"")), "n=1", "a fresh script serves the next request");
        });
    }

    #[test]
    fn a_worker_that_cannot_boot_answers_its_waiting_requests_503() {
        let w = script("broken-boot-worker.php", "<?php throw new RuntimeException('no database');");
        with_engine(&worker_config(&w, r#","max_boot_backoff_ms":200"#), |engine| {
            let calls = run_in(engine, 1, &w, &[], 0, b"");
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0].status, 503);
            assert!(calls[0].headers.contains(&("Retry-After".into(), "1".into())), "{:?}", calls[0].headers);
            assert_eq!(body(&calls), "503 Service Unavailable: worker w fails to start; the server log says why\n");
            // The thread logs after it has answered: wait for the line.
            let logged = || {
                let logs = EXCHANGES.logs.lock().unwrap_or_else(|e| e.into_inner());
                logs.iter().any(|(_, _, m)| m.contains("worker w: no thread can start the script; answered 1"))
            };
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !logged() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert!(logged(), "the answered requests are logged");
        });
    }

    #[test]
    fn max_requests_recycles_the_script() {
        let w = script(
            "recycled-worker.php",
            "<?php $n = 0; while (frankenphp_handle_request(function () use (&$n) { $n++; echo $n; })) {}",
        );
        with_engine(&worker_config(&w, r#","max_requests":2"#), |engine| {
            let bodies: Vec<String> = (0..5).map(|_| body(&run_in(engine, 1, &w, &[], 0, b""))).collect();
            assert_eq!(bodies, vec!["1", "2", "1", "2", "1"]);
        });
    }

    #[test]
    fn handle_request_outside_a_worker_throws() {
        with_engine(r#"{"num_threads":1,"php_ini":{"display_errors":"1","html_errors":"0"}}"#, |engine| {
            let s = script(
                "not-a-worker.php",
                "<?php try { frankenphp_handle_request(fn () => null); } catch (RuntimeException $e) { echo $e->getMessage(); }",
            );
            assert_eq!(body(&run(engine, &s, &[], 0, b"")), "frankenphp_handle_request() called while not in worker mode");
        });
    }

    fn run_fields(engine: &Engine, pool: u32, fields: &[&str]) -> Vec<Call> {
        use crate::request::tests::encode;
        let handle = new_handle();
        let (block, spans) = encode(fields, &[], b"");
        let request = Request::new(engine.shared().clone(), pool, &block, &spans, 0, 0, 0, 1, handle).unwrap();
        engine.submit(request).unwrap();
        wait_done(handle, fields[crate::ffi::Field::ScriptFilename as usize])
    }

    /// The calls of `handle` once its DONE call came; fails after 20 s.
    fn wait_done(handle: usize, script: &str) -> Vec<Call> {
        let mut calls = EXCHANGES.calls.lock().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !calls.iter().any(|c| c.handle == handle && c.flags & crate::ffi::PHP_WORKER_RESPONSE_DONE != 0) {
            assert!(std::time::Instant::now() < deadline, "no response for {script}");
            calls = EXCHANGES.done.wait_timeout(calls, std::time::Duration::from_millis(100)).unwrap().0;
        }
        calls.iter().filter(|c| c.handle == handle).cloned().collect()
    }

    #[test]
    fn putenv_is_per_thread_and_per_request() {
        with_engine(r#"{"num_threads":1}"#, |engine| {
            let set = script(
                "putenv-set.php",
                "<?php putenv('PW_T=1'); putenv('PATH'); $all = getenv();
                 echo getenv('PW_T'), '|', var_export(getenv('PATH'), true), '|', $all['PW_T'] ?? '-', '|',
                 isset($all['PATH']) ? 'path' : 'no-path';",
            );
            assert_eq!(body(&run(engine, &set, &[], 0, b"")), "1|false|1|no-path");
            let read = script("putenv-read.php", "<?php echo var_export(getenv('PW_T'), true), '|', getenv('PATH') ? 'path' : 'none';");
            assert_eq!(body(&run(engine, &read, &[], 0, b"")), "false|path", "a classic request forgets its putenv()s");
            assert!(std::env::var_os("PW_T").is_none(), "the process environment is untouched");
        });
        let w = script(
            "putenv-worker.php",
            "<?php putenv('BOOTED=yes'); while (frankenphp_handle_request(function () { echo getenv('BOOTED'); })) {}",
        );
        with_engine(&worker_config(&w, ""), |engine| {
            assert_eq!(body(&run_in(engine, 1, &w, &[], 0, b"")), "yes");
            assert_eq!(body(&run_in(engine, 1, &w, &[], 0, b"")), "yes", "a worker keeps its boot-time putenv()s");
        });
    }
}
