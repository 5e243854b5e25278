//! The engine's PHP threads: the [`Registry`] that starts and joins them, and the life of
//! one: its PHP context, the loop of its role (classic.rs or worker.rs), moving to
//! another pool, ending.

use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::Receiver;

use super::PHP_THREAD_STACK;
use super::info::{ThreadInfo, ThreadState, lock};
use super::protocol::{Assignment, Command, Leave, Next, Role, TaskRouter, ThreadHandle};

use super::thread::{PhpThread, with_thread};
use super::{background, classic, worker};
use crate::config::WorkerKind;
use crate::error::{Error, Result};
use crate::host::{self, Host, Level};
use crate::php::context::PhpContext;

/// Every PHP thread of an engine.
#[derive(Default)]
pub struct Registry {
    slots: Mutex<Vec<Option<Slot>>>,
    finished: Condvar,
    tasks: OnceLock<Arc<dyn TaskRouter>>,
    /// Requests after which a thread starts a fresh PHP context (0: never); set once by
    /// the engine, read by each thread at each new context.
    pub context_max_requests: AtomicU64,
}

struct Slot {
    info: Arc<ThreadInfo>,
    join: JoinHandle<()>,
    ctl: crossbeam_channel::Sender<Command>,
    /// The signal stack of the slot's threads: a thread keeps it until it has exited
    /// (Go's runtime records it on the thread's first callback and relies on it until
    /// then), so it is reused only after a join.
    signal_stack: SignalStack,
}

/// Size of a PHP thread's signal stack: the crash trail (csrc/crash.c) and Go's
/// handler run on it, also after the thread's own stack overflowed.
const SIGNAL_STACK: usize = 64 * 1024;

/// A signal stack mapped on its own rather than taken from the heap: its pages become
/// resident only when a signal handler first touches them, where a zeroed heap block
/// may cost its whole size in RSS for every PHP thread.
struct SignalStack(std::ptr::NonNull<libc::c_void>);

// SAFETY: the mapping is plain memory owned by this value; threads only write to it
// through the kernel's signal delivery.
unsafe impl Send for SignalStack {}

impl SignalStack {
    fn new() -> Result<Self> {
        // SAFETY: an anonymous private mapping, no address hint; checked below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SIGNAL_STACK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(Error::Startup(format!("cannot map a PHP thread's signal stack: {}", std::io::Error::last_os_error())));
        }
        Ok(SignalStack(std::ptr::NonNull::new(addr).expect("mmap returned null")))
    }

    fn addr(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

impl Drop for SignalStack {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by SignalStack::new with this size and is dropped
        // only after the thread that used it has been joined (see Slot).
        unsafe { libc::munmap(self.0.as_ptr(), SIGNAL_STACK) };
    }
}

/// Makes `stack` the calling thread's signal stack, unless it has one.
fn use_signal_stack(stack: usize) {
    // SAFETY: `stack` points to SIGNAL_STACK bytes that outlive this thread (see Slot).
    unsafe {
        let mut current: libc::stack_t = std::mem::zeroed();
        if libc::sigaltstack(std::ptr::null(), &mut current) == 0 && current.ss_flags & libc::SS_DISABLE == 0 {
            return;
        }
        let ss = libc::stack_t { ss_sp: stack as *mut libc::c_void, ss_flags: 0, ss_size: SIGNAL_STACK };
        libc::sigaltstack(&ss, std::ptr::null_mut());
    }
}

impl Registry {
    /// Starts a PHP thread serving `assignment`. The engine's main thread must be up.
    pub fn spawn(self: &Arc<Self>, host: &Arc<Host>, assignment: Assignment) -> Result<ThreadHandle> {
        let mut slots = lock(&self.slots);
        // Reuse the index of a thread that ended.
        let index = slots.iter().position(|s| s.as_ref().is_none_or(|s| s.info.state() == ThreadState::Done && s.join.is_finished()));
        let mut signal_stack = None;
        let index = match index {
            Some(i) => {
                if let Some(old) = slots[i].take() {
                    let _ = old.join.join();
                    signal_stack = Some(old.signal_stack);
                }
                i
            }
            None => {
                slots.push(None);
                slots.len() - 1
            }
        };
        let signal_stack = match signal_stack {
            Some(stack) => stack,
            None => SignalStack::new()?,
        };
        let stack_addr = signal_stack.addr();
        let info = Arc::new(ThreadInfo::new(index, assignment.pool, assignment.generation()));
        let (ctl_tx, ctl_rx) = crossbeam_channel::unbounded();
        let (thread_info, thread_host, registry) = (info.clone(), host.clone(), self.clone());
        let join = std::thread::Builder::new()
            .name(info.name())
            .stack_size(PHP_THREAD_STACK)
            .spawn(move || {
                use_signal_stack(stack_addr);
                run(thread_info, thread_host, registry, ctl_rx, assignment)
            })
            .map_err(|e| Error::Startup(format!("cannot spawn a PHP thread: {e}")))?;
        slots[index] = Some(Slot { info: info.clone(), join, ctl: ctl_tx.clone(), signal_stack });
        Ok(ThreadHandle::new(info, ctl_tx))
    }

    /// Every thread that has not ended.
    pub fn threads(&self) -> Vec<Arc<ThreadInfo>> {
        lock(&self.slots).iter().flatten().filter(|s| s.info.state() != ThreadState::Done).map(|s| s.info.clone()).collect()
    }

    /// Sends every thread that has not ended the command `make` returns.
    pub fn broadcast(&self, make: impl Fn() -> Command) {
        for slot in lock(&self.slots).iter().flatten().filter(|s| s.info.state() != ThreadState::Done) {
            let command = make();
            if matches!(command, Command::Recycle(_)) {
                // OPcache restarts once every script has left PHP: a background script
                // must end for it (and runs again on the fresh cache).
                slot.info.request_stop_with(None, || slot.ctl.send(command).is_ok());
            } else {
                let _ = slot.ctl.send(command);
            }
        }
    }

    /// Tells every thread's script to stop (the engine stops): scheduled jobs, which no
    /// pool commands, learn it this way.
    pub fn request_stop_all(&self) {
        for slot in lock(&self.slots).iter().flatten().filter(|s| s.info.state() != ThreadState::Done) {
            slot.info.request_stop();
        }
    }

    /// Where PHP threads send tasks (php_worker_task()); set once by the engine.
    pub fn set_task_router(&self, router: Arc<dyn TaskRouter>) {
        let _ = self.tasks.set(router);
    }

    /// Stops every running script the way a timeout does; the count signalled.
    pub fn kill_all(&self) -> usize {
        self.threads().iter().filter(|t| t.kill()).count()
    }

    /// Waits until every thread has ended, or the deadline; true when they have.
    pub fn wait_all_done(&self, deadline: Instant) -> bool {
        let mut slots = lock(&self.slots);
        loop {
            if slots.iter().flatten().all(|s| s.info.state() == ThreadState::Done) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            slots = self.finished.wait_timeout(slots, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Joins every thread; call after [`Registry::wait_all_done`] said they ended.
    pub fn join_all(&self) {
        let slots = std::mem::take(&mut *lock(&self.slots));
        for slot in slots.into_iter().flatten() {
            let _ = slot.join.join();
        }
    }

    fn thread_done(&self, info: &ThreadInfo) {
        let _slots = lock(&self.slots);
        info.set_state(ThreadState::Done);
        self.finished.notify_all();
    }
}

/// The body of a PHP thread.
fn run(info: Arc<ThreadInfo>, host: Arc<Host>, registry: Arc<Registry>, ctl: Receiver<Command>, assignment: Assignment) {
    host::attach_thread(Some(host.clone()));
    PhpThread::install(info.clone(), host.clone(), ctl, assignment, registry.tasks.get().cloned());
    let name = CString::new(info.name()).unwrap_or_default();
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loop {
        with_thread(|t| t.mark_taken()); // not free while its context starts
        info.set_state(ThreadState::Starting);
        // SAFETY: pools spawn threads only while the engine's main thread is up, and the
        // engine waits for every thread to end before it stops PHP.
        let context = unsafe { PhpContext::new(&name) };
        // Dropped before the context, on every path: see register_kill.
        let kill = info.register_kill(context.kill_slot());
        with_thread(|t| {
            t.context_requests = 0;
            t.context_max_requests = registry.context_max_requests.load(Ordering::Relaxed);
        });
        let end = serve(&info);
        drop(kill);
        drop(context);
        release_free_memory();
        match end {
            ContextEnd::Exit => break,
            ContextEnd::Damaged => {
                host.log(0, Level::Warn, &format!("PHP thread {} restarted after an unrecoverable error", info.name()))
            }
            ContextEnd::Spent => host.event(0, Level::Debug, "PHP thread restarted (max_requests)", &[("thread", info.name().into())]),
        }
    }));
    if let Err(panic) = served {
        // A bug in the thread's own loop (hooks catch their own): the thread ends, and
        // the engine must not wait for it. (Its kill slot went with its context.)
        host.log(0, Level::Error, &format!("PHP thread {} ended on an internal error: {}", info.name(), crate::error::panic_message(&*panic)));
    }
    let events = with_thread(|t| t.assignment.events.clone());
    events.left(&info);
    PhpThread::uninstall();
    host::attach_thread(None);
    registry.thread_done(&info);
}

/// Returns the memory malloc keeps free to the OS. A PHP context freed leaves holes in
/// malloc's arenas that a later thread may never fill (a reload boots new threads beside
/// the old ones): without this, every reload would leave the process a little bigger.
pub fn release_free_memory() {
    // SAFETY: malloc_trim only walks malloc's own arenas, under their locks.
    unsafe { libc::malloc_trim(0) };
}

/// Why a thread's PHP context ended.
enum ContextEnd {
    /// The thread ends.
    Exit,
    /// PHP's state may be damaged: a fresh context.
    Damaged,
    /// It served the engine's max_requests: a fresh context.
    Spent,
}

/// Serves assignments on one PHP context, until the thread ends or needs a fresh context.
fn serve(info: &ThreadInfo) -> ContextEnd {
    loop {
        let role = with_thread(|t| {
            let a = &t.assignment;
            info.assign(a.pool, a.generation(), a.worker_name());
            t.assignment.role.clone()
        });
        let next = match role {
            Role::Classic => classic::serve(),
            Role::Worker(generation) if generation.spec.kind == WorkerKind::Background => background::serve(&generation),
            Role::Worker(generation) => worker::serve(&generation),
        };
        match next {
            Next::FreshContext => return ContextEnd::Damaged,
            Next::Renew => return ContextEnd::Spent,
            Next::Leave(Leave::Exit) => return ContextEnd::Exit,
            Next::Leave(Leave::Join(assignment)) => {
                let old = with_thread(|t| t.switch(assignment));
                old.events.left(info);
            }
        }
    }
}
