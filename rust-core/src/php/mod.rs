//! The raw C seam: declarations checked against the generated csrc/pw_seam.h, the panic
//! guard every hook runs in, and the per-thread PHP context.
//!
//! Bailouts (PHP's longjmp) never cross Rust frames: every PHP call that can bail out
//! sits in csrc/ inside zend_try, and the Rust hooks PHP calls never call PHP.

pub mod context;
pub mod guard;
pub mod module;
pub mod sys;
