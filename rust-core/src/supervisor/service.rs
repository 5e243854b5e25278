//! A service thread of an engine (the autoscaler, the watchdog): it runs one round of
//! its work every tick, or at once when its settings change, until it is dropped.

use std::cell::Cell;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

struct State<S> {
    settings: S,
    /// How many times the settings changed: a change made while the thread was not
    /// waiting (its notification lost) still starts the next round at once.
    changes: u64,
    /// The thread must stop.
    stop: bool,
}

struct Shared<S> {
    state: Mutex<State<S>>,
    wake: Condvar,
}

impl<S> Shared<S> {
    fn lock(&self) -> MutexGuard<'_, State<S>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The thread, and its settings. Dropping it stops the thread and waits for it.
pub struct Service<S> {
    shared: Arc<Shared<S>>,
    handle: Option<JoinHandle<()>>,
}

/// The thread's view: its settings, one round at a time.
pub struct Rounds<S> {
    shared: Arc<Shared<S>>,
    /// The changes the thread has had a round for.
    seen: Cell<u64>,
}

impl<S: Copy> Rounds<S> {
    /// Waits for the next round (`tick(settings)` from now, or a change of the
    /// settings) and returns the settings then; None once the service must stop.
    pub fn next(&self, tick: impl Fn(&S) -> Duration) -> Option<S> {
        let mut guard = self.shared.lock();
        // A stop or a change made while the thread worked would otherwise wait a whole
        // tick: their notification came when nobody waited.
        if guard.changes == self.seen.get() && !guard.stop {
            let wait = tick(&guard.settings);
            guard = self.shared.wake.wait_timeout(guard, wait).unwrap_or_else(|e| e.into_inner()).0;
        }
        self.seen.set(guard.changes);
        if guard.stop { None } else { Some(guard.settings) }
    }
}

impl<S: Copy + Send + 'static> Service<S> {
    /// Starts the thread `name`, which runs `body` with its rounds.
    pub fn start(name: &str, settings: S, body: impl FnOnce(Rounds<S>) + Send + 'static) -> std::io::Result<Service<S>> {
        let shared =
            Arc::new(Shared { state: Mutex::new(State { settings, changes: 0, stop: false }), wake: Condvar::new() });
        let rounds = Rounds { shared: shared.clone(), seen: Cell::new(0) };
        let handle = std::thread::Builder::new().name(name.into()).spawn(move || {
            // It calls into the host (its log) as PHP threads do: the host's signals are
            // the host's threads' to take.
            crate::host::block_host_signals();
            body(rounds)
        })?;
        Ok(Service { shared, handle: Some(handle) })
    }

    /// New settings; the thread's next round starts at once.
    pub fn set(&self, settings: S) {
        let mut state = self.shared.lock();
        state.settings = settings;
        state.changes += 1;
        self.shared.wake.notify_all();
    }

    pub fn settings(&self) -> S {
        self.shared.lock().settings
    }
}

impl<S> Drop for Service<S> {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// Rounds come every tick with the settings of the time, at once after a change,
    /// and end when the service is dropped, which waits for the thread.
    #[test]
    fn rounds_follow_the_settings_and_end_on_drop() {
        let (tx, rx) = mpsc::channel();
        let service = Service::start("test-service", 1u32, move |rounds| {
            while let Some(n) = rounds.next(|&n| if n == 1 { Duration::from_millis(5) } else { Duration::from_secs(60) }) {
                let _ = tx.send(n);
            }
            let _ = tx.send(0);
        })
        .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(1), "a round every tick");
        service.set(2);
        assert_eq!(service.settings(), 2);
        // The new tick is 60 s: the round with 2 comes from the change itself.
        while rx.recv_timeout(Duration::from_secs(5)).expect("a change starts a round at once") != 2 {}
        drop(service);
        assert_eq!(rx.try_iter().last(), Some(0), "the thread ended before drop returned");
    }

    /// A change made while the thread works on a round (nobody waits to hear it) still
    /// starts the next round at once, not a tick later.
    #[test]
    fn a_change_made_between_rounds_is_not_lost() {
        let (tx, rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let service = Service::start("test-service", 1u32, move |rounds| {
            while let Some(n) = rounds.next(|_| Duration::from_secs(60)) {
                let _ = tx.send(n);
                // Working on the round: the change comes now.
                let _ = go_rx.recv();
            }
        })
        .unwrap();
        service.set(2);
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(2), "the first change starts a round");
        service.set(3); // while the thread works
        go_tx.send(()).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(3), "a change made between rounds starts the next at once");
        drop(go_tx);
    }
}
