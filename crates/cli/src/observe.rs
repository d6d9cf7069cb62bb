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
        match &self.spinner {
            Some(bar) => bar.suspend(|| eprintln!("{text}")),
            None => eprintln!("{text}"),
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
                self.line(&format!("✓ {stage}  {}{outs}", duration(*duration_ms)));
            }
            Event::AttemptFailed { stage, duration_ms, error, attempt } => {
                self.stop_spinner();
                self.line(&format!(
                    "✗ {stage} attempt {attempt} failed after {}: {}",
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
            Event::SnapshotRestored { stage, report, .. } => self.line(&format!(
                "  {stage}: undid the interrupted attempt's changes ({} restored, {} recreated, {} removed)",
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

impl Observer for Projector {
    fn on_event(&mut self, record: &EventRecord, state: &RunState, pipeline: &Pipeline) {
        // The retry log of stages that can retry or that failed.
        if let Some(stage) = record.event.stage()
            && matches!(
                record.event,
                Event::AttemptSucceeded { .. }
                    | Event::AttemptFailed { .. }
                    | Event::RetryScheduled { .. }
                    | Event::StageFailed { .. }
            )
            && let Some(s) = state.stage(stage.as_str())
            && (s.attempts > 1
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
