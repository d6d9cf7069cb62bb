//! Cancel requests through the journal: `loopwright cancel`, the API or the dashboard append
//! `cancel_requested`, and whoever drives the run finds it here and stops. Each front-end's
//! stopper adds its own interruptions (the CLI's signals, the daemon's shutdown).

use std::cell::Cell;
use std::time::Duration;

use loopwright_engine::{RunId, Stop, Store};
use loopwright_store::Journal;
use tokio::time::Instant;

/// Watches a run's journal for a cancel request recorded after a given event.
pub struct CancelWatch<'a> {
    store: &'a Journal,
    run: RunId,
    after: u64,
    every: Duration,
    /// The next look, kept across calls: the engine asks again at every wait, and a look must
    /// still come every `every` however often a wait is cut short.
    next: Cell<Instant>,
}

impl<'a> CancelWatch<'a> {
    /// Looks at `run`'s journal every `every` for a cancel request after event `after`.
    pub fn new(store: &'a Journal, run: RunId, after: u64, every: Duration) -> Self {
        Self { store, run, after, every, next: Cell::new(Instant::now() + every) }
    }

    /// Resolves with the first cancel request found.
    pub async fn requested(&self) -> Stop {
        loop {
            tokio::time::sleep_until(self.next.get()).await;
            self.next.set(Instant::now() + self.every);
            if let Ok(Some((by, rollback))) = self.store.cancel_requested(&self.run, self.after).await {
                return Stop::Cancel { by, rollback };
            }
        }
    }
}
