//! Acquire limits: what the provider allows is taken before anything of the attempt starts;
//! waiting for it, the run is queued with the reason, and a stop ends the wait as it ends an
//! attempt.

use loopwright_spec::Stage;

use super::Engine;
use crate::event::Event;
use crate::ports::{Allowed, Changes, Clock, Delivery, Limits, Payer, Runner, Stopper, Store, StoreError};
use crate::state::RunState;

/// How often an attempt waiting for a provider limit asks again, at least and at most.
const LIMIT_POLL_MIN: jiff::SignedDuration = jiff::SignedDuration::from_millis(200);
const LIMIT_POLL_MAX: jiff::SignedDuration = jiff::SignedDuration::from_secs(2);

/// When to ask a provider that said wait again: at its wait's end when known, but within
/// [`LIMIT_POLL_MIN`] to [`LIMIT_POLL_MAX`] from `now`.
fn ask_again(now: jiff::Timestamp, until: Option<jiff::Timestamp>) -> jiff::Timestamp {
    now + until.map(|u| u.duration_since(now).clamp(LIMIT_POLL_MIN, LIMIT_POLL_MAX)).unwrap_or(LIMIT_POLL_MAX)
}

/// Whether the attempt may go on.
pub(super) enum Acquired {
    /// Its provider's slot is held by `holder` (or it has no provider).
    Taken,
    /// The run was stopped while it waited; the stop is journaled.
    Stopped,
    /// A spend cap says it may not run (`on_exceed = "fail"`): why.
    Refused(String),
}

/// What a run's attempts' spend is counted by.
pub(super) fn payer_of<'s>(pipeline: &'s loopwright_spec::Pipeline, state: &'s RunState) -> Payer<'s> {
    Payer { pipeline: pipeline.name.as_str(), person: state.started.as_ref().and_then(|s| s.by.as_deref()) }
}

impl<S: Store, R: Runner, C: Clock, X: Stopper, W: Changes, L: Limits, D: Delivery> Engine<'_, S, R, C, X, W, L, D> {
    /// Takes the slot of the stage's agent's provider for `holder`, journaling when the
    /// attempt starts waiting and when it waits for another reason (not for another count of
    /// the same one).
    pub(super) async fn acquire(
        &mut self,
        state: &mut RunState,
        stage: &Stage,
        attempt: u32,
        holder: &str,
    ) -> Result<Acquired, StoreError> {
        match super::agent_now(self.pipeline, state, stage) {
            Some(agent) => self.acquire_for(state, stage, attempt, holder, agent).await,
            None => Ok(Acquired::Taken),
        }
    }

    /// [`Self::acquire`] for `agent` (a candidate's, which need not be the stage's).
    pub(super) async fn acquire_for(
        &mut self,
        state: &mut RunState,
        stage: &Stage,
        attempt: u32,
        holder: &str,
        agent: &loopwright_spec::Agent,
    ) -> Result<Acquired, StoreError> {
        let mut waited: Option<String> = None;
        let mut refused = None;
        loop {
            match self.limits.take(agent, holder, &payer_of(self.pipeline, state)).await? {
                Allowed::Yes => break,
                Allowed::Refused { reason } => {
                    refused = Some(reason);
                    break;
                }
                Allowed::Wait { reason, until } => {
                    let kind: String = reason.chars().filter(|c| !c.is_ascii_digit()).collect();
                    if waited.as_ref() != Some(&kind) {
                        let event = Event::LimitWaiting { stage: stage.id.clone(), attempt, reason, until };
                        self.record(state, event).await?;
                        waited = Some(kind);
                    }
                    let next = ask_again(self.clock.now(), until);
                    let (clock, stopper) = (self.clock, self.stopper);
                    tokio::select! {
                        biased;
                        stop = stopper.stopped() => {
                            self.stop(state, stop).await?;
                            return Ok(Acquired::Stopped);
                        }
                        () = clock.sleep_until(next) => {}
                    }
                }
            }
        }
        // The wait is over either way: the run works again (and fails the attempt if refused).
        if waited.is_some() {
            self.defer(state, Event::LimitTaken { stage: stage.id.clone(), attempt });
        }
        Ok(refused.map_or(Acquired::Taken, Acquired::Refused))
    }
}

impl<S: Store, R: Runner, C: Clock, X: Stopper, W: Changes, L: Limits, D: Delivery> Engine<'_, S, R, C, X, W, L, D> {
    /// [`Self::acquire`] without waiting, for a stage of a graph while others run: `None` when
    /// the slot is taken (or the stage has no provider), else when to ask again. Not journaled:
    /// a wait journaled queues the whole run (`limit_waiting`), while here the others run on; a
    /// stage still waiting when none runs waits in [`Self::acquire`], journaled.
    pub(super) async fn try_acquire(
        &mut self,
        state: &RunState,
        stage: &Stage,
        attempt: u32,
    ) -> Result<Option<jiff::Timestamp>, StoreError> {
        let Some(agent) = super::agent_now(self.pipeline, state, stage).cloned() else { return Ok(None) };
        let holder = format!("{}/{}/{attempt}", state.run_id, stage.id);
        self.try_acquire_for(state, &agent, &holder).await
    }

    /// [`Self::try_acquire`] for `agent` and `holder` (a candidate's).
    /// A cap that refuses it leaves it waiting here: it fails when it is started the
    /// blocking way, with nothing else in flight.
    pub(super) async fn try_acquire_for(
        &mut self,
        state: &RunState,
        agent: &loopwright_spec::Agent,
        holder: &str,
    ) -> Result<Option<jiff::Timestamp>, StoreError> {
        Ok(match self.limits.take(agent, holder, &payer_of(self.pipeline, state)).await? {
            Allowed::Yes => None,
            Allowed::Wait { until, .. } => Some(ask_again(self.clock.now(), until)),
            Allowed::Refused { .. } => Some(ask_again(self.clock.now(), None)),
        })
    }
}
