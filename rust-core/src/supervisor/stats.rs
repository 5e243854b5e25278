//! What the engine's threads and pools are doing, from their atomics and locks, without
//! calling PHP: the admin API's thread list and the metrics read one snapshot.

use serde::Serialize;

use crate::supervisor::engine::Engine;
use crate::supervisor::pool::PoolStats;
use crate::runtime::counters::BUCKETS;
use crate::runtime::opcache::{self, OpcacheStats};
use crate::abi::types::PoolId;

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
    /// Threads whose request ran past its deadline and that have not come back.
    pub stuck_threads: usize,
    /// Requests answered because they ran past their deadline.
    pub expired_requests: u64,
    /// PHP's post_max_size in bytes (0: no limit).
    pub post_max_size: u64,
}

#[derive(Serialize, Debug)]
pub struct ThreadStats {
    pub index: usize,
    /// The OS thread's name: php-<index>.
    pub name: String,
    /// starting, booting, standby, ready, busy, backoff, stopping, or stuck (its request
    /// ran past its deadline and was answered 504; the thread waits for a call that does
    /// not return).
    pub state: &'static str,
    pub pool: PoolId,
    /// The worker the thread runs; None for a classic thread.
    pub worker: Option<String>,
    /// The worker generation the thread belongs to (0 for a classic thread).
    pub generation: u32,
    /// The request it runs, if any, and for how long it has run, in milliseconds.
    pub method: String,
    pub uri: String,
    pub running_ms: u64,
    /// Requests served since the thread started.
    pub requests: u64,
    /// PHP's memory usage at the end of its last request, in bytes.
    pub memory: u64,
    /// A worker thread's memory from the system (memory_get_usage(true)) when its
    /// script last asked for a request, in bytes: what max_memory compares.
    pub real_memory: u64,
}

/// The state a thread shows once the watchdog gave up on its request, whatever its
/// [`ThreadState`](crate::runtime::info::ThreadState).
pub const STUCK: &str = "stuck";

/// Every state a thread of the snapshot can show.
pub fn thread_state_names() -> Vec<&'static str> {
    crate::runtime::info::ThreadState::ALL.iter().map(|s| s.name()).chain([STUCK]).collect()
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
                state: if s.stuck { STUCK } else { s.state.name() },
                pool: s.pool,
                worker: s.worker.map(|w| w.to_string()),
                generation: s.generation,
                running_ms: s.running.as_millis() as u64,
                method: s.method,
                uri: s.uri,
                requests: s.requests,
                memory: s.memory,
                real_memory: s.real_memory,
            }
        })
        .collect();
    threads.sort_by_key(|t| t.index);
    let stuck_threads = threads.iter().filter(|t| t.state == STUCK).count();
    Stats {
        max_threads: engine.limits().max_threads,
        histogram_bounds: &BUCKETS,
        threads,
        pools,
        opcache: opcache::gate().stats(),
        stuck_threads,
        expired_requests: engine.deadlines().1,
        post_max_size: engine.post_max_size(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::counters::{HistogramSnapshot, Route};

    /// A snapshot with every field set to a value of its own, so that a field the Go
    /// side reads under another name decodes as zero there and its test fails.
    fn sample() -> Stats {
        let histogram = |n: u64| HistogramSnapshot { buckets: vec![n; BUCKETS.len()], count: n, sum: n as f64 / 4.0 };
        Stats {
            max_threads: 12,
            histogram_bounds: &BUCKETS,
            threads: vec![ThreadStats {
                index: 3,
                name: "php-3".into(),
                state: "busy",
                pool: 7,
                worker: Some("app".into()),
                generation: 2,
                method: "GET".into(),
                uri: "/orders?page=2".into(),
                running_ms: 1250,
                requests: 41,
                memory: 2_097_152,
                real_memory: 4_194_304,
            }],
            pools: vec![PoolStats {
                id: 7,
                kind: crate::config::WorkerKind::Task,
                worker: Some("app".into()),
                generation: 2,
                staged: Some(3),
                threads: 4,
                ready: 3,
                leaving: 21,
                restarting: true,
                failing: 1,
                busy: 2,
                idle: 5,
                base: 4,
                max_threads: 8,
                queued: 6,
                duration: histogram(9),
                wait: histogram(10),
                crashes: 11,
                restarts: 13,
                memory_growth: vec![Route { path: "/orders".into(), bytes: 65_536, requests: 14 }],
            }],
            opcache: OpcacheStats {
                guarded: true,
                restart_pending: true,
                restarts_out_of_memory: 15,
                restarts_key_table_full: 16,
                restarts_opcache_reset: 17,
                holds_timed_out: 18,
                usage: Some(crate::runtime::opcache::OpcacheUsage {
                    memory_used: 22,
                    memory_free: 23,
                    memory_wasted: 24,
                    hits: 25,
                    misses: 26,
                    cached_scripts: 27,
                }),
            },
            stuck_threads: 19,
            expired_requests: 20,
            post_max_size: 8_388_608,
        }
    }

    /// Compares `value`'s pretty JSON with tests/golden/<file>, which go-module's tests
    /// read too; UPDATE_GOLDEN=1 rewrites it.
    fn assert_golden(file: &str, value: &impl serde::Serialize, what_changed: &str) {
        let path = format!("{}/tests/golden/{file}", env!("CARGO_MANIFEST_DIR"));
        let json = serde_json::to_string_pretty(value).unwrap() + "\n";
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &json).unwrap();
        }
        let golden = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(json, golden, "{what_changed}: UPDATE_GOLDEN=1 cargo test, then update go-module");
    }

    /// The snapshot's wire form, which go-module decodes too (TestStatsGoldenSnapshot):
    /// one schema for both sides.
    #[test]
    fn stats_match_the_golden_snapshot() {
        assert_golden("stats.json", &sample(), "the stats schema changed");
    }

    /// The thread states' names, which go-module's constants are checked against
    /// (TestThreadStatesMatchTheCore).
    #[test]
    fn thread_states_match_the_golden_list() {
        assert_golden("thread_states.json", &thread_state_names(), "the thread states changed");
    }
}
