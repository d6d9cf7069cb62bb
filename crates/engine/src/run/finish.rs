//! Finish: an attempt's execution judged. In the closed loop, GENERATE + EXECUTE ended (what
//! the agent changed, its failure if it failed); a plan-mode stage that wrote is put back and
//! failed for good; otherwise the stage's declared outputs are read — success commits what an
//! agent-mode stage changed, failure is classified.

use loopwright_spec::outputs::extract;
use loopwright_spec::{Mode, Stage, StageId};

use super::{Engine, output_tail};
use crate::closed_loop::{self, FailureType};
use crate::event::{Event, FailureKind, StageError};
use crate::ports::{
    Changes, Clock, Delivery, ExecOutcome, Execution, LayerError, Limits, Runner, StageRequest, Stopper, Store,
    StoreError,
};
use crate::state::RunState;

/// What a plan-mode attempt did to the workspace.
enum PlanCheck {
    /// Nothing: it is judged like any attempt.
    Untouched,
    /// It wrote: what it wrote was put back and the attempt failed for good (journaled).
    Undone,
}

impl<S: Store, R: Runner, C: Clock, X: Stopper, W: Changes, L: Limits, D: Delivery> Engine<'_, S, R, C, X, W, L, D> {
    /// Judges the attempt `request` ran to `execution`, `snapshot` taken before it.
    pub(super) async fn finish(
        &mut self,
        state: &mut RunState,
        stage: &Stage,
        request: &StageRequest,
        execution: &Execution,
        snapshot: Option<String>,
    ) -> Result<(), StoreError> {
        let (stage_id, attempt) = (stage.id.clone(), request.attempt);
        let duration_ms = u64::try_from(execution.duration.as_millis()).unwrap_or(u64::MAX);
        if closed_loop::is_closed_loop(stage) {
            return self.generated(state, stage, request, execution, snapshot.as_deref()).await;
        }
        if stage.mode == Mode::Plan
            && let Some(name) = &snapshot
            && let PlanCheck::Undone = self.plan_check(state, &stage_id, attempt, name, execution).await?
        {
            return Ok(());
        }
        match judge(&stage.outputs, execution) {
            Ok(outputs) => {
                // An agent-mode stage commits what its layer holds, else everything changed
                // since its first attempt.
                let commit = match &request.confine.layer {
                    Some(layer) => Some(Commit::Layer(layer.clone())),
                    None => snapshot.filter(|_| stage.mode == Mode::Agent).map(|snapshot| {
                        let first = state.stage(stage_id.as_str()).and_then(|s| s.snapshots.first());
                        Commit::Since(first.map_or(snapshot, |(_, n)| n.clone()))
                    }),
                };
                self.succeed(state, stage_id, attempt, duration_ms, outputs, commit).await
            }
            Err(error) => {
                let error = explained(self.patterns, stage, execution, error);
                self.defer(state, Event::AttemptFailed { stage: stage_id, attempt, duration_ms, error });
                Ok(())
            }
        }
    }

    /// Closed loop: GENERATE + EXECUTE ended — what the agent changed, and its failure if it
    /// failed.
    async fn generated(
        &mut self,
        state: &mut RunState,
        stage: &Stage,
        request: &StageRequest,
        execution: &Execution,
        snapshot: Option<&str>,
    ) -> Result<(), StoreError> {
        let files = match (&request.confine.layer, snapshot) {
            (Some(layer), _) => self.changes.layer_changed(&state.run_id, layer).unwrap_or_default(),
            (None, Some(snapshot)) => self.changes.changed(&state.run_id, snapshot).unwrap_or_default(),
            (None, None) => Default::default(),
        };
        let (outputs, failure) = match judge(&stage.outputs, execution) {
            Ok(outputs) => (outputs, None),
            Err(error) => {
                let failure_type = match error.kind {
                    FailureKind::Timeout => FailureType::Timeout,
                    _ => FailureType::ExecutionError,
                };
                let full = format!("{}\n{}", execution.stderr, execution.stdout_tail());
                let summary = format!("the agent {}", error.message);
                let context = execution.outcome.context(None, None);
                let mut f = closed_loop::classify(self.patterns, "generate", failure_type, summary, &full, &context);
                f.unfixable = execution.unfixable;
                (Default::default(), Some(Box::new(f)))
            }
        };
        let exit_code = match execution.outcome {
            ExecOutcome::Exited(c) => Some(c),
            _ => None,
        };
        let output = output_tail(&format!("{}{}", execution.stdout, execution.stderr));
        let duration_ms = u64::try_from(execution.duration.as_millis()).unwrap_or(u64::MAX);
        let (stage, attempt) = (stage.id.clone(), request.attempt);
        let event = Event::Generated { stage, attempt, duration_ms, outputs, files, output, exit_code, failure };
        self.record(state, event).await
    }

    /// Plan mode is read-only: a stage that wrote has everything put back and fails for good.
    async fn plan_check(
        &mut self,
        state: &mut RunState,
        stage_id: &StageId,
        attempt: u32,
        snapshot: &str,
        execution: &Execution,
    ) -> Result<PlanCheck, StoreError> {
        let files = self.changes.changed(&state.run_id, snapshot).unwrap_or_default();
        if !files.commits_kept.is_empty() {
            let commits = files.commits_kept.clone();
            self.defer(state, Event::CommitsKept { stage: stage_id.clone(), attempt, commits });
        }
        if files.is_empty() {
            return Ok(PlanCheck::Untouched);
        }
        self.flush(state).await?;
        let (mut kept, mut undone) = (Vec::new(), Vec::new());
        if let Ok(report) = self.changes.restore(&state.run_id, snapshot) {
            kept = report.unrestorable.clone();
            undone = report.kept.clone();
            self.record(state, Event::SnapshotRestored { stage: stage_id.clone(), attempt, report }).await?;
        }
        let mut restored = if kept.is_empty() {
            "the files were restored".to_owned()
        } else {
            format!("the files were restored, except what cannot be: {}", kept.join(", "))
        };
        if !undone.is_empty() {
            restored.push_str(&format!("; {}", undone.join(", ")));
        }
        let error = StageError {
            kind: FailureKind::SecurityViolation,
            message: format!(
                "plan-mode stage changed files: {} (plan mode is read-only; {restored})",
                files.described().join(", ")
            ),
            exit_code: None,
            output_tail: output_tail(&execution.stdout),
            pattern: None,
            classified_by: None,
            unfixable: None,
        };
        let duration_ms = u64::try_from(execution.duration.as_millis()).unwrap_or(u64::MAX);
        self.record(state, Event::AttemptFailed { stage: stage_id.clone(), attempt, duration_ms, error }).await?;
        Ok(PlanCheck::Undone)
    }

    /// Ends a successful attempt. With `commit_from` (an agent-mode stage), what changed since
    /// that snapshot is committed **before** the attempt's end is journaled, together with the
    /// commit: should loopwright die between the two, the attempt is redone (or, in the closed
    /// loop, evaluated again) on resume and the commit it made is adopted, never lost nor folded
    /// into the next stage's. A commit that fails fails the attempt instead (retryable).
    pub(super) async fn succeed(
        &mut self,
        state: &mut RunState,
        stage: StageId,
        attempt: u32,
        duration_ms: u64,
        outputs: crate::event::Outputs,
        commit: Option<Commit>,
    ) -> Result<(), StoreError> {
        let Some(commit) = commit else {
            self.defer(state, Event::AttemptSucceeded { stage, attempt, duration_ms, outputs });
            return Ok(());
        };
        match self.commit(state, &stage, &commit).await? {
            Err(error) => self.record(state, Event::AttemptFailed { stage, attempt, duration_ms, error }).await,
            Ok(committed) => {
                self.defer(state, Event::AttemptSucceeded { stage, attempt, duration_ms, outputs });
                if let Some(event) = committed {
                    self.defer(state, event);
                }
                self.flush(state).await
            }
        }
    }

    /// Commits what changed since snapshot `name` for a stage. Returns the `changes_committed`
    /// event to journal with the attempt's end (none when nothing changed), or the error that
    /// fails the attempt. A commit of this run and stage that a crash left unjournaled is
    /// adopted.
    async fn commit(
        &mut self,
        state: &mut RunState,
        stage_id: &StageId,
        commit: &Commit,
    ) -> Result<Result<Option<Event>, StageError>, StoreError> {
        self.repair(state, stage_id).await?;
        let task = state.started.as_ref().map(|s| s.task_id.clone()).expect("a started run");
        let known = |sha: &str| state.stage(stage_id.as_str()).is_some_and(|s| s.commits.iter().any(|c| c == sha));
        let made = match commit {
            Commit::Since(name) => self.changes.commit(&state.run_id, name, &task, stage_id).map_err(LayerError::from),
            Commit::Layer(name) => self.changes.commit_layer(&state.run_id, name, &task, stage_id),
        };
        Ok(match made {
            Ok(Some((commit, files))) => Ok(Some(Event::ChangesCommitted { stage: stage_id.clone(), commit, files })),
            // Only an attempt run again after its process died can find its commit made and
            // not journaled: asking on every stage would cost a git process each.
            Ok(None) if state.stage(stage_id.as_str()).is_some_and(|s| s.restarted) => Ok(self
                .changes
                .committed(&state.run_id, stage_id)
                .filter(|(sha, _)| !known(sha))
                .map(|(commit, files)| Event::ChangesCommitted { stage: stage_id.clone(), commit, files })),
            Ok(None) => Ok(None),
            Err(e) => Err(StageError {
                kind: FailureKind::ExecutionError,
                message: format!("the stage's changes could not be committed: {e}"),
                exit_code: None,
                output_tail: String::new(),
                pattern: None,
                classified_by: None,
                unfixable: None,
            }),
        })
    }

    /// Repairs what a crash left in the repository, journaling each repair.
    pub(super) async fn repair(&mut self, state: &mut RunState, stage: &StageId) -> Result<(), StoreError> {
        for detail in self.changes.repair() {
            self.record(state, Event::RepositoryRepaired { stage: stage.clone(), detail }).await?;
        }
        Ok(())
    }
}

/// A failed attempt's error with its failure pattern, and a sandbox's refusal first in what
/// is said of it: refused by the sandbox, it would fail the same way again, so it is not
/// retried. A reset named in what the attempt printed (its agent's output, a file it read, a
/// guess of the classifier) is this attempt's to wait for, not a provider's pause for every
/// run: only a provider's own answer pauses it (`Notice::RateLimited`).
fn explained(
    patterns: &crate::patterns::Library,
    stage: &Stage,
    execution: &Execution,
    mut error: StageError,
) -> StageError {
    error.unfixable = execution.unfixable;
    if error.exit_code.is_some() || error.kind == FailureKind::Timeout {
        let command = (!stage.run.is_empty()).then(|| stage.run.join(" && "));
        let context = execution.outcome.context(command.as_deref(), None);
        let c = patterns.classify_in(&format!("{}\n{}", error.output_tail, execution.stdout_tail()), &context);
        error.pattern = c.matched_pattern;
        error.classified_by = Some(c.classified_by);
    }
    if let Some(refused) = sandbox_refusals(&execution.stderr) {
        error.kind = FailureKind::ValidationError;
        error.message = format!("{refused} (a stage reaches only the hosts its `network:` names); {}", error.message);
    }
    error
}

/// What a failed process was refused by the sandbox, in words: `the sandbox refused its
/// connections to `a:443`, `b:443``, or `None` when it was refused nothing.
pub fn sandbox_refusals(stderr: &str) -> Option<String> {
    let targets: Vec<String> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix(crate::ports::SANDBOX_REFUSED))
        .map(|rest| format!("`{}`", rest.split(": ").next().unwrap_or(rest)))
        .collect();
    match targets.len() {
        0 => None,
        1 => Some(format!("the sandbox refused its connection to {}", targets[0])),
        _ => Some(format!("the sandbox refused its connections to {}", targets.join(", "))),
    }
}

/// What an agent-mode attempt's success commits.
pub(super) enum Commit {
    /// What changed since this snapshot.
    Since(String),
    /// What this layer holds.
    Layer(String),
}

/// Turns an execution into the stage's outputs, or the error it failed with.
pub(super) fn judge(declared: &[String], execution: &Execution) -> Result<crate::event::Outputs, StageError> {
    let tail = || output_tail(if execution.stderr.trim().is_empty() { &execution.stdout } else { &execution.stderr });
    match &execution.outcome {
        ExecOutcome::Exited(0) => {
            let (outputs, missing) = extract(declared, &execution.stdout);
            if missing.is_empty() {
                Ok(outputs)
            } else {
                Err(StageError {
                    kind: FailureKind::PartialFailure,
                    message: format!(
                        "the stage did not produce declared output{} {} (expected a `## key` section for each)",
                        if missing.len() == 1 { "" } else { "s" },
                        missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
                    ),
                    exit_code: Some(0),
                    output_tail: output_tail(&execution.stdout),
                    pattern: None,
                    classified_by: None,
                    unfixable: None,
                })
            }
        }
        ExecOutcome::Exited(code) => Err(StageError {
            kind: FailureKind::ExecutionError,
            message: format!("exited with status {code}"),
            exit_code: Some(*code),
            output_tail: tail(),
            pattern: None,
            classified_by: None,
            unfixable: None,
        }),
        ExecOutcome::Signaled(signal) => Err(StageError {
            kind: FailureKind::ExecutionError,
            message: format!("killed by signal {signal}"),
            exit_code: None,
            output_tail: tail(),
            pattern: None,
            classified_by: None,
            unfixable: None,
        }),
        ExecOutcome::TimedOut => Err(StageError {
            kind: FailureKind::Timeout,
            message: format!(
                "ran past its timeout of {:.1}s; its process group was ended",
                execution.duration.as_secs_f64()
            ),
            exit_code: None,
            output_tail: tail(),
            pattern: None,
            classified_by: None,
            unfixable: None,
        }),
        ExecOutcome::SpawnFailed(why) => Err(StageError {
            kind: FailureKind::ValidationError,
            message: why.clone(),
            exit_code: None,
            output_tail: String::new(),
            pattern: None,
            classified_by: None,
            unfixable: None,
        }),
    }
}
