//! The files a run leaves beside its journal, for people to read: `runs/RUN/task.md`,
//! `artifact-STAGE.md`, `attempts-STAGE.md`, `metrics.md`, the retry logs, and the dead letters
//! in `dead-letters/` (written as the run goes, and read back by `dead-letters` and `stats`).

use std::path::PathBuf;

use loopwright_engine::projection::{artifact_markdown, attempts_markdown, metrics_markdown, task_markdown};
use loopwright_engine::state::StageStatus;
use loopwright_engine::{Event, EventRecord, Observer, RunState};
use loopwright_spec::Pipeline;

use crate::workspace::write_atomic;

/// Writes `runs/RUN/task.md`, `artifact-STAGE.md` and `metrics.md` as the run goes.
pub struct Projector {
    runs_dir: PathBuf,
    warned: bool,
}

impl Projector {
    /// A projector writing under `runs_dir`.
    pub fn new(runs_dir: PathBuf) -> Self {
        Self { runs_dir, warned: false }
    }

    fn write(&mut self, state: &RunState, name: &str, contents: &str) {
        let dir = self.runs_dir.join(state.run_id.as_str());
        let result = std::fs::create_dir_all(&dir).and_then(|()| write_atomic(&dir.join(name), contents));
        if let Err(e) = result
            && !self.warned
        {
            self.warned = true;
            eprintln!(
                "loopwright: warning: cannot write {}: {e} (the journal has everything)",
                dir.join(name).display()
            );
        }
    }
}

impl Projector {
    /// Writes `dead-letters/TASK.md` (seed 000 "Dead Letter Format"), with similar earlier
    /// dead letters aggregated, and a pattern-learning candidate when one is due.
    fn dead_letter(&mut self, record: &EventRecord, state: &RunState, stage: &loopwright_spec::StageId, reason: &str) {
        use loopwright_engine::closed_loop::context::{DeadLetter, DeadLetterSummary};
        let (Some(started), Some(lp)) =
            (state.started.as_ref(), state.stage(stage.as_str()).and_then(|s| s.closed.as_deref()))
        else {
            return;
        };
        let dir = dead_letters_dir(&self.runs_dir);
        let task = started.task_id.to_string();
        // Earlier dead letters of other tasks (this task's own is being rewritten).
        let others: Vec<DeadLetterSummary> =
            read_dead_letters(&dir).into_iter().map(|(s, _)| s).filter(|s| s.task_id != task).collect();
        let located = lp
            .iterations
            .last()
            .and_then(|i| i.failure.as_ref())
            .and_then(|f| {
                let changes =
                    loopwright_runners::FsChanges::new(started.workspace.clone().into(), self.runs_dir.clone());
                loopwright_engine::closed_loop::strategies::locations(&f.output, &changes).into_iter().next()
            })
            .map(|(f, _)| f);
        let letter = DeadLetter {
            run: state.run_id.as_str(),
            task_id: &task,
            task: &started.task,
            stage: stage.as_str(),
            state: lp,
            reason,
            blocked_at: record.at,
            located: located.as_deref(),
            others: &others,
        };
        let mut files = vec![(format!("{task}.md"), letter.render())];
        files.extend(letter.learning_candidate());
        for (name, text) in files {
            let result = std::fs::create_dir_all(&dir).and_then(|()| write_atomic(&dir.join(&name), &text));
            if let Err(e) = result {
                eprintln!(
                    "loopwright: warning: cannot write {}: {e} (the journal has everything)",
                    dir.join(name).display()
                );
            }
        }
    }

    /// Appends to `logs/retry.log` and `logs/retry.jsonl` (seed 001 formats) what a retry
    /// story needs: failed attempts, the retries scheduled, escalations and their answers, and
    /// how a stage that failed at least once ended.
    fn retry_log(&mut self, record: &EventRecord, state: &RunState) {
        let Some(stage) = record.event.stage() else { return };
        // Formatted only for the few events that are logged (this runs for every event).
        let key = std::cell::LazyCell::new(|| {
            let task = state.started.as_ref().map(|s| s.task_id.to_string()).unwrap_or_default();
            format!("{task}:{stage}")
        });
        let ts = std::cell::LazyCell::new(|| record.at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        let st = state.stage(stage.as_str());
        let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
        let (lines, json): (Vec<String>, Vec<serde_json::Value>) = match &record.event {
            Event::AttemptFailed { attempt, duration_ms, error, .. } => (
                vec![
                    format!("attempt={attempt} status=failed type={}", error.kind.as_str()),
                    format!("error={}", q(&error.message)),
                ],
                vec![serde_json::json!({"timestamp": *ts, "event": "attempt", "task_id": *key, "attempt": attempt,
                    "status": "failed", "failure_type": error.kind.as_str(), "error": error.message, "duration_ms": duration_ms})],
            ),
            Event::RetryScheduled { attempt, delay_ms, reason, .. } => (
                vec![format!("retrying attempt={attempt} delay_ms={delay_ms} reason={}", q(reason))],
                vec![
                    serde_json::json!({"timestamp": *ts, "event": "retry_scheduled", "task_id": *key, "attempt": attempt,
                    "delay_ms": delay_ms, "reason": reason}),
                ],
            ),
            Event::AttemptSucceeded { attempt, duration_ms, .. } if st.is_some_and(|s| s.attempt_log.len() > 1) => {
                let total: u64 = st.map_or(*duration_ms, |s| s.duration_ms);
                (
                    vec![format!("attempt={attempt} status=success"), "resolved status=success".to_owned()],
                    vec![
                        serde_json::json!({"timestamp": *ts, "event": "attempt", "task_id": *key, "attempt": attempt,
                            "status": "success", "duration_ms": duration_ms}),
                        serde_json::json!({"timestamp": *ts, "event": "resolved", "task_id": *key, "resolution": "success",
                            "total_attempts": st.map_or(1, |s| s.attempts), "total_duration_ms": total}),
                    ],
                )
            }
            Event::StageFailed { error, .. } => (
                vec![format!("resolved status=failed reason={}", q(&error.message))],
                vec![
                    serde_json::json!({"timestamp": *ts, "event": "resolved", "task_id": *key, "resolution": "failed",
                    "total_attempts": st.map_or(0, |s| s.attempts), "total_duration_ms": st.map_or(0, |s| s.duration_ms)}),
                ],
            ),
            Event::FeedbackChecked {
                action: loopwright_engine::event::FeedbackAction::Escalate,
                iteration,
                blocking,
                ..
            } => (
                vec![format!(
                    "escalating reason=\"{blocking} blocking review item(s) after {iteration} feedback iteration(s)\""
                )],
                vec![serde_json::json!({"timestamp": *ts, "event": "escalated", "task_id": *key,
                    "attempts": st.map_or(0, |s| s.attempts), "reason": "feedback_iterations_exhausted"})],
            ),
            Event::Analyzed { attempt, analysis, .. } => {
                let f = st
                    .and_then(|s| s.closed.as_deref())
                    .and_then(|l| l.iterations.iter().find(|i| i.attempt == *attempt))
                    .and_then(|i| i.failure.as_ref());
                let Some(f) = f else { return };
                let mut lines = vec![
                    format!("attempt={attempt} status=failed type={} pattern={}", f.failure_type, f.key()),
                    format!("error={}", q(&f.summary.chars().take(200).collect::<String>())),
                ];
                let mut json = vec![
                    serde_json::json!({"timestamp": *ts, "event": "attempt", "task_id": *key, "attempt": attempt,
                    "status": "failed", "failure_type": f.failure_type, "pattern": f.pattern, "error": f.summary,
                    "duration_ms": st.and_then(|s| s.closed.as_deref()).and_then(|l| l.iterations.iter().find(|i| i.attempt == *attempt)).map_or(0, |i| i.duration_ms)}),
                ];
                match analysis.next {
                    loopwright_engine::closed_loop::NextAction::Fix => {}
                    loopwright_engine::closed_loop::NextAction::Escalate => {
                        lines.push(format!("escalating reason={}", q(&analysis.reason)));
                        json.push(serde_json::json!({"timestamp": *ts, "event": "escalated", "task_id": *key,
                            "attempts": st.map_or(0, |s| s.attempts), "reason": analysis.reason}));
                    }
                    loopwright_engine::closed_loop::NextAction::DeadLetter => {}
                }
                (lines, json)
            }
            Event::FixApplied { attempt, fix, .. } => {
                let lines = vec![
                    format!("suggested_fix={}", q(&fix.applied)),
                    format!("injecting_feedback attempt={}", attempt + 1),
                ];
                let feedback = fix.context.as_deref().map_or(0, |c| c.lines().count());
                (
                    lines,
                    vec![serde_json::json!({"timestamp": *ts, "event": "feedback_injected", "task_id": *key,
                    "attempt": attempt + 1, "strategy": fix.strategy, "feedback_lines": feedback})],
                )
            }
            Event::DeadLettered { reason, .. } => (
                vec![format!("resolved status=dead_letter reason={}", q(reason))],
                vec![
                    serde_json::json!({"timestamp": *ts, "event": "resolved", "task_id": *key, "resolution": "dead_letter",
                    "total_attempts": st.map_or(0, |s| s.attempts), "total_duration_ms": st.map_or(0, |s| s.duration_ms)}),
                ],
            ),
            Event::StageSkipped { reason: loopwright_engine::SkipReason::EscalationSkip, .. } => (
                vec!["resolved status=skipped".to_owned()],
                vec![
                    serde_json::json!({"timestamp": *ts, "event": "resolved", "task_id": *key, "resolution": "skipped",
                    "total_attempts": st.map_or(0, |s| s.attempts), "total_duration_ms": st.map_or(0, |s| s.duration_ms)}),
                ],
            ),
            Event::EscalationAnswered { answer, by, .. } => {
                let answer = serde_json::to_value(answer).unwrap_or_default();
                let name = answer["answer"].as_str().unwrap_or("").to_owned();
                (
                    vec![format!("user_response={} by={by}", q(&name))],
                    vec![
                        serde_json::json!({"timestamp": *ts, "event": "user_response", "task_id": *key, "response": answer, "by": by}),
                    ],
                )
            }
            _ => return,
        };
        let dir = self.runs_dir.parent().map_or_else(|| self.runs_dir.join("logs"), |p| p.join("logs"));
        let text: String = lines.iter().map(|l| format!("[{}] [RETRY] [{}] {l}\n", *ts, *key)).collect();
        let jsonl: String = json.iter().map(|j| format!("{j}\n")).collect();
        let append = |name: &str, text: &str| -> std::io::Result<()> {
            use std::io::Write;
            std::fs::create_dir_all(&dir)?;
            std::fs::OpenOptions::new().create(true).append(true).open(dir.join(name))?.write_all(text.as_bytes())
        };
        if let Err(e) = append("retry.log", &text).and_then(|()| append("retry.jsonl", &jsonl))
            && !self.warned
        {
            self.warned = true;
            eprintln!("loopwright: warning: cannot write {}: {e} (the journal has everything)", dir.display());
        }
    }
}

impl Projector {
    /// Keeps what the stage's agent said of a failure nothing sure classified, as a labelled
    /// sample with a candidate pattern (`state/learned/`). The candidate's strategy is the
    /// built-in category's.
    fn learned(
        &mut self,
        record: &EventRecord,
        state: &RunState,
        (stage, attempt): (&loopwright_spec::StageId, u32),
        checks: &[loopwright_engine::closed_loop::CheckResult],
        failure: &loopwright_engine::closed_loop::Failure,
    ) {
        if loopwright_engine::closed_loop::ask::answered(failure).is_none() {
            return;
        }
        let library = loopwright_engine::patterns::Library::builtin();
        let check = checks.iter().rev().find(|c| !c.passed);
        let place = (state.run_id.as_str(), stage.as_str(), attempt);
        let Some(sample) = crate::learned::Sample::of(&library, failure, check, place, record.at) else {
            return;
        };
        if let Err(e) = crate::learned::save(&self.runs_dir, &sample)
            && !self.warned
        {
            self.warned = true;
            eprintln!("loopwright: warning: cannot keep what the agent said of a failure: {e} (the journal has it)");
        }
    }
}

impl Observer for Projector {
    fn on_event(&mut self, record: &EventRecord, state: &RunState, pipeline: &Pipeline) {
        self.retry_log(record, state);
        // The retry log of stages that can retry or that failed.
        if let Some(stage) = record.event.stage()
            && matches!(
                record.event,
                Event::AttemptSucceeded { .. }
                    | Event::AttemptFailed { .. }
                    | Event::RetryScheduled { .. }
                    | Event::StageFailed { .. }
                    | Event::Generated { .. }
                    | Event::Evaluated { .. }
                    | Event::Analyzed { .. }
                    | Event::FixApplied { .. }
                    | Event::LoopEscalated { .. }
            )
            && let Some(s) = state.stage(stage.as_str())
            && (s.attempts > 1
                || s.closed.is_some()
                || s.last_error.is_some()
                || pipeline.stage(stage.as_str()).is_some_and(|p| p.retry.is_some()))
        {
            self.write(state, &format!("attempts-{stage}.md"), &attempts_markdown(state, s));
        }
        match &record.event {
            Event::AttemptSucceeded { stage, .. } => {
                if let Some(s) =
                    state.stage(stage.as_str()).filter(|s| s.status == StageStatus::Success && !s.outputs.is_empty())
                {
                    let md = artifact_markdown(pipeline, state, s);
                    self.write(state, &format!("artifact-{stage}.md"), &md);
                }
            }
            Event::StageRolledBack {
                stage,
                strategy: loopwright_spec::pipeline::RollbackStrategy::MemoryCleanup,
                status: loopwright_engine::event::RollbackStatus::Success,
                ..
            } => {
                let _ = std::fs::remove_file(
                    self.runs_dir.join(state.run_id.as_str()).join(format!("artifact-{stage}.md")),
                );
            }
            Event::RunFinished { .. } => {
                self.write(state, "task.md", &task_markdown(pipeline, state));
                self.write(state, "metrics.md", &metrics_markdown(state));
            }
            Event::DeadLettered { stage, reason, .. } => self.dead_letter(record, state, stage, reason),
            Event::Evaluated { stage, attempt, checks, failure: Some(failure) } => {
                self.learned(record, state, (stage, *attempt), checks, failure);
            }
            Event::RegressionGate { stage, baseline: Some(baseline), .. } => {
                let md = loopwright_engine::projection::baseline_markdown(state, stage.as_str(), baseline, record.at);
                self.write(state, &format!("baseline-{stage}.md"), &md);
            }
            Event::RunStarted(_)
            | Event::StageFailed { .. }
            | Event::ApprovalRequested { .. }
            | Event::ApprovalRejected { .. } => {
                self.write(state, "task.md", &task_markdown(pipeline, state));
            }
            _ => {}
        }
    }
}

/// `.loopwright/state/dead-letters/`, next to `runs/`.
pub fn dead_letters_dir(runs_dir: &std::path::Path) -> PathBuf {
    runs_dir.parent().map_or_else(|| runs_dir.join("dead-letters"), |p| p.join("dead-letters"))
}

/// Every dead letter in `dir` (not the candidate patterns), read, with its text.
pub fn read_dead_letters(
    dir: &std::path::Path,
) -> Vec<(loopwright_engine::closed_loop::context::DeadLetterSummary, String)> {
    use loopwright_engine::closed_loop::context::DeadLetterSummary;
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(".md") && !name.starts_with("candidate-pattern-")
        })
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|t| DeadLetterSummary::parse(&t).map(|s| (s, t)))
        .collect()
}
