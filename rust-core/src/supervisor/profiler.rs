//! The profiler's sampler: a service thread (`php-profiler`) that exists only while a
//! profile is taken. Every 1/hz s it gives each PHP thread that may be running PHP the
//! time since the last tick (wall mode) or the CPU time the thread used since then (CPU
//! mode), and has it sample its own stack at its next instruction
//! (ThreadInfo::add_profile_weight; src/runtime/profile.rs says why the sampler never
//! reads PHP's state itself).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::service::{Rounds, Service};
use crate::runtime::info::ThreadInfo;
use crate::runtime::registry::Registry;

/// The sampling rates accepted.
pub const HZ: std::ops::RangeInclusive<u32> = 1..=1000;

/// A tick later than this (a stalled machine) counts as this much: a thread's weight
/// stays near what it could have run.
const MAX_TICK: Duration = Duration::from_secs(1);

#[derive(Clone, Copy)]
struct Settings {
    period: Duration,
    cpu: bool,
}

/// The sampler thread. Dropping it stops the thread and waits for it.
pub struct Profiler {
    _service: Service<Settings>,
}

impl Profiler {
    pub fn start(registry: Arc<Registry>, hz: u32, cpu: bool) -> std::io::Result<Profiler> {
        let hz = hz.clamp(*HZ.start(), *HZ.end());
        let settings = Settings { period: Duration::from_nanos(1_000_000_000 / u64::from(hz)), cpu };
        // Weight left from an earlier profile would be reported in this one.
        for info in registry.threads() {
            info.profile.clear();
        }
        let service = Service::start("php-profiler", settings, move |rounds| run(&rounds, &registry))?;
        Ok(Profiler { _service: service })
    }
}

/// A thread the sampler saw, and its CPU time then.
struct Seen {
    info: Arc<ThreadInfo>,
    cpu: Option<u64>,
}

fn run(rounds: &Rounds<Settings>, registry: &Registry) {
    let mut last = Instant::now();
    let mut seen: HashMap<usize, Seen> = HashMap::new();
    while let Some(settings) = rounds.next(|s| s.period) {
        let now = Instant::now();
        let wall = now.duration_since(last).min(MAX_TICK).as_nanos() as u64;
        last = now;
        let threads = registry.threads();
        seen.retain(|index, s| threads.iter().any(|t| t.index == *index && Arc::ptr_eq(t, &s.info)));
        for info in &threads {
            let weight = if settings.cpu {
                let cpu = info.cpu_time();
                let entry = seen.entry(info.index).or_insert_with(|| Seen { info: info.clone(), cpu });
                // Only the time used since the last tick (none on the first sight).
                let used = match (entry.cpu, cpu) {
                    (Some(before), Some(now)) => now.saturating_sub(before),
                    _ => 0,
                };
                entry.cpu = cpu;
                used.min(MAX_TICK.as_nanos() as u64)
            } else {
                wall
            };
            if weight > 0 && info.runs_php() {
                info.add_profile_weight(weight);
            }
        }
    }
}
