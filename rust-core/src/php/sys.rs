//! The raw seam between Rust and the C shim (csrc/): the types both sides share and the
//! C functions Rust calls.
//!
//! csrc/pw_seam.h is generated from this file and the files that define the `pw_rs_*`
//! hooks (cbindgen, see cbindgen-seam.toml); the `seam_header_is_current` test fails when
//! it is stale. The shim includes it, so the C compiler checks every pw_shim_* definition
//! against the declaration Rust calls and every pw_rs_* call against the Rust hook: a
//! signature that drifts on either side no longer builds.

use std::ffi::{c_char, c_int, c_void};

/// One request as PHP needs it. Every string is NUL-terminated, owned by Rust and valid
/// until the script (or, for a worker request, pw_rs_worker_done) is over.
#[repr(C)]
pub struct ShimRequest {
    /// The Rust request context, stored in SG(server_context); never NULL.
    pub ctx: *mut c_void,
    pub method: *const c_char,
    pub request_uri: *const c_char,
    pub query_string: *const c_char,
    /// NULL when the request has none.
    pub content_type: *const c_char,
    pub path_translated: *const c_char,
    pub script_filename: *const c_char,
    /// NULL when the request has none.
    pub authorization: *const c_char,
    /// 0 when unknown (chunked).
    pub content_length: i64,
    /// The script's command line (`$argv`), `argc` NUL-terminated strings, for a
    /// scheduled job; 0 and NULL for everything else.
    pub argc: c_int,
    pub argv: *const *const c_char,
}

/// How pw_shim_run_script runs its script.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)] // read by C
pub enum RunMode {
    /// One request of classic mode.
    Request = 0,
    /// A worker script (HTTP or task): `req` is what it sees while it boots, and it
    /// serves through frankenphp_handle_request() or php_worker_handle_task().
    Worker,
    /// A background worker's or a scheduled job's script: it runs with no time limit,
    /// and its output goes to the log.
    Background,
    /// An HTTP worker's script run as one request, with a full request startup and
    /// shutdown (which debuggers and profilers hook): its frankenphp_handle_request()
    /// serves that request once, then returns false.
    OneShotWorker,
}

/// Variables for `$_SERVER` or the environment, in the layout of src/layout.rs: `pairs`
/// pairs, each two (offset, length) spans into `block`, whose strings end with a NUL.
#[repr(C)]
pub struct ShimVars {
    pub block: *const c_char,
    pub spans: *const u32,
    pub pairs: usize,
}

/// How pw_shim_run_script ended.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)] // the values are produced by C
pub enum RunResult {
    /// The script ran; it may have failed the PHP way (see the outcome).
    Ok = 0,
    /// php_request_startup failed; the script did not run.
    StartupFailed = 1,
    /// A bailout escaped PHP's own handlers: the thread needs a fresh PHP context.
    Unhealthy = 2,
}

/// What the script left behind.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOutcome {
    /// It ended on a fatal error or an uncaught exception.
    pub fatal: bool,
    /// Its exit status (exit(n), 255 after a fatal error).
    pub exit_status: c_int,
    /// PHP's memory usage when the script ended, before request shutdown.
    pub memory: usize,
}

/// A line PHP logs, with where it comes from: a PHP error (`type` is its E_* constant,
/// `file` and `line` where it happened), an error_log() call (`type` 0) or a
/// frankenphp_log() call (`type` PW_LOG_FRANKENPHP, `context` its context array as a
/// JSON object); for those two `file` and `line` are the calling script's, NULL and 0
/// outside a script. Strings are not NUL-terminated and are valid for the duration of
/// the call; `context` is NULL when there is none.
#[repr(C)]
pub struct PhpLogLine {
    pub r#type: c_int,
    pub message: *const c_char,
    pub message_len: usize,
    pub file: *const c_char,
    pub file_len: usize,
    pub line: u32,
    pub context: *const c_char,
    pub context_len: usize,
}

/// The `type` of a PhpLogLine from frankenphp_log().
pub const PW_LOG_FRANKENPHP: c_int = -1;

/// What it takes to stop the script running on a PHP thread from another thread, the
/// way max_execution_time does: the thread and its execution timer; and to watch it:
/// its kernel thread id and its `EG(timed_out)` flag.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KillSlot {
    pub thread: libc::pthread_t,
    pub timer: *mut c_void,
    pub tid: libc::pid_t,
    pub timed_out: *mut c_void,
    /// The thread's `EG(vm_interrupt)`.
    pub vm_interrupt: *mut c_void,
}

// SAFETY: a pthread id and an address only used as a signal's payload.
unsafe impl Send for KillSlot {}
// SAFETY: as for Send: the slot is only read, by the watchdog, once its thread filled it.
unsafe impl Sync for KillSlot {}

/// One frame of a PHP thread's stack, for the profiler (csrc/profile.c): the function's
/// name (NULL for a script's top level), its class (`scope`, NULL for a function), and for user
/// code its file and the line running; strings are not NUL-terminated and are valid for
/// the duration of the pw_rs_profile_sample call.
#[repr(C)]
pub struct ProfileFrame {
    pub function: *const c_char,
    pub function_len: usize,
    pub scope: *const c_char,
    pub scope_len: usize,
    pub file: *const c_char,
    pub file_len: usize,
    pub line: u32,
}

/// What pw_shim_opcache_attach found.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)] // the values are produced by C
pub enum OpcacheHook {
    /// OPcache is not loaded.
    Absent = 0,
    /// php_worker decides when OPcache restarts (src/runtime/opcache.rs).
    Attached = 1,
    /// OPcache lacks the thread hook of scripts/php-patches/opcache-thread-hook.patch.
    Unpatched = 2,
}

/// What pw_shim_cli_run runs (csrc/cli.c).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)] // read by C
pub enum CliMode {
    /// The script `argv[0]`.
    Script = 0,
    /// `code` (php -r).
    Code,
    /// php -v.
    Version,
    /// php -m.
    Modules,
    /// php -i.
    Info,
    /// php -l: `argv[0]`'s syntax.
    Lint,
    /// The script on standard input; `argv[0]` is its name for PHP.
    Stdin,
    /// php --ini.
    Ini,
}

/// A command line for pw_shim_cli_run; every pointer is valid for the call.
#[repr(C)]
pub struct CliArgs {
    pub mode: CliMode,
    /// The script's $argv, `argc` NUL-terminated strings (PHP's type: not modified).
    pub argc: c_int,
    pub argv: *mut *mut c_char,
    /// The code of [`CliMode::Code`], else NULL.
    pub code: *const c_char,
    /// "key=value\n" lines applied after php.ini and the CLI's own settings, or NULL.
    pub ini_entries: *const c_char,
    /// "key=value\n" lines of defaults that php.ini may change, or NULL.
    pub ini_defaults: *const c_char,
    /// The php.ini file or folder to read instead of the default (php -c), or NULL.
    pub ini_path: *const c_char,
    /// Read no php.ini at all (php -n): 1, else 0.
    pub no_ini: c_int,
    /// What `PHP_BINARY` names (PHP searches the PATH for a name without a slash), or
    /// NULL for none.
    pub executable: *const c_char,
}

unsafe extern "C" {
    /// Starts PHP with a SAPI named "cli", runs one command line as PHP's CLI does, and
    /// stops PHP: the exit status (255 after a fatal error, 1 when PHP does not start).
    /// On a thread of its own, in a process where no engine runs.
    pub fn pw_shim_cli_run(args: *const CliArgs) -> c_int;
    /// Starts TSRM, the SAPI and the modules on the calling thread, which becomes the
    /// engine's main thread. Returns 0 on success. `ini_entries` ("key=value\n" lines,
    /// applied after php.ini) and `ini_defaults` (the same, under php.ini) must stay
    /// valid until pw_shim_engine_shutdown; `module` is the ext-php-rs module entry; `env`
    /// (the process environment every `$_SERVER` starts with) is copied.
    pub fn pw_shim_engine_startup(
        ini_entries: *const c_char,
        ini_defaults: *const c_char,
        module: *mut c_void,
        env: *const ShimVars,
    ) -> c_int;
    /// Stops PHP, on the main thread, after every PHP thread has ended.
    pub fn pw_shim_engine_shutdown();
    /// Points OPcache's thread hook at pw_rs_opcache_event, on the main thread after
    /// pw_shim_engine_startup.
    pub fn pw_shim_opcache_attach() -> OpcacheHook;
    /// PHP's post_max_size in bytes (0 or less: no limit), on the main thread after
    /// pw_shim_engine_startup.
    pub fn pw_shim_post_max_size() -> i64;
    /// Installs the handler that writes a line on standard error when a PHP thread gets
    /// SIGSEGV, SIGBUS, SIGILL, SIGFPE or SIGABRT, then calls the handler that was there
    /// before (Go's). Once per process (later calls do nothing), after Go's runtime
    /// installed its handlers.
    pub fn pw_shim_crash_trail_install();
    /// Gives the calling OS thread its own PHP context, blocks the host's signals on it
    /// (pw_rs_block_host_signals), names it `name` (or leaves it when NULL) and fills
    /// `slot`. Pair with pw_shim_thread_shutdown on the same thread.
    pub fn pw_shim_thread_init(name: *const c_char, slot: *mut KillSlot);
    /// Frees the calling thread's PHP context; no request may be running on it.
    pub fn pw_shim_thread_shutdown();
    /// Runs a script as one request: request startup, the script, request shutdown
    /// (see [`RunMode`]).
    pub fn pw_shim_run_script(req: *const ShimRequest, mode: RunMode, outcome: *mut RunOutcome) -> RunResult;
    /// Makes the script on the slot's thread fail with "Maximum execution time
    /// exceeded" at its next instruction, interrupting a blocking sleep. False if no
    /// signal could be sent, or none may be yet (no thread started a request, so PHP's
    /// handler is not installed and no script runs). Safe from any thread while the slot's thread has its context.
    pub fn pw_shim_kill(slot: *const KillSlot) -> bool;
    /// Whether the script on the slot's thread passed its time limit (PHP's timer fired,
    /// or pw_shim_kill was called) and has not reached a new request since. Safe from
    /// any thread while the slot's thread has its context.
    pub fn pw_shim_timed_out(slot: *const KillSlot) -> bool;
    /// Has the script on the slot's thread run its php_worker_on_stop() callback, if it
    /// registered one, at its next instruction. Safe from any thread while the slot's
    /// thread has its context.
    pub fn pw_shim_interrupt(slot: *const KillSlot);
}
