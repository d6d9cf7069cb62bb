//! The closed loop's next step after GENERATE (seed 000): evaluate, analyze, fix, escalate
//! or give up.

use loopwright_spec::{Pipeline, Stage};

use super::{Step, new_attempt};
use crate::closed_loop::NextAction;
use crate::event::{Answer, Event, FailureKind, RunStatus, SkipReason, StageError};
use crate::state::RunState;

/// The closed loop after GENERATE (seed 000): evaluate, analyze, fix, escalate or give up.
pub(super) fn loop_step(pipeline: &Pipeline, state: &RunState, stage: &Stage, now: jiff::Timestamp) -> Step {
    let (st, lp, it) = state.looping(stage.id.as_str());
    let id = stage.id.clone();
    if it.failure.is_none() {
        return Step::Evaluate { stage: id, attempt: it.attempt };
    }
    let Some(analysis) = &it.analysis else {
        let unfixable = it.failure.as_ref().and_then(|f| f.unfixable);
        if let Some(step) = super::fallback::fall_back(pipeline, stage, st, unfixable, it.attempt) {
            return step;
        }
        return Step::Analyze { stage: id, attempt: it.attempt };
    };
    match analysis.next {
        NextAction::Fix => match (&it.fix, it.fix_at) {
            (Some(fix), Some(at)) => {
                let until = at
                    .checked_add(jiff::SignedDuration::from_millis(i64::try_from(fix.wait_ms).unwrap_or(i64::MAX)))
                    .unwrap_or(at);
                if until > now {
                    Step::Wait { stage: id, until }
                } else {
                    new_attempt(pipeline, state, stage, st.attempts + 1)
                }
            }
            _ => Step::Fix { stage: id, attempt: it.attempt },
        },
        NextAction::Escalate => match (&lp.escalation, &lp.answer) {
            (_, Some(Answer::Retry | Answer::Fix { .. })) => new_attempt(pipeline, state, stage, st.attempts + 1),
            (_, Some(Answer::Skip)) => {
                Step::Record(Event::StageSkipped { stage: id, reason: SkipReason::EscalationSkip })
            }
            (None, None) => {
                Step::Record(Event::LoopEscalated { stage: id, attempt: it.attempt, reason: analysis.reason.clone() })
            }
            (Some(_), None) | (_, Some(Answer::Abort)) => Step::Done(RunStatus::Waiting),
        },
        NextAction::DeadLetter => gave_up(pipeline, state, stage),
    }
}

/// The loop gave up; a stage `retry:` runs the whole loop again first (seed 000: "the pipeline
/// executor may then retry the whole stage"), each pass with a fresh budget; else the failure
/// is dead-lettered, then the stage fails.
fn gave_up(pipeline: &Pipeline, state: &RunState, stage: &Stage) -> Step {
    let (st, lp, it) = state.looping(stage.id.as_str());
    let id = stage.id.clone();
    let reason = it.analysis.as_ref().map(|a| a.reason.clone()).unwrap_or_default();
    let retry = stage.retry.as_ref().filter(|r| lp.passes + 1 < r.max_attempts);
    if lp.dead_letter.is_some() {
        let failure = it.failure.as_ref().expect("a loop gives up on a failure");
        return Step::Record(Event::StageFailed {
            stage: id,
            error: StageError {
                kind: FailureKind::ExecutionError,
                message: format!(
                    "the closed loop gave up after {} attempt{} ({reason}); see the dead letter",
                    lp.iterations.len(),
                    if lp.iterations.len() == 1 { "" } else { "s" },
                ),
                exit_code: None,
                output_tail: failure.output.clone(),
                pattern: failure.pattern.clone(),
                classified_by: None,
                unfixable: None,
            },
        });
    }
    match retry {
        Some(policy) if state.retries_used < pipeline.max_retries => {
            let delay = policy.delay(lp.passes + 1);
            Step::Record(Event::RetryScheduled {
                stage: id,
                attempt: st.attempts + 1,
                delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                reason: format!(
                    "the closed loop gave up ({reason}); stage retry {} of {}",
                    lp.passes + 2,
                    policy.max_attempts
                ),
            })
        }
        _ => Step::Record(Event::DeadLettered {
            stage: id,
            attempt: it.attempt,
            reason: "retry_budget_exhausted".into(),
            detail: reason,
        }),
    }
}
