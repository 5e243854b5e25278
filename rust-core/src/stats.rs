//! What the engine's threads and pools are doing, from their atomics and locks, without
//! calling PHP: the admin API's thread list and the metrics read one snapshot.

use serde::Serialize;

use crate::engine::Engine;
use crate::pool::PoolStats;
use crate::runtime::counters::BUCKETS;
use crate::runtime::opcache::{self, OpcacheStats};
use crate::runtime::thread::PoolId;

/// One snapshot of an engine.
#[derive(Serialize, Debug)]
pub struct Stats {
    /// The autoscaling limit on PHP threads (0: autoscaling off).
    pub max_threads: usize,
    /// The upper bounds (seconds) of the buckets of every histogram below.
    pub histogram_bounds: &'static [f64],
    pub threads: Vec<ThreadStats>,
    pub pools: Vec<PoolStats>,
    pub opcache: OpcacheStats,
}

#[derive(Serialize, Debug)]
pub struct ThreadStats {
    pub index: usize,
    /// The OS thread's name: php-<index>.
    pub name: String,
    /// starting, booting, standby, ready, busy, backoff, stopping.
    pub state: &'static str,
    pub pool: PoolId,
    /// The worker the thread runs; None for a classic thread.
    pub worker: Option<String>,
    /// The worker generation the thread belongs to (0 for a classic thread).
    pub generation: u32,
    /// The request it runs, if any.
    pub method: String,
    pub uri: String,
    /// Requests served since the thread started.
    pub requests: u64,
    /// PHP's memory usage at the end of its last request, in bytes.
    pub memory: u64,
}

pub fn collect(engine: &Engine) -> Stats {
    let pools: Vec<PoolStats> = engine.pools().iter().map(|p| p.stats()).collect();
    let mut threads: Vec<ThreadStats> = engine
        .threads()
        .iter()
        .map(|t| {
            let s = t.snapshot();
            ThreadStats {
                index: s.index,
                name: t.name(),
                state: s.state.name(),
                pool: s.pool,
                worker: s.worker.map(|w| w.to_string()),
                generation: s.generation,
                method: s.method,
                uri: s.uri,
                requests: s.requests,
                memory: s.memory,
            }
        })
        .collect();
    threads.sort_by_key(|t| t.index);
    Stats { max_threads: engine.limits().max_threads, histogram_bounds: &BUCKETS, threads, pools, opcache: opcache::gate().stats() }
}
