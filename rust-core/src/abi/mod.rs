//! The C ABI of the core (include/php_worker.h): its types, and the exported functions,
//! the only `extern "C"` entry points the host calls.

pub mod exports;
pub mod types;
