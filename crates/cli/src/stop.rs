//! Stopping a run: SIGINT/SIGTERM interrupt it (resumable), `loopwright cancel` from another
//! process cancels it through a `cancel_requested` event in the journal.

use std::time::Duration;

use loopwright_app::stop::CancelWatch;
use loopwright_engine::{RunId, Stop, Stopper};
use loopwright_store::Journal;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::Mutex;

/// How often a running stage checks the journal for a cancel request.
const CANCEL_POLL: Duration = Duration::from_millis(250);

/// The binary's stopper.
pub struct CliStopper<'a> {
    signals: Mutex<(Signal, Signal)>,
    cancel: CancelWatch<'a>,
}

impl<'a> CliStopper<'a> {
    /// Listens for SIGINT and SIGTERM from now on, and for cancel requests of `run` recorded
    /// after event `after`.
    pub fn new(store: &'a Journal, run: RunId, after: u64) -> std::io::Result<Self> {
        let signals = (signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?);
        Ok(Self { signals: Mutex::new(signals), cancel: CancelWatch::new(store, run, after, CANCEL_POLL) })
    }
}

impl Stopper for CliStopper<'_> {
    async fn stopped(&self) -> Stop {
        let mut signals = self.signals.lock().await;
        let (sigint, sigterm) = &mut *signals;
        tokio::select! {
            _ = sigint.recv() => Stop::Interrupt { signal: "SIGINT".into() },
            _ = sigterm.recv() => Stop::Interrupt { signal: "SIGTERM".into() },
            stop = self.cancel.requested() => stop,
        }
    }
}
