//! Attempt: the attempt's process runs; what the runner notices while it runs is journaled
//! (process groups, refused connections) or told to the provider's limits (a rate limit); its
//! provider slot is renewed while it runs; its usage is journaled when it ends.

use loopwright_spec::{Pipeline, Stage, StageId};
use tokio::sync::mpsc;

use super::Engine;
use crate::event::Event;
use crate::ports::{
    Changes, Clock, Confinement, Delivery, Execution, Limits, Notice, Runner, StageRequest, Stop, Stopper, Store,
    StoreError,
};
use crate::prompt::build_prompt;
use crate::state::RunState;

/// How often a running attempt renews the provider slots it holds (their lease is a minute).
pub(super) const LIMIT_RENEW: std::time::Duration = std::time::Duration::from_secs(20);

/// How an attempt's execution ended.
pub(super) enum Attempted {
    /// Its process ran to an end (its usage journaled).
    Ran(Execution),
    /// The run was stopped first: the process was ended, its slot given back, the stop
    /// journaled.
    Stopped,
}

/// How the wait for the attempt's process ended.
enum Ended {
    Ran(Execution),
    Stopped(Stop),
}

impl<S: Store, R: Runner, C: Clock, X: Stopper, W: Changes, L: Limits, D: Delivery> Engine<'_, S, R, C, X, W, L, D> {
    /// What the runner is asked to run for attempt `attempt` of `stage`.
    pub(super) fn request(&self, state: &RunState, stage: &Stage, attempt: u32, confine: Confinement) -> StageRequest {
        let started = state.started.as_ref().expect("a started run");
        StageRequest {
            run_id: state.run_id.clone(),
            task_id: started.task_id.clone(),
            stage: stage.id.clone(),
            attempt,
            mode: stage.mode,
            agent: super::agent_now(self.pipeline, state, stage).cloned(),
            commands: stage.run.clone(),
            prompt: build_prompt(self.pipeline, stage, state),
            timeout: capped_timeout(self.pipeline, state, stage),
            workspace: self.workspace(state),
            confine,
            purpose: crate::ports::Purpose::Attempt,
            traceparent: Some(traceparent_of(state, stage.id.as_str(), attempt)),
        }
    }

    /// Runs `request` to its end or the run's stop, `holder` holding its provider's slot.
    pub(super) async fn attempt(
        &mut self,
        state: &mut RunState,
        request: &StageRequest,
        holder: &str,
    ) -> Result<Attempted, StoreError> {
        let (stage_id, attempt) = (&request.stage, request.attempt);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (runner, stopper) = (self.runner, self.stopper);
        let limited = request.agent.is_some();
        let ended = {
            let run = runner.run(request, tx);
            tokio::pin!(run);
            // A provider slot is leased: kept while the attempt runs.
            let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + LIMIT_RENEW, LIMIT_RENEW);
            loop {
                tokio::select! {
                    biased;
                    stop = stopper.stopped() => break Ended::Stopped(stop),
                    Some(notice) = rx.recv() => self.notice(state, stage_id, attempt, notice).await?,
                    execution = &mut run => break Ended::Ran(execution),
                    _ = renew.tick(), if limited => self.limits.renew(holder).await,
                }
            }
            // Leaving this block drops the runner's future, which kills the process it waits on.
        };
        while let Ok(notice) = rx.try_recv() {
            self.notice(state, stage_id, attempt, notice).await?;
        }
        let execution = match ended {
            Ended::Ran(execution) => execution,
            Ended::Stopped(stop) => {
                if limited {
                    self.limits.give(holder, &crate::ports::Used::default()).await;
                }
                self.stop(state, stop).await?;
                return Ok(Attempted::Stopped);
            }
        };
        self.used(state, request, holder, &execution).await;
        Ok(Attempted::Ran(execution))
    }

    /// After an agent's attempt ran: its slot given back with what it used, its usage
    /// journaled (deferred).
    pub(super) async fn used(
        &mut self,
        state: &mut RunState,
        request: &StageRequest,
        holder: &str,
        execution: &Execution,
    ) {
        if let Some(agent) = &request.agent {
            let usage = usage_of(agent, request, execution, state);
            self.limits.give(holder, &super::attempt::used_of(&usage)).await;
            let (stage, attempt) = (request.stage.clone(), request.attempt);
            self.defer(state, Event::UsageRecorded { stage, attempt, usage });
        }
    }

    /// Journals what the runner noticed while the attempt ran, or tells the provider's limits.
    pub(super) async fn notice(
        &mut self,
        state: &mut RunState,
        stage: &StageId,
        attempt: u32,
        notice: Notice,
    ) -> Result<(), StoreError> {
        match notice {
            Notice::ProcessStarted { group, command } => {
                let event = Event::ProcessStarted {
                    stage: stage.clone(),
                    attempt,
                    pgid: group.pgid,
                    start_time: group.start_time,
                    host: group.host,
                    command,
                };
                // Journaled at once, while the process runs (SPEC §1): after a crash, `resume`
                // ends the group it names even when its processes cleared their environment
                // (`exec env -i …`), which `end_strays` could not recognise them by.
                self.record(state, event).await
            }
            Notice::RateLimited { detail, until } => {
                if let Some(agent) =
                    self.pipeline.stage(stage.as_str()).and_then(|s| super::agent_now(self.pipeline, state, s))
                {
                    self.limits.exhausted(agent, &detail, until).await;
                }
                Ok(())
            }
            Notice::NetworkRefused { target, why } => {
                self.record(state, Event::NetworkRefused { stage: stage.clone(), attempt, target, why }).await
            }
        }
    }
}

/// What an agent's request used: the agent's own report, else a count (o200k) of what it was
/// told and answered; priced from the run's prices when the agent did not say.
/// The `traceparent` of the agent invocation of attempt `attempt` of `stage`.
pub(super) fn traceparent_of(state: &RunState, stage: &str, attempt: u32) -> String {
    use loopwright_journal::trace;
    let journaled = state.started.as_ref().and_then(|s| s.trace_id.as_deref());
    let trace_id = trace::trace_id(journaled, state.run_id.as_str());
    trace::traceparent(&trace_id, &trace::Place::Agent(stage.to_owned(), attempt))
}

/// What [`Limits::give`](crate::ports::Limits::give) is told an attempt used.
pub(super) fn used_of(usage: &crate::event::Usage) -> crate::ports::Used {
    crate::ports::Used { tokens: usage.input_tokens + usage.output_tokens, cost_usd: usage.cost_usd.unwrap_or(0.0) }
}

pub(super) fn usage_of(
    agent: &loopwright_spec::Agent,
    request: &StageRequest,
    execution: &Execution,
    state: &RunState,
) -> crate::event::Usage {
    let mut usage = match &execution.usage {
        Some(reported) if !reported.estimated => reported.clone(),
        other => crate::event::Usage {
            input_tokens: crate::tokens::count_tokens(&request.prompt) as u64,
            output_tokens: crate::tokens::count_tokens(&execution.stdout) as u64,
            estimated: true,
            model: agent.model.clone(),
            cost_usd: None,
            quota_wait_ms: other.as_ref().map_or(0, |u| u.quota_wait_ms),
        },
    };
    if usage.cost_usd.is_none() {
        let prices = state.started.as_ref().map(|s| &s.prices);
        usage.cost_usd = agent.model.as_ref().and_then(|m| prices.and_then(|p| p.get(m))).map(|p| {
            (usage.input_tokens as f64 * p.input_per_mtok + usage.output_tokens as f64 * p.output_per_mtok)
                / 1_000_000.0
        });
    }
    usage
}

/// The stage's timeout, shortened to what is left of its and the run's time budgets.
pub(super) fn capped_timeout(
    pipeline: &Pipeline,
    state: &RunState,
    stage: &loopwright_spec::Stage,
) -> std::time::Duration {
    if stage.budget.wall_ms.is_none() && pipeline.budget.wall_ms.is_none() {
        return stage.timeout;
    }
    let left =
        |budget: Option<u64>, spent: u64| budget.map(|b| std::time::Duration::from_millis(b.saturating_sub(spent)));
    [
        Some(stage.timeout),
        left(stage.budget.wall_ms, state.stage_spend(stage.id.as_str()).active_ms),
        left(pipeline.budget.wall_ms, state.spend().active_ms),
    ]
    .into_iter()
    .flatten()
    .min()
    .unwrap_or(stage.timeout)
}
