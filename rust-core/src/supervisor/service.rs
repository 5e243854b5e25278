//! A service thread of an engine (the autoscaler, the watchdog): it runs one round of
//! its work every tick, or at once when its settings change, until it is dropped.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

struct Shared<S> {
    /// The settings, and whether the thread must stop.
    state: Mutex<(S, bool)>,
    wake: Condvar,
}

impl<S> Shared<S> {
    fn lock(&self) -> MutexGuard<'_, (S, bool)> {
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
}

impl<S: Copy> Rounds<S> {
    /// Waits for the next round (`tick(settings)` from now, or a change of the
    /// settings) and returns the settings then; None once the service must stop.
    pub fn next(&self, tick: impl Fn(&S) -> Duration) -> Option<S> {
        let guard = self.shared.lock();
        // A stop asked while the thread worked would otherwise wait a whole tick.
        if guard.1 {
            return None;
        }
        let wait = tick(&guard.0);
        let (guard, _) = self.shared.wake.wait_timeout(guard, wait).unwrap_or_else(|e| e.into_inner());
        if guard.1 { None } else { Some(guard.0) }
    }
}

impl<S: Copy + Send + 'static> Service<S> {
    /// Starts the thread `name`, which runs `body` with its rounds.
    pub fn start(name: &str, settings: S, body: impl FnOnce(Rounds<S>) + Send + 'static) -> std::io::Result<Service<S>> {
        let shared = Arc::new(Shared { state: Mutex::new((settings, false)), wake: Condvar::new() });
        let rounds = Rounds { shared: shared.clone() };
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
        self.shared.lock().0 = settings;
        self.shared.wake.notify_all();
    }

    pub fn settings(&self) -> S {
        self.shared.lock().0
    }
}

impl<S> Drop for Service<S> {
    fn drop(&mut self) {
        self.shared.lock().1 = true;
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
}
