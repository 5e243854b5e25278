//! What a pool's threads count as they serve: requests, their durations and waits, and
//! worker script crashes and restarts. Atomics the threads add to and the stats read
//! (src/stats.rs): metrics cost the request path no call across the ABI.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

/// Upper bounds of the histogram buckets, in seconds: from half a millisecond (a wait
/// for a thread that was almost free) to ten seconds (a slow request).
pub const BUCKETS: [f64; 14] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// A histogram of durations with fixed buckets, safe to add to from any thread.
#[derive(Default)]
pub struct Histogram {
    /// Per bucket (not cumulative); the last counts what exceeds every bound.
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

/// A copy of a histogram in Prometheus' form.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
pub struct HistogramSnapshot {
    /// Cumulative counts, one per bound of [`BUCKETS`].
    pub buckets: Vec<u64>,
    pub count: u64,
    /// Seconds.
    pub sum: f64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let seconds = d.as_secs_f64();
        let i = BUCKETS.iter().position(|&b| seconds <= b).unwrap_or(BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut buckets = Vec::with_capacity(BUCKETS.len());
        let mut total = 0;
        for c in &self.counts[..BUCKETS.len()] {
            total += c.load(Ordering::Relaxed);
            buckets.push(total);
        }
        total += self.counts[BUCKETS.len()].load(Ordering::Relaxed);
        HistogramSnapshot { buckets, count: total, sum: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9 }
    }
}

/// A pool's counters. They live as long as the pool: across worker restarts and
/// reloads, not across a restart of PHP.
#[derive(Default)]
pub struct PoolCounters {
    /// Time from start to end of each request the pool served.
    pub duration: Histogram,
    /// Time each request waited for a thread of the pool.
    pub wait: Histogram,
    /// Worker scripts that ended on an error: a fatal error, an uncaught exception, a
    /// non-zero exit, or a failure before reaching frankenphp_handle_request().
    pub crashes: AtomicU64,
    /// Worker scripts ended on purpose and started again: max_requests, or a thread
    /// replaced by a new generation (reloads, the admin API, file changes).
    pub restarts: AtomicU64,
}

impl PoolCounters {
    pub fn new() -> Arc<PoolCounters> {
        Arc::new(PoolCounters::default())
    }

    pub fn crashed(&self) {
        self.crashes.fetch_add(1, Ordering::Relaxed);
    }

    pub fn restarted(&self, n: u64) {
        self.restarts.fetch_add(n, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_with_sum_and_count() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(300)); // first bucket
        h.observe(Duration::from_millis(3)); // <= 5 ms
        h.observe(Duration::from_millis(5)); // a bound belongs to its bucket
        h.observe(Duration::from_secs(60)); // above every bound
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.buckets.len(), BUCKETS.len());
        assert_eq!(s.buckets[0], 1, "0.5 ms");
        assert_eq!(s.buckets[2], 1, "2.5 ms");
        assert_eq!(s.buckets[3], 3, "5 ms");
        assert_eq!(*s.buckets.last().unwrap(), 3, "10 s leaves out the minute");
        assert!((s.sum - 60.0083).abs() < 1e-6, "{}", s.sum);
    }
}
