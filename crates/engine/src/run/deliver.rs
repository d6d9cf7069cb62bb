//! Deliver: the run's work handed to the forge it came from through the [`Delivery`] port —
//! its branch pushed and its change request opened or updated — journaled as `delivered`, or
//! `delivery_failed` with when to try again; its failure reported once before it ends.

use crate::event::Event;
use crate::forge::Delivery as Delivered;
use crate::ports::{Changes, Clock, Delivery, Limits, MergeOutcome, Runner, Stopper, Store, StoreError};
use crate::state::RunState;

use super::Engine;

impl<S: Store, R: Runner, C: Clock, X: Stopper, W: Changes, L: Limits, D: Delivery> Engine<'_, S, R, C, X, W, L, D> {
    /// Delivers `round`: the port pushes and opens (or finds again, after a crash) the change
    /// request; what it says is journaled before anything else happens.
    pub(super) async fn deliver(&mut self, state: &mut RunState, round: u32) -> Result<(), StoreError> {
        self.flush(state).await?;
        let watching = state.forge_link().is_some_and(|l| l.watch);
        let event = match self.delivery.deliver(state, round).await {
            Ok(d) => Event::Delivered(Delivered { round, number: d.number, url: d.url, head: d.head, watching }),
            Err(e) => Event::DeliveryFailed { round, message: e.message, retry_at: e.retry_at },
        };
        self.record(state, event).await
    }

    /// Reports the run's failure on the forge (one comment, found again after a crash).
    pub(super) async fn report_failure(&mut self, state: &mut RunState) -> Result<(), StoreError> {
        self.flush(state).await?;
        let event = match self.delivery.report_failure(state).await {
            Ok(url) => Event::FailureReported { url: Some(url), error: None },
            Err(e) => Event::FailureReported { url: None, error: Some(e.message) },
        };
        self.record(state, event).await
    }

    /// Merges the change request at `head` (the tested, approved head); a head someone else
    /// pushed, or a merge the forge refused, is journaled and the run waits for a person.
    pub(super) async fn merge(&mut self, state: &mut RunState, head: String) -> Result<(), StoreError> {
        self.flush(state).await?;
        let Some(number) = state.forge.change().map(|d| d.number) else { return Ok(()) };
        let event = match self.delivery.merge(state, &head).await {
            MergeOutcome::Merged { auto_merge } => Event::Merged { number, head, auto_merge },
            MergeOutcome::Moved { head } => Event::HeadMoved { head },
            MergeOutcome::Refused { message } => Event::MergeFailed { head, message },
        };
        self.record(state, event).await
    }

    /// Asks a person on the change request after too many red CI rounds, then waits: the
    /// comment is found again by its marker after a crash.
    pub(super) async fn escalate_ci(&mut self, state: &mut RunState, round: u32) -> Result<(), StoreError> {
        self.flush(state).await?;
        let Some(stage) = state.forge_link().map(|l| l.stage.clone()) else {
            return Ok(());
        };
        let comment = self.delivery.escalate(state, round).await.ok();
        self.record(state, Event::CiEscalated { round, stage, comment }).await
    }
}
