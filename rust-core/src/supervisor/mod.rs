//! What runs off PHP threads and watches over them: the engine (its pools, created and
//! restarted for the host), each pool's threads and generations, the autoscaler, the
//! watchdog and the profiler's sampler (service threads of the engine), and the stats
//! snapshot they feed.

pub mod engine;
pub mod pool;
pub mod profiler;
pub mod scaling;
mod service;
pub mod stats;
pub mod watchdog;
