//! Observers of a run: the progress lines on stderr and the markdown projections on disk.
//! Both read the same event stream the journal records.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use loopwright_engine::projection::{artifact_markdown, attempts_markdown, metrics_markdown, task_markdown};
use loopwright_engine::state::StageStatus;
use loopwright_engine::{Event, EventRecord, Observer, RunState};
use loopwright_spec::Pipeline;

use crate::render::duration;
use crate::workspace::write_atomic;

/// Both observers at once.
pub struct Observers {
    /// Progress on stderr.
    pub progress: Progress,
    /// Markdown files.
    pub files: Projector,
}

impl Observer for Observers {
    fn on_event(&mut self, record: &EventRecord, state: &RunState, pipeline: &Pipeline) {
        self.files.on_event(record, state, pipeline);
        self.progress.on_event(record, state, pipeline);
    }
}

/// One line per stage start and end on stderr, and a spinner with the elapsed time while a
/// stage runs when stderr is a terminal.
pub struct Progress {
    spinner: Option<ProgressBar>,
    tty: bool,
    quiet: bool,
    run_started: Instant,
    stage_started: HashMap<String, Instant>,
}

impl Progress {
    /// A progress printer; `quiet` prints nothing.
    pub fn new(quiet: bool) -> Self {
        Self {
            spinner: None,
            tty: std::io::stderr().is_terminal(),
            quiet,
            run_started: Instant::now(),
            stage_started: HashMap::new(),
        }
    }

    fn line(&self, text: &str) {
        if self.quiet {
            return;
        }
        // One write per line (`eprintln!` makes two on unbuffered stderr).
        let print = || {
            use std::io::Write;
            let _ = std::io::stderr().write_all(format!("{text}\n").as_bytes());
        };
        match &self.spinner {
            Some(bar) => bar.suspend(print),
            None => print(),
        }
    }

    fn stop_spinner(&mut self) {
        if let Some(bar) = self.spinner.take() {
            bar.finish_and_clear();
        }
    }
}

impl Observer for Progress {
    fn on_event(&mut self, record: &EventRecord, state: &RunState, pipeline: &Pipeline) {
        for l in loopwright_engine::closed_loop::context::log_lines(&record.event, state) {
            self.line(&l);
        }
        match &record.event {
            Event::RunStarted(started) => {
                self.run_started = Instant::now();
                self.line(&format!(
                    "loopwright: run {} of pipeline `{}` ({} stage{}), task {}",
                    state.run_id,
                    started.pipeline,
                    pipeline.stages.len(),
                    if pipeline.stages.len() == 1 { "" } else { "s" },
                    started.task_id
                ));
            }
            Event::AttemptStarted { stage, attempt } => {
                self.stage_started.insert(stage.to_string(), Instant::now());
                let st = pipeline.stage(stage.as_str());
                let who = st.map_or_else(String::new, |s| format!(" [{}, {} mode]", s.agent.name(), s.mode));
                let of = match st.and_then(|s| s.retry) {
                    Some(r) if *attempt > 1 => format!(" attempt {attempt}/{}", r.max_attempts),
                    _ => String::new(),
                };
                self.line(&format!("▶ {stage}{who}{of}"));
                if self.tty && !self.quiet {
                    let bar = ProgressBar::new_spinner();
                    if let Ok(style) = ProgressStyle::with_template("  {spinner} {msg} {elapsed}") {
                        bar.set_style(style);
                    }
                    bar.set_message(format!("{stage} running"));
                    bar.enable_steady_tick(Duration::from_millis(100));
                    self.spinner = Some(bar);
                }
            }
            Event::AttemptSucceeded { stage, duration_ms, outputs, .. } => {
                self.stop_spinner();
                let outs = if outputs.is_empty() {
                    String::new()
                } else {
                    format!("  → {}", outputs.keys().cloned().collect::<Vec<_>>().join(", "))
                };
                let total =
                    state.stage(stage.as_str()).filter(|s| s.closed.is_some()).map_or(*duration_ms, |s| s.duration_ms);
                self.line(&format!("✓ {stage}  {}{outs}", duration(total)));
            }
            Event::AttemptFailed { stage, duration_ms, error, attempt } => {
                self.stop_spinner();
                let why = error.pattern.as_ref().map(|p| format!(" [{p}]")).unwrap_or_default();
                self.line(&format!(
                    "✗ {stage} attempt {attempt} failed after {}: {}{why}",
                    duration(*duration_ms),
                    error.message
                ));
                let tail: Vec<&str> = error.output_tail.lines().collect();
                for l in &tail[tail.len().saturating_sub(8)..] {
                    self.line(&format!("    │ {l}"));
                }
            }
            Event::RetryScheduled { stage, attempt, delay_ms, reason } => {
                let max = pipeline.stage(stage.as_str()).and_then(|s| s.retry).map_or(*attempt, |r| r.max_attempts);
                let how = reason.rsplit("; ").next().unwrap_or("");
                let n = attempt - state.stage(stage.as_str()).map_or(0, |s| s.pass_base);
                self.line(&format!("↻ Retry {n}/{max} for stage '{stage}' in {} ({how})", duration(*delay_ms)));
            }
            Event::StageSkipped { stage, reason } => {
                let why = match state.stage(stage.as_str()).and_then(|s| s.condition_detail.as_ref()) {
                    Some((cond, values)) if *reason == loopwright_engine::SkipReason::ConditionFalse => {
                        format!("condition not met: `{cond}` with {values}")
                    }
                    _ => "named with --skip".to_owned(),
                };
                self.line(&format!("- {stage} skipped: {why}"));
            }
            Event::ApprovalRequested { stage } => {
                self.line(&format!("⏸ {stage} requires approval"));
            }
            Event::ApprovalGranted { stage, by, .. } => self.line(&format!("  {stage} approved by {by}")),
            Event::ApprovalRejected { stage, by, .. } => {
                self.line(&format!("■ {stage} rejected by {by}: run cancelled"))
            }
            Event::StageFailed { stage, error } => {
                self.line(&format!("✗ {stage} failed for good ({})", error.kind.as_str()));
            }
            Event::RunFinished { status } => {
                self.stop_spinner();
                let elapsed = u64::try_from(self.run_started.elapsed().as_millis()).unwrap_or(u64::MAX);
                self.line(&format!("loopwright: run {} {} in {}", state.run_id, status.as_str(), duration(elapsed)));
            }
            Event::RunInterrupted { stage, signal } => {
                self.stop_spinner();
                self.line(&format!(
                    "■ run {} interrupted by {signal}{}: `loopwright resume {}` continues it",
                    state.run_id,
                    stage.as_ref().map(|s| format!(" during {s}")).unwrap_or_default(),
                    state.run_id
                ));
            }
            Event::FeedbackChecked { stage, items, blocking, iteration, action } => {
                use loopwright_engine::event::FeedbackAction;
                let max = pipeline
                    .stage(stage.as_str())
                    .and_then(|s| s.feedback_loop.as_ref())
                    .map_or(0, |f| f.max_iterations);
                match action {
                    FeedbackAction::Continue => self.line(&format!("  {stage}: feedback=none ({items} items, none blocking)")),
                    FeedbackAction::ReImplement { target, .. } => self.line(&format!(
                        "↺ {stage}: {blocking} blocking item{} — back to `{target}` (feedback iteration {iteration}/{max})",
                        if *blocking == 1 { "" } else { "s" }
                    )),
                    FeedbackAction::Escalate => self.line(&format!(
                        "⏸ {stage}: {blocking} blocking item{} left after {iteration} iteration{}: `loopwright respond {} retry|fix TEXT|skip|abort`",
                        if *blocking == 1 { "" } else { "s" },
                        if *iteration == 1 { "" } else { "s" },
                        state.run_id
                    )),
                    FeedbackAction::Accepted => self.line(&format!("  {stage}: review accepted as it is")),
                }
            }
            Event::EscalationAnswered { stage, answer, by } => {
                self.line(&format!("  {stage}: {by} answered {}", serde_json::to_string(answer).unwrap_or_default()));
            }
            Event::RunResumed { .. } => self.line(&format!("loopwright: resuming run {}", state.run_id)),
            Event::RollbackStarted { stages, .. } => self.line(&format!(
                "⟲ rolling back {}",
                stages.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            )),
            Event::StageRolledBack { stage, strategy, status, detail } => {
                let how = serde_json::to_string(strategy).unwrap_or_default();
                if *strategy == loopwright_spec::pipeline::RollbackStrategy::Manual {
                    self.line(&format!(
                        "  {stage}: manual rollback steps ({}):\n    {}",
                        status.as_str(),
                        detail.replace('\n', "\n    ")
                    ));
                } else {
                    self.line(&format!("  {stage}: {} {} — {detail}", how.trim_matches('"'), status.as_str()));
                }
            }
            Event::RollbackFinished { overall } => self.line(&format!("⟲ rollback {}", overall.as_str())),
            Event::RunCancelled { stage, by, .. } => {
                self.stop_spinner();
                let at = stage.as_ref().map(|s| format!(" at stage {s}")).unwrap_or_default();
                self.line(&format!("■ run {} cancelled by {by}{at}", state.run_id));
            }
            Event::ConditionEvaluated { .. }
            | Event::ProcessStarted { .. }
            | Event::CancelRequested { .. }
            | Event::SnapshotTaken { .. }
            | Event::ChangesCommitted { .. } => {}
            Event::SnapshotFailed { stage, reason, .. } => self.line(&format!("  {stage}: warning: {reason}")),
            Event::RepositoryRepaired { stage, detail } => self.line(&format!("  {stage}: {detail}")),
            Event::Generated { stage, attempt, duration_ms, files, failure, .. } => {
                self.stop_spinner();
                let changed =
                    if files.is_empty() { "no file changed".to_owned() } else { files.described().join(", ") };
                match failure {
                    Some(f) => {
                        self.line(&format!("✗ {stage} attempt {attempt}: {} ({})", f.summary, duration(*duration_ms)))
                    }
                    None => self.line(&format!(
                        "  {stage} attempt {attempt} generated in {}: {changed}",
                        duration(*duration_ms)
                    )),
                }
            }
            Event::Evaluated { stage, checks, failure, .. } => {
                for c in checks {
                    let mark = if c.passed { "✓" } else { "✗" };
                    self.line(&format!(
                        "  {mark} {stage} check {} `{}` ({})",
                        c.name,
                        c.command,
                        duration(c.duration_ms)
                    ));
                }
                if checks.is_empty() {
                    self.line(&format!("  {stage}: no checks to run (no `checks:` and no test or lint command found)"));
                }
                if let Some(f) = failure {
                    for l in &f.lines {
                        self.line(&format!("    │ {l}"));
                    }
                    let pattern = f.pattern.as_deref().map_or_else(
                        || "no pattern matched (confidence < 0.3)".to_owned(),
                        |p| format!("pattern {p} (confidence {:.2})", f.confidence),
                    );
                    self.line(&format!("  {stage}: {pattern}"));
                }
            }
            Event::Analyzed { stage, analysis, .. } => {
                self.line(&format!("  {stage}: ANALYZE → {}: {}", analysis.next.as_str(), analysis.reason))
            }
            Event::FixApplied { stage, fix, attempt } => {
                self.line(&format!("  {stage}: FIX {}", fix.applied));
                if let Some(context) = &fix.context {
                    let lines: Vec<&str> = context.lines().filter(|l| !l.trim().is_empty()).collect();
                    for l in lines.iter().take(4) {
                        self.line(&format!("    │ {l}"));
                    }
                    if lines.len() > 4 {
                        self.line(&format!("    │ … ({} more lines)", lines.len() - 4));
                    }
                }
                self.line(&format!(
                    "  {stage}: feeding the failure back into attempt {} (<retry_context>)",
                    attempt + 1
                ));
            }
            Event::LoopEscalated { stage, reason, .. } => {
                self.stop_spinner();
                self.line(&format!(
                    "⏸ {stage}: escalated — {reason}\n  the escalation report follows the result; answer with `loopwright respond {} retry|fix TEXT|skip|abort`",
                    state.run_id
                ));
            }
            Event::DeadLettered { stage, detail, .. } => {
                self.stop_spinner();
                let task = state.started.as_ref().map(|s| s.task_id.to_string()).unwrap_or_default();
                self.line(&format!(
                    "✗ {stage}: {detail}\n  dead letter: .loopwright/state/dead-letters/{task}.md (`loopwright dead-letters show {task}`)"
                ));
            }
            Event::WorktreeMerged { branch, how, .. } => {
                self.line(&format!("⎇ merged {branch} back ({}); worktree removed", how.as_str()))
            }
            Event::WorktreeConflict { branch, files } => self.line(&format!(
                "⏸ merge-conflict: {branch} conflicts with the workspace in {}; the worktree is kept. Resolve it (e.g. `git merge {branch}` in the workspace), then `loopwright respond {} retry`, or `respond {} skip` to leave it unmerged",
                files.join(", "),
                state.run_id,
                state.run_id
            )),
            Event::Validated { .. }
            | Event::RegressionGate { .. }
            | Event::RegressionChecked { .. }
            | Event::UsageRecorded { .. } => {}
            Event::SnapshotRestored { stage, report, .. } => self.line(&format!(
                "  {stage}: undid the attempt's changes ({} restored, {} recreated, {} removed)",
                report.restored, report.recreated, report.removed
            )),
        }
    }
}

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
        let others: Vec<DeadLetterSummary> = crate::cmd::dead_letters::read_all(&dir)
            .into_iter()
            .map(|(s, _)| s)
            .filter(|s| s.task_id != task)
            .collect();
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
