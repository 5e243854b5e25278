//! Errors of the engine, as Rust sees them; src/exports.rs maps them to C codes and
//! messages.

/// Everything that can go wrong outside a PHP script.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration JSON could not be read or holds an impossible value.
    #[error("invalid php_worker configuration: {0}")]
    Config(String),
    /// A second engine was started while one is alive; PHP allows one SAPI per process.
    #[error("a PHP engine is already running in this process")]
    AlreadyRunning,
    /// PHP's own startup (TSRM, SAPI, modules, php.ini) failed, or a thread could not be
    /// created.
    #[error("PHP failed to start: {0}")]
    Startup(String),
    /// The engine is stopping or stopped and takes no new requests.
    #[error("the PHP engine is not running")]
    Stopped,
    /// The request queue of the pool is full.
    #[error("the request queue is full")]
    QueueFull,
    /// The host passed something that does not follow the ABI.
    #[error("invalid argument: {0}")]
    InvalidRequest(&'static str),
    /// The pool named by the host does not exist.
    #[error("no PHP pool with id {0}")]
    UnknownPool(u32),
    /// A pool operation that does not apply to this pool (resizing a worker pool, ...).
    #[error("pool {0}: {1}")]
    Pool(u32, String),
    /// A profile cannot start (one is being taken) or stop (none is).
    #[error("profiler: {0}")]
    Profile(&'static str),
    /// A Rust panic was caught at the C ABI.
    #[error("internal error (panic): {0}")]
    Panic(String),
}

pub type Result<T> = std::result::Result<T, Error>;

/// The message of a caught panic.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned())
}
