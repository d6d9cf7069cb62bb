//! Stopping a run: SIGINT/SIGTERM interrupt it (resumable), `loopwright cancel` from another
//! process cancels it through a `cancel_requested` event in the journal.

use std::cell::Cell;
use std::time::Duration;

use loopwright_engine::{RunId, Stop, Stopper, Store};
use loopwright_store::SqliteStore;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::Mutex;
use tokio::time::Instant;

/// How often a running stage checks the journal for a cancel request.
const CANCEL_POLL: Duration = Duration::from_millis(250);

/// The binary's stopper.
pub struct CliStopper<'a> {
    signals: Mutex<(Signal, Signal)>,
    store: &'a SqliteStore,
    run: RunId,
    /// Cancel requests recorded after this event count.
    after: u64,
    next_poll: Cell<Instant>,
}

impl<'a> CliStopper<'a> {
    /// Listens for SIGINT and SIGTERM from now on, and for cancel requests of `run` recorded
    /// after event `after`.
    pub fn new(store: &'a SqliteStore, run: RunId, after: u64) -> std::io::Result<Self> {
        let signals = (signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?);
        Ok(Self { signals: Mutex::new(signals), store, run, after, next_poll: Cell::new(Instant::now() + CANCEL_POLL) })
    }
}

impl Stopper for CliStopper<'_> {
    async fn stopped(&self) -> Stop {
        let mut signals = self.signals.lock().await;
        let (sigint, sigterm) = &mut *signals;
        loop {
            tokio::select! {
                _ = sigint.recv() => return Stop::Interrupt { signal: "SIGINT".into() },
                _ = sigterm.recv() => return Stop::Interrupt { signal: "SIGTERM".into() },
                () = tokio::time::sleep_until(self.next_poll.get()) => {
                    self.next_poll.set(Instant::now() + CANCEL_POLL);
                    if let Ok(Some((by, rollback))) = self.store.cancel_requested(&self.run, self.after).await {
                        return Stop::Cancel { by, rollback };
                    }
                }
            }
        }
    }
}
