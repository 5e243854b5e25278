//! Autoscaling: a thread of the engine that adds PHP threads to a pool whose requests
//! wait while the CPU has room, and removes the extra ones that stay idle.
//!
//! Threads that wait on a database or an API use no CPU: an I/O-bound app needs more of
//! them than there are cores. A CPU-bound one does not, so nothing is added while the
//! cores are (nearly) all busy, with this process or others; the requests then wait in
//! the queue, up to the host's max_wait_time. After adding threads, the scaler measures
//! the CPU again before it adds more.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::pool::Pool;
use super::service::{Rounds, Service};
use crate::host::{Host, Level};
use crate::abi::types::PoolId;

/// How often the scaler looks at the queues while autoscaling is on.
const TICK: Duration = Duration::from_millis(5);
/// Ticks a queue must stay non-empty before threads are added: requests waited that long.
const STALLED_TICKS: u32 = 2;
/// Most threads added to one pool per tick: a burst grows the pool in steps, each
/// checked against the CPU again.
const MAX_STEP: usize = 4;
/// How often idle threads are looked for.
const SHRINK_EVERY: Duration = Duration::from_millis(250);
/// The CPU is saturated when the process used this share of every core.
const CPU_SATURATED: f64 = 0.9;
/// The longest window the CPU use is measured over.
const CPU_WINDOW: Duration = Duration::from_millis(100);
/// The shortest: after threads are added, their effect on the CPU is measured for this
/// long before more are added, so a CPU-bound burst does not add a step every tick.
const CPU_PROBE: Duration = Duration::from_millis(20);

/// Autoscaling settings of an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most PHP threads across all pools; 0 turns adding threads off.
    pub max_threads: usize,
    /// How long an extra thread may wait for a request before it is removed.
    pub max_idle: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_threads: 0, max_idle: Duration::from_secs(5) }
    }
}

/// The engine's table of pools, shared with the scaler.
pub type Pools = Arc<RwLock<Vec<Arc<Pool>>>>;

/// The scaler thread of an engine. Dropping it stops the thread.
pub struct Scaler {
    service: Service<Limits>,
}

impl Scaler {
    pub fn start(pools: Pools, host: Arc<Host>) -> std::io::Result<Scaler> {
        let service = Service::start("php-scaler", Limits::default(), move |rounds| run(&rounds, &pools, &host))?;
        Ok(Scaler { service })
    }

    pub fn set_limits(&self, limits: Limits) {
        self.service.set(limits);
    }

    pub fn limits(&self) -> Limits {
        self.service.settings()
    }
}

fn run(rounds: &Rounds<Limits>, pools: &Pools, host: &Host) {
    let mut stalled: Vec<(PoolId, u32)> = Vec::new();
    let mut cpu = CpuProbe::new();
    let mut last_shrink = Instant::now();
    let mut last_growth = Instant::now();
    // Every tick while autoscaling is on; idle threads are looked for less often.
    while let Some(limits) = rounds.next(|l| if l.max_threads > 0 { TICK } else { SHRINK_EVERY }) {
        let pools: Vec<Arc<Pool>> = pools.read().unwrap_or_else(|e| e.into_inner()).clone();
        cpu.sample();
        if limits.max_threads > 0 && grow(&pools, &limits, &mut stalled, &cpu, last_growth, host) {
            last_growth = Instant::now();
        }
        if last_shrink.elapsed() >= SHRINK_EVERY {
            last_shrink = Instant::now();
            for pool in &pools {
                let removed = pool.shrink_idle(limits.max_idle);
                if removed > 0 {
                    host.event(0, Level::Info, "removed idle PHP threads", &[
                        ("worker", pool.worker_name().into()),
                        ("removed", removed.into()),
                        ("threads", pool.load().threads.into()),
                        ("max_idle_ms", (limits.max_idle.as_millis() as u64).into()),
                    ]);
                }
            }
        }
    }
}

/// Adds threads to the pools whose queue stayed non-empty for [`STALLED_TICKS`], while
/// the engine's limit and the CPU (measured since the last growth) allow. Returns
/// whether it added any.
fn grow(pools: &[Arc<Pool>], limits: &Limits, stalled: &mut Vec<(PoolId, u32)>, cpu: &CpuProbe, last_growth: Instant, host: &Host) -> bool {
    let mut grew = false;
    let loads: Vec<_> = pools.iter().map(|p| (p, p.load())).collect();
    stalled.retain(|(id, _)| pools.iter().any(|p| p.id == *id));
    let mut total: usize = loads.iter().map(|(_, l)| l.threads).sum();
    for (pool, load) in &loads {
        let streak = match stalled.iter_mut().find(|(id, _)| *id == pool.id) {
            Some((_, n)) => n,
            None => {
                stalled.push((pool.id, 0));
                &mut stalled.last_mut().expect("just pushed").1
            }
        };
        if load.queued == 0 || load.failing > 0 {
            *streak = 0;
            continue;
        }
        *streak += 1;
        if *streak < STALLED_TICKS || total >= limits.max_threads {
            continue;
        }
        let want = load.queued.saturating_sub(load.starting).min(MAX_STEP).min(load.room).min(limits.max_threads - total);
        if want == 0 || cpu.saturated_since(last_growth) != Some(false) {
            continue;
        }
        match pool.grow(want) {
            Ok(added) if added > 0 => {
                total += added;
                grew = true;
                host.event(0, Level::Info, "added PHP threads: requests are waiting", &[
                    ("worker", pool.worker_name().into()),
                    ("added", added.into()),
                    ("threads", (load.threads + added).into()),
                    ("queued", load.queued.into()),
                    ("total_threads", total.into()),
                    ("max_threads", limits.max_threads.into()),
                ]);
            }
            Ok(_) => {}
            Err(e) => host.event(0, Level::Error, "cannot add a PHP thread", &[("error", e.to_string().into())]),
        }
    }
    grew
}

/// The CPU use over the last [`CPU_WINDOW`]: the process's, and the machine's (other
/// processes, such as a database on the same machine, use the same cores).
struct CpuProbe {
    cores: f64,
    samples: std::collections::VecDeque<CpuSample>,
}

#[derive(Clone, Copy)]
struct CpuSample {
    at: Instant,
    /// CPU time the process used.
    process: Duration,
    /// The machine's busy and total clock ticks (/proc/stat), if readable.
    machine: Option<(u64, u64)>,
}

impl CpuProbe {
    fn new() -> CpuProbe {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        CpuProbe { cores, samples: std::collections::VecDeque::new() }
    }

    fn sample(&mut self) {
        let now = Instant::now();
        self.samples.push_back(CpuSample { at: now, process: process_cpu_time(), machine: machine_ticks() });
        while self.samples.len() > 2 && now.duration_since(self.samples[1].at) >= CPU_WINDOW {
            self.samples.pop_front();
        }
    }

    /// Whether the process used nearly every core since `since`, or the machine over
    /// the whole window (its clock ticks are too coarse for less); None while less than
    /// [`CPU_PROBE`] passed since `since`.
    fn saturated_since(&self, since: Instant) -> Option<bool> {
        let first = self.samples.iter().find(|s| s.at >= since)?;
        let (oldest, last) = (self.samples.front()?, self.samples.back()?);
        if last.at.duration_since(first.at) < CPU_PROBE {
            return None;
        }
        Some(saturated(self.cores, first, last) || machine_busy(oldest, last))
    }
}

/// Whether the process's CPU time between two samples fills nearly `cores` cores.
fn saturated(cores: f64, first: &CpuSample, last: &CpuSample) -> bool {
    let wall = last.at.duration_since(first.at).as_secs_f64();
    if wall < TICK.as_secs_f64() {
        return false;
    }
    let used = last.process.saturating_sub(first.process).as_secs_f64();
    used / wall >= CPU_SATURATED * cores
}

/// Fewest clock ticks (all cores together) the machine's use is judged on: ticks are
/// 10 ms, and a few of them say little.
const MIN_MACHINE_TICKS: u64 = 10;

/// Whether the machine's cores were nearly all busy between two samples.
fn machine_busy(first: &CpuSample, last: &CpuSample) -> bool {
    match (first.machine, last.machine) {
        (Some((busy0, total0)), Some((busy1, total1))) if total1 >= total0 + MIN_MACHINE_TICKS => {
            busy1.saturating_sub(busy0) as f64 / (total1 - total0) as f64 >= CPU_SATURATED
        }
        _ => false,
    }
}

/// CPU time the whole process has used.
fn process_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The machine's busy and total CPU clock ticks since boot, from /proc/stat's first line.
fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_cpu_line(stat.lines().next()?)
}

/// (busy, total) from "cpu user nice system idle iowait irq softirq steal ...": idle,
/// I/O wait and niced work are not busy (see below).
fn parse_cpu_line(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let ticks: Vec<u64> = fields.take(8).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    let total: u64 = ticks.iter().sum();
    // Idle, I/O wait, and niced processes' time: a nice batch job (a build, a backup)
    // gives way to the server's threads, so its CPU is the server's for the taking.
    let free = ticks.get(3)? + ticks.get(4).copied().unwrap_or(0) + ticks[1];
    Some((total - free, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturation_is_cpu_time_over_wall_time_and_cores_or_a_busy_machine() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let at = |wall: u64, cpu: u64| CpuSample { at: t0 + ms(wall), process: ms(cpu), machine: None };
        assert!(saturated(2.0, &at(0, 0), &at(100, 190)), "1.9 of 2 cores");
        assert!(!saturated(2.0, &at(0, 0), &at(100, 120)), "1.2 of 2 cores");
        assert!(saturated(1.0, &at(0, 0), &at(100, 95)));
        assert!(!saturated(4.0, &at(0, 0), &at(100, 300)));
        assert!(!saturated(1.0, &at(0, 0), &at(1, 1)), "too short a window says nothing");
        let machine = |wall: u64, busy: u64, total: u64| CpuSample { machine: Some((busy, total)), ..at(wall, 0) };
        assert!(machine_busy(&machine(0, 100, 200), &machine(100, 195, 300)), "others keep the machine 95% busy");
        assert!(!machine_busy(&machine(0, 100, 200), &machine(100, 150, 300)), "a half idle machine");
        assert!(!machine_busy(&machine(0, 100, 200), &machine(10, 104, 204)), "4 ticks say too little");
    }

    #[test]
    fn reads_the_machine_cpu_line() {
        assert_eq!(parse_cpu_line("cpu  10 2 8 70 10 0 0 0 0 0"), Some((18, 100)), "nice time is free");
        assert_eq!(parse_cpu_line("cpu0 1 2 3 4"), None);
        assert_eq!(parse_cpu_line("cpu x"), None);
        let (busy, total) = machine_ticks().expect("/proc/stat is readable on Linux");
        assert!(busy <= total && total > 0);
    }

    #[test]
    fn cpu_probe_keeps_one_window_of_samples() {
        let mut probe = CpuProbe::new();
        let start = Instant::now();
        assert_eq!(probe.saturated_since(start), None, "no sample says nothing");
        for _ in 0..40 {
            probe.sample();
            std::thread::sleep(Duration::from_millis(5));
        }
        let (first, last) = (probe.samples.front().unwrap().at, probe.samples.back().unwrap().at);
        assert!(last.duration_since(first) < CPU_WINDOW + Duration::from_millis(50), "{:?}", last - first);
        assert!(probe.samples.back().unwrap().process > Duration::ZERO, "the process used some CPU");
        assert!(probe.saturated_since(start).is_some(), "a full window judges");
        assert_eq!(probe.saturated_since(Instant::now()), None, "nothing measured since now");
    }
}
