//! The run state machine: given the pipeline and a run's state, what happens next.
//!
//! [`next_step`] is pure: it reads the state and returns either an event to record (a decision
//! that needs no outside work, such as skipping a stage) or work for the driver (run a stage,
//! wait for a retry). The driver records what the work gave and asks again.

use loopwright_spec::outputs::typed_value;
use loopwright_spec::{Condition, Pipeline, Stage, StageId};
use serde_json::{Map, Value, json};

use crate::event::{ConditionOutcome, Event, FailureKind, RunStatus, SkipReason, StageError};
use crate::state::{RunState, StageStatus};

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
    /// Nothing more to do now: the run has this status.
    Done(RunStatus),
}

/// Decides the next step of a run.
pub fn next_step(pipeline: &Pipeline, state: &RunState, now: jiff::Timestamp) -> Step {
    let Some(started) = &state.started else {
        return Step::Done(RunStatus::Failed);
    };
    if state.status != RunStatus::Running {
        return Step::Done(state.status);
    }
    let start = started.start_from.as_ref().and_then(|s| pipeline.index_of(s.as_str())).unwrap_or(0);
    for stage in &pipeline.stages[start..] {
        let st = state.stage(stage.id.as_str());
        match st.map_or(StageStatus::Pending, |s| s.status) {
            StageStatus::Success | StageStatus::Skipped => continue,
            StageStatus::Failed | StageStatus::Timeout | StageStatus::Cancelled | StageStatus::RolledBack => {
                return Step::Record(Event::RunFinished { status: RunStatus::Failed });
            }
            StageStatus::Running => {
                return Step::Execute { stage: stage.id.clone(), attempt: st.map_or(1, |s| s.attempts.max(1)) };
            }
            StageStatus::AttemptFailed => return after_failure(pipeline, state, stage),
            StageStatus::RetryWaiting => {
                let s = st.expect("a waiting stage has state");
                return match s.retry_at {
                    Some(until) if until > now => Step::Wait { stage: stage.id.clone(), until },
                    _ => Step::Execute { stage: stage.id.clone(), attempt: s.attempts + 1 },
                };
            }
            StageStatus::Pending => {
                if started.skip.contains(&stage.id) {
                    return Step::Record(Event::StageSkipped { stage: stage.id.clone(), reason: SkipReason::SkipList });
                }
                if let Some(condition) = &stage.condition {
                    match st.and_then(|s| s.condition.as_ref()) {
                        None => return Step::Record(evaluate_condition(pipeline, state, stage, condition)),
                        Some(ConditionOutcome::True) => {}
                        Some(ConditionOutcome::False | ConditionOutcome::ReadsSkippedStage { .. }) => {
                            return Step::Record(Event::StageSkipped {
                                stage: stage.id.clone(),
                                reason: SkipReason::ConditionFalse,
                            });
                        }
                        Some(ConditionOutcome::Error { message }) => {
                            return Step::Record(Event::StageFailed {
                                stage: stage.id.clone(),
                                error: StageError {
                                    kind: FailureKind::ConditionError,
                                    message: format!(
                                        "condition `{}` could not be evaluated: {message}",
                                        condition.source
                                    ),
                                    exit_code: None,
                                    output_tail: String::new(),
                                },
                            });
                        }
                    }
                }
                if stage.requires_approval {
                    match st.and_then(|s| s.approval.as_ref()) {
                        None if started.auto_approve => {
                            return Step::Record(Event::ApprovalGranted {
                                stage: stage.id.clone(),
                                by: "--yes".into(),
                                comment: None,
                            });
                        }
                        None => return Step::Record(Event::ApprovalRequested { stage: stage.id.clone() }),
                        Some(a) if !a.granted => {
                            return Step::Record(Event::RunFinished { status: RunStatus::Cancelled });
                        }
                        Some(_) => {}
                    }
                }
                return Step::Execute { stage: stage.id.clone(), attempt: 1 };
            }
        }
    }
    Step::Record(Event::RunFinished { status: RunStatus::Success })
}

/// After a failed attempt: retry (seed 004 "Retry Protocol") or fail the stage.
fn after_failure(pipeline: &Pipeline, state: &RunState, stage: &Stage) -> Step {
    let st = state.stage(stage.id.as_str()).expect("a failed stage has state");
    let error = st.last_error.clone().unwrap_or(StageError {
        kind: FailureKind::ExecutionError,
        message: "the attempt failed".into(),
        exit_code: None,
        output_tail: String::new(),
    });
    if let Some(policy) = &stage.retry
        && error.kind.is_retryable()
        && st.attempts < policy.max_attempts
        && state.retries_used < pipeline.max_retries
    {
        let delay = policy.delay(st.attempts);
        let secs = policy.initial_delay.as_secs_f64();
        let how = match policy.backoff {
            loopwright_spec::pipeline::Backoff::Exponential => {
                format!("exponential backoff {secs}s * 2^{}", st.attempts - 1)
            }
            loopwright_spec::pipeline::Backoff::Linear => format!("linear backoff {secs}s * {}", st.attempts),
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

/// Evaluates a stage's condition against the run's variables and earlier outputs.
fn evaluate_condition(pipeline: &Pipeline, state: &RunState, stage: &Stage, condition: &Condition) -> Event {
    let context = condition_context(pipeline, state);
    let mut values = Map::new();
    for var in &condition.variables {
        if var == "stage_outputs" {
            let mut outs = Map::new();
            for r in &condition.outputs {
                let v = context["stage_outputs"].get(&r.stage).cloned().unwrap_or(Value::Null);
                let v = match &r.key {
                    Some(k) => v.get(k).cloned().unwrap_or(Value::Null),
                    None => v,
                };
                outs.insert(r.key.as_ref().map_or_else(|| r.stage.clone(), |k| format!("{}.{k}", r.stage)), v);
            }
            values.insert(var.clone(), Value::Object(outs));
        } else {
            values.insert(var.clone(), context.get(var).cloned().unwrap_or(Value::Null));
        }
    }
    let skipped = condition.outputs.iter().find(|r| state.outputs_of(&r.stage).is_none());
    let outcome = match skipped {
        Some(r) => ConditionOutcome::ReadsSkippedStage { stage: StageId::parse(&r.stage).expect("validated stage id") },
        None => match condition.evaluate(&context) {
            Ok(true) => ConditionOutcome::True,
            Ok(false) => ConditionOutcome::False,
            Err(message) => ConditionOutcome::Error { message },
        },
    };
    Event::ConditionEvaluated {
        stage: stage.id.clone(),
        condition: condition.source.clone(),
        values: Value::Object(values),
        outcome,
    }
}

/// The variables conditions see: `complexity`, `task_type`, `tags`, `always_include`,
/// `stage_outputs` and the pipeline's declared `vars`.
pub fn condition_context(pipeline: &Pipeline, state: &RunState) -> Value {
    let given = state.started.as_ref().map(|s| s.vars.clone()).unwrap_or_default();
    let text = |k: &str| given.get(k).filter(|v| !v.is_empty()).map_or(Value::Null, |v| Value::String(v.clone()));
    let list = |k: &str| {
        Value::Array(
            given
                .get(k)
                .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| json!(s)).collect())
                .unwrap_or_default(),
        )
    };
    let mut ctx = Map::new();
    for (name, default) in &pipeline.vars {
        ctx.insert(name.clone(), given.get(name).map_or_else(|| default.clone(), |v| typed_value(v)));
    }
    ctx.insert("complexity".into(), text("complexity"));
    ctx.insert("task_type".into(), text("task_type"));
    ctx.insert("tags".into(), list("tags"));
    ctx.insert("always_include".into(), list("always_include"));
    let mut outs = Map::new();
    for (stage, outputs) in state.all_outputs() {
        outs.insert(
            stage.to_owned(),
            Value::Object(outputs.iter().map(|(k, v)| (k.clone(), typed_value(v))).collect()),
        );
    }
    ctx.insert("stage_outputs".into(), Value::Object(outs));
    Value::Object(ctx)
}
