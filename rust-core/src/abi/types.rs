//! The types and constants of the C ABI (include/php_worker.h). No logic: cbindgen reads
//! this file and src/exports.rs to generate the header.

/// Status: success.
pub const PHP_WORKER_OK: i32 = 0;
/// Status: the engine is stopping or stopped.
pub const PHP_WORKER_ERR_STOPPED: i32 = 1;
/// Status: the pool's queue is full.
pub const PHP_WORKER_ERR_QUEUE_FULL: i32 = 2;
/// Status: the arguments do not follow this header's layout.
pub const PHP_WORKER_ERR_INVALID: i32 = 3;
/// Status: no pool has the given id (it is not created yet, or was deleted).
pub const PHP_WORKER_ERR_UNKNOWN_POOL: i32 = 4;
/// Status: an internal error (a caught panic); details went to the log callback.
pub const PHP_WORKER_ERR_INTERNAL: i32 = 5;

/// The pool of classic threads (one script run per request). It exists from
/// php_worker_engine_new() on, with no threads until php_worker_pool_resize().
pub const PHP_WORKER_CLASSIC_POOL: u32 = 0;

/// Names a pool: the `pool` argument of the php_worker_pool_* functions, chosen by the
/// host, stable across engine restarts. 0 is the classic pool. (Rust's name only: the
/// header says uint32_t.)
pub type PoolId = u32;

/// Request flag: the bytes at the end of `strings` are the whole body; PHP will not call
/// `read_body`.
pub const PHP_WORKER_REQUEST_BODY_COMPLETE: u32 = 1;

/// Request flag: the script is a worker script, run for this one request in a request
/// of its own (a classic thread's full request startup and shutdown, which debuggers
/// and profilers hook): its frankenphp_handle_request() serves this request once, then
/// returns false. Submitted to the classic pool.
pub const PHP_WORKER_REQUEST_ONE_SHOT_WORKER: u32 = 2;

/// Response flag: send what was written so far to the client now (PHP's flush()).
pub const PHP_WORKER_RESPONSE_FLUSH: u32 = 1;
/// Response flag: the response is complete; this is the last call for the request.
pub const PHP_WORKER_RESPONSE_DONE: u32 = 2;
/// Response flag: an informational (1xx) response, such as 103 Early Hints, carrying
/// `status` and `headers`; the final response follows in later calls.
pub const PHP_WORKER_RESPONSE_INFORMATIONAL: u32 = 4;
/// Response flag: the request ran past its deadline (PHP's time limit plus the engine's
/// grace) and its PHP thread is stuck. The host answers the client now (504 Gateway
/// Timeout, or a cut-off response when the headers already left) and drops later
/// output; `status`, `headers` and `body` are empty. The request's DONE still follows,
/// whenever the thread comes back. Sent at most once per request, from the core's
/// watchdog thread, never after DONE.
pub const PHP_WORKER_RESPONSE_EXPIRED: u32 = 8;
/// Response flag: the core did not serve the request, for the reason in `refusal` (a
/// PHP_WORKER_REFUSED_* code). Always sent with PHP_WORKER_RESPONSE_DONE, as the only
/// call for the request; `status`, `headers` and `body` are empty. The host writes the
/// answer (status, body, `Retry-After`, log line): the core never writes a refusal.
pub const PHP_WORKER_RESPONSE_REFUSED: u32 = 16;
/// Refusal: none (a served request).
pub const PHP_WORKER_REFUSED_NONE: u32 = 0;
/// Refusal: its pool stopped (deleted, or the engine shut down) before a thread took it.
pub const PHP_WORKER_REFUSED_STOPPED: u32 = 1;
/// Refusal: no thread of its worker can boot the worker script; `retry_after_ms` is the
/// pause before the next attempt.
pub const PHP_WORKER_REFUSED_BOOT_FAILING: u32 = 2;
/// Refusal: its body could not be read (`read_body` returned -1) before any header left,
/// so what the script answered, built on part of the body, was dropped.
pub const PHP_WORKER_REFUSED_BODY: u32 = 3;
/// Refusal: the host withdrew it (php_worker_request_cancel() returned true) and answers
/// it itself; this call only ends the core's use of the handle.
pub const PHP_WORKER_REFUSED_WITHDRAWN: u32 = 4;
/// Refusal: the core dropped it without an answer (an internal error).
pub const PHP_WORKER_REFUSED_LOST: u32 = 5;

/// Log levels of the `log` callback.
pub const PHP_WORKER_LOG_DEBUG: i32 = 0;
pub const PHP_WORKER_LOG_INFO: i32 = 1;
pub const PHP_WORKER_LOG_WARN: i32 = 2;
pub const PHP_WORKER_LOG_ERROR: i32 = 3;

/// The fixed fields at the start of a request's spans, in this order. Empty strings
/// stand for "absent".
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// GET, POST, ...
    Method = 0,
    /// The original request URI with its query string (REQUEST_URI).
    RequestUri,
    /// The raw query string, without '?'.
    QueryString,
    /// The Content-Type header.
    ContentType,
    /// Absolute path of the script to run.
    ScriptFilename,
    /// PATH_TRANSLATED, or empty.
    PathTranslated,
    /// The Cookie header(s), joined with "; ".
    Cookie,
    /// The Authorization header (PHP derives PHP_AUTH_USER and PHP_AUTH_PW from it).
    Authorization,
    /// "HTTP/1.1", "HTTP/2.0", ...
    Protocol,
    /// Number of fixed fields.
    Count,
}

/// A response header. Not NUL-terminated; valid only during the callback.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub name: *const u8,
    pub name_len: usize,
    pub value: *const u8,
    pub value_len: usize,
}

/// Response data handed to the `respond` callback. Every pointer is owned by Rust and
/// valid only during the callback: the host copies what it keeps.
#[repr(C)]
#[derive(Debug)]
pub struct Response {
    /// The HTTP status on the first call for a request, with `headers`; 0 on later calls.
    /// An informational call carries its own 1xx status and headers.
    pub status: i32,
    pub headers: *const Header,
    pub headers_len: usize,
    pub body: *const u8,
    pub body_len: usize,
    /// PHP_WORKER_RESPONSE_* flags.
    pub flags: u32,
    /// With PHP_WORKER_RESPONSE_REFUSED: why, a PHP_WORKER_REFUSED_* code; else 0.
    pub refusal: u32,
    /// With PHP_WORKER_REFUSED_BOOT_FAILING: how long until the worker tries to boot
    /// again, in milliseconds (the host's `Retry-After`); else 0.
    pub retry_after_ms: u32,
    /// The index of the PHP thread running the request (its name is php-<index>), or -1
    /// when no thread took it (a refusal).
    pub thread: i32,
    /// How long the request waited for a thread, from its submission until a thread took
    /// it, in microseconds (0 when no thread took it): the rest of its time is its run.
    pub queued_us: u64,
}

/// A request's last response call, taken from the completion queue with
/// php_worker_completions_take(): what `respond` would have received for `handle`.
#[repr(C)]
pub struct CompletionEntry {
    pub handle: usize,
    pub response: Response,
}

/// The host's callbacks, registered once with php_worker_engine_new(). Each is called
/// on a PHP thread (or, for PHP_WORKER_RESPONSE_EXPIRED and log lines about stuck
/// threads, on the core's watchdog thread), never on a thread of the host's and never
/// while the core holds a lock the host's calls take; each may block briefly (network
/// writes) and must not unwind.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Callbacks {
    /// Response data for the request `handle`. Returns 0, or non-zero when the client is
    /// gone (PHP then sees an aborted connection). Called exactly once with
    /// PHP_WORKER_RESPONSE_DONE per submitted request; after that call returns, `handle`
    /// is never used again and the request's php_worker_request_t is freed.
    pub respond: Option<unsafe extern "C" fn(handle: usize, response: *const Response) -> i32>,
    /// Fills `buf` with up to `len` bytes of the request body of `handle`. Returns the
    /// count (less than `len` only at the end of the body), or -1 when the body cannot
    /// be read (client gone, timeout). After -1 the body is not asked for again, the
    /// script sees an aborted connection, and a response whose headers have not left
    /// yet becomes a bare 408.
    pub read_body: Option<unsafe extern "C" fn(handle: usize, buf: *mut u8, len: usize) -> i64>,
    /// A log line at a PHP_WORKER_LOG_* level; `handle` is the request it belongs to, or
    /// 0. `message` (UTF-8, not NUL-terminated) is the line; `fields` is empty or a JSON
    /// object (UTF-8) of structured fields, such as `{"worker":"app","thread":"php-3"}`
    /// or a PHP error's `{"php_error":"Warning","file":"/app/x.php","line":3}`.
    pub log: Option<
        unsafe extern "C" fn(handle: usize, level: i32, message: *const u8, message_len: usize, fields: *const u8, fields_len: usize),
    >,
    /// NULL, or where the shared table lives for this engine: a host that keeps it in
    /// another process (php_worker's child processes keep it in the Caddy process) gets
    /// each operation of the php_worker_shared_* PHP functions, encoded as
    /// php_worker_shared_store_run() reads it, and returns 0 with the encoded reply in
    /// `*reply` and `*reply_len` (allocated with malloc(); the core frees it with
    /// free()), or -1 when the table cannot be reached: the operation then fails as on a
    /// full table (a get finds nothing). Called on PHP threads, never with a lock held;
    /// may block until the reply comes. When NULL, the table is this process's own.
    pub shared_store: Option<unsafe extern "C" fn(request: *const u8, len: usize, reply: *mut *mut u8, reply_len: *mut usize) -> i32>,
}

/// php_worker_cli_run() modes: the script `argv[0]`; `code` (php -r); php -v; php -m;
/// php -i; php -l (`argv[0]`'s syntax); the script on standard input (`php < x.php`,
/// `argv[0]` its name for PHP); php --ini.
pub const PHP_WORKER_CLI_SCRIPT: u32 = 0;
pub const PHP_WORKER_CLI_CODE: u32 = 1;
pub const PHP_WORKER_CLI_VERSION: u32 = 2;
pub const PHP_WORKER_CLI_MODULES: u32 = 3;
pub const PHP_WORKER_CLI_INFO: u32 = 4;
pub const PHP_WORKER_CLI_LINT: u32 = 5;
pub const PHP_WORKER_CLI_STDIN: u32 = 6;
pub const PHP_WORKER_CLI_INI: u32 = 7;

/// A command line for php_worker_cli_run(). Strings are NUL-terminated; NULL for absent.
#[repr(C)]
pub struct CliCommand {
    /// One of the PHP_WORKER_CLI_* modes.
    pub mode: u32,
    /// The script's $argv: for PHP_WORKER_CLI_SCRIPT, argv[0] is the script's path.
    pub argv: *const *const std::ffi::c_char,
    pub argc: usize,
    /// The code of PHP_WORKER_CLI_CODE.
    pub code: *const std::ffi::c_char,
    /// The engine settings JSON of php_worker_engine_new() (its php_ini, applied after
    /// php.ini: the server's, then php -d), or NULL.
    pub settings_json: *const u8,
    pub settings_len: usize,
    /// The php.ini file or folder to read instead of the default one (php -c).
    pub ini_path: *const std::ffi::c_char,
    /// Read no php.ini (php -n).
    pub no_ini: bool,
    /// What `PHP_BINARY` names: a command that runs this PHP (the path of a `php` link
    /// to this binary), or NULL for none.
    pub executable: *const std::ffi::c_char,
}

/// How a scheduled job's run ended (php_worker_job_run()).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct JobOutcome {
    /// The script's exit status: exit(n), 255 after a fatal error.
    pub exit_status: i32,
    /// It ended on a fatal error or an uncaught exception.
    pub fatal: bool,
    /// PHP failed around the script (its request startup or shutdown).
    pub failed_to_run: bool,
    /// How long it ran, in milliseconds.
    pub duration_ms: u64,
}

// ---- the wire of a child process ------------------------------------------------------
//
// php_worker's child processes (`processes N`) talk to the Caddy process over one Unix
// stream socket. The Caddy process's side is Go (go-module/internal/cluster); a child's
// request path is the core's (php_worker_wire_open()), its control calls Go's. Both
// sides take the frame kinds and layouts from here.
//
// A frame is a 16-byte head, then its payload: payload length u32, kind u8, 3 bytes of
// padding, an id u64 (a request's handle, a call's or a shared table operation's id),
// little-endian like every number below.
//
// Payloads:
//   SUBMIT       pool u32, flags u32, env pairs u32, body length u32, content length
//                i64, span count u32, taken slot u32 (0xffffffff: none), the spans (u32
//                each), then the strings of php_worker_request_submit();
//   BODY         count i64 (-1: the body cannot be read), then the bytes;
//   RESPOND      status i32, flags u32, refusal u32, retry after (ms) u32, thread i32,
//                queued (µs) u64, header count u32, body length u32, 4 bytes of padding,
//                then per header: name length u32, value length u32, name, value; then
//                the body;
//   READ_BODY    the count wanted, u32;
//   LOG          level i8 (zap's: -1 debug, 0 info, 1 warn, 2 error), message length
//                u32, the message, then the fields (empty or a JSON object);
//   SUBMIT_FAILED a PHP_WORKER_ERR_* code, u32;
//   CANCELLED    one byte: 1 when the request was withdrawn;
//   CALL, REPLY  JSON; STORE, STORE_REPLY: a shared table operation and its reply;
//   CANCEL, CLIENT_GONE: empty.

/// Bytes in a frame's head.
pub const PHP_WORKER_WIRE_HEAD: usize = 16;
/// The largest payload a frame may carry; a reader ends the wire at a larger one.
pub const PHP_WORKER_WIRE_MAX_FRAME: u32 = 64 << 20;
/// Bytes in a SUBMIT payload's fixed head.
pub const PHP_WORKER_WIRE_SUBMIT_HEAD: usize = 32;
/// Bytes in a RESPOND payload's fixed head.
pub const PHP_WORKER_WIRE_RESPOND_HEAD: usize = 40;
/// No slot in the taken table.
pub const PHP_WORKER_WIRE_NO_SLOT: u32 = 0xffff_ffff;
/// Slots in a child's taken table: a shared mapping of this many u64 words.
pub const PHP_WORKER_WIRE_TAKEN_SLOTS: u32 = 1 << 16;

/// Frame kind, Caddy process to child: a control call (JSON).
pub const PHP_WORKER_WIRE_CALL: u8 = 1;
/// Frame kind, Caddy process to child: a request.
pub const PHP_WORKER_WIRE_SUBMIT: u8 = 2;
/// Frame kind, Caddy process to child: withdraw the request if it has not started.
pub const PHP_WORKER_WIRE_CANCEL: u8 = 3;
/// Frame kind, Caddy process to child: body bytes a READ_BODY asked for.
pub const PHP_WORKER_WIRE_BODY: u8 = 4;
/// Frame kind, Caddy process to child: the request's client left.
pub const PHP_WORKER_WIRE_CLIENT_GONE: u8 = 5;
/// Frame kind, Caddy process to child: a shared table operation's reply.
pub const PHP_WORKER_WIRE_STORE_REPLY: u8 = 6;

/// Frame kind, child to Caddy process: a control call's reply (JSON).
pub const PHP_WORKER_WIRE_REPLY: u8 = 64;
/// Frame kind, child to Caddy process: response data (a `respond` call).
pub const PHP_WORKER_WIRE_RESPOND: u8 = 65;
/// Frame kind, child to Caddy process: a `read_body` call.
pub const PHP_WORKER_WIRE_READ_BODY: u8 = 66;
/// Frame kind, child to Caddy process: a log line.
pub const PHP_WORKER_WIRE_LOG: u8 = 67;
/// Frame kind, child to Caddy process: a submission failed.
pub const PHP_WORKER_WIRE_SUBMIT_FAILED: u8 = 68;
/// Frame kind, child to Caddy process: a CANCEL's verdict.
pub const PHP_WORKER_WIRE_CANCELLED: u8 = 69;
/// Frame kind, child to Caddy process: a shared table operation.
pub const PHP_WORKER_WIRE_STORE: u8 = 70;
