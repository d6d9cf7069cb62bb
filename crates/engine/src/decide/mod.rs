//! The run state machine: given the pipeline and a run's state, what happens next.
//!
//! [`next_step`] is pure: it reads the state and returns either an event to record (a decision
//! that needs no outside work, such as skipping a stage) or work for the driver (run a stage,
//! wait for a retry). The driver records what the work gave and asks again.

use loopwright_spec::{Pipeline, Stage, StageId};

use crate::closed_loop::{self};
use crate::event::{ConditionOutcome, Event, FailureKind, RunStarted, RunStatus, SkipReason, StageError};
use crate::state::{RunState, StageStatus};

pub mod candidates;
mod condition;
mod deliver;
mod fallback;
mod feedback;
pub mod judge;
mod looping;

pub use condition::condition_context;
use condition::evaluate_condition;
pub use deliver::DELIVERY_TRIES;
use feedback::feedback_step;
pub use feedback::{FeedbackItem, parse_feedback_items};
use looping::loop_step;

/// What to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Record this event (then ask again).
    Record(Event),
    /// Run an attempt of a stage.
    Execute {
        /// The stage.
        stage: StageId,
        /// The attempt number (the same number again when an attempt in flight is redone).
        attempt: u32,
    },
    /// Wait until a retry is due (then ask again).
    Wait {
        /// The stage waiting.
        stage: StageId,
        /// When.
        until: jiff::Timestamp,
    },
    /// Roll back these stages, most recent first (seed 004 "Rollback Protocol").
    RollBack {
        /// The stage whose failure triggered it (none for a cancellation).
        trigger: Option<StageId>,
        /// The stages still to roll back.
        stages: Vec<StageId>,
        /// The rollback was already started (and journaled) before a crash.
        resumed: bool,
    },
    /// Closed loop: evaluate the regression gate and take the baseline, before the first attempt.
    Baseline {
        /// The stage.
        stage: StageId,
    },
    /// Closed loop: VALIDATE, EVALUATE and the regression re-check of an attempt (whichever
    /// are not journaled yet); success when all pass.
    Evaluate {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
    },
    /// Closed loop, ANALYZE: decide what to do about an attempt's failure (with the
    /// strategies' measured effectiveness, which the engine holds).
    Analyze {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
    },
    /// Closed loop: run the strategy ANALYZE chose for an attempt's failure.
    Fix {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
    },
    /// Deliver the run's work to the forge it came from (push, open or update the change
    /// request) for this round.
    Deliver {
        /// The round (0 the first delivery, then one per CI retry).
        round: u32,
    },
    /// Merge the change request at `head`, the head CI passed on and a person approved (or
    /// enable the forge's auto-merge for it).
    Merge {
        /// The head to merge.
        head: String,
    },
    /// Report the run's failure where its work came from, before it ends.
    ReportFailure,
    /// Ask a person on the change request, after more red CI rounds than allowed (then wait).
    EscalateCi {
        /// The round that failed last.
        round: u32,
    },
    /// Nothing more to do now: the run has this status.
    Done(RunStatus),
}

/// Decides the next step of a run.
pub fn next_step(pipeline: &Pipeline, state: &RunState, now: jiff::Timestamp) -> Step {
    let mut once = true;
    let mut admit = |_: &Stage| std::mem::take(&mut once);
    next_steps(pipeline, state, now, &std::collections::BTreeSet::new(), &mut admit)
        .into_iter()
        .next()
        .unwrap_or(Step::Done(state.status))
}

/// Decides what can happen next while the stages in `busy` have attempts in flight (never
/// named): the attempts of the stages that are ready (each stage they need has finished or
/// was skipped) and that `admit` lets start now, else one other step. Empty: nothing to do
/// but wait for `busy`. In a line of stages at most one is ready at a time, so this is
/// [`next_step`]'s one step.
pub fn next_steps(
    pipeline: &Pipeline,
    state: &RunState,
    now: jiff::Timestamp,
    busy: &std::collections::BTreeSet<StageId>,
    admit: &mut dyn FnMut(&Stage) -> bool,
) -> Vec<Step> {
    let Some(started) = &state.started else {
        return vec![Step::Done(RunStatus::Failed)];
    };
    if let Some(step) = rollback_step(pipeline, state) {
        return vec![step];
    }
    if state.status != RunStatus::Running {
        return vec![Step::Done(state.status)];
    }
    let start = started.start_from.as_ref().and_then(|s| pipeline.index_of(s.as_str())).unwrap_or(0);
    let from = start.max(state.scan_hint()).min(pipeline.stages.len());
    let mut ready: Vec<Step> = Vec::new();
    // A ready stage was not let start now.
    let mut held = false;
    // Every stage before this one is done: the next scan may start after it.
    let mut prefix = true;
    for (index, stage) in pipeline.stages.iter().enumerate().skip(from) {
        if busy.contains(&stage.id) {
            prefix = false;
            continue;
        }
        let step = match stage_step(pipeline, state, started, stage, start, now) {
            StageStep::Done => {
                if prefix {
                    state.set_scan_hint(index + 1);
                }
                continue;
            }
            StageStep::NotReady => {
                prefix = false;
                continue;
            }
            StageStep::Ends(step) => return vec![step],
            StageStep::Step(step) => step,
        };
        prefix = false;
        match step {
            Step::Execute { .. } if admit(stage) => ready.push(step),
            Step::Execute { .. } => held = true,
            other if ready.is_empty() => return vec![other],
            _ => return ready,
        }
    }
    if !ready.is_empty() || !busy.is_empty() || held {
        return ready;
    }
    vec![deliver::succeeded(pipeline, state, started, now)]
}

/// What one stage makes of the run's next step.
enum StageStep {
    /// It is done: nothing to do.
    Done,
    /// It waits for a stage it needs.
    NotReady,
    /// It failed: the run ends (or rolls back) with this step.
    Ends(Step),
    /// This.
    Step(Step),
}

/// The next step of `stage` as the run stands.
fn stage_step(
    pipeline: &Pipeline,
    state: &RunState,
    started: &RunStarted,
    stage: &Stage,
    start: usize,
    now: jiff::Timestamp,
) -> StageStep {
    let st = state.stage(stage.id.as_str());
    StageStep::Step(match st.map_or(StageStatus::Pending, |s| s.status) {
        StageStatus::Success if stage.feedback_loop.is_some() => match feedback_step(pipeline, state, stage) {
            Some(step) => step,
            None => return StageStep::Done,
        },
        StageStatus::Success | StageStatus::Skipped => return StageStep::Done,
        StageStatus::Failed | StageStatus::Timeout | StageStatus::Cancelled | StageStatus::RolledBack => {
            if state.rollback.is_none() {
                let stages = rollback_candidates(pipeline, state, Some(stage));
                if !stages.is_empty() {
                    return StageStep::Ends(Step::RollBack { trigger: Some(stage.id.clone()), stages, resumed: false });
                }
            }
            return StageStep::Ends(deliver::failed(state, started));
        }
        StageStatus::Running => Step::Execute { stage: stage.id.clone(), attempt: st.map_or(1, |s| s.attempts.max(1)) },
        StageStatus::AttemptFailed => after_failure(pipeline, state, stage),
        StageStatus::Looping => loop_step(pipeline, state, stage, now),
        StageStatus::RetryWaiting => {
            let s = st.expect("a waiting stage has state");
            match s.retry_at {
                Some(until) if until > now => Step::Wait { stage: stage.id.clone(), until },
                _ => new_attempt(pipeline, state, stage, s.attempts + 1),
            }
        }
        StageStatus::Pending if !needs_done(pipeline, state, start, stage) => return StageStep::NotReady,
        StageStatus::Pending => pending_step(pipeline, state, started, stage),
    })
}

/// True when every stage `stage` needs has finished or was skipped (a stage before the one
/// the run started from counts as finished: its outputs come from an earlier run).
fn needs_done(pipeline: &Pipeline, state: &RunState, start: usize, stage: &Stage) -> bool {
    stage.needs.iter().all(|need| {
        pipeline.index_of(need.as_str()).is_none_or(|i| i < start)
            || state
                .stage(need.as_str())
                .is_some_and(|s| matches!(s.status, StageStatus::Success | StageStatus::Skipped))
    })
}

/// A rollback to go on with (one a crash cut short), or to start (a run cancelled with
/// `--rollback`).
fn rollback_step(pipeline: &Pipeline, state: &RunState) -> Option<Step> {
    if let Some(r) = &state.rollback
        && r.overall.is_none()
    {
        let stages =
            r.stages.iter().filter(|s| state.stage(s.as_str()).is_none_or(|s| s.rollback.is_none())).cloned().collect();
        return Some(Step::RollBack { trigger: r.trigger.clone(), stages, resumed: true });
    }
    if matches!(state.status, RunStatus::Cancelled | RunStatus::Rejected)
        && state.rollback_requested
        && state.rollback.is_none()
    {
        let stages = rollback_candidates(pipeline, state, None);
        if !stages.is_empty() {
            return Some(Step::RollBack { trigger: None, stages, resumed: false });
        }
    }
    None
}

/// A stage not started yet: skipped (by the skip list or its condition), held for approval,
/// measured for the regression gate, or run.
fn pending_step(pipeline: &Pipeline, state: &RunState, started: &RunStarted, stage: &Stage) -> Step {
    let st = state.stage(stage.id.as_str());
    if started.skip.contains(&stage.id) {
        return Step::Record(Event::StageSkipped { stage: stage.id.clone(), reason: SkipReason::SkipList });
    }
    if stage.judges.is_some() {
        // A judge runs inside the round it judges, never at its own place.
        return Step::Record(Event::StageSkipped { stage: stage.id.clone(), reason: SkipReason::Judge });
    }
    if let Some(step) = condition_step(pipeline, state, stage) {
        return step;
    }
    if let Some(step) = approval_step(state, started, stage) {
        return step;
    }
    if closed_loop::is_closed_loop(stage)
        && st.and_then(|s| s.closed.as_ref()).is_none_or(|l| l.regression_gate.is_none())
    {
        return Step::Baseline { stage: stage.id.clone() };
    }
    new_attempt(pipeline, state, stage, st.map_or(0, |s| s.attempts) + 1)
}

/// What a stage's `condition` makes of it, until it has held.
fn condition_step(pipeline: &Pipeline, state: &RunState, stage: &Stage) -> Option<Step> {
    let condition = stage.condition.as_ref()?;
    match state.stage(stage.id.as_str()).and_then(|s| s.condition.as_ref()) {
        None => Some(Step::Record(evaluate_condition(pipeline, state, stage, condition))),
        Some(ConditionOutcome::True) => None,
        Some(ConditionOutcome::False | ConditionOutcome::ReadsSkippedStage { .. }) => {
            Some(Step::Record(Event::StageSkipped { stage: stage.id.clone(), reason: SkipReason::ConditionFalse }))
        }
        Some(ConditionOutcome::Error { message }) => Some(Step::Record(Event::StageFailed {
            stage: stage.id.clone(),
            error: StageError {
                kind: FailureKind::ConditionError,
                message: format!("condition `{}` could not be evaluated: {message}", condition.source),
                exit_code: None,
                output_tail: String::new(),
                pattern: None,
                classified_by: None,
                unfixable: None,
            },
        })),
    }
}

/// What a stage that `requires_approval` waits for, until it is approved.
fn approval_step(state: &RunState, started: &RunStarted, stage: &Stage) -> Option<Step> {
    if !stage.requires_approval {
        return None;
    }
    match state.stage(stage.id.as_str()).and_then(|s| s.approval.as_ref()) {
        None if started.auto_approve => Some(Step::Record(Event::ApprovalGranted {
            stage: stage.id.clone(),
            by: crate::event::AUTO_APPROVED_BY.into(),
            comment: None,
            via: None,
        })),
        None => Some(Step::Record(Event::ApprovalRequested { stage: stage.id.clone() })),
        Some(a) if !a.granted => Some(Step::Record(Event::RunFinished { status: RunStatus::Rejected })),
        Some(_) => None,
    }
}

/// The stages to roll back, most recent first: those up to the failed stage (included) that
/// declare a `rollback` and did something (succeeded, or failed / were cancelled in flight).
/// In a graph, stages that ran at once end in any order: every stage that did something, in
/// the reverse order of their ends.
pub fn rollback_candidates(pipeline: &Pipeline, state: &RunState, failed: Option<&Stage>) -> Vec<StageId> {
    let end = match failed.and_then(|f| pipeline.index_of(f.id.as_str())) {
        Some(i) if !pipeline.is_graph() => i + 1,
        _ => pipeline.stages.len(),
    };
    let mut stages: Vec<&Stage> = pipeline.stages[..end].iter().rev().collect();
    if pipeline.is_graph() {
        let ended = |s: &Stage| state.stage(s.id.as_str()).map_or(0, |st| st.finished_seq);
        stages.sort_by_key(|s| std::cmp::Reverse(ended(s)));
    }
    stages
        .into_iter()
        .filter(|s| s.rollback.is_some())
        .filter(|s| {
            state.stage(s.id.as_str()).is_some_and(|st| {
                st.rollback.is_none()
                    && st.attempts > 0
                    && matches!(
                        st.status,
                        StageStatus::Success | StageStatus::Failed | StageStatus::Timeout | StageStatus::Cancelled
                    )
            })
        })
        .map(|s| s.id.clone())
        .collect()
}

/// A new attempt of a stage, unless a budget forbids it: then the stage fails for good, before
/// anything of the attempt happens (nothing is half-applied).
pub(super) fn new_attempt(pipeline: &Pipeline, state: &RunState, stage: &Stage, attempt: u32) -> Step {
    match budget_exceeded(pipeline, state, stage) {
        None => Step::Execute { stage: stage.id.clone(), attempt },
        Some(message) => Step::Record(Event::StageFailed {
            stage: stage.id.clone(),
            error: StageError {
                kind: FailureKind::BudgetExceeded,
                message,
                exit_code: None,
                output_tail: String::new(),
                pattern: None,
                classified_by: None,
                unfixable: None,
            },
        }),
    }
}

/// The first budget already spent: the stage's, then the run's.
pub fn budget_exceeded(pipeline: &Pipeline, state: &RunState, stage: &Stage) -> Option<String> {
    use loopwright_spec::pipeline::Budget;
    if stage.budget.is_unlimited() && pipeline.budget.is_unlimited() {
        // Nothing to add up (summing the run's spend is linear in its stages).
        return None;
    }
    let check = |scope: String, b: &Budget, s: crate::state::Spend| -> Option<String> {
        let est = if s.estimated { " (counted by loopwright)" } else { "" };
        if let Some(max) = b.tokens.filter(|m| s.tokens >= *m) {
            return Some(format!("{scope} token budget exhausted: {} of {max} tokens used{est}", s.tokens));
        }
        if let Some(max) = b.cost_usd.filter(|m| s.cost_usd >= *m) {
            return Some(format!("{scope} cost budget exhausted: ${:.4} of ${max:.2} spent", s.cost_usd));
        }
        if let Some(max) = b.wall_ms.filter(|m| s.active_ms >= *m) {
            return Some(format!(
                "{scope} time budget exhausted: {:.1}s of {:.1}s spent in attempts",
                s.active_ms as f64 / 1000.0,
                max as f64 / 1000.0
            ));
        }
        if let Some(max) = b.invocations.filter(|m| s.invocations >= *m) {
            return Some(format!(
                "{scope} invocation budget exhausted: {} of {max} agent invocations made",
                s.invocations
            ));
        }
        None
    };
    check(format!("stage `{}`", stage.id), &stage.budget, state.stage_spend(stage.id.as_str()))
        .or_else(|| check("run".to_owned(), &pipeline.budget, state.spend()))
}

/// After a failed attempt: retry (seed 004 "Retry Protocol") or fail the stage.
fn after_failure(pipeline: &Pipeline, state: &RunState, stage: &Stage) -> Step {
    let st = state.stage(stage.id.as_str()).expect("a failed stage has state");
    let error = st.last_error.clone().unwrap_or(StageError {
        kind: FailureKind::ExecutionError,
        message: "the attempt failed".into(),
        exit_code: None,
        output_tail: String::new(),
        pattern: None,
        classified_by: None,
        unfixable: None,
    });
    if let Some(step) = fallback::fall_back(pipeline, stage, st, error.unfixable, st.attempts) {
        return step;
    }
    // The retry budget counts from the pass's start, or from when the agent took over.
    let base = st.pass_base.max(st.agent_since);
    if let Some(policy) = &stage.retry
        && error.kind.is_retryable()
        && st.attempts - base < policy.max_attempts
        && state.retries_used < pipeline.max_retries
    {
        let delay = policy.delay(st.attempts - base);
        let secs = policy.initial_delay.as_secs_f64();
        let how = match policy.backoff {
            loopwright_spec::pipeline::Backoff::Exponential => {
                format!("exponential backoff {secs}s * 2^{}", st.attempts - base - 1)
            }
            loopwright_spec::pipeline::Backoff::Linear => {
                format!("linear backoff {secs}s * {}", st.attempts - base)
            }
            loopwright_spec::pipeline::Backoff::Fixed => format!("fixed backoff {secs}s"),
        };
        return Step::Record(Event::RetryScheduled {
            stage: stage.id.clone(),
            attempt: st.attempts + 1,
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            reason: format!("{} after {}; {how}", error.kind.as_str(), error.message),
        });
    }
    Step::Record(Event::StageFailed { stage: stage.id.clone(), error })
}
