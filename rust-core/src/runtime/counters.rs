//! What a pool's threads count as they serve: requests, their durations and waits, and
//! worker script crashes and restarts. Atomics the threads add to and the stats read
//! (src/supervisor/stats.rs): metrics cost the request path no call across the ABI.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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
    /// Worker scripts ended on purpose and started again: max_requests, max_memory, or
    /// a thread replaced by a new generation (reloads, the admin API, file changes).
    pub restarts: AtomicU64,
    /// The routes whose requests left a worker script's memory larger.
    pub memory_growth: Mutex<RouteGrowth>,
    /// Threads between two requests now, looking for the next (PhpThread::next_job): a
    /// request queued meanwhile is taken at once (max_wait_time does not count that
    /// hand-over).
    pub waiting: AtomicUsize,
}

/// Longest path kept for a route.
const MAX_ROUTE_PATH: usize = 256;

/// Routes tracked per pool (and per script run): enough for a few leaking routes among
/// many that are not.
pub const TRACKED_ROUTES: usize = 32;

/// How much each route grew a worker script's memory: the memory PHP used after a
/// request, less what it used when the request began, summed over the requests that left
/// it larger. Bounded: past [`TRACKED_ROUTES`] paths, a new path replaces the one with
/// the least growth and inherits its count ("space saving": a route that grows memory
/// steadily is never missed, and its bytes are at most overstated by what it inherited).
#[derive(Default, Debug, Clone)]
pub struct RouteGrowth {
    routes: Vec<Route>,
}

/// A route's memory growth.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The request path, without the query.
    pub path: String,
    /// Bytes its requests added to the script's memory, in all.
    pub bytes: u64,
    /// Requests of it that left the script's memory larger.
    pub requests: u64,
}

impl RouteGrowth {
    /// A request to `uri` left the memory `grew` bytes larger.
    pub fn record(&mut self, uri: &[u8], grew: u64) {
        let path = uri.split(|&b| b == b'?').next().unwrap_or_default();
        let path = &path[..path.len().min(MAX_ROUTE_PATH)];
        if let Some(r) = self.routes.iter_mut().find(|r| r.path.as_bytes() == path) {
            r.bytes += grew;
            r.requests += 1;
            return;
        }
        let path = String::from_utf8_lossy(path).into_owned();
        if self.routes.len() < TRACKED_ROUTES {
            self.routes.push(Route { path, bytes: grew, requests: 1 });
            return;
        }
        let least = self.routes.iter_mut().min_by_key(|r| r.bytes).expect("the table is full");
        *least = Route { path, bytes: least.bytes + grew, requests: 1 };
    }

    /// The `n` routes that grew memory most, most first.
    pub fn top(&self, n: usize) -> Vec<Route> {
        let mut routes = self.routes.clone();
        routes.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.path.cmp(&b.path)));
        routes.truncate(n);
        routes
    }
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

    pub fn grew(&self, uri: &[u8], bytes: u64) {
        self.memory_growth.lock().unwrap_or_else(|e| e.into_inner()).record(uri, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_growth_sums_by_path_and_keeps_a_steady_leak_when_full() {
        let mut g = RouteGrowth::default();
        g.record(b"/leak?i=1", 1000);
        g.record(b"/leak?i=2", 1000);
        g.record(b"/other", 10);
        assert_eq!(g.top(1), vec![Route { path: "/leak".into(), bytes: 2000, requests: 2 }]);
        // Many one-off paths fill the table; the leaking route stays, and so does its count.
        for i in 0..200 {
            g.record(format!("/once/{i}").as_bytes(), 5);
            g.record(b"/leak", 1000);
        }
        let top = g.top(3);
        assert_eq!(top[0].path, "/leak");
        assert_eq!((top[0].bytes, top[0].requests), (202_000, 202));
        assert!(g.routes.len() == TRACKED_ROUTES);
        assert!(top[1].bytes < 202_000 / 10, "{top:?}");
        let long = vec![b'a'; 1000];
        g.record(&long, 1);
        assert!(g.routes.iter().all(|r| r.path.len() <= MAX_ROUTE_PATH));
    }

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
