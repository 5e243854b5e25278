//! Errors of the engine, as Rust sees them; src/ffi.rs maps them to C codes.

/// Everything that can go wrong outside a PHP script.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration JSON could not be read.
    #[error("invalid php_worker configuration: {0}")]
    Config(String),
    /// A second engine was started while one is alive; PHP allows one SAPI per process.
    #[error("a PHP engine is already running in this process")]
    AlreadyRunning,
    /// PHP's own startup (TSRM, SAPI, modules, php.ini) failed.
    #[error("PHP failed to start: {0}")]
    Startup(String),
    /// The engine is stopping or stopped and takes no new requests.
    #[error("the PHP engine is not running")]
    Stopped,
    /// The request queue of the pool is full.
    #[error("the request queue is full")]
    QueueFull,
    /// The host passed a request that does not follow the ABI's layout.
    #[error("malformed request: {0}")]
    InvalidRequest(&'static str),
    /// The pool named by the host does not exist.
    #[error("no PHP pool with id {0}")]
    UnknownPool(u32),
    /// A Rust panic was caught at the C ABI.
    #[error("internal error (panic): {0}")]
    Panic(String),
}

pub type Result<T> = std::result::Result<T, Error>;
