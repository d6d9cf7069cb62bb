//! Observers of a run: the progress lines on stderr, and the markdown files on disk (the
//! application layer's [`Projector`]). Both read the same event stream the journal records.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use loopwright_engine::{Event, EventRecord, Observer, RunState};
use loopwright_spec::Pipeline;

pub use loopwright_app::files::Projector;

use crate::render::duration;

/// The observers of a run driven here.
pub struct Observers {
    /// Progress on stderr.
    pub progress: Progress,
    /// Markdown files.
    pub files: Projector,
    /// Traces, when a collector is named.
    pub telemetry: Option<loopwright_app::telemetry::Telemetry>,
}

impl Observers {
    /// The observers of a run in `ws` (`quiet`: no progress).
    pub fn new(ws: &loopwright_app::workspace::Workspace, quiet: bool) -> Self {
        Self {
            progress: Progress::new(quiet),
            files: Projector::new(ws.runs_dir()),
            telemetry: loopwright_app::telemetry::Telemetry::new(&ws.config),
        }
    }
}

impl Observer for Observers {
    fn on_event(&mut self, record: &EventRecord, state: &RunState, pipeline: &Pipeline) {
        self.files.on_event(record, state, pipeline);
        self.progress.on_event(record, state, pipeline);
        if let Some(t) = &mut self.telemetry {
            t.on_event(record, state, pipeline);
        }
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
    /// In a GitHub Actions job: the stage whose `::group::` is open, if one is.
    actions: Option<Option<String>>,
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
            actions: loopwright_app::report::actions::enabled().then_some(None),
        }
    }

    /// In a GitHub Actions job, opens the log group of `stage` unless it is open (closing
    /// another's first): the stage's lines fold under it.
    fn group(&mut self, stage: &str, title: &str) {
        if self.quiet || self.actions.as_ref().is_none_or(|open| open.as_deref() == Some(stage)) {
            return;
        }
        self.end_group();
        self.raw(&loopwright_app::report::actions::group(title));
        self.actions = Some(Some(stage.to_owned()));
    }

    /// Closes the open log group, if one is.
    fn end_group(&mut self) {
        if let Some(open) = &mut self.actions
            && open.take().is_some()
        {
            self.raw(loopwright_app::report::actions::END_GROUP);
        }
    }

    /// Prints a line of loopwright's own (a workflow command) as it is.
    fn raw(&self, text: &str) {
        use std::io::Write;
        let _ = std::io::stderr().write_all(format!("{text}\n").as_bytes());
    }

    fn line(&self, text: &str) {
        if self.quiet {
            return;
        }
        // What agents and checks printed is part of many lines.
        let text = crate::terminal::safe(text);
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

impl Drop for Progress {
    fn drop(&mut self) {
        self.end_group();
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
                let now = state.stage(stage.as_str()).and_then(|s| s.agent.as_deref());
                let who =
                    st.map_or_else(String::new, |s| format!(" [{}, {} mode]", now.unwrap_or(s.agent.name()), s.mode));
                let of = match st.and_then(|s| s.retry) {
                    Some(r) if *attempt > 1 => format!(" attempt {attempt}/{}", r.max_attempts),
                    _ => String::new(),
                };
                self.group(stage.as_str(), &format!("{stage}{who}"));
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
            Event::CandidateStarted { stage, candidate, agent, .. } => {
                self.line(&format!("▶ {stage} candidate {} [{agent}]", candidate + 1));
            }
            Event::CandidateEnded { stage, candidate, result, .. } => {
                let mark = if result.passed { "✓" } else { "✗" };
                let why = result.error.as_ref().map(|e| format!(": {e}")).unwrap_or_default();
                self.line(&format!("{mark} {stage} candidate {}  {}{why}", candidate + 1, duration(result.duration_ms)));
            }
            Event::CandidateChosen { stage, why, .. } => self.line(&format!("★ {stage}: {why}")),
            Event::AgentFellBack { stage, attempt, from, to, reason } => {
                self.line(&format!(
                    "⇢ {stage}: agent `{from}` cannot go on after attempt {attempt} ({}); agent `{to}` takes over",
                    reason.describe()
                ));
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
                    _ => match (reason, pipeline.stage(stage.as_str()).and_then(|s| s.judges.as_ref())) {
                        (loopwright_engine::SkipReason::Judge, Some(judged)) => {
                            format!("it judges the candidates of '{judged}'")
                        }
                        (loopwright_engine::SkipReason::EscalationSkip, _) => "skipped at its escalation".to_owned(),
                        (loopwright_engine::SkipReason::ConditionFalse, _) => "condition not met".to_owned(),
                        _ => "named with --skip".to_owned(),
                    },
                };
                self.line(&format!("- {stage} skipped: {why}"));
            }
            Event::ApprovalRequested { stage } => {
                self.end_group();
                self.line(&format!("⏸ {stage} requires approval"));
            }
            Event::ApprovalGranted { stage, by, .. } => self.line(&format!("  {stage} approved by {by}")),
            Event::ApprovalRejected { stage, by, .. } => {
                self.line(&format!("■ {stage} rejected by {by}: run rejected"))
            }
            Event::StageFailed { stage, error } => {
                self.line(&format!("✗ {stage} failed for good ({})", error.kind.as_str()));
            }
            Event::RunFinished { status } => {
                self.stop_spinner();
                self.end_group();
                let elapsed = u64::try_from(self.run_started.elapsed().as_millis()).unwrap_or(u64::MAX);
                self.line(&format!("loopwright: run {} {} in {}", state.run_id, status.as_str(), duration(elapsed)));
            }
            Event::RunInterrupted { stage, signal } => {
                self.stop_spinner();
                self.end_group();
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
            Event::EscalationAnswered { stage, answer, by, .. } => {
                self.line(&format!("  {stage}: {by} answered {}", serde_json::to_string(answer).unwrap_or_default()));
            }
            Event::RunResumed { .. } => self.line(&format!("loopwright: resuming run {}", state.run_id)),
            Event::RunQueued {} => self.line(&format!("loopwright: run {} is queued", state.run_id)),
            Event::LimitWaiting { stage, reason, until, .. } => self.line(&format!(
                "  {stage}: waits for the provider: {reason}{}",
                until.map(|u| format!(" (until {})", u.strftime("%H:%M:%S UTC"))).unwrap_or_default()
            )),
            Event::LimitTaken { stage, .. } => self.line(&format!("  {stage}: the provider allows it: going on")),
            Event::CommitsKept { stage, commits, .. } => self.line(&format!(
                "  {stage}: commits made meanwhile outside the stage, kept: {}",
                commits.join("; ")
            )),
            Event::CheckoutFailed { worker, reason, tries } => self.line(&format!(
                "  worker {worker} could not make the run's work tree (try {tries} of {}): {reason}",
                Event::CHECKOUT_TRIES
            )),
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
            | Event::LayerMade { .. }
            | Event::LayerDropped { .. }
            | Event::SandboxUnavailable { .. }
            | Event::ChangesCommitted { .. } => {}
            Event::SnapshotFailed { stage, reason, .. } => self.line(&format!("  {stage}: warning: {reason}")),
            Event::NetworkRefused { stage, target, .. } => {
                self.line(&format!("  {stage}: the sandbox refused a connection to {target}"));
            }
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
                    self.line(&format!("  {stage}: {}", f.classification()));
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
            Event::Delivered(_)
            | Event::DeliveryFailed { .. }
            | Event::CiReported { .. }
            | Event::ReviewReceived { .. }
            | Event::CiAwaited { .. }
            | Event::CiRetried { .. }
            | Event::CiEscalated { .. }
            | Event::ApprovalReceived { .. }
            | Event::ReviewAwaited { .. }
            | Event::HeadMoved { .. }
            | Event::Merged { .. }
            | Event::MergeFailed { .. }
            | Event::FailureReported { .. } => {
                if let Some(line) = loopwright_app::forge::describe(&record.event) {
                    self.line(&format!("⇡ {line}"));
                }
            }
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
