//! Why a run stands where it stands, in words: the headline at the top of a failed, waiting,
//! interrupted or cancelled run and of each failed stage — the failing check and its key lines,
//! the failure's category and how sure loopwright is (or "unclassified"), what was tried, and
//! what happens next or what is asked of the reader. One pure function of the journal's state,
//! read by the dashboard and the notifications alike.

use loopwright_engine::closed_loop::ClassifiedBy;
use loopwright_engine::state::{StageState, StageStatus};
use loopwright_engine::{RunState, RunStatus};
use loopwright_spec::Pipeline;
use serde::Serialize;

/// How a headline reads: what the reader is looking at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tone {
    /// The run failed, or a stage did.
    Failed,
    /// A person is asked for something.
    Waiting,
    /// The run stopped and can be resumed.
    Interrupted,
    /// A person ended the run.
    Cancelled,
}

/// A run's or a stage's headline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Headline {
    /// What it reads as.
    pub tone: Tone,
    /// The stage it is about.
    pub stage: Option<String>,
    /// One sentence: what happened.
    pub title: String,
    /// The failing check (its command or name), when a check failed.
    pub check: Option<String>,
    /// The output's key lines (at most eight).
    pub lines: Vec<String>,
    /// The failure's category and how sure, or "unclassified".
    pub category: Option<String>,
    /// What was tried: attempts, strategies, the budget spent.
    pub tried: Vec<String>,
    /// What happens next, or what is asked of the reader.
    pub next: String,
}

/// The key lines shown: at most this many.
const KEY_LINES: usize = 8;

/// The category of a classified failure in words, with what decided it: `test-failure (92 %
/// sure, by its pattern)`, `… (84 % likely, by the statistical classifier)`, `… (as the
/// stage's agent labelled it)`, or `unclassified` when nothing was sure.
fn category(pattern: Option<&str>, confidence: Option<f64>, by: Option<ClassifiedBy>) -> String {
    let percent = |c: f64| (c * 100.0).clamp(0.0, 100.0);
    match (pattern, confidence, by) {
        (None, _, _) => "unclassified".to_owned(),
        (Some(p), _, Some(ClassifiedBy::Agent)) => format!("{p} (as the stage's agent labelled it)"),
        (Some(p), Some(c), Some(ClassifiedBy::Statistical)) => {
            format!("{p} ({:.0} % likely, by the statistical classifier)", percent(c))
        }
        (Some(p), Some(c), _) => format!("{p} ({:.0} % sure, by its pattern)", percent(c)),
        (Some(p), None, _) => p.to_owned(),
    }
}

fn plural(n: u32, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The last lines of an output that say something (not blank), at most [`KEY_LINES`].
pub fn last_lines(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().map(str::trim_end).filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(KEY_LINES)..].iter().map(|l| (*l).to_owned()).collect()
}

/// What was spent against the stage's budget, when it has one or spent anything.
fn spend_line(stage: &StageState, pipeline: &Pipeline) -> Option<String> {
    let budget = pipeline.stage(stage.id.as_str()).map(|s| s.budget).unwrap_or_default();
    let spend = &stage.spend;
    if spend.invocations == 0 && budget.tokens.is_none() && budget.cost_usd.is_none() && budget.invocations.is_none() {
        return None;
    }
    let mut parts =
        vec![format!("{} tokens{}", spend.tokens, budget.tokens.map(|b| format!(" of {b}")).unwrap_or_default())];
    if spend.cost_usd > 0.0 || budget.cost_usd.is_some() {
        parts.push(format!(
            "${:.2}{}",
            spend.cost_usd,
            budget.cost_usd.map(|b| format!(" of ${b:.2}")).unwrap_or_default()
        ));
    }
    parts.push(format!(
        "{}{}",
        plural(spend.invocations, "model call", "model calls"),
        budget.invocations.map(|b| format!(" of {b}")).unwrap_or_default()
    ));
    Some(format!("Budget spent: {}", parts.join(", ")))
}

/// The headline of a stage that failed or was escalated; `None` for any other stage.
pub fn stage_headline(stage: &StageState, pipeline: &Pipeline) -> Option<Headline> {
    headline_of(stage, Some(pipeline))
}

/// One line for a run's row in a list, from its state alone: what it waits for ("gate at
/// `ship`", "escalation at `docs`: permission-error"), the first line of why it failed, or who
/// rejected it ("rejected at `ship` by carol: not on a Friday").
pub fn row_line(state: &RunState, status: RunStatus) -> Option<String> {
    use loopwright_engine::result::{PipelineResult, WaitKind};
    match status {
        RunStatus::Waiting => {
            let waiting = PipelineResult::from_state(state).waiting?;
            let stage = waiting.stage;
            Some(match waiting.kind {
                WaitKind::Approval => format!("gate at `{stage}`"),
                WaitKind::Escalation => {
                    let pattern = state
                        .stage(&stage)
                        .and_then(|s| s.closed.as_deref())
                        .and_then(|l| l.iterations.iter().rev().find_map(|i| i.failure.as_ref()))
                        .and_then(|f| f.pattern.clone());
                    format!("escalation at `{stage}`: {}", pattern.as_deref().unwrap_or("unclassified"))
                }
                WaitKind::Ci => "its pull request's CI".to_owned(),
                WaitKind::Review => "an approval of its pull request".to_owned(),
            })
        }
        RunStatus::Failed => {
            let stage = state.failed_stage.as_ref().and_then(|id| state.stage(id.as_str()))?;
            headline_of(stage, None).map(|h| h.title)
        }
        RunStatus::Rejected => {
            let (stage, approval) =
                state.stages.iter().rev().find_map(|s| s.approval.as_ref().filter(|a| !a.granted).map(|a| (s, a)))?;
            let comment = approval.comment.as_deref().map(|c| format!(": {c}")).unwrap_or_default();
            Some(format!("rejected at `{}` by {}{comment}", stage.id, approval.by))
        }
        _ => None,
    }
}

/// [`stage_headline`], with what the stage spent against its budget when the pipeline is given.
fn headline_of(stage: &StageState, pipeline: Option<&Pipeline>) -> Option<Headline> {
    let escalated = stage.closed.as_ref().is_some_and(|l| l.escalation.is_some() && l.answer.is_none())
        || (stage.feedback == Some(loopwright_engine::event::FeedbackAction::Escalate)
            && stage.escalation_answer.is_none());
    let failed = matches!(stage.status, StageStatus::Failed | StageStatus::Timeout);
    if !failed && !escalated {
        return None;
    }
    let id = stage.id.as_str();
    let mut tried = Vec::new();
    let (check, lines, category_words, title) = match stage.closed.as_deref() {
        Some(l) if !l.iterations.is_empty() => {
            let last = l.iterations.iter().rev().find_map(|i| i.failure.as_ref());
            let n = u32::try_from(l.iterations.len()).unwrap_or(u32::MAX);
            let strategies = l.strategies();
            tried.push(format!(
                "{}; {}",
                plural(n, "attempt", "attempts"),
                if strategies.is_empty() {
                    "no fix strategy ran".to_owned()
                } else {
                    format!(
                        "fix strategies tried: {}",
                        strategies.iter().map(|s| s.as_str().replace('_', " ")).collect::<Vec<_>>().join(", ")
                    )
                }
            ));
            match last {
                Some(f) => {
                    let lines = if f.lines.is_empty() { last_lines(&f.output) } else { f.lines.clone() };
                    let what = match f.source.as_str() {
                        "generate" => "the agent's attempt failed".to_owned(),
                        "pre_validation" => "a validation gate failed".to_owned(),
                        "regression_check" => "the tests of what depends on it regressed".to_owned(),
                        check => format!("the check `{check}` failed"),
                    };
                    let check = (!matches!(f.source.as_str(), "generate" | "pre_validation" | "regression_check"))
                        .then(|| f.source.clone());
                    (
                        check,
                        lines.into_iter().take(KEY_LINES).collect(),
                        format!(
                            "{}; it calls for {}",
                            category(f.pattern.as_deref(), Some(f.confidence), Some(f.classified_by())),
                            f.strategy.as_str().replace('_', " ")
                        ),
                        format!("Stage {id}: {what} — {}", f.headline()),
                    )
                }
                None => (None, Vec::new(), category(None, None, None), format!("Stage {id} did not succeed")),
            }
        }
        _ => {
            tried.push(plural(stage.attempts, "attempt", "attempts"));
            match &stage.last_error {
                Some(e) => {
                    let how = match e.exit_code {
                        Some(code) => format!("{} (exit {code})", e.kind.as_str().replace('_', " ")),
                        None => e.kind.as_str().replace('_', " "),
                    };
                    (
                        None,
                        last_lines(&e.output_tail),
                        category(e.pattern.as_deref(), None, e.classified_by),
                        format!("Stage {id} failed: {how} — {}", e.message.lines().next().unwrap_or_default()),
                    )
                }
                None => (None, Vec::new(), category(None, None, None), format!("Stage {id} failed")),
            }
        }
    };
    tried.extend(pipeline.and_then(|p| spend_line(stage, p)));
    if !stage.network_refused.is_empty() {
        let hosts: Vec<String> = stage.network_refused.iter().map(|h| format!("`{h}`")).collect();
        tried.push(format!(
            "the sandbox refused its connections to {} (a stage reaches only the hosts its `network:` names)",
            hosts.join(", ")
        ));
    }
    let next = if escalated {
        let reason = stage.closed.as_ref().and_then(|l| l.escalation_reason.clone());
        format!(
            "{}You are asked to answer: retry, retry with your guidance (fix), skip the stage, or abort the run.",
            reason.map(|r| format!("It was escalated: {r}. ")).unwrap_or_default()
        )
    } else if let Some(letter) = stage.closed.as_ref().and_then(|l| l.dead_letter.as_ref()) {
        format!("The task went to the dead letters ({letter}): nothing retries it on its own.")
    } else {
        "Nothing retries it on its own: re-run the run, or retry from this stage.".to_owned()
    };
    Some(Headline {
        tone: if escalated { Tone::Waiting } else { Tone::Failed },
        stage: Some(id.to_owned()),
        title,
        check,
        lines,
        category: Some(category_words),
        tried,
        next,
    })
}

/// A run from a forge that waits on its pull request: for its CI (nobody answers), or for a
/// person's approval of the tested head before loopwright merges it (`merge = "auto"`).
fn pull_request_wait(state: &RunState) -> Option<Headline> {
    let link = state.forge_link()?;
    let pull = state.forge.change()?;
    let head = state.forge.head()?;
    let head = head.get(..12).unwrap_or(head);
    let stage = link.stage.as_str();
    let (title, next) = if state.forge.waiting_for_ci() {
        let green = if link.merge.is_some() { "waits for an approval to merge" } else { "ends the run" };
        (
            format!("Waits for CI on pull request #{} at {head}", pull.number),
            format!("Nobody needs to answer: a red round goes back to stage {stage}, a green one {green}."),
        )
    } else if link.merge.is_some() && !state.forge.merged {
        (
            format!("Waits for a person to approve pull request #{} at {head}", pull.number),
            format!(
                "Its CI passed. Someone with the permission approves that head on GitHub; loopwright then merges exactly that head. A review asking for changes goes back to stage {stage}."
            ),
        )
    } else {
        return None;
    };
    Some(Headline {
        tone: Tone::Waiting,
        stage: Some(stage.to_owned()),
        title,
        check: None,
        lines: Vec::new(),
        category: None,
        tried: Vec::new(),
        next,
    })
}

/// The headline of a run that failed, waits for a person, was interrupted or cancelled;
/// `None` for a run that runs, is queued or succeeded. `status` is the status shown (a run
/// whose owner died reads as interrupted).
pub fn run_headline(state: &RunState, status: RunStatus, pipeline: &Pipeline) -> Option<Headline> {
    match status {
        RunStatus::Waiting => {
            if let Some(gate) = state.waiting_for_approval() {
                let id = gate.id.as_str();
                let description = pipeline.stage(id).map(|s| s.description.clone()).unwrap_or_default();
                let done: Vec<&str> =
                    state.stages.iter().filter(|s| s.status == StageStatus::Success).map(|s| s.id.as_str()).collect();
                return Some(Headline {
                    tone: Tone::Waiting,
                    stage: Some(id.to_owned()),
                    title: format!(
                        "Stage {id} waits for your approval{}",
                        if description.is_empty() { String::new() } else { format!(": {description}") }
                    ),
                    check: None,
                    lines: Vec::new(),
                    category: None,
                    tried: if done.is_empty() { Vec::new() } else { vec![format!("Done so far: {}", done.join(", "))] },
                    next: format!("Approve to run {id}, or reject to cancel the run."),
                });
            }
            if let Some(stage) = state.waiting_for_escalation() {
                return stage_headline(stage, pipeline).map(|mut h| {
                    h.tone = Tone::Waiting;
                    h.title = format!("Escalated to you — {}", h.title);
                    h
                });
            }
            if let Some(headline) = pull_request_wait(state) {
                return Some(headline);
            }
            Some(Headline {
                tone: Tone::Waiting,
                stage: None,
                title: "The run waits for a person".into(),
                check: None,
                lines: Vec::new(),
                category: None,
                tried: Vec::new(),
                next: "Look at the stages below for what it waits on.".into(),
            })
        }
        RunStatus::Failed => {
            let stage = state.failed_stage.as_ref().and_then(|id| state.stage(id.as_str())).or_else(|| {
                state.stages.iter().rev().find(|s| matches!(s.status, StageStatus::Failed | StageStatus::Timeout))
            });
            let mut headline =
                stage.and_then(|s| stage_headline(s, pipeline)).unwrap_or_else(|| match &state.checkout_failed {
                    // Workers could not make its work tree, try after try.
                    Some((tries, reason)) => Headline {
                        tone: Tone::Failed,
                        stage: None,
                        title: format!("No worker could check the run out: {reason}"),
                        check: None,
                        lines: Vec::new(),
                        category: None,
                        tried: vec![format!("{tries} tries, a lease apart")],
                        next:
                            "Push its base to the repository (or make the repository reachable), then submit it again."
                                .into(),
                    },
                    None => Headline {
                        tone: Tone::Failed,
                        stage: None,
                        title: "The run failed".into(),
                        check: None,
                        lines: Vec::new(),
                        category: None,
                        tried: Vec::new(),
                        next: "Re-run it.".into(),
                    },
                });
            headline.tone = Tone::Failed;
            if let Some(rollback) = &state.rollback
                && let Some(overall) = rollback.overall
            {
                headline.next =
                    format!("{} The earlier stages were rolled back ({}).", headline.next, overall.as_str());
            }
            Some(headline)
        }
        RunStatus::Queued => {
            let (stage, reason, until) = state.provider_wait.as_ref()?;
            Some(Headline {
                tone: Tone::Waiting,
                stage: Some(stage.to_string()),
                title: format!("Stage {stage} waits for its provider"),
                check: None,
                lines: vec![reason.clone()],
                category: None,
                tried: Vec::new(),
                next: match until {
                    Some(until) => format!(
                        "It starts by itself when the provider allows it, at {} at the latest; nothing is asked of you.",
                        until.strftime("%Y-%m-%d %H:%M:%S UTC")
                    ),
                    None => {
                        "It starts by itself as soon as another stage gives its slot back; nothing is asked of you."
                            .into()
                    }
                },
            })
        }
        RunStatus::Interrupted => {
            let at =
                state.stages.iter().rev().find(|s| matches!(s.status, StageStatus::Running | StageStatus::Looping));
            Some(Headline {
                tone: Tone::Interrupted,
                stage: at.map(|s| s.id.to_string()),
                title: match at {
                    Some(s) => format!("Interrupted during stage {}", s.id),
                    None => "Interrupted".into(),
                },
                check: None,
                lines: Vec::new(),
                category: None,
                tried: Vec::new(),
                next: "Resume it: finished stages are not run again; the stage in flight starts over.".into(),
            })
        }
        _ => None,
    }
}

/// One phase of a closed-loop attempt, in sentences.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Phase {
    /// The phase (`Generate`, `Validate`, `Evaluate`, `Regression check`, `Analyze`, `Fix`,
    /// `Escalate`, `Dead letter`).
    pub name: &'static str,
    /// What happened, in sentences.
    pub sentences: Vec<String>,
    /// The output's key lines, when something failed.
    pub lines: Vec<String>,
}

/// A list in words: `a`, `a and b`, `a, b and c` (at most `max` named, then "and N more").
fn list(items: &[String], max: usize) -> String {
    let shown: Vec<&str> = items.iter().take(max).map(String::as_str).collect();
    let more = items.len().saturating_sub(max);
    match (shown.as_slice(), more) {
        ([], _) => String::new(),
        ([one], 0) => (*one).to_owned(),
        (many, 0) => format!("{} and {}", many[..many.len() - 1].join(", "), many[many.len() - 1]),
        (many, more) => format!("{} and {more} more", many.join(", ")),
    }
}

/// How a classified failure reads: what failed, its category, the strategy it calls for.
fn failure_sentence(f: &loopwright_engine::closed_loop::Failure) -> String {
    let mut s = format!(
        "{}. Category: {}",
        f.summary.trim_end_matches('.'),
        category(f.pattern.as_deref(), Some(f.confidence), Some(f.classified_by()))
    );
    if f.pattern.is_some() {
        s.push_str(&format!("; it calls for {}", f.strategy.as_str().replace('_', " ")));
    }
    s.push('.');
    for note in f.agent_notes() {
        s.push_str(&format!(" The stage's {}.", note.trim_end_matches('.')));
    }
    s
}

/// A closed-loop phase event in sentences; `None` for any other event.
pub fn phase(event: &loopwright_engine::Event) -> Option<Phase> {
    use loopwright_engine::Event;
    use loopwright_engine::closed_loop::NextAction;
    let failure_lines = |f: &Option<Box<loopwright_engine::closed_loop::Failure>>| {
        f.as_ref().map(|f| f.lines.iter().take(KEY_LINES).cloned().collect()).unwrap_or_default()
    };
    Some(match event {
        Event::Generated { duration_ms, files, exit_code, failure, .. } => {
            let changed: Vec<String> = files
                .created
                .iter()
                .map(|f| format!("{f} (new)"))
                .chain(files.modified.iter().cloned())
                .chain(files.deleted.iter().map(|f| format!("{f} (deleted)")))
                .collect();
            let mut sentences = vec![format!(
                "The agent worked for {:.1} s{} and {}.",
                *duration_ms as f64 / 1000.0,
                exit_code.map(|c| format!(", exited with {c}")).unwrap_or_default(),
                if changed.is_empty() {
                    "changed no file".to_owned()
                } else {
                    format!("changed {}", list(&changed, 6))
                }
            )];
            sentences.extend(failure.as_deref().map(failure_sentence));
            Phase { name: "Generate", sentences, lines: failure_lines(failure) }
        }
        Event::Validated { gates, violations, failure, .. } => {
            let mut sentences = vec![if violations.is_empty() {
                let gates: Vec<String> = gates.iter().map(|g| g.as_str().to_owned()).collect();
                format!("The gates passed: {}.", list(&gates, 8))
            } else {
                let found: Vec<String> = violations
                    .iter()
                    .map(|v| {
                        format!(
                            "{}{}: {}",
                            v.gate,
                            v.file.as_ref().map(|f| format!(" in {f}")).unwrap_or_default(),
                            v.message
                        )
                    })
                    .collect();
                format!(
                    "The gates found {}: {}.",
                    plural(u32::try_from(violations.len()).unwrap_or(u32::MAX), "problem", "problems"),
                    list(&found, 4)
                )
            }];
            sentences.extend(failure.as_deref().map(failure_sentence));
            Phase { name: "Validate", sentences, lines: failure_lines(failure) }
        }
        Event::Evaluated { checks, failure, .. } => {
            let each: Vec<String> = checks
                .iter()
                .map(|c| {
                    let name = if c.name.is_empty() { &c.command } else { &c.name };
                    match (c.passed, c.exit_code) {
                        (true, _) => format!("{name} passed"),
                        (false, Some(code)) => format!("{name} failed (exit {code})"),
                        (false, None) => format!("{name} failed"),
                    }
                })
                .collect();
            let mut sentences =
                vec![if each.is_empty() { "No check ran.".to_owned() } else { format!("Checks: {}.", list(&each, 8)) }];
            sentences.extend(failure.as_deref().map(failure_sentence));
            let lines = match failure {
                Some(f) if !f.lines.is_empty() => f.lines.iter().take(KEY_LINES).cloned().collect(),
                _ => checks.iter().find(|c| !c.passed).map(|c| last_lines(&c.output)).unwrap_or_default(),
            };
            Phase { name: "Evaluate", sentences, lines }
        }
        Event::RegressionChecked { dependents, regressions, failure, .. } => {
            let mut sentences = vec![if regressions.is_empty() {
                format!(
                    "No regression in {}.",
                    if dependents.is_empty() {
                        "the files that depend on the change".to_owned()
                    } else {
                        list(dependents, 5)
                    }
                )
            } else {
                let each: Vec<String> = regressions
                    .iter()
                    .map(|r| {
                        format!(
                            "{} ({} of {} passed, {} before)",
                            r.file, r.current_pass, r.current_total, r.baseline_pass
                        )
                    })
                    .collect();
                format!("Regressions: {}.", list(&each, 4))
            }];
            sentences.extend(failure.as_deref().map(failure_sentence));
            Phase { name: "Regression check", sentences, lines: failure_lines(failure) }
        }
        Event::Analyzed { analysis, .. } => {
            let next = match analysis.next {
                NextAction::Fix => format!(
                    "Next: fix with {}",
                    analysis.strategy.map_or("the default strategy", |s| s.as_str()).replace('_', " ")
                ),
                NextAction::Escalate => "Next: ask a person".to_owned(),
                NextAction::DeadLetter => "Next: give up and write a dead letter".to_owned(),
            };
            let mut sentences = vec![format!("{next} — {}.", analysis.reason.trim_end_matches('.'))];
            sentences.push(format!(
                "Same failure {} so far; {} of {} automatic retries left.",
                plural(analysis.same_pattern_count, "time", "times"),
                analysis.budget_remaining,
                analysis.budget
            ));
            sentences.extend(analysis.measured.as_ref().map(|m| format!("Measured: {m}.")));
            Phase { name: "Analyze", sentences, lines: Vec::new() }
        }
        Event::FixApplied { fix, .. } => {
            let mut sentences =
                vec![format!("{}: {}.", fix.strategy.as_str().replace('_', " "), fix.applied.trim_end_matches('.'))];
            if fix.wait_ms > 0 {
                sentences.push(format!("It waited {:.1} s first.", fix.wait_ms as f64 / 1000.0));
            }
            if fix.resolved {
                sentences.push("It resolved the failure without another attempt.".into());
            }
            Phase { name: "Fix", sentences, lines: Vec::new() }
        }
        Event::LoopEscalated { reason, .. } => Phase {
            name: "Escalate",
            sentences: vec![format!("Handed to a person: {}.", reason.trim_end_matches('.'))],
            lines: Vec::new(),
        },
        Event::DeadLettered { detail, .. } => Phase {
            name: "Dead letter",
            sentences: vec![format!("Gave up: {}.", detail.trim_end_matches('.'))],
            lines: Vec::new(),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use loopwright_engine::event::{Event, FailureKind, StageError};
    use loopwright_engine::{EventRecord, RunId};
    use pretty_assertions::assert_eq;

    use super::*;

    const PIPELINE: &str = "name: p\ndescription: d\nversion: 1\nstages:\n  - {id: build, description: builds it, agent: shell, mode: agent, run: 'true'}\n  - {id: ship, description: ships the release, agent: shell, mode: agent, requires_approval: true, run: 'true'}\n";

    fn pipeline() -> Pipeline {
        let agents = Default::default();
        let cx = loopwright_spec::CompileContext { agents: &agents, extra_inputs: &[], default_timeout_minutes: 1.0 };
        loopwright_spec::compile(&loopwright_spec::SourceFile::new("p.yml", PIPELINE), &cx).expect("pipeline")
    }

    fn state(events: Vec<Event>) -> RunState {
        let started = serde_json::json!({
            "pipeline": "p", "pipeline_path": "p.yml", "pipeline_source": PIPELINE, "task_id": "task-1", "task": "t",
            "vars": {}, "inputs": {}, "start_from": null, "skip": [], "prior_outputs": {}, "workspace": "/w",
        });
        let mut all = vec![Event::RunStarted(Box::new(serde_json::from_value(started).expect("a start")))];
        all.extend(events);
        let records: Vec<EventRecord> = all
            .into_iter()
            .enumerate()
            .map(|(i, event)| EventRecord { seq: i as u64 + 1, at: jiff::Timestamp::UNIX_EPOCH, event })
            .collect();
        RunState::replay(RunId::new("r"), &records)
    }

    fn stage(s: &str) -> loopwright_spec::StageId {
        loopwright_spec::StageId::parse(s).expect("id")
    }

    #[test]
    fn a_category_says_what_decided_it() {
        let table = [
            (Some("test-failure"), Some(0.92), Some(ClassifiedBy::Pattern), "test-failure (92 % sure, by its pattern)"),
            (
                Some("lint-error"),
                Some(0.843),
                Some(ClassifiedBy::Statistical),
                "lint-error (84 % likely, by the statistical classifier)",
            ),
            (
                Some("runtime-error"),
                Some(0.7),
                Some(ClassifiedBy::Agent),
                "runtime-error (as the stage's agent labelled it)",
            ),
            (Some("build-error"), None, None, "build-error"),
            (None, Some(0.0), Some(ClassifiedBy::None), "unclassified"),
        ];
        for (pattern, confidence, by, want) in table {
            assert_eq!(category(pattern, confidence, by), want);
        }
    }

    #[test]
    fn a_row_says_what_waits_why_it_failed_or_who_rejected_it() {
        let built = || {
            vec![
                Event::AttemptStarted { stage: stage("build"), attempt: 1 },
                Event::AttemptSucceeded {
                    stage: stage("build"),
                    attempt: 1,
                    duration_ms: 5,
                    outputs: Default::default(),
                },
                Event::ApprovalRequested { stage: stage("ship") },
            ]
        };
        let answered = |granted: bool, comment: Option<&str>| {
            let (stage, by, comment, via) = (stage("ship"), "carol".to_owned(), comment.map(str::to_owned), None);
            let mut events = built();
            events.push(if granted {
                Event::ApprovalGranted { stage, by, comment, via }
            } else {
                Event::ApprovalRejected { stage, by, comment, rollback: false, via }
            });
            events
        };
        let error = StageError {
            kind: FailureKind::ExecutionError,
            message: "the command exited with 2".into(),
            exit_code: Some(2),
            output_tail: "boom\n".into(),
            pattern: None,
            classified_by: None,
            unfixable: None,
        };
        let failed = vec![
            Event::AttemptStarted { stage: stage("build"), attempt: 1 },
            Event::AttemptFailed { stage: stage("build"), attempt: 1, duration_ms: 5, error: error.clone() },
            Event::StageFailed { stage: stage("build"), error },
            Event::RunFinished { status: RunStatus::Failed },
        ];
        let table: [(&str, Vec<Event>, Option<&str>); 5] = [
            ("a gate", built(), Some("gate at `ship`")),
            (
                "rejected with a comment",
                answered(false, Some("not on a Friday")),
                Some("rejected at `ship` by carol: not on a Friday"),
            ),
            ("rejected without one", answered(false, None), Some("rejected at `ship` by carol")),
            ("approved and running", answered(true, None), None),
            ("failed", failed, Some("Stage build failed: execution error (exit 2) — the command exited with 2")),
        ];
        for (name, events, want) in table {
            let s = state(events);
            assert_eq!(row_line(&s, s.status).as_deref(), want, "{name}");
        }
    }

    #[test]
    fn a_gate_says_what_waits_what_is_done_and_what_is_asked() {
        let s = state(vec![
            Event::AttemptStarted { stage: stage("build"), attempt: 1 },
            Event::AttemptSucceeded { stage: stage("build"), attempt: 1, duration_ms: 5, outputs: Default::default() },
            Event::ApprovalRequested { stage: stage("ship") },
        ]);
        assert_eq!(
            run_headline(&s, RunStatus::Waiting, &pipeline()),
            Some(Headline {
                tone: Tone::Waiting,
                stage: Some("ship".into()),
                title: "Stage ship waits for your approval: ships the release".into(),
                check: None,
                lines: vec![],
                category: None,
                tried: vec!["Done so far: build".into()],
                next: "Approve to run ship, or reject to cancel the run.".into(),
            })
        );
    }

    #[test]
    fn a_failed_stage_says_how_it_failed_its_last_lines_and_that_nothing_retries_it() {
        let error = StageError {
            kind: FailureKind::ExecutionError,
            message: "the command exited with 101\nmore".into(),
            exit_code: Some(101),
            output_tail: "compiling\n\nerror[E0308]: mismatched types\n  --> src/lib.rs:3:5\n".into(),
            pattern: Some("compile-error".into()),
            classified_by: None,
            unfixable: None,
        };
        let s = state(vec![
            Event::AttemptStarted { stage: stage("build"), attempt: 1 },
            Event::AttemptFailed { stage: stage("build"), attempt: 1, duration_ms: 5, error: error.clone() },
            Event::StageFailed { stage: stage("build"), error: error.clone() },
            Event::RunFinished { status: RunStatus::Failed },
        ]);
        let got = run_headline(&s, RunStatus::Failed, &pipeline()).expect("a headline");
        // The same failure where the sandbox refused hosts: the headline says which.
        let refused = |target: &str| Event::NetworkRefused {
            stage: stage("build"),
            attempt: 1,
            target: target.into(),
            why: "not a host this stage may reach".into(),
        };
        let sandboxed = state(vec![
            Event::AttemptStarted { stage: stage("build"), attempt: 1 },
            refused("index.crates.io:443"),
            refused("index.crates.io:443"),
            refused("static.crates.io:443"),
            Event::AttemptFailed { stage: stage("build"), attempt: 1, duration_ms: 5, error: error.clone() },
            Event::StageFailed { stage: stage("build"), error },
            Event::RunFinished { status: RunStatus::Failed },
        ]);
        let told = run_headline(&sandboxed, RunStatus::Failed, &pipeline()).expect("a headline");
        assert_eq!(
            told.tried,
            [
                "1 attempt",
                "the sandbox refused its connections to `index.crates.io:443`, `static.crates.io:443` (a stage reaches only the hosts its `network:` names)"
            ]
        );
        assert_eq!(
            got,
            Headline {
                tone: Tone::Failed,
                stage: Some("build".into()),
                title: "Stage build failed: execution error (exit 101) — the command exited with 101".into(),
                check: None,
                lines: vec!["compiling".into(), "error[E0308]: mismatched types".into(), "  --> src/lib.rs:3:5".into()],
                category: Some("compile-error".into()),
                tried: vec!["1 attempt".into()],
                next: "Nothing retries it on its own: re-run the run, or retry from this stage.".into(),
            }
        );
    }

    #[test]
    fn a_run_queued_for_its_provider_says_why_and_that_it_goes_on_by_itself() {
        let until = "2026-11-25T12:00:00Z".parse::<jiff::Timestamp>().expect("time");
        let waiting = Event::LimitWaiting {
            stage: stage("build"),
            attempt: 1,
            reason: "openai is paused until 2026-11-25T12:00:00Z after a rate limit: 429".into(),
            until: Some(until),
        };
        let s = state(vec![waiting.clone()]);
        assert_eq!(s.status, RunStatus::Queued);
        assert_eq!(
            run_headline(&s, RunStatus::Queued, &pipeline()),
            Some(Headline {
                tone: Tone::Waiting,
                stage: Some("build".into()),
                title: "Stage build waits for its provider".into(),
                check: None,
                lines: vec!["openai is paused until 2026-11-25T12:00:00Z after a rate limit: 429".into()],
                category: None,
                tried: Vec::new(),
                next: "It starts by itself when the provider allows it, at 2026-11-25 12:00:00 UTC at the latest; nothing is asked of you.".into(),
            })
        );
        // Taken, the run works again and the wait is over; a run merely queued has no headline.
        let s = state(vec![waiting, Event::LimitTaken { stage: stage("build"), attempt: 1 }]);
        assert_eq!((s.status, s.provider_wait.clone()), (RunStatus::Running, None));
        assert_eq!(run_headline(&state(vec![Event::RunQueued {}]), RunStatus::Queued, &pipeline()), None);
    }

    #[test]
    fn a_run_waiting_on_its_pull_request_says_for_what_and_who_answers() {
        let link = serde_json::json!({
            "forge": "github", "repo": "acme/shop", "issue": 7, "issue_url": "u", "title": "t", "trigger": "comment/1",
            "actor": "carol", "branch": "loopwright/r", "base": "main", "watch": true, "ci_retries": 2, "stage": "build",
            "merge": "squash",
        });
        let delivered = Event::Delivered(loopwright_engine::forge::Delivery {
            round: 0,
            number: 12,
            url: "https://github.com/acme/shop/pull/12".into(),
            head: "0123456789abcdef0123".into(),
            watching: true,
        });
        let green = Event::CiReported {
            round: 0,
            head: "0123456789abcdef0123".into(),
            outcome: loopwright_engine::forge::CiOutcome::Passed { checks: vec!["test".into()] },
        };
        let waiting = |events: Vec<Event>| {
            let mut s = state(events);
            if let Some(started) = s.started.as_mut() {
                started.forge = Some(serde_json::from_value(link.clone()).expect("link"));
            }
            run_headline(&s, RunStatus::Waiting, &pipeline()).map(|h| (h.title, h.next))
        };
        let headline = |title: &str, next: &str| Some((title.to_owned(), next.to_owned()));
        assert_eq!(
            waiting(vec![delivered.clone()]),
            headline(
                "Waits for CI on pull request #12 at 0123456789ab",
                "Nobody needs to answer: a red round goes back to stage build, a green one waits for an approval to merge."
            )
        );
        assert_eq!(
            waiting(vec![delivered, green, Event::ReviewAwaited { head: "0123456789abcdef0123".into() }]),
            headline(
                "Waits for a person to approve pull request #12 at 0123456789ab",
                "Its CI passed. Someone with the permission approves that head on GitHub; loopwright then merges exactly that head. A review asking for changes goes back to stage build."
            )
        );
    }

    #[test]
    fn running_and_successful_runs_have_no_headline() {
        let s = state(vec![]);
        assert_eq!(run_headline(&s, RunStatus::Running, &pipeline()), None);
        assert_eq!(run_headline(&s, RunStatus::Success, &pipeline()), None);
        assert_eq!(run_headline(&s, RunStatus::Interrupted, &pipeline()).map(|h| h.tone), Some(Tone::Interrupted));
    }
}
