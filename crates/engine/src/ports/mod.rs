//! The ports the engine drives: the journal ([`Store`]), stage execution ([`Runner`]), time
//! ([`Clock`]) and whoever watches the run ([`Observer`]). Implementations live in other crates.

use std::time::Duration;

use loopwright_spec::Agent;

pub use loopwright_journal::event::ProcessGroup;
pub use loopwright_journal::store::{RunSummary, Store, StoreError};

use crate::event::EventRecord;

mod changes;
mod delivery;
mod runner;
mod slots;
mod spend;

pub use changes::{
    Changes, CommitError, Commits, LayerError, Layers, NoChanges, SnapshotError, Snapshots, Watch, Workspace,
};
pub use delivery::{Delivered, Delivery, DeliveryError, MergeOutcome, NoDelivery};
pub use runner::{
    CommandRequest, Confinement, ExecOutcome, Execution, Notice, Purpose, Runner, SANDBOX_REFUSED, StageRequest,
};
pub use slots::{Slot, Slots};
pub use spend::{Payer, Used};

/// Time, so tests can control it.
#[allow(async_fn_in_trait)]
pub trait Clock {
    /// Now.
    fn now(&self) -> jiff::Timestamp;
    /// Sleeps until `t`.
    async fn sleep_until(&self, t: jiff::Timestamp);
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }

    async fn sleep_until(&self, t: jiff::Timestamp) {
        let wait = t.duration_since(jiff::Timestamp::now());
        if let Ok(d) = Duration::try_from(wait) {
            tokio::time::sleep(d).await;
        }
    }
}

/// Watches a run: called after each event is durably recorded.
pub trait Observer {
    /// An event was recorded; `state` includes it.
    fn on_event(&mut self, record: &EventRecord, state: &crate::state::RunState, pipeline: &loopwright_spec::Pipeline);
}

/// Borrowing any observer as `&mut dyn Observer`.
pub trait NoObserverExt {
    /// The observer as a trait object.
    fn as_dyn(&mut self) -> &mut dyn Observer;
}

impl<T: Observer> NoObserverExt for T {
    fn as_dyn(&mut self) -> &mut dyn Observer {
        self
    }
}

/// An observer that does nothing.
#[derive(Debug, Default)]
pub struct NoObserver;

impl Observer for NoObserver {
    fn on_event(&mut self, _: &EventRecord, _: &crate::state::RunState, _: &loopwright_spec::Pipeline) {}
}

/// Why the engine was asked to stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// A signal: the run is interrupted and `resume` continues it.
    Interrupt {
        /// The signal's name.
        signal: String,
    },
    /// A cancel request: the run is cancelled.
    Cancel {
        /// Who asked.
        by: String,
        /// Roll back completed stages.
        rollback: bool,
    },
}

/// Tells the engine to stop. `stopped` resolves when a stop is asked for; a request that came
/// while nobody was waiting must still be returned by the next call.
#[allow(async_fn_in_trait)]
pub trait Stopper {
    /// Waits for a stop request.
    async fn stopped(&self) -> Stop;
}

/// What providers allow (`[[limits]]`, SPEC §13), shared by every process of the journal: an
/// agent's attempt takes what it needs before it starts, or waits (the run `queued`, the reason
/// journaled), and gives it back when it ends.
#[allow(async_fn_in_trait)]
pub trait Limits {
    /// Takes what an attempt of `agent` needs (`holder` names the attempt, `payer` what its
    /// spend is counted by), or says why it waits or may not run.
    async fn take(&self, agent: &Agent, holder: &str, payer: &Payer<'_>) -> Result<Allowed, StoreError>;
    /// The attempt still runs: keeps what it took.
    async fn renew(&self, holder: &str);
    /// The attempt ended, having used `used`: gives back what it took.
    async fn give(&self, holder: &str, used: &Used);
    /// The provider itself rate-limited an attempt (its answer, `source`, named when it may be
    /// called again): pauses it for every run until `until`, capped by the limits' longest
    /// pause.
    async fn exhausted(&self, agent: &Agent, source: &str, until: jiff::Timestamp);
}

/// What [`Limits::take`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allowed {
    /// The attempt may start.
    Yes,
    /// It waits: why, and until when at the latest when that is known.
    Wait {
        /// In words.
        reason: String,
        /// The latest it lasts, when known.
        until: Option<jiff::Timestamp>,
    },
    /// It may not run: a spend cap whose period is used up says to fail (`on_exceed = "fail"`).
    Refused {
        /// In words.
        reason: String,
    },
}

/// No limits: every attempt starts at once.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoLimits;

impl Limits for NoLimits {
    async fn take(&self, _: &Agent, _: &str, _: &Payer<'_>) -> Result<Allowed, StoreError> {
        Ok(Allowed::Yes)
    }
    async fn renew(&self, _: &str) {}
    async fn give(&self, _: &str, _: &Used) {}
    async fn exhausted(&self, _: &Agent, _: &str, _: jiff::Timestamp) {}
}

/// A stopper that never stops.
#[derive(Debug, Default, Clone, Copy)]
pub struct NeverStop;

impl Stopper for NeverStop {
    async fn stopped(&self) -> Stop {
        std::future::pending().await
    }
}
