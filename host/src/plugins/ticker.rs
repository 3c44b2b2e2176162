//! The engine's epoch ticker: while any plugin call runs it advances the
//! epoch every [`TICK`], so that a call past its deadline is interrupted;
//! while none runs it sleeps, so that an idle host is not woken hundreds
//! of times a second for nothing.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How often the epoch advances while a call runs. Call deadlines are
/// counted in these ticks.
pub(crate) const TICK: Duration = Duration::from_millis(2);

#[derive(Debug, Default)]
struct State {
    /// Calls under way.
    running: usize,
    /// The ticker waits for a call.
    parked: bool,
    /// Epochs advanced.
    ticks: u64,
    stopped: bool,
}

/// The ticker thread's shared state.
#[derive(Debug, Default)]
pub(crate) struct Ticker {
    state: Mutex<State>,
    wake: Condvar,
}

impl Ticker {
    /// Start a ticker that calls `tick` every [`TICK`] while a call runs.
    pub(crate) fn start(tick: impl Fn() + Send + 'static) -> std::io::Result<Arc<Self>> {
        let ticker = Arc::new(Self::default());
        let shared = Arc::clone(&ticker);
        std::thread::Builder::new()
            .name("verdict-epoch".into())
            .spawn(move || {
                while shared.wait_for_a_call() {
                    std::thread::sleep(TICK);
                    tick();
                    shared.lock().ticks += 1;
                }
            })?;
        Ok(ticker)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Block while no call runs; false once stopped.
    fn wait_for_a_call(&self) -> bool {
        let mut state = self.lock();
        while state.running == 0 && !state.stopped {
            state.parked = true;
            state = self
                .wake
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        state.parked = false;
        !state.stopped
    }

    /// A call begins: the ticker ticks until the returned guard is dropped
    /// (and every other call's is).
    pub(crate) fn running(self: &Arc<Self>) -> Running {
        let mut state = self.lock();
        state.running += 1;
        if state.running == 1 {
            self.wake.notify_one();
        }
        Running(Arc::clone(self))
    }

    /// Stop the thread for good.
    pub(crate) fn stop(&self) {
        self.lock().stopped = true;
        self.wake.notify_one();
    }

    /// Whether the ticker waits for a call, and how many epochs it advanced.
    #[cfg(test)]
    fn seen(&self) -> (bool, u64) {
        let state = self.lock();
        (state.parked, state.ticks)
    }
}

/// A call under way; its end is the drop.
#[must_use = "the ticker ticks while this is held"]
pub(crate) struct Running(Arc<Ticker>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.lock().running -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Instant;

    /// Wait until `done`, for at most 10 s.
    fn until(done: impl Fn() -> bool) -> bool {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if done() {
                return true;
            }
            std::thread::yield_now();
        }
        false
    }

    #[test]
    fn ticks_only_while_a_call_runs() {
        let ticked = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&ticked);
        let ticker = Ticker::start(move || {
            counter.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        // Nothing runs: the ticker waits, and has not ticked.
        assert!(until(|| ticker.seen().0), "parked while idle");
        assert_eq!(ticked.load(Ordering::Relaxed), 0);

        // A call: it ticks, several times over.
        let call = ticker.running();
        assert!(
            until(|| ticked.load(Ordering::Relaxed) >= 3),
            "ticks during a call"
        );
        // A second call at once, and the first ends: still ticking.
        let second = ticker.running();
        drop(call);
        let now = ticked.load(Ordering::Relaxed);
        assert!(
            until(|| ticked.load(Ordering::Relaxed) > now),
            "ticks while one runs"
        );

        // Both over: it parks again and stops counting.
        drop(second);
        assert!(until(|| ticker.seen().0), "parked after the calls");
        let (_, parked_at) = ticker.seen();
        assert_eq!(ticked.load(Ordering::Relaxed), parked_at);

        ticker.stop();
        assert!(until(|| !ticker.seen().0), "the thread ends when stopped");
    }
}
