//! The run state machine: given the pipeline and a run's state, what happens next.
//!
//! [`next_step`] is pure: it reads the state and returns either an event to record (a decision
//! that needs no outside work, such as skipping a stage) or work for the driver (run a stage,
//! wait for a retry). The driver records what the work gave and asks again.

use loopwright_spec::outputs::typed_value;
use loopwright_spec::{Condition, Pipeline, Stage, StageId};
use serde_json::{Map, Value, json};

use crate::closed_loop::{self, NextAction};
use crate::event::{Answer, ConditionOutcome, Event, FailureKind, FeedbackAction, RunStatus, SkipReason, StageError};
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
    /// Nothing more to do now: the run has this status.
    Done(RunStatus),
}

/// Decides the next step of a run.
pub fn next_step(pipeline: &Pipeline, state: &RunState, now: jiff::Timestamp) -> Step {
    let Some(started) = &state.started else {
        return Step::Done(RunStatus::Failed);
    };
    if let Some(r) = &state.rollback
        && r.overall.is_none()
    {
        let stages =
            r.stages.iter().filter(|s| state.stage(s.as_str()).is_none_or(|s| s.rollback.is_none())).cloned().collect();
        return Step::RollBack { trigger: r.trigger.clone(), stages, resumed: true };
    }
    if state.status == RunStatus::Cancelled && state.rollback_requested && state.rollback.is_none() {
        let stages = rollback_candidates(pipeline, state, None);
        if !stages.is_empty() {
            return Step::RollBack { trigger: None, stages, resumed: false };
        }
    }
    if state.status != RunStatus::Running {
        return Step::Done(state.status);
    }
    let start = started.start_from.as_ref().and_then(|s| pipeline.index_of(s.as_str())).unwrap_or(0);
    let from = start.max(state.scan_hint()).min(pipeline.stages.len());
    for (index, stage) in pipeline.stages.iter().enumerate().skip(from) {
        let st = state.stage(stage.id.as_str());
        match st.map_or(StageStatus::Pending, |s| s.status) {
            StageStatus::Success if stage.feedback_loop.is_some() => {
                if let Some(step) = feedback_step(pipeline, state, stage) {
                    return step;
                }
                state.set_scan_hint(index + 1);
                continue;
            }
            StageStatus::Success | StageStatus::Skipped => {
                state.set_scan_hint(index + 1);
                continue;
            }
            StageStatus::Failed | StageStatus::Timeout | StageStatus::Cancelled | StageStatus::RolledBack => {
                if state.rollback.is_none() {
                    let stages = rollback_candidates(pipeline, state, Some(stage));
                    if !stages.is_empty() {
                        return Step::RollBack { trigger: Some(stage.id.clone()), stages, resumed: false };
                    }
                }
                return Step::Record(Event::RunFinished { status: RunStatus::Failed });
            }
            StageStatus::Running => {
                return Step::Execute { stage: stage.id.clone(), attempt: st.map_or(1, |s| s.attempts.max(1)) };
            }
            StageStatus::AttemptFailed => return after_failure(pipeline, state, stage),
            StageStatus::Looping => return loop_step(pipeline, state, stage, now),
            StageStatus::RetryWaiting => {
                let s = st.expect("a waiting stage has state");
                return match s.retry_at {
                    Some(until) if until > now => Step::Wait { stage: stage.id.clone(), until },
                    _ => new_attempt(pipeline, state, stage, s.attempts + 1),
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
                                    pattern: None,
                                    classified_by: None,
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
                                by: crate::event::AUTO_APPROVED_BY.into(),
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
                if closed_loop::is_closed_loop(stage)
                    && st.and_then(|s| s.closed.as_ref()).is_none_or(|l| l.regression_gate.is_none())
                {
                    return Step::Baseline { stage: stage.id.clone() };
                }
                return new_attempt(pipeline, state, stage, st.map_or(0, |s| s.attempts) + 1);
            }
        }
    }
    Step::Record(Event::RunFinished { status: RunStatus::Success })
}

/// The stages to roll back, most recent first: those up to the failed stage (included) that
/// declare a `rollback` and did something (succeeded, or failed / were cancelled in flight).
pub fn rollback_candidates(pipeline: &Pipeline, state: &RunState, failed: Option<&Stage>) -> Vec<StageId> {
    let end = failed.and_then(|f| pipeline.index_of(f.id.as_str())).map_or(pipeline.stages.len(), |i| i + 1);
    pipeline.stages[..end]
        .iter()
        .rev()
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

/// One item of a review's `feedback_items` (seed 004).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(default)]
pub struct FeedbackItem {
    /// `blocking`, `advisory` or `informational`.
    pub severity: String,
    /// The file concerned.
    pub file: Option<String>,
    /// The line concerned.
    pub line: Option<u64>,
    /// What is wrong.
    pub description: String,
    /// How to fix it.
    pub suggested_fix: Option<String>,
    /// Who said so.
    pub source_agent: Option<String>,
    /// The quality gate, if any.
    pub gate_id: Option<String>,
}

/// Reads `feedback_items` from a stage output: a fenced ```yaml / ```json block, or the text
/// itself as YAML. Text that is not a list of items gives no items.
pub fn parse_feedback_items(text: &str) -> Vec<FeedbackItem> {
    let body = loopwright_spec::outputs::fenced_block(text).unwrap_or(text);
    serde_saphyr::from_str::<Vec<FeedbackItem>>(body).unwrap_or_default()
}

/// After a review stage with a `feedback_loop` succeeded: loop, escalate or go on.
fn feedback_step(pipeline: &Pipeline, state: &RunState, stage: &Stage) -> Option<Step> {
    let st = state.stage(stage.id.as_str())?;
    let feedback = stage.feedback_loop.as_ref()?;
    let iteration = st.feedback_iterations;
    let check = |items: usize, blocking: usize, iteration: u32, action: FeedbackAction| {
        Some(Step::Record(Event::FeedbackChecked { stage: stage.id.clone(), items, blocking, iteration, action }))
    };
    let items = parse_feedback_items(st.outputs.get("feedback_items").map_or("", String::as_str));
    let blocking: Vec<&FeedbackItem> = items.iter().filter(|i| i.severity == "blocking").collect();
    let re_implement = |extra: Option<&str>| {
        let target = pipeline.index_of(feedback.target_stage.as_str()).unwrap_or(0);
        let source = pipeline.index_of(stage.id.as_str()).unwrap_or(target);
        let reset = pipeline.stages[target..=source].iter().map(|s| s.id.clone()).collect();
        let mut brief = format!(
            "Review `{}` found {} blocking item{} (feedback iteration {} of {}). Fix them:\n",
            stage.id,
            blocking.len(),
            if blocking.len() == 1 { "" } else { "s" },
            iteration + 1,
            feedback.max_iterations
        );
        for item in &blocking {
            let place = match (&item.file, item.line) {
                (Some(f), Some(l)) => format!("{f}:{l}: "),
                (Some(f), None) => format!("{f}: "),
                _ => String::new(),
            };
            brief.push_str(&format!("- {place}{}", item.description.trim()));
            if let Some(fix) = &item.suggested_fix {
                brief.push_str(&format!(" (suggested fix: {})", fix.trim()));
            }
            brief.push('\n');
        }
        if let Some(text) = extra {
            brief.push_str(&format!("Instruction from a human (high priority): {text}\n"));
        }
        FeedbackAction::ReImplement { target: feedback.target_stage.clone(), reset, brief }
    };
    match (&st.feedback, &st.escalation_answer) {
        (None, _) if blocking.is_empty() => check(items.len(), 0, iteration, FeedbackAction::Continue),
        (None, _) if iteration < feedback.max_iterations => {
            check(items.len(), blocking.len(), iteration + 1, re_implement(None))
        }
        (None, _) => check(items.len(), blocking.len(), iteration, FeedbackAction::Escalate),
        (Some(FeedbackAction::Escalate), Some(Answer::Retry)) => {
            check(items.len(), blocking.len(), iteration + 1, re_implement(None))
        }
        (Some(FeedbackAction::Escalate), Some(Answer::Fix { text })) => {
            check(items.len(), blocking.len(), iteration + 1, re_implement(Some(text)))
        }
        (Some(FeedbackAction::Escalate), Some(Answer::Skip)) => {
            check(items.len(), blocking.len(), iteration, FeedbackAction::Accepted)
        }
        _ => None,
    }
}

/// A new attempt of a stage, unless a budget forbids it: then the stage fails for good, before
/// anything of the attempt happens (nothing is half-applied).
fn new_attempt(pipeline: &Pipeline, state: &RunState, stage: &Stage, attempt: u32) -> Step {
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

/// The closed loop after GENERATE (seed 000): evaluate, analyze, fix, escalate or give up.
fn loop_step(pipeline: &Pipeline, state: &RunState, stage: &Stage, now: jiff::Timestamp) -> Step {
    let (st, lp, it) = state.looping(stage.id.as_str());
    let id = stage.id.clone();
    if it.failure.is_none() {
        return Step::Evaluate { stage: id, attempt: it.attempt };
    }
    let Some(analysis) = &it.analysis else {
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
        // The loop gave up; a stage `retry:` runs the whole loop again first (seed 000: "the
        // pipeline executor may then retry the whole stage"), each pass with a fresh budget.
        NextAction::DeadLetter
            if lp.dead_letter.is_none()
                && stage.retry.as_ref().is_some_and(|r| lp.passes + 1 < r.max_attempts)
                && state.retries_used < pipeline.max_retries =>
        {
            let policy = stage.retry.as_ref().expect("checked");
            let delay = policy.delay(lp.passes + 1);
            Step::Record(Event::RetryScheduled {
                stage: id,
                attempt: st.attempts + 1,
                delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                reason: format!(
                    "the closed loop gave up ({}); stage retry {} of {}",
                    analysis.reason,
                    lp.passes + 2,
                    policy.max_attempts
                ),
            })
        }
        NextAction::DeadLetter if lp.dead_letter.is_none() => Step::Record(Event::DeadLettered {
            stage: id,
            attempt: it.attempt,
            reason: "retry_budget_exhausted".into(),
            detail: analysis.reason.clone(),
        }),
        NextAction::DeadLetter => {
            let failure = it.failure.as_ref().expect("checked above");
            Step::Record(Event::StageFailed {
                stage: id,
                error: StageError {
                    kind: FailureKind::ExecutionError,
                    message: format!(
                        "the closed loop gave up after {} attempt{} ({}); see the dead letter",
                        lp.iterations.len(),
                        if lp.iterations.len() == 1 { "" } else { "s" },
                        analysis.reason
                    ),
                    exit_code: None,
                    output_tail: failure.output.clone(),
                    pattern: failure.pattern.clone(),
                    classified_by: None,
                },
            })
        }
    }
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
    });
    if let Some(policy) = &stage.retry
        && error.kind.is_retryable()
        && st.attempts - st.pass_base < policy.max_attempts
        && state.retries_used < pipeline.max_retries
    {
        let delay = policy.delay(st.attempts - st.pass_base);
        let secs = policy.initial_delay.as_secs_f64();
        let how = match policy.backoff {
            loopwright_spec::pipeline::Backoff::Exponential => {
                format!("exponential backoff {secs}s * 2^{}", st.attempts - st.pass_base - 1)
            }
            loopwright_spec::pipeline::Backoff::Linear => {
                format!("linear backoff {secs}s * {}", st.attempts - st.pass_base)
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
