//! The C ABI of the core (include/php_worker.h): its types and constants, which every
//! layer may use. The functions the host calls are the top layer, src/exports.rs.

pub mod types;
