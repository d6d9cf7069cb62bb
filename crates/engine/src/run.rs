//! The life of a run: start it, then loop — ask the state machine for the next step, do it,
//! journal what happened — until the run ends or waits for a human.

use loopwright_spec::outputs::extract;
use loopwright_spec::{Pipeline, StageId};
use tokio::sync::mpsc;

use crate::closed_loop::{self, CheckResult, FailureType, FixResult, Strategy};
use crate::decide::{Step, next_step};
use crate::event::RollbackStatus;
use crate::event::{Event, EventRecord, FailureKind, RunStarted, StageError};
use crate::ids::RunId;
use crate::ports::{
    Allowed, Changes, Clock, ExecOutcome, Execution, Limits, Notice, Observer, Runner, StageRequest, Stop, Stopper,
    Store, StoreError, Watch,
};
use crate::prompt::build_prompt;
use crate::state::RunState;
use loopwright_spec::Mode;
use loopwright_spec::pipeline::RollbackStrategy;
use loopwright_spec::sandbox::{Network, SandboxMode};

/// Runs a pipeline against the ports.
pub struct Engine<'a, S, R, C, X, W, L = crate::ports::NoLimits> {
    /// The validated pipeline.
    pub pipeline: &'a Pipeline,
    /// The journal.
    pub store: &'a S,
    /// Who runs stages.
    pub runner: &'a R,
    /// Time.
    pub clock: &'a C,
    /// Who watches.
    pub observer: &'a mut dyn Observer,
    /// Who may ask the run to stop (signals, cancel requests).
    pub stopper: &'a X,
    /// Snapshots, commits and their undoing.
    pub changes: &'a W,
    /// The failure patterns failed attempts are classified with.
    pub patterns: &'a crate::patterns::Library,
    /// Closed-loop settings (regression detection, backoff).
    pub settings: &'a closed_loop::Settings,
    /// What providers allow, shared with every process of the journal.
    pub limits: L,
}

/// How often an attempt waiting for a provider limit asks again, at least and at most.
const LIMIT_POLL_MIN: jiff::SignedDuration = jiff::SignedDuration::from_millis(200);
const LIMIT_POLL_MAX: jiff::SignedDuration = jiff::SignedDuration::from_secs(2);
/// How often a running attempt renews the provider slots it holds (their lease is a minute).
const LIMIT_RENEW: std::time::Duration = std::time::Duration::from_secs(20);

/// How an attempt's execution ended from the engine's point of view.
enum Ended {
    Ran(Execution),
    Stopped(Stop),
}

impl<S: Store, R: Runner, C: Clock, X: Stopper, W: Changes, L: Limits> Engine<'_, S, R, C, X, W, L> {
    /// Creates a run and drives it until it ends or waits.
    pub async fn start(&mut self, run_id: RunId, started: RunStarted) -> Result<RunState, StoreError> {
        let mut state = RunState::new(run_id);
        self.defer(&mut state, Event::RunStarted(Box::new(started)));
        self.drive(state).await
    }

    /// Drives a run from the state its journal gives until it ends or waits.
    pub async fn drive(&mut self, mut state: RunState) -> Result<RunState, StoreError> {
        loop {
            match next_step(self.pipeline, &state, self.clock.now()) {
                Step::Record(event) => self.defer(&mut state, event),
                Step::Execute { stage, attempt } => self.execute(&mut state, stage, attempt).await?,
                Step::Wait { until, .. } => {
                    self.flush(&mut state).await?;
                    let (clock, stopper) = (self.clock, self.stopper);
                    tokio::select! {
                        biased;
                        stop = stopper.stopped() => self.stop(&mut state, stop).await?,
                        () = clock.sleep_until(until) => {}
                    }
                }
                Step::RollBack { trigger, stages, resumed } => {
                    self.flush(&mut state).await?;
                    self.roll_back(&mut state, trigger, stages, resumed).await?
                }
                Step::Baseline { stage } => self.baseline(&mut state, stage).await?,
                Step::Evaluate { stage, attempt } => self.evaluate(&mut state, stage, attempt).await?,
                Step::Analyze { stage, attempt } => self.analyze(&mut state, stage, attempt).await?,
                Step::Fix { stage, attempt } => self.fix(&mut state, stage, attempt).await?,
                Step::Done(status) => {
                    self.flush(&mut state).await?;
                    if status.is_final() {
                        // What failed attempts wrote is of no more use once the run has ended.
                        let left: Vec<StageId> =
                            state.stages.iter().filter(|s| s.layer.is_some()).map(|s| s.id.clone()).collect();
                        for stage in left {
                            self.drop_layer(&mut state, &stage, None).await?;
                        }
                        self.changes.ended(&state.run_id);
                    }
                    return Ok(state);
                }
            }
        }
    }

    /// Journals an event now (with any deferred ones, in one transaction), then tells the
    /// observer (journal first).
    pub async fn record(&mut self, state: &mut RunState, event: Event) -> Result<(), StoreError> {
        self.defer(state, event);
        self.flush(state).await
    }

    /// Journals `events` together, only if the run's journal still ends where `state` read
    /// it (compare-and-append), then tells the observer. An answer, a resume or a cancel made
    /// on a journal that another process has moved on since fails with
    /// [`StoreError::Conflict`], and nothing is recorded.
    pub async fn record_after(&mut self, state: &mut RunState, events: Vec<Event>) -> Result<(), StoreError> {
        debug_assert!(!state.has_deferred(), "a compare-and-append comes before anything is deferred");
        let at = self.clock.now();
        let batch: Vec<(Event, jiff::Timestamp)> = events.into_iter().map(|e| (e, at)).collect();
        let records = self.store.append_after(&state.run_id, state.last_seq, &batch).await?;
        for record in &records {
            state.apply(record);
        }
        for record in &records {
            self.observer.on_event(record, state, self.pipeline);
        }
        Ok(())
    }

    /// Applies an event that has no effect outside loopwright, and keeps it to be journaled
    /// before the next outside effect (a process started or ended, files restored, a commit, a
    /// wait, the end of `drive`). Nothing is reported before it is journaled.
    fn defer(&self, state: &mut RunState, event: Event) {
        let at = self.clock.now();
        let provisional = EventRecord { seq: state.last_seq + 1, at, event };
        state.apply(&provisional);
        state.defer(provisional.event, at);
    }

    /// Journals the deferred events in one transaction, then tells the observer of each.
    async fn flush(&mut self, state: &mut RunState) -> Result<(), StoreError> {
        if !state.has_deferred() {
            return Ok(());
        }
        let events = state.take_deferred();
        let records = self.store.append_all(&state.run_id, &events).await?;
        if let Some(last) = records.last() {
            state.last_seq = last.seq;
        }
        for record in &records {
            self.observer.on_event(record, state, self.pipeline);
        }
        Ok(())
    }

    /// ANALYZE (seed 000): a decision over the journal and the strategies' measured
    /// effectiveness, journaled before the FIX it chooses.
    async fn analyze(&mut self, state: &mut RunState, stage_id: StageId, attempt: u32) -> Result<(), StoreError> {
        let measured = match self.settings.effectiveness.get() {
            Some(measured) => measured,
            None => {
                let measured = closed_loop::effectiveness::Effectiveness::measure(
                    self.store,
                    closed_loop::effectiveness::MEASURED_RUNS,
                )
                .await?;
                self.settings.effectiveness.get_or_init(|| measured)
            }
        };
        let stage = self.pipeline.stage(stage_id.as_str()).expect("the state machine only names pipeline stages");
        let lp = state.stage(stage_id.as_str()).and_then(|s| s.closed.as_deref()).expect("a looping stage has a loop");
        let analysis = closed_loop::analyze(stage, lp, measured);
        self.defer(state, Event::Analyzed { stage: stage_id, attempt, analysis });
        Ok(())
    }

    async fn execute(&mut self, state: &mut RunState, stage_id: StageId, attempt: u32) -> Result<(), StoreError> {
        let stage = self.pipeline.stage(stage_id.as_str()).expect("the state machine only names pipeline stages");
        // Decisions so far are journaled before anything outside changes.
        self.flush(state).await?;
        if let Some(st) = state.stage(stage_id.as_str()).filter(|s| s.status == crate::state::StageStatus::Running) {
            // An attempt was in flight when loopwright died: end what it left before redoing it.
            if !st.process_groups.is_empty() {
                self.runner.end_leftovers(&st.process_groups);
            }
            self.runner.end_strays(&state.run_id, &stage_id);
        }
        let redo = state.stage(stage_id.as_str()).filter(|s| s.status == crate::state::StageStatus::Running);
        if let Some(name) =
            redo.and_then(|s| s.snapshots.iter().rev().find(|(a, _)| *a == attempt)).map(|(_, n)| n.clone())
        {
            // Undo what the interrupted attempt had changed, so running it again is safe.
            if let Ok(report) = self.changes.restore(&state.run_id, &name) {
                self.record(state, Event::SnapshotRestored { stage: stage_id.clone(), attempt, report }).await?;
            }
        }
        // An earlier attempt's layer (it failed), or this attempt's (it was interrupted): what
        // it wrote is discarded, and nothing of the workspace needs restoring.
        self.drop_layer(state, &stage_id, Some(attempt)).await?;
        if !state.sandbox_noted
            && let Some(reason) = self.runner.unsandboxed()
        {
            self.defer(state, Event::SandboxUnavailable { reason });
        }
        // What the provider allows is taken before anything of the attempt starts; waiting for
        // it, the run is queued with the reason (a stop ends the wait as it ends an attempt).
        let holder = format!("{}/{stage_id}/{attempt}", state.run_id);
        if let Some(agent) = self.pipeline.agent_of(stage) {
            // Journaled when the attempt starts waiting and when it waits for another reason
            // (not for another count of the same one).
            let mut waited: Option<String> = None;
            loop {
                match self.limits.take(agent, &holder).await? {
                    Allowed::Yes => break,
                    Allowed::Wait { reason, until } => {
                        let kind: String = reason.chars().filter(|c| !c.is_ascii_digit()).collect();
                        if waited.as_ref() != Some(&kind) {
                            let event = Event::LimitWaiting { stage: stage_id.clone(), attempt, reason, until };
                            self.record(state, event).await?;
                            waited = Some(kind);
                        }
                        let now = self.clock.now();
                        let pause = until
                            .map(|u| u.duration_since(now).clamp(LIMIT_POLL_MIN, LIMIT_POLL_MAX))
                            .unwrap_or(LIMIT_POLL_MAX);
                        let (clock, stopper) = (self.clock, self.stopper);
                        tokio::select! {
                            biased;
                            stop = stopper.stopped() => return self.stop(state, stop).await,
                            () = clock.sleep_until(now + pause) => {}
                        }
                    }
                }
            }
            if waited.is_some() {
                self.defer(state, Event::LimitTaken { stage: stage_id.clone(), attempt });
            }
        }
        self.defer(state, Event::AttemptStarted { stage: stage_id.clone(), attempt });
        let looped = closed_loop::is_closed_loop(stage);
        let mut confine = self.confinement(stage);
        // In a sandbox that keeps the workspace apart, an agent-mode attempt writes into a layer
        // and plan mode is mounted read-only: neither needs a snapshot (SPEC §12).
        let apart = confine.sandbox && self.changes.confined();
        // A model's edits are written by loopwright itself, through the path guard, into the
        // workspace: its attempt is snapshotted, not given a layer its edits would miss.
        let http = self.pipeline.agent_of(stage).is_some_and(|a| a.runner.is_http());
        if apart && stage.mode == Mode::Agent && !http {
            let name = format!("{stage_id}-{attempt}");
            let event = match self.changes.make_layer(&state.run_id, &name) {
                Ok(how) => {
                    confine.layer = Some(name.clone());
                    Event::LayerMade { stage: stage_id.clone(), attempt, layer: name, how }
                }
                Err(reason) => Event::SnapshotFailed {
                    stage: stage_id.clone(),
                    attempt,
                    reason: format!("no layer could be made for the attempt ({reason}); it writes into the workspace"),
                },
            };
            self.defer(state, event);
        }
        // Plan mode is enforced, not trusted (SPEC §5): without a sandbox its attempts are
        // snapshotted too. A `file_restore` rollback needs the snapshot either way.
        let kept_apart = confine.layer.is_some() || (apart && stage.mode == Mode::Plan);
        let tracks_changes = self.changes.enabled()
            && (stage.rollback.as_ref().is_some_and(|r| r.strategy == RollbackStrategy::FileRestore)
                || (!kept_apart && (looped || stage.mode == Mode::Plan || stage.mode == Mode::Agent)));
        let mut snapshot = format!("{stage_id}-{attempt}");
        let mut snapshot_taken = false;
        let watch = if stage.mode == Mode::Plan { Watch::ReadOnly } else { Watch::Files };
        if tracks_changes {
            let event = match self.changes.snapshot(&state.run_id, &snapshot, watch) {
                Ok((name, files)) => {
                    snapshot_taken = true;
                    snapshot = name;
                    Event::SnapshotTaken { stage: stage_id.clone(), attempt, snapshot: snapshot.clone(), files }
                }
                Err(reason) if stage.mode == Mode::Plan => {
                    // Plan mode fails closed: a read-only stage that cannot be watched does not run.
                    let error = StageError {
                        kind: FailureKind::ValidationError,
                        message: format!(
                            "plan mode cannot be enforced, so the stage was not run: {reason}. Free disk space or fix the permissions of the workspace and .loopwright/state, then `loopwright resume` (or run it with `mode: agent` if it may change files)"
                        ),
                        exit_code: None,
                        output_tail: String::new(),
                        pattern: None,
                        classified_by: None,
                    };
                    // What the attempt took of its provider goes back: it never ran.
                    if self.pipeline.agent_of(stage).is_some() {
                        self.limits.give(&holder, 0).await;
                    }
                    return self
                        .record(state, Event::AttemptFailed { stage: stage_id, attempt, duration_ms: 0, error })
                        .await;
                }
                Err(reason) => Event::SnapshotFailed { stage: stage_id.clone(), attempt, reason },
            };
            self.defer(state, event);
        }
        // The attempt is journaled as started before its process exists.
        self.flush(state).await?;
        let started = state.started.as_ref().expect("a started run");
        let request = StageRequest {
            run_id: state.run_id.clone(),
            task_id: started.task_id.clone(),
            stage: stage_id.clone(),
            attempt,
            mode: stage.mode,
            agent: self.pipeline.agent_of(stage).cloned(),
            commands: stage.run.clone(),
            prompt: build_prompt(self.pipeline, stage, state),
            timeout: capped_timeout(self.pipeline, state, stage),
            workspace: self.workspace(state),
            confine,
            purpose: crate::ports::Purpose::Attempt,
        };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (runner, stopper) = (self.runner, self.stopper);
        let limited = request.agent.is_some();
        let ended = {
            let run = runner.run(&request, tx);
            tokio::pin!(run);
            // A provider slot is leased: kept while the attempt runs.
            let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + LIMIT_RENEW, LIMIT_RENEW);
            loop {
                tokio::select! {
                    biased;
                    stop = stopper.stopped() => break Ended::Stopped(stop),
                    Some(notice) = rx.recv() => self.notice(state, &stage_id, attempt, notice).await?,
                    execution = &mut run => break Ended::Ran(execution),
                    _ = renew.tick(), if limited => self.limits.renew(&holder).await,
                }
            }
            // Leaving this block drops the runner's future, which kills the process it waits on.
        };
        while let Ok(notice) = rx.try_recv() {
            self.notice(state, &stage_id, attempt, notice).await?;
        }
        let execution = match ended {
            Ended::Ran(execution) => execution,
            Ended::Stopped(stop) => {
                if limited {
                    self.limits.give(&holder, 0).await;
                }
                return self.stop(state, stop).await;
            }
        };
        let duration_ms = u64::try_from(execution.duration.as_millis()).unwrap_or(u64::MAX);
        if let Some(agent) = &request.agent {
            let usage = usage_of(agent, &request, &execution, state);
            self.limits.give(&holder, usage.input_tokens + usage.output_tokens).await;
            self.defer(state, Event::UsageRecorded { stage: stage_id.clone(), attempt, usage });
        }
        if looped {
            // GENERATE + EXECUTE ended: what the agent changed, and its failure if it failed.
            let files = match &request.confine.layer {
                Some(layer) => self.changes.layer_changed(&state.run_id, layer).unwrap_or_default(),
                None if snapshot_taken => self.changes.changed(&state.run_id, &snapshot).unwrap_or_default(),
                None => Default::default(),
            };
            let (outputs, failure) = match judge(&stage.outputs, &execution) {
                Ok(outputs) => (outputs, None),
                Err(error) => {
                    let failure_type = match error.kind {
                        FailureKind::Timeout => FailureType::Timeout,
                        _ => FailureType::ExecutionError,
                    };
                    let full = format!("{}\n{}", execution.stderr, execution.stdout_tail());
                    let summary = format!("the agent {}", error.message);
                    let context = execution.outcome.context(None, None);
                    let f = closed_loop::classify(self.patterns, "generate", failure_type, summary, &full, &context);
                    (Default::default(), Some(Box::new(f)))
                }
            };
            let exit_code = match execution.outcome {
                crate::ports::ExecOutcome::Exited(c) => Some(c),
                _ => None,
            };
            let printed = format!("{}{}", execution.stdout, execution.stderr);
            let output = output_tail(&printed);
            let event =
                Event::Generated { stage: stage_id, attempt, duration_ms, outputs, files, output, exit_code, failure };
            return self.record(state, event).await;
        }
        if stage.mode == Mode::Plan && snapshot_taken {
            let files = self.changes.changed(&state.run_id, &snapshot).unwrap_or_default();
            if !files.commits_kept.is_empty() {
                let commits = files.commits_kept.clone();
                self.defer(state, Event::CommitsKept { stage: stage_id.clone(), attempt, commits });
            }
            if !files.is_empty() {
                // A read-only stage wrote: put everything back and fail it for good.
                self.flush(state).await?;
                let (mut kept, mut undone) = (Vec::new(), Vec::new());
                if let Ok(report) = self.changes.restore(&state.run_id, &snapshot) {
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
                };
                return self.record(state, Event::AttemptFailed { stage: stage_id, attempt, duration_ms, error }).await;
            }
        }
        match judge(&stage.outputs, &execution) {
            Ok(outputs) => {
                // An agent-mode stage commits what its layer holds, else everything changed
                // since its first attempt.
                let commit = match request.confine.layer {
                    Some(layer) => Some(Commit::Layer(layer)),
                    None => (snapshot_taken && stage.mode == Mode::Agent).then(|| {
                        let first = state.stage(stage_id.as_str()).and_then(|s| s.snapshots.first());
                        Commit::Since(first.map_or(snapshot, |(_, n)| n.clone()))
                    }),
                };
                return self.succeed(state, stage_id, attempt, duration_ms, outputs, commit).await;
            }
            Err(mut error) => {
                if error.exit_code.is_some() || error.kind == FailureKind::Timeout {
                    let command = (!stage.run.is_empty()).then(|| stage.run.join(" && "));
                    let context = execution.outcome.context(command.as_deref(), None);
                    let c = self
                        .patterns
                        .classify_in(&format!("{}\n{}", error.output_tail, execution.stdout_tail()), &context);
                    error.pattern = c.matched_pattern;
                    error.classified_by = Some(c.classified_by);
                }
                // Refused by the sandbox, it would fail the same way again: not retried, and
                // the refusal comes first in what is said of it.
                if let Some(refused) = sandbox_refusals(&execution.stderr) {
                    error.kind = FailureKind::ValidationError;
                    error.message =
                        format!("{refused} (a stage reaches only the hosts its `network:` names); {}", error.message);
                }
                // A reset named in what the attempt printed (its agent's output, a file it
                // read, a guess of the classifier) is this attempt's to wait for, not a
                // provider's pause for every run: only a provider's own answer pauses it
                // (`Notice::RateLimited`).
                self.defer(state, Event::AttemptFailed { stage: stage_id, attempt, duration_ms, error });
            }
        }
        Ok(())
    }

    /// Closed loop, before the first attempt: regression detection's complexity gate
    /// (seed 000) and, when it is on, the baseline test results.
    async fn baseline(&mut self, state: &mut RunState, stage_id: StageId) -> Result<(), StoreError> {
        let stage = self.pipeline.stage(stage_id.as_str()).expect("the state machine only names pipeline stages");
        let given = state.started.as_ref().and_then(|s| s.vars.get("complexity").cloned()).filter(|c| !c.is_empty());
        let config = stage.closed_loop.as_ref();
        let complexity = config.and_then(|c| c.complexity).map(|c| format!("{c:?}").to_lowercase()).or(given);
        let settings = &self.settings.regression;
        let (enabled, reason) = match config.and_then(|c| c.regression) {
            Some(on) => (on, format!("closed_loop.regression: {on}")),
            None => match &complexity {
                Some(c) if settings.enabled_for_complexity.contains(c) => {
                    (true, format!("complexity {c} is in enabled_for_complexity"))
                }
                Some(c) => (false, format!("complexity {c} is not in enabled_for_complexity")),
                None => (false, "no complexity given".to_owned()),
            },
        };
        let command = settings
            .test_command
            .clone()
            .or_else(|| closed_loop::checks::Project::detect(self.changes).verbose_test_command());
        let baseline = match (enabled, command) {
            (true, Some(command)) => {
                self.flush(state).await?;
                self.runner.end_strays(&state.run_id, &stage_id);
                let run = self.shell(state, &stage_id, &command, stage.timeout).await;
                let output = format!("{}\n{}", run.stdout, run.stderr);
                let results = closed_loop::regression::parse_results(&output, self.changes);
                Some(closed_loop::Baseline { command, results })
            }
            _ => None,
        };
        let reason = if enabled && baseline.is_none() {
            format!("{reason}, but the project has no test command")
        } else {
            reason
        };
        self.record(state, Event::RegressionGate { stage: stage_id, complexity, reason, baseline }).await
    }

    /// Closed loop: VALIDATE, EVALUATE and the regression re-check, each unless journaled
    /// already; the first that fails ends the step (ANALYZE is next); success when all pass.
    async fn evaluate(&mut self, state: &mut RunState, stage_id: StageId, attempt: u32) -> Result<(), StoreError> {
        let stage = self.pipeline.stage(stage_id.as_str()).expect("the state machine only names pipeline stages");
        let st = state.stage(stage_id.as_str()).expect("a looping stage has state");
        let lp = st.closed.as_ref().expect("a looping stage has a loop");
        let it = lp.iterations.last().expect("a looping stage has generated").clone();
        let snapshot = st.snapshots.iter().rev().find(|(a, _)| *a == attempt).map(|(_, n)| n.clone());
        let first_snapshot = st.snapshots.first().map(|(_, n)| n.clone());
        let layer = st.layer.as_ref().filter(|(a, _)| *a == attempt).map(|(_, n)| n.clone());
        let all_files = lp.files();
        let gate = lp.regression_gate.clone().flatten();
        self.flush(state).await?;
        // A crash may have left this stage's commands running: end them before running again.
        self.runner.end_strays(&state.run_id, &stage_id);
        if it.validation.is_none() {
            let violations = closed_loop::checks::validate(&it.files, stage.mode, self.changes);
            let plan = violations.iter().any(|v| v.gate == "plan_mode");
            if plan && let Some(name) = &snapshot {
                // Plan mode is read-only: what the attempt changed is put back.
                if let Ok(report) = self.changes.restore(&state.run_id, name) {
                    self.record(state, Event::SnapshotRestored { stage: stage_id.clone(), attempt, report }).await?;
                }
            }
            let failure = (!violations.is_empty()).then(|| {
                let text: Vec<String> = violations.iter().map(|v| format!("{}: {}", v.gate, v.message)).collect();
                let summary = format!(
                    "pre-execution validation failed: {} violation{} ({})",
                    violations.len(),
                    if violations.len() == 1 { "" } else { "s" },
                    violations.iter().map(|v| v.gate.as_str()).collect::<Vec<_>>().join(", ")
                );
                let kind = if plan { FailureType::SecurityViolation } else { FailureType::ValidationFailed };
                Box::new(closed_loop::classify(
                    self.patterns,
                    "pre_validation",
                    kind,
                    summary,
                    &text.join("\n"),
                    &Default::default(),
                ))
            });
            let failed = failure.is_some();
            let gates = closed_loop::checks::GATES.iter().map(|g| (*g).to_owned()).collect();
            self.record(state, Event::Validated { stage: stage_id.clone(), attempt, gates, violations, failure })
                .await?;
            if failed {
                return Ok(());
            }
        }
        if it.checks.is_none() {
            let task_type = state.started.as_ref().and_then(|s| s.vars.get("task_type").cloned());
            let checks = closed_loop::checks::checks_for(&stage.checks, task_type.as_deref(), self.changes);
            let mut results = Vec::new();
            let mut failure = None;
            for check in checks {
                let run = self.shell(state, &stage_id, &check.command, stage.timeout).await;
                let output = match (run.stdout.trim().is_empty(), run.stderr.trim().is_empty()) {
                    (false, false) => format!("{}\n{}", run.stdout.trim_end(), run.stderr.trim_end()),
                    (true, _) => run.stderr.clone(),
                    (false, true) => run.stdout.clone(),
                };
                let exit_code = match run.outcome {
                    crate::ports::ExecOutcome::Exited(c) => Some(c),
                    _ => None,
                };
                let expected_ok = check.expected.as_ref().is_none_or(|e| output.contains(e.as_str()));
                let passed = exit_code == Some(0) && expected_ok;
                let kind = check.kind.as_str().to_owned();
                results.push(CheckResult {
                    name: check.name.clone(),
                    kind,
                    command: check.command.clone(),
                    passed,
                    exit_code,
                    output: output_tail(&output),
                    duration_ms: u64::try_from(run.duration.as_millis()).unwrap_or(u64::MAX),
                });
                if !passed {
                    let how = match (&run.outcome, expected_ok) {
                        (crate::ports::ExecOutcome::Exited(0), false) => {
                            format!("did not print the expected `{}`", check.expected.as_deref().unwrap_or_default())
                        }
                        (crate::ports::ExecOutcome::Exited(c), _) => format!("returned exit code {c}"),
                        (crate::ports::ExecOutcome::TimedOut, _) => "ran past the stage's timeout".to_owned(),
                        (crate::ports::ExecOutcome::Signaled(s), _) => format!("was killed by signal {s}"),
                        (crate::ports::ExecOutcome::SpawnFailed(why), _) => format!("could not start: {why}"),
                    };
                    let failure_type = if run.outcome == crate::ports::ExecOutcome::TimedOut {
                        FailureType::Timeout
                    } else {
                        FailureType::VerificationFailed
                    };
                    let summary = format!("check `{}` (`{}`) {how}", check.name, check.command);
                    let context = run.outcome.context(Some(&check.command), Some(check.kind.as_str()));
                    let mut f =
                        closed_loop::classify(self.patterns, &check.name, failure_type, summary, &output, &context);
                    if closed_loop::ask::wanted(&f) {
                        self.ask_agent(state, &stage_id, attempt, &mut f, &context).await;
                    }
                    failure = Some(Box::new(f));
                    break;
                }
            }
            let failed = failure.is_some();
            self.record(state, Event::Evaluated { stage: stage_id.clone(), attempt, checks: results, failure }).await?;
            if failed {
                return Ok(());
            }
        }
        if let Some(baseline) = gate.filter(|_| it.regression.is_none()) {
            let settings = &self.settings.regression;
            let changed: Vec<&str> = all_files.paths();
            let dependents = closed_loop::regression::dependents(
                self.changes,
                &changed,
                settings.search_depth,
                &settings.exclude_patterns,
            );
            let mut regressions = Vec::new();
            if !dependents.is_empty() {
                let run = self.shell(state, &stage_id, &baseline.command, stage.timeout).await;
                let current =
                    closed_loop::regression::parse_results(&format!("{}\n{}", run.stdout, run.stderr), self.changes);
                regressions = closed_loop::regression::compare(&baseline.results, &current, &dependents);
            }
            let failure = (!regressions.is_empty()).then(|| {
                let report = closed_loop::regression::report(&regressions);
                let summary = format!(
                    "regression check: {} dependent file{} with new test failures ({})",
                    regressions.len(),
                    if regressions.len() == 1 { "" } else { "s" },
                    regressions.iter().map(|r| r.file.as_str()).collect::<Vec<_>>().join(", ")
                );
                let mut f = closed_loop::classify(
                    self.patterns,
                    "regression_check",
                    FailureType::Regression,
                    summary,
                    &report,
                    &Default::default(),
                );
                if let Some(p) = self.patterns.get("regression-detected") {
                    f.pattern = Some(p.id.clone());
                    f.confidence = 1.0;
                    f.strategy = p.strategy;
                    f.alternatives = p.alternatives.clone();
                    f.max_auto_retries = Some(p.max_auto_retries);
                    f.retryable = p.retryable;
                    f.lines = regressions
                        .iter()
                        .map(|r| format!("{}: {} new failure(s): {}", r.file, r.new_failures, r.tests.join(", ")))
                        .collect();
                }
                Box::new(f)
            });
            let failed = failure.is_some();
            let event = Event::RegressionChecked { stage: stage_id.clone(), attempt, dependents, regressions, failure };
            self.record(state, event).await?;
            if failed {
                return Ok(());
            }
        }
        // SUCCESS: the agent's changes are committed, then its outputs become the stage's.
        let commit = match layer {
            Some(layer) => Some(Commit::Layer(layer)),
            None => first_snapshot.filter(|_| stage.mode == Mode::Agent).map(Commit::Since),
        };
        self.succeed(state, stage_id, attempt, 0, it.outputs, commit).await?;
        self.flush(state).await
    }

    /// Ends a successful attempt. With `commit_from` (an agent-mode stage), what changed since
    /// that snapshot is committed **before** the attempt's end is journaled, together with the
    /// commit: should loopwright die between the two, the attempt is redone (or, in the closed
    /// loop, evaluated again) on resume and the commit it made is adopted, never lost nor folded
    /// into the next stage's. A commit that fails fails the attempt instead (retryable).
    async fn succeed(
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

    /// Closed loop, FIX: runs the strategy ANALYZE chose for an attempt's failure.
    async fn fix(&mut self, state: &mut RunState, stage_id: StageId, attempt: u32) -> Result<(), StoreError> {
        let stage = self.pipeline.stage(stage_id.as_str()).expect("the state machine only names pipeline stages");
        let st = state.stage(stage_id.as_str()).expect("a looping stage has state");
        let lp = st.closed.as_ref().expect("a looping stage has a loop");
        let it = lp.iterations.last().expect("a looping stage has generated").clone();
        let failure = it.failure.clone().expect("FIX follows a failure");
        let strategy = it.analysis.as_ref().and_then(|a| a.strategy).unwrap_or(Strategy::AnalyzeThenFix);
        let backoffs = u32::try_from(
            lp.iterations
                .iter()
                .filter_map(|i| i.fix.as_ref())
                .filter(|f| f.strategy == Strategy::RetryWithBackoff)
                .count(),
        )
        .unwrap_or(u32::MAX);
        self.flush(state).await?;
        // A crash may have left this stage's commands running: end them before running again.
        self.runner.end_strays(&state.run_id, &stage_id);
        let ws: &dyn crate::ports::Changes = self.changes;
        let fix = match strategy {
            Strategy::AutoFix => {
                let fix_command =
                    failure.pattern.as_deref().and_then(|p| self.patterns.get(p)).and_then(|p| p.fix_command.clone());
                match closed_loop::strategies::fixer_command(&failure, fix_command.as_deref(), ws) {
                    Some(command) => {
                        let run = self.shell(state, &stage_id, &command, stage.timeout).await;
                        let fixed = run.outcome == crate::ports::ExecOutcome::Exited(0);
                        // Re-run the check that failed, to see whether the fixer resolved it.
                        let check =
                            it.checks.as_ref().and_then(|c| c.iter().find(|c| !c.passed)).map(|c| c.command.clone());
                        let resolved = match (fixed, check) {
                            (true, Some(check)) => {
                                self.shell(state, &stage_id, &check, stage.timeout).await.outcome
                                    == crate::ports::ExecOutcome::Exited(0)
                            }
                            _ => false,
                        };
                        let applied = format!(
                            "auto_fix: ran `{command}` ({}); the failed check {} afterwards",
                            if fixed { "exit 0" } else { "it failed" },
                            if resolved { "passes" } else { "still fails" }
                        );
                        FixResult { strategy, applied, context: None, resolved, wait_ms: 0 }
                    }
                    None => {
                        let (applied, context) = closed_loop::strategies::analyze_then_fix(&failure, ws);
                        FixResult {
                            strategy,
                            applied: format!("auto_fix: no fixer found for this project; {applied}"),
                            context,
                            resolved: false,
                            wait_ms: 0,
                        }
                    }
                }
            }
            Strategy::ContextExpand => {
                let (applied, context) = closed_loop::strategies::context_expand(&failure, ws);
                FixResult { strategy, applied, context, resolved: false, wait_ms: 0 }
            }
            Strategy::DependencyCheck => {
                let (applied, context) = closed_loop::strategies::dependency_check(&failure, ws);
                FixResult { strategy, applied, context, resolved: false, wait_ms: 0 }
            }
            Strategy::RetryWithBackoff => {
                let delay = closed_loop::strategies::backoff_delay(self.settings.backoff_initial, backoffs + 1);
                let wait_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
                let applied =
                    format!("retry_with_backoff: waiting {:.1}s before generating again", delay.as_secs_f64());
                FixResult { strategy, applied, context: None, resolved: false, wait_ms }
            }
            // ANALYZE never chooses escalate for FIX (it escalates instead); a journal that
            // says so anyway gets the generic fix.
            Strategy::AnalyzeThenFix | Strategy::Escalate => {
                let (applied, context) = closed_loop::strategies::analyze_then_fix(&failure, ws);
                FixResult { strategy, applied, context, resolved: false, wait_ms: 0 }
            }
        };
        self.record(state, Event::FixApplied { stage: stage_id, attempt, fix }).await
    }

    /// Where the run's stages work: the tree the changes are tracked in (a worker's worktree
    /// of the run's repository), else the working tree its start journaled.
    fn workspace(&self, state: &RunState) -> std::path::PathBuf {
        match self.changes.root() {
            Some(root) => root.to_path_buf(),
            None => state.started.as_ref().map(|s| std::path::PathBuf::from(&s.workspace)).unwrap_or_default(),
        }
    }

    /// Runs a check or fixer command of a stage in the workspace, over the layer of the
    /// stage's attempt when it has one.
    async fn shell(&self, state: &RunState, stage: &StageId, command: &str, timeout: std::time::Duration) -> Execution {
        let workspace = self.workspace(state);
        let spec = self.pipeline.stage(stage.as_str()).expect("the state machine only names pipeline stages");
        let mut confine = self.confinement(spec);
        // Checks reach only the hosts a stage names, never its model.
        if !matches!(spec.network, Some(Network::Hosts(_))) {
            confine.network = Network::None;
        }
        confine.layer = state.stage(stage.as_str()).and_then(|s| s.layer.as_ref()).map(|(_, name)| name.clone());
        let request = crate::ports::CommandRequest {
            run: &state.run_id,
            stage,
            command,
            workspace: &workspace,
            timeout,
            confine: &confine,
        };
        self.runner.command(&request).await
    }

    /// Asks the stage's agent to label a failure nothing sure classified (SPEC §6, `[classify]
    /// ask_agent`): one request in plan mode, in the stage's sandbox, answered as JSON of
    /// [`closed_loop::ask::schema`], within `[classify] timeout_seconds`. Not asked when the
    /// stage's agent is not a model or an agent CLI, the budget is spent, or its provider's
    /// limits say wait. What it used is journaled with the failure (`usage_recorded`, against the
    /// run's budget); what it answered is the failure's evidence, used by
    /// [`closed_loop::ask::adopt`]'s rule.
    async fn ask_agent(
        &mut self,
        state: &mut RunState,
        stage_id: &StageId,
        attempt: u32,
        failure: &mut closed_loop::Failure,
        context: &crate::patterns::Context,
    ) {
        let stage = self.pipeline.stage(stage_id.as_str()).expect("the state machine only names pipeline stages");
        let Some(agent) = self.pipeline.agent_of(stage).filter(|a| a.runner.is_model_or_cli()) else {
            return;
        };
        if !self.settings.classify.ask_agent {
            return;
        }
        let unusable = |f: &mut closed_loop::Failure, why: String| {
            closed_loop::ask::adopt(self.patterns, f, &closed_loop::ask::Answer::Unusable(why));
        };
        if let Some(why) = crate::decide::budget_exceeded(self.pipeline, state, stage) {
            return unusable(failure, format!("not asked: {why}"));
        }
        let holder = format!("{}/{}/{}/classify", state.run_id, stage_id, attempt);
        match self.limits.take(agent, &holder).await {
            Ok(Allowed::Yes) => {}
            Ok(Allowed::Wait { reason, .. }) => return unusable(failure, format!("not asked: {reason}")),
            Err(e) => return unusable(failure, format!("not asked: the provider's limits could not be read: {e}")),
        }
        let question = closed_loop::ask::question(self.patterns, failure, context);
        // The stage's sandbox and network, the workspace read-only (plan mode): the question
        // carries what failed; the agent is to read, not change.
        let confine = self.confinement(stage);
        let limit = std::time::Duration::from_secs(self.settings.classify.timeout_seconds);
        let request = StageRequest {
            run_id: state.run_id.clone(),
            task_id: state.started.as_ref().expect("a started run").task_id.clone(),
            stage: stage_id.clone(),
            attempt,
            mode: Mode::Plan,
            agent: Some(agent.clone()),
            commands: Vec::new(),
            prompt: question.prompt,
            timeout: limit.min(capped_timeout(self.pipeline, state, stage)),
            workspace: self.workspace(state),
            confine,
            purpose: crate::ports::Purpose::Classify { schema: question.schema },
        };
        // Its processes carry the run's and stage's marks: a crash leaves none that resume
        // would not end (`end_strays`). A rate limit it meets pauses the provider as usual.
        let (tx, mut rx) = mpsc::unbounded_channel();
        let execution = self.runner.run(&request, tx).await;
        while let Ok(notice) = rx.try_recv() {
            if let Notice::RateLimited { detail, until } = notice {
                self.limits.exhausted(agent, &detail, until).await;
            }
        }
        let usage = usage_of(agent, &request, &execution, state);
        self.limits.give(&holder, usage.input_tokens + usage.output_tokens).await;
        self.defer(state, Event::UsageRecorded { stage: stage_id.clone(), attempt, usage });
        let answer = match &execution.outcome {
            ExecOutcome::Exited(0) => closed_loop::ask::read(&execution.stdout),
            ExecOutcome::TimedOut => {
                closed_loop::ask::Answer::Unusable(format!("no answer within {} s", request.timeout.as_secs()))
            }
            ExecOutcome::Exited(code) => closed_loop::ask::Answer::Unusable(format!("the agent exited with {code}")),
            ExecOutcome::Signaled(n) => {
                closed_loop::ask::Answer::Unusable(format!("the agent was killed by signal {n}"))
            }
            ExecOutcome::SpawnFailed(why) => {
                closed_loop::ask::Answer::Unusable(format!("the agent could not start: {why}"))
            }
        };
        closed_loop::ask::adopt(self.patterns, failure, &answer);
    }

    /// How a stage's processes are confined (without a layer: [`Self::execute`] adds it): in a
    /// sandbox unless the stage or the workspace turns it off; reaching the network the stage
    /// names, else its agent's, else the agent's model (an agent) or nothing (shell commands).
    fn confinement(&self, stage: &loopwright_spec::Stage) -> crate::ports::Confinement {
        let agent = self.pipeline.agent_of(stage);
        let default = if agent.is_some() { Network::Model } else { Network::None };
        let network = stage.network.clone().or_else(|| agent.and_then(|a| a.network.clone())).unwrap_or(default);
        let mode = stage.sandbox.unwrap_or(self.settings.sandbox);
        crate::ports::Confinement { sandbox: mode != SandboxMode::Off, network, layer: None, env: stage.env.clone() }
    }

    /// Discards the layer a stage's earlier attempt (or this one, interrupted) left, journaling
    /// what it held.
    /// `next` is the attempt about to start; `None` when the run has ended.
    async fn drop_layer(&mut self, state: &mut RunState, stage: &StageId, next: Option<u32>) -> Result<(), StoreError> {
        let Some((made, name)) = state.stage(stage.as_str()).and_then(|s| s.layer.clone()) else {
            return Ok(());
        };
        let files = self.changes.drop_layer(&state.run_id, &name).unwrap_or(0);
        let reason = match next {
            Some(next) if next == made => "the attempt was interrupted; it runs again from the start".to_owned(),
            Some(next) => format!("attempt {made} did not pass; attempt {next} starts from the workspace as it was"),
            None => "the run ended without keeping what the attempt wrote".to_owned(),
        };
        self.record(state, Event::LayerDropped { stage: stage.clone(), attempt: made, files, reason }).await
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
            Commit::Since(name) => self.changes.commit(&state.run_id, name, &task, stage_id),
            Commit::Layer(name) => self.changes.commit_layer(&state.run_id, name, &task, stage_id),
        };
        Ok(match made {
            Ok(Some((commit, files))) => Ok(Some(Event::ChangesCommitted { stage: stage_id.clone(), commit, files })),
            Ok(None) => Ok(self
                .changes
                .committed(&state.run_id, stage_id)
                .filter(|(sha, _)| !known(sha))
                .map(|(commit, files)| Event::ChangesCommitted { stage: stage_id.clone(), commit, files })),
            Err(e) => Err(StageError {
                kind: FailureKind::ExecutionError,
                message: format!("the stage's changes could not be committed: {e}"),
                exit_code: None,
                output_tail: String::new(),
                pattern: None,
                classified_by: None,
            }),
        })
    }

    /// Repairs what a crash left in the repository, journaling each repair.
    async fn repair(&mut self, state: &mut RunState, stage: &StageId) -> Result<(), StoreError> {
        for detail in self.changes.repair() {
            self.record(state, Event::RepositoryRepaired { stage: stage.clone(), detail }).await?;
        }
        Ok(())
    }

    /// Rolls back stages, most recent first, each by its strategy.
    async fn roll_back(
        &mut self,
        state: &mut RunState,
        trigger: Option<StageId>,
        stages: Vec<StageId>,
        resumed: bool,
    ) -> Result<(), StoreError> {
        if !resumed {
            self.record(state, Event::RollbackStarted { trigger, stages: stages.clone() }).await?;
        }
        let task = state.started.as_ref().map(|s| s.task_id.clone()).expect("a started run");
        for id in stages {
            let Some(rollback) = self.pipeline.stage(id.as_str()).and_then(|s| s.rollback.clone()) else { continue };
            if rollback.strategy == RollbackStrategy::GitRevert {
                self.repair(state, &id).await?;
            }
            let st = state.stage(id.as_str());
            let (status, detail) = match rollback.strategy {
                RollbackStrategy::GitRevert => match self.changes.revert(&task, &id) {
                    Ok(0) => (RollbackStatus::Success, "no commits to revert".to_owned()),
                    Ok(n) => (RollbackStatus::Success, format!("reverted {n} commit{}", if n == 1 { "" } else { "s" })),
                    Err(e) => (RollbackStatus::Failed, e),
                },
                RollbackStrategy::FileRestore => match st.and_then(|s| s.snapshots.first()).map(|(_, n)| n.clone()) {
                    Some(name) => match self.changes.restore(&state.run_id, &name) {
                        Ok(c) => (
                            RollbackStatus::Success,
                            format!(
                                "restored {} file(s), recreated {}, removed {}",
                                c.restored, c.recreated, c.removed
                            ),
                        ),
                        Err(e) => (RollbackStatus::Failed, e),
                    },
                    None => (RollbackStatus::Failed, "no snapshot was taken before the stage".to_owned()),
                },
                RollbackStrategy::MemoryCleanup => {
                    let n = st.map_or(0, |s| s.outputs.len());
                    (RollbackStatus::Success, format!("removed {n} artifact entr{}", if n == 1 { "y" } else { "ies" }))
                }
                RollbackStrategy::Manual => (
                    RollbackStatus::Pending,
                    rollback.description.clone().unwrap_or_else(|| "(no steps given)".to_owned()),
                ),
            };
            self.record(state, Event::StageRolledBack { stage: id, strategy: rollback.strategy, status, detail })
                .await?;
        }
        let overall = state.rollback_overall();
        self.record(state, Event::RollbackFinished { overall }).await
    }

    /// Ends what the stage in flight left running, then records the interruption or the
    /// cancellation.
    async fn stop(&mut self, state: &mut RunState, stop: Stop) -> Result<(), StoreError> {
        let flushed = self.flush(state).await;
        let stage = state.in_flight().map(|s| s.id.clone());
        // Ended even when the journal refuses this process (a lease taken over): what it
        // started must not go on working for a run it no longer drives.
        if let Some(groups) = state.in_flight().map(|s| s.process_groups.clone()).filter(|g| !g.is_empty()) {
            self.runner.end_leftovers(&groups);
        }
        flushed?;
        let event = match stop {
            Stop::Interrupt { signal } => Event::RunInterrupted { stage, signal },
            Stop::Cancel { by, rollback } => Event::RunCancelled {
                stage: stage.or_else(|| state.waiting_for_approval().map(|s| s.id.clone())),
                by,
                rollback,
            },
        };
        self.record(state, event).await
    }

    async fn notice(
        &mut self,
        state: &mut RunState,
        stage: &StageId,
        attempt: u32,
        notice: Notice,
    ) -> Result<(), StoreError> {
        match notice {
            Notice::ProcessStarted { group, command } => {
                let event = Event::ProcessStarted {
                    stage: stage.clone(),
                    attempt,
                    pgid: group.pgid,
                    start_time: group.start_time,
                    host: group.host,
                    command,
                };
                // Journaled at once, while the process runs (SPEC §1): after a crash, `resume`
                // ends the group it names even when its processes cleared their environment
                // (`exec env -i …`), which `end_strays` could not recognise them by.
                self.record(state, event).await
            }
            Notice::RateLimited { detail, until } => {
                if let Some(agent) = self.pipeline.stage(stage.as_str()).and_then(|s| self.pipeline.agent_of(s)) {
                    self.limits.exhausted(agent, &detail, until).await;
                }
                Ok(())
            }
            Notice::NetworkRefused { target, why } => {
                self.record(state, Event::NetworkRefused { stage: stage.clone(), attempt, target, why }).await
            }
        }
    }
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
enum Commit {
    /// What changed since this snapshot.
    Since(String),
    /// What this layer holds.
    Layer(String),
}

/// The stage's timeout, shortened to what is left of its and the run's time budgets.
/// What an agent's request used: the agent's own report, else a count (o200k) of what it was
/// told and answered; priced from the run's prices when the agent did not say.
fn usage_of(
    agent: &loopwright_spec::Agent,
    request: &StageRequest,
    execution: &Execution,
    state: &RunState,
) -> crate::event::Usage {
    let mut usage = match &execution.usage {
        Some(reported) if !reported.estimated => reported.clone(),
        other => crate::event::Usage {
            input_tokens: crate::tokens::count_tokens(&request.prompt) as u64,
            output_tokens: crate::tokens::count_tokens(&execution.stdout) as u64,
            estimated: true,
            model: agent.model.clone(),
            cost_usd: None,
            quota_wait_ms: other.as_ref().map_or(0, |u| u.quota_wait_ms),
        },
    };
    if usage.cost_usd.is_none() {
        let prices = state.started.as_ref().map(|s| &s.prices);
        usage.cost_usd = agent.model.as_ref().and_then(|m| prices.and_then(|p| p.get(m))).map(|p| {
            (usage.input_tokens as f64 * p.input_per_mtok + usage.output_tokens as f64 * p.output_per_mtok)
                / 1_000_000.0
        });
    }
    usage
}

fn capped_timeout(pipeline: &Pipeline, state: &RunState, stage: &loopwright_spec::Stage) -> std::time::Duration {
    if stage.budget.wall_ms.is_none() && pipeline.budget.wall_ms.is_none() {
        return stage.timeout;
    }
    let left =
        |budget: Option<u64>, spent: u64| budget.map(|b| std::time::Duration::from_millis(b.saturating_sub(spent)));
    [
        Some(stage.timeout),
        left(stage.budget.wall_ms, state.stage_spend(stage.id.as_str()).active_ms),
        left(pipeline.budget.wall_ms, state.spend().active_ms),
    ]
    .into_iter()
    .flatten()
    .min()
    .unwrap_or(stage.timeout)
}

/// Turns an execution into the stage's outputs, or the error it failed with.
fn judge(declared: &[String], execution: &Execution) -> Result<crate::event::Outputs, StageError> {
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
        }),
        ExecOutcome::Signaled(signal) => Err(StageError {
            kind: FailureKind::ExecutionError,
            message: format!("killed by signal {signal}"),
            exit_code: None,
            output_tail: tail(),
            pattern: None,
            classified_by: None,
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
        }),
        ExecOutcome::SpawnFailed(why) => Err(StageError {
            kind: FailureKind::ValidationError,
            message: why.clone(),
            exit_code: None,
            output_tail: String::new(),
            pattern: None,
            classified_by: None,
        }),
    }
}

/// The end of an output (kept in errors and the journal), at most
/// [`closed_loop::OUTPUT_CHARS`] characters, cut at a line start.
pub fn output_tail(text: &str) -> String {
    closed_loop::tail_chars(text, closed_loop::OUTPUT_CHARS)
}
