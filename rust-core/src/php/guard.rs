//! The panic guard of every hook C calls: a panic must not unwind into C (or PHP, or
//! Go), so it becomes a log line and a fallback value.

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::error::panic_message;
use crate::host::{Level, log_unattached};

/// Runs a hook body, turning a panic into `fallback`.
pub fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        log_unattached(Level::Error, &format!("internal error in a PHP hook: {}", panic_message(&*panic)), &[]);
        fallback
    })
}
