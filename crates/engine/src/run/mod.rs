//! The life of a run: start it, then loop — ask the state machine for the next step, do it,
//! journal what happened — until the run ends or waits for a human.
//!
//! One file per step of a stage's life, each an `impl` of [`Engine`] with a small function
//! over typed inputs returning a typed outcome; [`Engine::execute`] is the sequence of an
//! attempt's steps:
//!
//! | step | file | what it does |
//! |---|---|---|
//! | prepare and recover | `prepare.rs` | ends and undoes what an interrupted attempt left, drops an earlier attempt's layer |
//! | acquire limits | `limits.rs` | takes the provider's slot, waiting (queued, with the reason) while it says wait |
//! | confine | `confine.rs` | gives an agent-mode attempt a layer, or snapshots the workspace; plan mode fails closed |
//! | attempt | `attempt.rs` | runs the attempt's process, journals its notices, renews its slot, records its usage |
//! | finish | `finish.rs` | judges the execution: closed-loop generation, plan mode's read-only check, success (commit) or failure (classified) |
//! | evaluate | `evaluate.rs` | the closed loop's baseline, VALIDATE, EVALUATE, regression re-check and ANALYZE |
//! | fix | `fix.rs` | the closed loop's FIX: the strategy ANALYZE chose |
//! | roll back | `rollback.rs` | stages rolled back by their strategies, layers dropped |
//! | deliver | `deliver.rs` | a forge run's work pushed and its change request opened; its failure reported |
//! | best of N | `candidates.rs` | a round of candidates at once, each checked in its own layer, the winner applied |
//! | the judge | `judge.rs` | a round's choice by its selectors or by asking its judge stage |
//!
//! A new step is a new file with an `impl` block like these, a variant of
//! [`crate::decide::Step`] that names it, and one arm in `Engine::take` (both drivers take steps
//! through it; `graph.rs` drives a pipeline whose stages form a graph).

use loopwright_spec::{Pipeline, StageId};

use crate::closed_loop;
use crate::decide::{Step, next_step};
use crate::event::{Event, EventRecord, RunStarted};
use crate::ids::RunId;
use crate::ports::{Changes, Clock, Delivery, Execution, Limits, Observer, Runner, Stop, Stopper, Store, StoreError};
use crate::state::RunState;
use loopwright_spec::sandbox::{Network, SandboxMode};

mod attempt;
mod candidates;
mod confine;
mod deliver;
mod evaluate;
mod finish;
mod fix;
mod graph;
mod judge;
mod limits;
mod prepare;
mod process;
mod rollback;

pub use finish::sandbox_refusals;

/// An attempt ready to run its process.
struct Launched {
    /// What the runner is asked.
    request: crate::ports::StageRequest,
    /// Who holds its provider's slot.
    holder: String,
    /// The snapshot taken before it, when one was.
    snapshot: Option<String>,
}

/// What a step left to do.
enum Taken {
    /// Ask for the next step.
    Next,
    /// The run has ended or waits.
    Done,
}

/// Runs a pipeline against the ports.
pub struct Engine<'a, S, R, C, X, W, L = crate::ports::NoLimits, D = crate::ports::NoDelivery> {
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
    /// Where the work of a run that came from a forge goes.
    pub delivery: D,
    /// The worker's slots, which a graph's attempts in flight beyond the first take while free
    /// (none outside a worker).
    pub slots: crate::ports::Slots,
}

impl<S: Store, R: Runner, C: Clock, X: Stopper, W: Changes, L: Limits, D: Delivery> Engine<'_, S, R, C, X, W, L, D> {
    /// Creates a run and drives it until it ends or waits.
    pub async fn start(&mut self, run_id: RunId, started: RunStarted) -> Result<RunState, StoreError> {
        let mut state = RunState::new(run_id);
        self.defer(&mut state, Event::RunStarted(Box::new(started)));
        self.drive(state).await
    }

    /// Drives a run from the state its journal gives until it ends or waits. A pipeline whose
    /// stages form a graph is driven by [`Engine::drive_graph`], which runs ready stages at once.
    pub async fn drive(&mut self, mut state: RunState) -> Result<RunState, StoreError> {
        if self.pipeline.is_graph() {
            return self.drive_graph(state).await;
        }
        loop {
            let step = next_step(self.pipeline, &state, self.clock.now());
            if let Taken::Done = self.take(&mut state, step).await? {
                return Ok(state);
            }
        }
    }

    /// Does one step; [`Taken::Done`] when the run has ended or waits.
    async fn take(&mut self, state: &mut RunState, step: Step) -> Result<Taken, StoreError> {
        match step {
            Step::Record(event) => self.defer(state, event),
            Step::Execute { stage, attempt } => self.execute(state, stage, attempt).await?,
            Step::Wait { until, .. } => {
                self.flush(state).await?;
                let (clock, stopper) = (self.clock, self.stopper);
                tokio::select! {
                    biased;
                    stop = stopper.stopped() => self.stop(state, stop).await?,
                    () = clock.sleep_until(until) => {}
                }
            }
            Step::RollBack { trigger, stages, resumed } => {
                self.flush(state).await?;
                self.roll_back(state, trigger, stages, resumed).await?
            }
            Step::Baseline { stage } => self.baseline(state, stage).await?,
            Step::Evaluate { stage, attempt } => self.evaluate(state, stage, attempt).await?,
            Step::Analyze { stage, attempt } => self.analyze(state, stage, attempt).await?,
            Step::Fix { stage, attempt } => self.fix(state, stage, attempt).await?,
            Step::Deliver { round } => self.deliver(state, round).await?,
            Step::Merge { head } => self.merge(state, head).await?,
            Step::ReportFailure => self.report_failure(state).await?,
            Step::EscalateCi { round } => self.escalate_ci(state, round).await?,
            Step::Done(status) => {
                self.flush(state).await?;
                if status.is_final() {
                    // What failed attempts wrote is of no more use once the run has ended.
                    let left: Vec<StageId> =
                        state.stages.iter().filter(|s| s.layer.is_some()).map(|s| s.id.clone()).collect();
                    for stage in left {
                        self.drop_layer(state, &stage, None).await?;
                    }
                    self.changes.ended(&state.run_id);
                }
                return Ok(Taken::Done);
            }
        }
        Ok(Taken::Next)
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

    /// One attempt of a stage, step by step; a step that ends the attempt early (the run
    /// stopped, plan mode could not be enforced) has journaled why.
    async fn execute(&mut self, state: &mut RunState, stage_id: StageId, attempt: u32) -> Result<(), StoreError> {
        if self.pipeline.stage(stage_id.as_str()).is_some_and(|s| s.candidates.is_some()) {
            return self.candidates(state, stage_id, attempt).await;
        }
        let Some(launched) = self.launch(state, &stage_id, attempt, false).await? else { return Ok(()) };
        let stage = self.pipeline.stage(stage_id.as_str()).expect("the state machine only names pipeline stages");
        match self.attempt(state, &launched.request, &launched.holder).await? {
            attempt::Attempted::Ran(execution) => {
                self.finish(state, stage, &launched.request, &execution, launched.snapshot).await
            }
            attempt::Attempted::Stopped => Ok(()),
        }
    }

    /// An attempt's steps up to its process: prepared, its provider's slot taken (unless
    /// `taken` already), journaled as started, confined. `None` when it ends before it runs
    /// (the run stopped, plan mode could not be enforced; journaled).
    async fn launch(
        &mut self,
        state: &mut RunState,
        stage_id: &StageId,
        attempt: u32,
        taken: bool,
    ) -> Result<Option<Launched>, StoreError> {
        let stage = self.pipeline.stage(stage_id.as_str()).expect("the state machine only names pipeline stages");
        self.prepare(state, stage_id, attempt).await?;
        let holder = format!("{}/{stage_id}/{attempt}", state.run_id);
        if !taken {
            match self.acquire(state, stage, attempt, &holder).await? {
                limits::Acquired::Taken => {}
                limits::Acquired::Stopped => return Ok(None),
                limits::Acquired::Refused(reason) => {
                    self.defer(state, Event::AttemptStarted { stage: stage_id.clone(), attempt });
                    let error = crate::event::StageError {
                        kind: crate::event::FailureKind::BudgetExceeded,
                        message: reason,
                        exit_code: None,
                        output_tail: String::new(),
                        pattern: None,
                        classified_by: None,
                        unfixable: None,
                    };
                    let failed = Event::AttemptFailed { stage: stage_id.clone(), attempt, duration_ms: 0, error };
                    self.record(state, failed).await?;
                    return Ok(None);
                }
            }
        }
        self.defer(state, Event::AttemptStarted { stage: stage_id.clone(), attempt });
        let setup = match self.confine(state, stage, attempt, &holder).await? {
            confine::Confined::Ready(setup) => setup,
            confine::Confined::Refused => return Ok(None),
        };
        // The attempt is journaled as started before its process exists.
        self.flush(state).await?;
        let request = self.request(state, stage, attempt, setup.confine);
        Ok(Some(Launched { request, holder, snapshot: setup.snapshot }))
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
        let layer = state.stage(stage.as_str()).and_then(|s| s.layer.as_ref()).map(|(_, name)| name.clone());
        self.shell_in(state, stage, command, timeout, layer).await
    }

    /// [`Self::shell`] over layer `layer` (none: the workspace itself).
    async fn shell_in(
        &self,
        state: &RunState,
        stage: &StageId,
        command: &str,
        timeout: std::time::Duration,
        layer: Option<String>,
    ) -> Execution {
        let workspace = self.workspace(state);
        let spec = self.pipeline.stage(stage.as_str()).expect("the state machine only names pipeline stages");
        let mut confine = self.confinement(state, spec);
        // Checks reach only the hosts a stage names, never its model.
        if !matches!(spec.network, Some(Network::Hosts(_))) {
            confine.network = Network::None;
        }
        confine.layer = layer;
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

    /// How a stage's processes are confined (without a layer: [`Self::execute`] adds it): in a
    /// sandbox unless the stage or the workspace turns it off; reaching the network the stage
    /// names, else its agent's, else the agent's model (an agent) or nothing (shell commands).
    fn confinement(&self, state: &RunState, stage: &loopwright_spec::Stage) -> crate::ports::Confinement {
        let agent = agent_now(self.pipeline, state, stage);
        let default = if agent.is_some() { Network::Model } else { Network::None };
        let network = stage.network.clone().or_else(|| agent.and_then(|a| a.network.clone())).unwrap_or(default);
        let mode = self.settings.sandbox.mode(&stage.id);
        crate::ports::Confinement { sandbox: mode != SandboxMode::Off, network, layer: None, env: stage.env.clone() }
    }

    /// Ends what the stage in flight left running, then records the interruption or the
    /// cancellation.
    async fn stop(&mut self, state: &mut RunState, stop: Stop) -> Result<(), StoreError> {
        let flushed = self.flush(state).await;
        let stage = state.in_flight().map(|s| s.id.clone());
        // Ended even when the journal refuses this process (a lease taken over): what it
        // started must not go on working for a run it no longer drives.
        let groups: Vec<crate::event::ProcessGroup> = state
            .stages
            .iter()
            .filter(|s| s.status == crate::state::StageStatus::Running)
            .flat_map(|s| s.process_groups.iter().cloned())
            .collect();
        if !groups.is_empty() {
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
}

/// The agent `stage`'s attempts run with in `state`: the one it fell back to, else its own.
pub(crate) fn agent_now<'p>(
    pipeline: &'p Pipeline,
    state: &RunState,
    stage: &loopwright_spec::Stage,
) -> Option<&'p loopwright_spec::Agent> {
    pipeline.agent_now(stage, state.stage(stage.id.as_str()).and_then(|s| s.agent.as_deref()))
}

/// The end of an output (kept in errors and the journal), at most
/// [`closed_loop::OUTPUT_CHARS`] characters, cut at a line start.
pub fn output_tail(text: &str) -> String {
    closed_loop::tail_chars(text, closed_loop::OUTPUT_CHARS)
}
