//! The sampling profiler's profile, and the weight a thread has not reported yet.
//!
//! The sampler (src/supervisor/profiler.rs) never reads a thread's PHP state: it adds
//! weight to the thread's [`PendingWeight`] and sets its `EG(vm_interrupt)`. At its next
//! instruction the thread itself walks its own stack (csrc/profile.c, from
//! `zend_interrupt_function`) and reports it (src/runtime/sample.rs), which takes the
//! weight and adds one sample to the [`Profile`]. A thread blocked in a call (sleep(), a
//! database) keeps accumulating weight and reports it when it runs PHP again.
//!
//! Weight is tagged with the thread's request count when it was added, so what a
//! request left pending when it ended is dropped instead of being charged to the next.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use serde::Serialize;


/// Distinct (stack, labels) entries a profile keeps; samples past it are counted as
/// dropped, so a profile of a site with unbounded routes stays bounded.
const MAX_ENTRIES: usize = 100_000;
/// Longest route kept (bytes).
const MAX_ROUTE: usize = 256;
/// Longest function, class or file name kept (bytes).
const MAX_NAME: usize = 1024;

/// Weight the sampler gave a thread that the thread has not reported yet: one atomic,
/// so the sampler and the thread never lock each other. Bits 48..64 hold the tag (the
/// low 16 bits of the thread's request count), 32..48 the sampler's ticks, 0..32 the
/// weight in microseconds (71 minutes: more than the longest profile).
#[derive(Default)]
pub struct PendingWeight(AtomicU64);

const TAG_SHIFT: u32 = 48;
const TICKS_SHIFT: u32 = 32;
const FIELD_16: u64 = 0xffff;
const WEIGHT_MASK: u64 = 0xffff_ffff;

/// What a thread reports in one sample: sampler ticks and their weight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Weight {
    pub ticks: u64,
    pub ns: u64,
}

impl PendingWeight {
    /// Adds one tick of `ns` nanoseconds for the request numbered `tag`. Weight pending for
    /// another request is replaced: that request ended without reporting it.
    pub fn add(&self, tag: u64, ns: u64) {
        let tag = tag & FIELD_16;
        let us = ns / 1000;
        let _ = self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
            let (ticks, weight) = if v != 0 && v >> TAG_SHIFT == tag { ((v >> TICKS_SHIFT) & FIELD_16, v & WEIGHT_MASK) } else { (0, 0) };
            let ticks = (ticks + 1).min(FIELD_16);
            let weight = (weight + us).min(WEIGHT_MASK);
            Some(tag << TAG_SHIFT | ticks << TICKS_SHIFT | weight)
        });
    }

    /// Whether weight for the request numbered `tag` is pending.
    pub fn pending(&self, tag: u64) -> bool {
        let v = self.0.load(Ordering::Acquire);
        v != 0 && v >> TAG_SHIFT == tag & FIELD_16
    }

    /// Takes what is pending: the weight of the request numbered `tag`, nothing if it was
    /// added for another.
    pub fn take(&self, tag: u64) -> Weight {
        let v = self.0.swap(0, Ordering::AcqRel);
        if v == 0 || v >> TAG_SHIFT != tag & FIELD_16 {
            return Weight::default();
        }
        Weight { ticks: (v >> TICKS_SHIFT) & FIELD_16, ns: (v & WEIGHT_MASK) * 1000 }
    }

    pub fn clear(&self) {
        self.0.store(0, Ordering::Release);
    }
}

/// What kind of PHP thread took a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadKind {
    Classic,
    Worker,
    Background,
    Task,
}

/// One frame as the thread saw it, borrowed from PHP for the call.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawFrame<'a> {
    pub function: &'a [u8],
    pub class: &'a [u8],
    pub file: &'a [u8],
    pub line: u32,
}

/// What labels a sample.
#[derive(Clone, Copy, Debug)]
pub struct Labels<'a> {
    pub worker: &'a str,
    pub route: &'a str,
    pub kind: ThreadKind,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Frame {
    function: u32,
    class: u32,
    file: u32,
    line: u32,
}

#[derive(PartialEq, Eq, Hash)]
struct Key {
    /// Frame ids, innermost first.
    stack: Box<[u32]>,
    worker: u32,
    route: u32,
    kind: ThreadKind,
}

#[derive(Default)]
struct Totals {
    count: u64,
    weight: u64,
}

/// Strings kept once; id 0 is "".
#[derive(Default)]
struct Strings {
    all: Vec<Box<str>>,
    ids: HashMap<Box<str>, u32>,
}

impl Strings {
    fn id(&mut self, s: &str) -> u32 {
        if self.all.is_empty() {
            self.all.push("".into());
            self.ids.insert("".into(), 0);
        }
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.all.len() as u32;
        self.all.push(s.into());
        self.ids.insert(s.into(), id);
        id
    }

    fn bytes_id(&mut self, b: &[u8]) -> u32 {
        self.id(&bytes_name(b))
    }

    /// The id of a string already kept, without keeping it.
    fn find(&self, s: &str) -> Option<u32> {
        if s.is_empty() { Some(0) } else { self.ids.get(s).copied() }
    }

    fn get(&self, id: u32) -> &str {
        self.all.get(id as usize).map_or("", |s| s)
    }
}

/// A profile being taken: interned frames, and per (stack, labels) the samples and their
/// weight.
pub struct Profile {
    hz: u32,
    cpu: bool,
    started: Instant,
    strings: Strings,
    frames: Vec<Frame>,
    frame_ids: HashMap<Frame, u32>,
    entries: HashMap<Key, Totals>,
    dropped: u64,
}

/// The name of the frame that stands for the frames past the depth the thread walks.
pub const TRUNCATED: &str = "(truncated stack)";

impl Profile {
    pub fn new(hz: u32, cpu: bool) -> Profile {
        Profile {
            hz,
            cpu,
            started: Instant::now(),
            strings: Strings::default(),
            frames: Vec::new(),
            frame_ids: HashMap::new(),
            entries: HashMap::new(),
            dropped: 0,
        }
    }

    /// The id of a frame already kept, without keeping anything.
    fn find_frame(&self, raw: &RawFrame<'_>) -> Option<u32> {
        let frame = Frame {
            function: self.strings.find(&bytes_name(raw.function))?,
            class: self.strings.find(&bytes_name(raw.class))?,
            file: self.strings.find(&bytes_name(raw.file))?,
            line: raw.line,
        };
        self.frame_ids.get(&frame).copied()
    }

    fn frame_id(&mut self, raw: &RawFrame<'_>) -> u32 {
        let frame = Frame {
            function: self.strings.bytes_id(raw.function),
            class: self.strings.bytes_id(raw.class),
            file: self.strings.bytes_id(raw.file),
            line: raw.line,
        };
        if let Some(&id) = self.frame_ids.get(&frame) {
            return id;
        }
        let id = self.frames.len() as u32;
        self.frames.push(frame);
        self.frame_ids.insert(frame, id);
        id
    }

    /// Adds a sample: `frames` innermost first; `truncated` when the stack went deeper.
    /// Past MAX_ENTRIES only samples of a stack and labels already kept count, and
    /// nothing new is kept for the others (no frame, no route string): a profile taken
    /// while unique URLs arrive stays within its bound.
    pub fn add(&mut self, frames: &[RawFrame<'_>], truncated: bool, labels: Labels<'_>, weight: Weight) {
        let truncation = RawFrame { function: TRUNCATED.as_bytes(), ..RawFrame::default() };
        let stack = frames.iter().chain(truncated.then_some(&truncation));
        let route = &labels.route[..floor_char_boundary(labels.route, MAX_ROUTE)];
        let key = if self.entries.len() >= MAX_ENTRIES {
            let found = stack.map(|f| self.find_frame(f)).collect::<Option<Vec<u32>>>().and_then(|stack| {
                Some(Key {
                    stack: stack.into_boxed_slice(),
                    worker: self.strings.find(labels.worker)?,
                    route: self.strings.find(route)?,
                    kind: labels.kind,
                })
            });
            match found.and_then(|key| self.entries.get_mut(&key)) {
                Some(t) => {
                    t.count += weight.ticks;
                    t.weight += weight.ns;
                }
                None => self.dropped += weight.ticks,
            }
            return;
        } else {
            let stack: Vec<u32> = stack.map(|f| self.frame_id(f)).collect();
            Key {
                stack: stack.into_boxed_slice(),
                worker: self.strings.id(labels.worker),
                route: self.strings.id(route),
                kind: labels.kind,
            }
        };
        let totals = self.entries.entry(key).or_default();
        totals.count += weight.ticks;
        totals.weight += weight.ns;
    }

    /// The profile as JSON (see php_worker_profile_stop in include/php_worker.h).
    pub fn to_json(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Out<'a> {
            hz: u32,
            mode: &'static str,
            duration_ns: u64,
            frames: Vec<OutFrame<'a>>,
            samples: Vec<OutSample<'a>>,
            dropped: u64,
        }
        #[derive(Serialize)]
        struct OutFrame<'a> {
            function: String,
            file: &'a str,
            line: u32,
        }
        #[derive(Serialize)]
        struct OutSample<'a> {
            stack: &'a [u32],
            worker: &'a str,
            route: &'a str,
            kind: ThreadKind,
            count: u64,
            weight: u64,
        }
        let s = &self.strings;
        let frames = self
            .frames
            .iter()
            .map(|f| {
                let function = match (s.get(f.class), s.get(f.function)) {
                    (_, "") if f.file != 0 => "{main}".to_owned(),
                    (_, "") => "{unknown}".to_owned(),
                    ("", function) => function.to_owned(),
                    (class, function) => format!("{class}::{function}"),
                };
                OutFrame { function, file: s.get(f.file), line: f.line }
            })
            .collect();
        let samples = self
            .entries
            .iter()
            .map(|(k, t)| OutSample {
                stack: &k.stack,
                worker: s.get(k.worker),
                route: s.get(k.route),
                kind: k.kind,
                count: t.count,
                weight: t.weight,
            })
            .collect();
        let out = Out {
            hz: self.hz,
            mode: if self.cpu { "cpu" } else { "wall" },
            duration_ns: self.started.elapsed().as_nanos() as u64,
            frames,
            samples,
            dropped: self.dropped,
        };
        serde_json::to_vec(&out).unwrap_or_default()
    }
}

/// A frame's name or file as kept: at most MAX_NAME bytes, as UTF-8.
fn bytes_name(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(&b[..b.len().min(MAX_NAME)])
}

fn floor_char_boundary(s: &str, max: usize) -> usize {
    if s.len() <= max {
        return s.len();
    }
    (0..=max).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0)
}

/// Whether a profile is being taken: read by every interrupt, so an interrupt left set
/// after the profile ended does nothing.
static ACTIVE: AtomicBool = AtomicBool::new(false);
static PROFILE: Mutex<Option<Profile>> = Mutex::new(None);

fn profile() -> MutexGuard<'static, Option<Profile>> {
    PROFILE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts a profile of the process's PHP threads; false when one is being taken.
pub fn begin(hz: u32, cpu: bool) -> bool {
    let mut p = profile();
    if p.is_some() {
        return false;
    }
    *p = Some(Profile::new(hz, cpu));
    ACTIVE.store(true, Ordering::Release);
    true
}

/// Ends the profile being taken and returns it.
pub fn end() -> Option<Profile> {
    let mut p = profile();
    ACTIVE.store(false, Ordering::Release);
    p.take()
}

pub fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// Adds one sample to the profile being taken, if one is.
pub fn add(frames: &[RawFrame<'_>], truncated: bool, labels: Labels<'_>, weight: Weight) {
    if let Some(p) = profile().as_mut() {
        p.add(frames, truncated, labels, weight);
    }
}

/// A request URI's path, without the query.
pub fn route_of(uri: &str) -> &str {
    uri.split(['?', '#']).next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame<'a>(function: &'a str, class: &'a str, file: &'a str, line: u32) -> RawFrame<'a> {
        RawFrame { function: function.as_bytes(), class: class.as_bytes(), file: file.as_bytes(), line }
    }

    fn parse(p: &Profile) -> serde_json::Value {
        serde_json::from_slice(&p.to_json()).unwrap()
    }

    /// Weight adds up for one request; weight left by an ended request is replaced by the
    /// next request's, and taking it for another request gives nothing.
    #[test]
    fn pending_weight_belongs_to_its_request() {
        let p = PendingWeight::default();
        assert!(!p.pending(0));
        p.add(7, 10_000_000);
        p.add(7, 5_000_000);
        assert!(p.pending(7));
        assert!(!p.pending(8), "the request ended: not its weight");
        assert_eq!(p.take(7), Weight { ticks: 2, ns: 15_000_000 });
        assert_eq!(p.take(7), Weight::default(), "taken once");

        p.add(7, 10_000_000);
        assert_eq!(p.take(8), Weight::default(), "weight of request 7 is not charged to request 8");
        assert!(!p.pending(7), "and it is gone");

        p.add(7, 10_000_000);
        p.add(8, 1_000_000);
        assert_eq!(p.take(8), Weight { ticks: 1, ns: 1_000_000 }, "a new request's tick replaces the old weight");

        // Tags wrap at 16 bits, like the request count they come from.
        p.add(0x1_0003, 2000);
        assert_eq!(p.take(3), Weight { ticks: 1, ns: 2000 });
        p.add(1, 1000);
        p.clear();
        assert_eq!(p.take(1), Weight::default());
    }

    #[test]
    fn pending_weight_saturates() {
        let p = PendingWeight::default();
        for _ in 0..70_000 {
            p.add(1, u64::MAX / 2);
        }
        let w = p.take(1);
        assert_eq!(w.ticks, 0xffff);
        assert_eq!(w.ns, 0xffff_ffff * 1000);
    }

    /// Frames are interned across stacks, equal (stack, labels) merge, and each label
    /// makes its own entry.
    #[test]
    fn samples_merge_by_stack_and_labels() {
        let mut p = Profile::new(100, false);
        let hot = frame("hot_spin", "", "/app/hot.php", 5);
        let main = frame("", "", "/app/index.php", 3);
        let method = frame("handle", "App\\Kernel", "/app/Kernel.php", 40);
        let labels = Labels { worker: "", route: "/index.php", kind: ThreadKind::Classic };
        let w = Weight { ticks: 1, ns: 10_000_000 };
        p.add(&[hot, main], false, labels, w);
        p.add(&[hot, main], false, labels, Weight { ticks: 3, ns: 30_000_000 });
        p.add(&[hot, method, main], false, Labels { worker: "app", route: "/api", kind: ThreadKind::Worker }, w);
        p.add(&[hot, main], false, Labels { kind: ThreadKind::Background, ..labels }, w);

        let v = parse(&p);
        assert_eq!(v["hz"], 100);
        assert_eq!(v["mode"], "wall");
        let frames = v["frames"].as_array().unwrap();
        assert_eq!(frames.len(), 3, "hot_spin and {{main}} are kept once");
        let name = |id: &serde_json::Value| frames[id.as_u64().unwrap() as usize]["function"].as_str().unwrap().to_owned();
        let samples = v["samples"].as_array().unwrap();
        assert_eq!(samples.len(), 3);
        let classic = samples.iter().find(|s| s["kind"] == "classic").unwrap();
        assert_eq!(classic["count"], 4);
        assert_eq!(classic["weight"], 40_000_000);
        assert_eq!(classic["route"], "/index.php");
        assert_eq!(classic["worker"], "");
        let stack: Vec<String> = classic["stack"].as_array().unwrap().iter().map(name).collect();
        assert_eq!(stack, ["hot_spin", "{main}"]);
        let worker = samples.iter().find(|s| s["kind"] == "worker").unwrap();
        assert_eq!(worker["worker"], "app");
        assert_eq!(worker["route"], "/api");
        let stack: Vec<String> = worker["stack"].as_array().unwrap().iter().map(name).collect();
        assert_eq!(stack, ["hot_spin", "App\\Kernel::handle", "{main}"]);
        let hot_id = classic["stack"][0].as_u64().unwrap() as usize;
        assert_eq!(frames[hot_id]["file"], "/app/hot.php");
        assert_eq!(frames[hot_id]["line"], 5);
        assert_eq!(samples.iter().find(|s| s["kind"] == "background").unwrap()["count"], 1);
    }

    /// Same function at another line is another frame; a truncated stack ends in a marker.
    #[test]
    fn lines_split_frames_and_truncation_is_marked() {
        let mut p = Profile::new(10, true);
        let w = Weight { ticks: 1, ns: 1 };
        let labels = Labels { worker: "", route: "", kind: ThreadKind::Task };
        p.add(&[frame("f", "", "/a.php", 1)], false, labels, w);
        p.add(&[frame("f", "", "/a.php", 2)], true, labels, w);
        p.add(&[frame("sleep", "", "", 0)], false, labels, w);
        let v = parse(&p);
        assert_eq!(v["mode"], "cpu");
        let frames = v["frames"].as_array().unwrap();
        assert_eq!(frames.len(), 4);
        assert!(frames.iter().any(|f| f["function"] == TRUNCATED));
        assert!(frames.iter().any(|f| f["function"] == "sleep" && f["file"] == "" && f["line"] == 0));
    }

    #[test]
    fn entries_are_bounded_and_routes_cut() {
        let mut p = Profile::new(100, false);
        let w = Weight { ticks: 1, ns: 1 };
        let f = [frame("f", "", "/a.php", 1)];
        for i in 0..MAX_ENTRIES + 5 {
            let route = format!("/item/{i}");
            p.add(&f, false, Labels { worker: "", route: &route, kind: ThreadKind::Classic }, w);
        }
        assert_eq!(p.entries.len(), MAX_ENTRIES);
        assert_eq!(p.dropped, 5);
        // Full: unique routes and frames keep coming (a crawler during a profile), and
        // nothing more is kept for them; a sample of a kept stack still counts.
        let (strings, frames) = (p.strings.all.len(), p.frames.len());
        for i in 0..10_000 {
            let (route, file) = (format!("/unique/{i}"), format!("/f{i}.php"));
            let f = [frame("g", "", &file, i)];
            p.add(&f, false, Labels { worker: "", route: &route, kind: ThreadKind::Classic }, w);
        }
        assert_eq!((p.strings.all.len(), p.frames.len()), (strings, frames), "nothing kept past the bound");
        assert_eq!(p.dropped, 10_005);
        p.add(&f, false, Labels { worker: "", route: "/item/0", kind: ThreadKind::Classic }, w);
        assert_eq!(p.dropped, 10_005, "a kept stack and route still counts");
        let long = "é".repeat(MAX_ROUTE);
        let mut p = Profile::new(100, false);
        p.add(&f, false, Labels { worker: "", route: &long, kind: ThreadKind::Classic }, w);
        let v = parse(&p);
        assert!(v["samples"][0]["route"].as_str().unwrap().len() <= MAX_ROUTE);
    }

    #[test]
    fn routes_drop_the_query() {
        assert_eq!(route_of("/a/b?x=1"), "/a/b");
        assert_eq!(route_of("/a#frag"), "/a");
        assert_eq!(route_of(""), "");
    }
}
