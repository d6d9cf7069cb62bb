//! A run's state: a fold over its journal.

use std::collections::BTreeMap;

use loopwright_spec::StageId;
use serde::Serialize;

use crate::closed_loop::{Analysis, Baseline, CheckResult, Failure, FileChanges, FixResult, Regression, Violation};
use crate::event::{ConditionOutcome, Event, EventRecord, Outputs, RunStarted, RunStatus, SkipReason, StageError};
use crate::ids::RunId;

/// One pass through the loop: GENERATE … FIX.
#[derive(Debug, Clone, PartialEq)]
pub struct Iteration {
    /// The attempt number.
    pub attempt: u32,
    /// When GENERATE ended.
    pub at: jiff::Timestamp,
    /// How long GENERATE + EXECUTE took.
    pub duration_ms: u64,
    /// The agent's outputs.
    pub outputs: Outputs,
    /// Files the attempt changed.
    pub files: FileChanges,
    /// VALIDATE ran: gates checked and what they found.
    pub validation: Option<(Vec<crate::closed_loop::Gate>, Vec<Violation>)>,
    /// EVALUATE ran: each check.
    pub checks: Option<Vec<CheckResult>>,
    /// Regression re-check ran: dependents and regressions.
    pub regression: Option<(Vec<String>, Vec<Regression>)>,
    /// The first failure, classified.
    pub failure: Option<Failure>,
    /// ANALYZE's decision.
    pub analysis: Option<Analysis>,
    /// FIX's result.
    pub fix: Option<FixResult>,
    /// When FIX ended.
    pub fix_at: Option<jiff::Timestamp>,
}

/// A stage's closed loop, derived from the journal.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoopState {
    /// Every iteration, in order.
    pub iterations: Vec<Iteration>,
    /// Iterations before the current retry budget (a human's `retry` or `fix` resets it).
    pub base: usize,
    /// The open escalation's reason, while the run waits for an answer.
    pub escalation: Option<String>,
    /// The last escalation's reason (kept after it is answered, for the result).
    pub escalation_reason: Option<String>,
    /// The answer to the last escalation, until the next attempt starts.
    pub answer: Option<crate::event::Answer>,
    /// A human's `fix:` instruction for the attempts that follow.
    pub user_fix: Option<String>,
    /// The dead letter's reason, once written.
    pub dead_letter: Option<String>,
    /// Regression detection: None until the gate was evaluated; then the baseline when on.
    pub regression_gate: Option<Option<Baseline>>,
    /// The loop succeeded.
    pub succeeded: bool,
    /// Whole-loop passes the stage's `retry:` started after the first gave up.
    pub passes: u32,
}

impl LoopState {
    /// `success`, `failed`, `escalated`, or `running`.
    pub fn status(&self) -> &'static str {
        if self.succeeded {
            "success"
        } else if self.dead_letter.is_some() {
            "failed"
        } else if self.escalation.is_some()
            || matches!(self.answer, Some(crate::event::Answer::Skip | crate::event::Answer::Abort))
        {
            "escalated"
        } else {
            "running"
        }
    }

    /// The last pattern matched, if any.
    pub fn last_pattern(&self) -> Option<&str> {
        self.iterations.iter().rev().find_map(|i| i.failure.as_ref()).and_then(|f| f.pattern.as_deref())
    }

    /// Strategies used, in order, without repeats.
    pub fn strategies(&self) -> Vec<crate::closed_loop::Strategy> {
        let mut out = Vec::new();
        for s in self.iterations.iter().filter_map(|i| i.fix.as_ref()).map(|f| f.strategy) {
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }

    /// Patterns matched, in order, without repeats.
    pub fn patterns(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in self.iterations.iter().filter_map(|i| i.failure.as_ref()).map(|f| f.key().to_owned()) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    /// Every file changed by any attempt.
    pub fn files(&self) -> FileChanges {
        let mut all = FileChanges::default();
        for i in &self.iterations {
            all.merge(&i.files);
        }
        all
    }
}

/// Where a stage stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StageStatus {
    /// Not started.
    Pending,
    /// An attempt is in flight.
    Running,
    /// The last attempt failed; no decision yet.
    AttemptFailed,
    /// Waiting to retry.
    RetryWaiting,
    /// In the closed loop, between GENERATE and the next attempt (VALIDATE … FIX).
    Looping,
    /// Finished well.
    Success,
    /// Failed for good.
    Failed,
    /// Failed for good by running out of time.
    Timeout,
    /// Not run.
    Skipped,
    /// Stopped by a human.
    Cancelled,
    /// Undone after a later failure.
    RolledBack,
}

impl StageStatus {
    /// The status as written in result JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            StageStatus::Pending => "pending",
            StageStatus::Running | StageStatus::AttemptFailed | StageStatus::RetryWaiting | StageStatus::Looping => {
                "running"
            }
            StageStatus::Success => "success",
            StageStatus::Failed => "failed",
            StageStatus::Timeout => "timeout",
            StageStatus::Skipped => "skipped",
            StageStatus::Cancelled => "cancelled",
            StageStatus::RolledBack => "rolled_back",
        }
    }

    /// True once the stage will not run again in this pass.
    pub fn is_done(self) -> bool {
        matches!(
            self,
            StageStatus::Success
                | StageStatus::Skipped
                | StageStatus::Failed
                | StageStatus::Timeout
                | StageStatus::Cancelled
                | StageStatus::RolledBack
        )
    }
}

/// One stage's state.
#[derive(Debug, Clone, PartialEq)]
pub struct StageState {
    /// The stage.
    pub id: StageId,
    /// Where it stands.
    pub status: StageStatus,
    /// Attempts started.
    pub attempts: u32,
    /// Time spent in attempts.
    pub duration_ms: u64,
    /// Why it was skipped.
    pub skip_reason: Option<SkipReason>,
    /// Its condition's outcome, once evaluated.
    pub condition: Option<ConditionOutcome>,
    /// Its outputs, once it succeeded.
    pub outputs: Outputs,
    /// The last error.
    pub last_error: Option<StageError>,
    /// Process groups started for the attempt in flight.
    pub process_groups: Vec<crate::event::ProcessGroup>,
    /// When the pending retry may start.
    pub retry_at: Option<jiff::Timestamp>,
    /// The answer to its approval gate.
    pub approval: Option<Approval>,
    /// Its condition as evaluated, with the values it saw.
    pub condition_detail: Option<(String, serde_json::Value)>,
    /// Every attempt, in order.
    pub attempt_log: Vec<AttemptRecord>,
    /// The last feedback check of this (review) stage in its current pass.
    pub feedback: Option<crate::event::FeedbackAction>,
    /// Feedback loops run from this (review) stage.
    pub feedback_iterations: u32,
    /// The answer to this stage's escalation, not yet acted on.
    pub escalation_answer: Option<crate::event::Answer>,
    /// Feedback this (implementation) stage must address on its next attempt.
    pub feedback_brief: Option<String>,
    /// Snapshots taken before attempts: (attempt, name).
    pub snapshots: Vec<(u32, String)>,
    /// The layer an attempt wrote into that is still there: (attempt, name). A layer leaves
    /// when it is dropped or when its attempt succeeds (its files were copied back).
    pub layer: Option<(u32, String)>,
    /// Hosts the sandbox refused this stage's processes, each once, in the order asked.
    pub network_refused: Vec<String>,
    /// Commits of this stage's changes.
    pub commits: Vec<String>,
    /// The attempt in flight was in flight when the run was taken up again, or is being run
    /// again (a process died, or was stopped, while it ran): a commit of its changes may be
    /// in the repository without its journal entry. Its end (success or failure) clears it.
    pub restarted: bool,
    /// How this stage was rolled back.
    pub rollback: Option<(loopwright_spec::pipeline::RollbackStrategy, crate::event::RollbackStatus, String)>,
    /// Attempts made before the current pass (a feedback loop starts a new pass, with a fresh
    /// retry budget; attempts keep counting across passes).
    pub pass_base: u32,
    /// The closed loop of a `skill: closed-loop-execution` stage.
    pub closed: Option<Box<LoopState>>,
    /// What its agent attempts used.
    pub spend: Spend,
    /// The agent its attempts run with since it fell back (SPEC §16 "Fallback"); `None`: the
    /// stage's own.
    pub agent: Option<String>,
    /// Attempts made before that agent took over (its retry budget counts from here).
    pub agent_since: u32,
    /// Each time an agent could not go on and another took over, in order.
    pub fell_back: Vec<FellBack>,
    /// The journal position of the event that ended it (0 while it has not ended).
    pub finished_seq: u64,
    /// Best of N: the candidates of its latest round of attempts.
    pub candidates: Vec<CandidateState>,
    /// Best of N: the winner chosen for that round (`Some(None)`: none passed).
    pub chosen: Option<Option<u32>>,
    /// Best of N: the attempt those candidates are of.
    pub round: u32,
}

/// A candidate of a stage's latest round (best of N).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CandidateState {
    /// Which candidate.
    pub candidate: u32,
    /// Its agent.
    pub agent: String,
    /// Its layer.
    pub layer: String,
    /// What it did, once it ended.
    pub result: Option<crate::event::CandidateResult>,
}

/// An agent that could not go on, and the one that took a stage's attempts over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FellBack {
    /// The attempt that failed.
    pub attempt: u32,
    /// The agent that could not go on.
    pub from: String,
    /// The agent that took over.
    pub to: String,
    /// Why `from` could not go on.
    pub reason: crate::event::Unfixable,
}

/// Tokens, cost, agent invocations and active time spent (of a stage, or summed for a run).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Spend {
    /// Tokens in and out.
    pub tokens: u64,
    /// US dollars, for models with a price.
    pub cost_usd: f64,
    /// Agent attempts.
    pub invocations: u32,
    /// Some token counts are loopwright's estimates.
    pub estimated: bool,
    /// Time in attempts and checks.
    pub active_ms: u64,
}

/// How an attempt stands in the retry log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptStatus {
    /// Started, not ended (or in flight when loopwright died).
    Running,
    /// It passed.
    Success,
    /// It failed.
    Failed,
}

impl AttemptStatus {
    /// Its name in projections and logs (`success`).
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptStatus::Running => "running",
            AttemptStatus::Success => "success",
            AttemptStatus::Failed => "failed",
        }
    }
}

impl std::fmt::Display for AttemptStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, so a width (`{:<18}`) lines it up.
        f.pad(self.as_str())
    }
}

/// One attempt of a stage, for the retry log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptRecord {
    /// 1-based attempt number.
    pub attempt: u32,
    /// How it stands.
    pub status: AttemptStatus,
    /// The failure kind, when it failed.
    pub error: Option<String>,
    /// The failure message, when it failed.
    pub message: Option<String>,
    /// How long it ran.
    pub duration_ms: u64,
    /// When it started.
    pub timestamp: jiff::Timestamp,
    /// The delay chosen before the next attempt, and why.
    pub retry_delay_ms: Option<u64>,
    /// Why that delay.
    pub retry_reason: Option<String>,
    /// The agent that made it, when the stage has fallen back from its own (`None`: the
    /// stage's own agent).
    pub agent: Option<String>,
}

/// A run's rollback (seed 004 `rollback_state`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollbackState {
    /// The stage whose failure triggered it.
    pub trigger: Option<StageId>,
    /// The stages to roll back, most recent first.
    pub stages: Vec<StageId>,
    /// `success`, `partial` or `failed`, once finished.
    pub overall: Option<crate::event::RollbackStatus>,
    /// When it finished.
    pub completed_at: Option<jiff::Timestamp>,
}

/// A human's answer to an approval gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// Approved (true) or rejected.
    pub granted: bool,
    /// Who answered.
    pub by: String,
    /// Their comment.
    pub comment: Option<String>,
    /// Where the answer came from, when kept.
    pub via: Option<crate::event::Via>,
    /// When.
    pub at: jiff::Timestamp,
}

impl StageState {
    fn new(id: StageId) -> Self {
        Self {
            id,
            status: StageStatus::Pending,
            attempts: 0,
            duration_ms: 0,
            skip_reason: None,
            condition: None,
            outputs: Outputs::new(),
            last_error: None,
            process_groups: Vec::new(),
            retry_at: None,
            approval: None,
            condition_detail: None,
            attempt_log: Vec::new(),
            feedback: None,
            feedback_iterations: 0,
            escalation_answer: None,
            feedback_brief: None,
            pass_base: 0,
            snapshots: Vec::new(),
            layer: None,
            network_refused: Vec::new(),
            commits: Vec::new(),
            restarted: false,
            rollback: None,
            closed: None,
            spend: Spend::default(),
            agent: None,
            agent_since: 0,
            fell_back: Vec::new(),
            finished_seq: 0,
            candidates: Vec::new(),
            chosen: None,
            round: 0,
        }
    }

    fn closed_mut(&mut self) -> &mut LoopState {
        self.closed.get_or_insert_with(Default::default)
    }

    /// The closed loop's iteration of `attempt`.
    fn iteration_mut(&mut self, attempt: u32) -> Option<&mut Iteration> {
        self.closed.as_mut()?.iterations.iter_mut().rev().find(|i| i.attempt == attempt)
    }

    /// Records a closed-loop failure on the attempt log and as the stage's last error.
    fn loop_failure(&mut self, attempt: u32, failure: Option<&crate::closed_loop::Failure>) {
        let Some(f) = failure else { return };
        if let Some(it) = self.iteration_mut(attempt) {
            it.failure = Some(f.clone());
        }
        if let Some(a) = self.attempt_log.iter_mut().rev().find(|a| a.attempt == attempt) {
            a.status = AttemptStatus::Failed;
            a.error = Some(f.failure_type.as_str().to_owned());
            a.message = Some(f.summary.clone());
        }
        self.last_error = Some(StageError {
            kind: match f.failure_type {
                crate::closed_loop::FailureType::SecurityViolation => crate::event::FailureKind::SecurityViolation,
                crate::closed_loop::FailureType::Timeout => crate::event::FailureKind::Timeout,
                _ => crate::event::FailureKind::ExecutionError,
            },
            message: f.summary.clone(),
            exit_code: None,
            output_tail: f.output.clone(),
            pattern: f.pattern.clone(),
            classified_by: Some(f.classified_by()),
            unfixable: f.unfixable,
        });
    }
}

/// An answer a person gave a gate or an escalation, as a run's result lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct GivenAnswer {
    /// The stage it answered.
    pub stage: String,
    /// Who answered.
    pub by: String,
    /// What they answered.
    pub answer: AnswerGiven,
    /// Where the answer came from (absent in journals written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<crate::event::Via>,
    /// When.
    pub at: jiff::Timestamp,
}

/// What a person answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerGiven {
    /// A gate approved.
    Approved,
    /// A gate rejected.
    Rejected,
    /// An escalation: try again.
    Retry,
    /// An escalation: try again with guidance.
    Fix,
    /// An escalation: skip the stage.
    Skip,
    /// An escalation: stop the run.
    Abort,
}

impl GivenAnswer {
    /// The answer `record` journals, if it is one.
    pub fn of(record: &EventRecord) -> Option<Self> {
        use crate::event::Answer;
        let (stage, by, answer, via) = match &record.event {
            Event::ApprovalGranted { stage, by, via, .. } => (stage, by, AnswerGiven::Approved, via),
            Event::ApprovalRejected { stage, by, via, .. } => (stage, by, AnswerGiven::Rejected, via),
            Event::EscalationAnswered { stage, by, answer, via } => {
                let given = match answer {
                    Answer::Retry => AnswerGiven::Retry,
                    Answer::Fix { .. } => AnswerGiven::Fix,
                    Answer::Skip => AnswerGiven::Skip,
                    Answer::Abort => AnswerGiven::Abort,
                };
                (stage, by, given, via)
            }
            _ => return None,
        };
        Some(Self { stage: stage.to_string(), by: by.clone(), answer, via: *via, at: record.at })
    }
}

/// A run's state, derived from its events.
#[derive(Debug, Clone, PartialEq)]
pub struct RunState {
    /// The run.
    pub run_id: RunId,
    /// What it was started with (`None` only before the first event).
    pub started: Option<RunStarted>,
    /// Its status.
    pub status: RunStatus,
    /// Stages touched so far, in the order first touched.
    pub stages: Vec<StageState>,
    /// The stage that failed for good.
    pub failed_stage: Option<StageId>,
    /// Retries used across the run.
    pub retries_used: u32,
    /// When the run was created.
    pub created_at: Option<jiff::Timestamp>,
    /// When its last event was recorded.
    pub updated_at: Option<jiff::Timestamp>,
    /// Sequence number of the last event applied.
    pub last_seq: u64,
    /// The process driving the run (the last to start or resume it).
    pub owner: Option<crate::event::Owner>,
    /// The run's rollback: the stages to roll back and, once finished, the overall outcome.
    pub rollback: Option<RollbackState>,
    /// A cancellation asked for rollback of completed stages.
    pub rollback_requested: bool,
    /// The worktree's branch was merged back.
    pub worktree_merged: bool,
    /// Files conflicting when the worktree's branch was merged back, while that waits.
    pub merge_conflict: Option<Vec<String>>,
    /// The answer to the merge-conflict escalation, until the merge is tried again.
    pub merge_answer: Option<crate::event::Answer>,
    /// The journal already says why this run's stages are not sandboxed.
    pub sandbox_noted: bool,
    /// What an attempt waits for of a provider (`limit_waiting`), until it gets it or the run
    /// stops: the stage, why, and until when at the latest when known.
    pub provider_wait: Option<(StageId, String, Option<jiff::Timestamp>)>,
    /// The last time workers could not make the run's work tree: how many tries failed, and
    /// why the last did.
    pub checkout_failed: Option<(u32, String)>,
    /// What happened on the forge, for a run whose work came from there.
    pub forge: ForgeState,
    /// The answers people gave its gates and escalations, in order.
    pub answers: Vec<GivenAnswer>,
    /// Since when it waits for a person, while it does.
    pub waiting_since: Option<jiff::Timestamp>,
    /// How long it waited for people in all, waits that ended (milliseconds).
    pub waited_ms: i64,
    /// Events applied but not yet journaled (they have no effect outside until they are):
    /// the engine commits them in one transaction before its next outside effect.
    unflushed: Vec<(Event, jiff::Timestamp)>,
    /// Position of each touched stage in `stages`.
    index: std::collections::HashMap<StageId, usize>,
    /// Where the state machine's last scan for the next stage stopped: every pipeline stage
    /// before it is done. A cache, reset whenever a done stage is started again.
    scan_hint: std::cell::Cell<usize>,
}

impl RunState {
    /// Keeps an event applied but not yet journaled, to be committed with the next ones.
    pub fn defer(&mut self, event: Event, at: jiff::Timestamp) {
        self.unflushed.push((event, at));
    }

    /// True when events were applied that are not journaled yet.
    pub fn has_deferred(&self) -> bool {
        !self.unflushed.is_empty()
    }

    /// The events applied but not journaled yet, oldest first; none are left.
    pub fn take_deferred(&mut self) -> Vec<(Event, jiff::Timestamp)> {
        std::mem::take(&mut self.unflushed)
    }

    /// Where the next scan for a stage to run may start: every pipeline stage before it is
    /// done. A cache the state machine keeps; reset whenever a done stage starts again.
    pub fn scan_hint(&self) -> usize {
        self.scan_hint.get()
    }

    /// Moves the scan hint (the state machine found every stage before `index` done).
    pub fn set_scan_hint(&self, index: usize) {
        self.scan_hint.set(index);
    }

    /// The state before any event.
    pub fn new(run_id: RunId) -> Self {
        Self {
            answers: Vec::new(),
            waiting_since: None,
            waited_ms: 0,
            run_id,
            started: None,
            status: RunStatus::Running,
            stages: Vec::new(),
            failed_stage: None,
            retries_used: 0,
            created_at: None,
            updated_at: None,
            last_seq: 0,
            owner: None,
            index: std::collections::HashMap::new(),
            scan_hint: std::cell::Cell::new(0),
            rollback: None,
            rollback_requested: false,
            worktree_merged: false,
            merge_conflict: None,
            merge_answer: None,
            sandbox_noted: false,
            checkout_failed: None,
            forge: ForgeState::default(),
            provider_wait: None,
            unflushed: Vec::new(),
        }
    }

    /// Replays a journal.
    pub fn replay(run_id: RunId, records: &[EventRecord]) -> Self {
        let mut state = Self::new(run_id);
        for r in records {
            state.apply(r);
        }
        state
    }

    /// A stage's state, if it was touched.
    pub fn stage(&self, id: &str) -> Option<&StageState> {
        self.index.get(id).map(|&i| &self.stages[i])
    }

    /// A looping stage's state, its closed loop and the loop's latest iteration.
    ///
    /// # Panics
    /// When the stage has not generated in its closed loop yet: callers act on an iteration
    /// the journal already holds.
    pub fn looping(&self, id: &str) -> (&StageState, &LoopState, &Iteration) {
        let st = self.stage(id).expect("a looping stage has state");
        let lp = st.closed.as_deref().expect("a looping stage has a loop");
        (st, lp, lp.iterations.last().expect("a looping stage has generated"))
    }

    fn stage_mut(&mut self, id: &StageId) -> &mut StageState {
        let index = match self.index.get(id.as_str()) {
            Some(&i) => i,
            None => {
                self.stages.push(StageState::new(id.clone()));
                self.index.insert(id.clone(), self.stages.len() - 1);
                self.stages.len() - 1
            }
        };
        &mut self.stages[index]
    }

    /// The outputs of a stage: from this run, else carried over from an earlier run of the task.
    pub fn outputs_of(&self, id: &str) -> Option<&Outputs> {
        match self.stage(id) {
            Some(s) if s.status == StageStatus::Success => Some(&s.outputs),
            Some(_) => None,
            None => self.started.as_ref().and_then(|st| st.prior_outputs.get(id)),
        }
    }

    /// Applies one event.
    pub fn apply(&mut self, record: &EventRecord) {
        self.last_seq = record.seq;
        self.updated_at = Some(record.at);
        if let Some(status) = record.event.run_status() {
            match (self.status == RunStatus::Waiting, status == RunStatus::Waiting) {
                (false, true) => self.waiting_since = Some(record.at),
                (true, false) => {
                    if let Some(since) = self.waiting_since.take() {
                        self.waited_ms += record.at.duration_since(since).as_millis().max(0) as i64;
                    }
                }
                _ => {}
            }
            self.status = status;
            // A provider wait lasts as long as the run is queued for it.
            if !matches!(record.event, Event::LimitWaiting { .. }) {
                self.provider_wait = None;
            }
        }
        if let Event::ApprovalRejected { rollback: true, .. } = &record.event {
            self.rollback_requested = true;
        }
        if let Some(given) = GivenAnswer::of(record) {
            self.answers.push(given);
        }
        let was_done = record.event.stage().and_then(|id| self.stage(id.as_str())).map(|s| s.status.is_done());
        self.apply_event(record);
        // When each stage ended, in the journal's order (a graph's rollback goes backwards).
        if let Some(id) = record.event.stage()
            && was_done != Some(true)
            && let Some(&i) = self.index.get(id.as_str())
            && self.stages[i].status.is_done()
        {
            self.stages[i].finished_seq = record.seq;
        }
    }

    /// [`RunState::apply`]'s change of the run and its stages for one event.
    fn apply_event(&mut self, record: &EventRecord) {
        match &record.event {
            Event::RunStarted(started) => {
                self.started = Some((**started).clone());
                self.owner = started.owner.clone();
                self.created_at = Some(record.at);
            }
            Event::ConditionEvaluated { stage, outcome, condition, values } => {
                let s = self.stage_mut(stage);
                s.condition = Some(outcome.clone());
                s.condition_detail = Some((condition.clone(), values.clone()));
            }
            Event::StageSkipped { stage, reason } => {
                let s = self.stage_mut(stage);
                s.status = StageStatus::Skipped;
                s.skip_reason = Some(*reason);
            }
            Event::ApprovalRequested { stage } => {
                self.stage_mut(stage).approval = None;
            }
            Event::ApprovalGranted { stage, by, comment, via }
            | Event::ApprovalRejected { stage, by, comment, via, .. } => {
                let granted = matches!(record.event, Event::ApprovalGranted { .. });
                let s = self.stage_mut(stage);
                let (by, comment, via) = (by.clone(), comment.clone(), *via);
                s.approval = Some(Approval { granted, by, comment, via, at: record.at });
                if !granted {
                    s.status = StageStatus::Cancelled;
                }
            }
            Event::AttemptStarted { stage, attempt } => {
                if self.stage(stage.as_str()).is_some_and(|s| s.status.is_done()) {
                    self.scan_hint.set(0);
                }
                let s = self.stage_mut(stage);
                s.restarted |= s.status == StageStatus::Running
                    && s.attempt_log.iter().any(|a| a.attempt == *attempt && a.status == AttemptStatus::Running);
                s.attempt_log.retain(|a| a.attempt != *attempt);
                s.attempt_log.push(AttemptRecord {
                    attempt: *attempt,
                    status: AttemptStatus::Running,
                    error: None,
                    message: None,
                    duration_ms: 0,
                    timestamp: record.at,
                    retry_delay_ms: None,
                    retry_reason: None,
                    agent: s.agent.clone(),
                });
                s.status = StageStatus::Running;
                s.attempts = s.attempts.max(*attempt);
                if let Some(lp) = s.closed.as_mut() {
                    lp.answer = None;
                }
                s.process_groups.clear();
                s.retry_at = None;
            }
            Event::ProcessStarted { stage, pgid, start_time, host, .. } => {
                let group = crate::event::ProcessGroup { pgid: *pgid, start_time: *start_time, host: host.clone() };
                self.stage_mut(stage).process_groups.push(group);
            }
            Event::RunResumed { owner, .. } => {
                self.owner = Some(owner.clone());
                // An attempt started whose end is not journaled (running, or in its closed loop).
                let unended = |s: &StageState| s.attempt_log.last().is_some_and(|a| a.status == AttemptStatus::Running);
                for s in self.stages.iter_mut().filter(|s| unended(s)) {
                    s.restarted = true;
                }
            }
            Event::FeedbackChecked { stage, iteration, action, .. } => {
                if let crate::event::FeedbackAction::ReImplement { target, reset, brief } = action {
                    self.reset_stages(reset);
                    self.stage_mut(target).feedback_brief = Some(brief.clone());
                }
                let s = self.stage_mut(stage);
                s.feedback_iterations = *iteration;
                s.escalation_answer = None;
                if !matches!(action, crate::event::FeedbackAction::ReImplement { .. }) {
                    s.feedback = Some(action.clone());
                }
            }
            Event::EscalationAnswered { stage, answer, .. } => {
                if self.forge.escalated {
                    self.forge.escalated = false;
                    self.forge.answer = Some(answer.clone());
                    return;
                }
                if self.merge_conflict.take().is_some() {
                    self.merge_answer = Some(answer.clone());
                    return;
                }
                let s = self.stage_mut(stage);
                s.escalation_answer = Some(answer.clone());
                if *answer == crate::event::Answer::Abort {
                    s.status = StageStatus::Cancelled;
                }
                if let Some(lp) = s.closed.as_mut().filter(|l| l.escalation.is_some()) {
                    lp.escalation = None;
                    lp.answer = Some(answer.clone());
                    match answer {
                        crate::event::Answer::Retry => lp.base = lp.iterations.len(),
                        crate::event::Answer::Fix { text } => {
                            lp.base = lp.iterations.len();
                            lp.user_fix = Some(text.clone());
                        }
                        crate::event::Answer::Skip | crate::event::Answer::Abort => {}
                    }
                }
            }
            Event::LimitWaiting { stage, reason, until, .. } => {
                self.provider_wait = Some((stage.clone(), reason.clone(), *until));
            }
            Event::RunInterrupted { .. }
            | Event::RunQueued { .. }
            | Event::CancelRequested { .. }
            | Event::LimitTaken { .. }
            | Event::CommitsKept { .. } => {}
            Event::SnapshotTaken { stage, attempt, snapshot, .. } => {
                self.stage_mut(stage).snapshots.push((*attempt, snapshot.clone()));
            }
            Event::LayerMade { stage, attempt, layer, .. } => {
                self.stage_mut(stage).layer = Some((*attempt, layer.clone()))
            }
            Event::LayerDropped { stage, .. } => self.stage_mut(stage).layer = None,
            Event::NetworkRefused { stage, target, .. } => {
                let refused = &mut self.stage_mut(stage).network_refused;
                if !refused.contains(target) {
                    refused.push(target.clone());
                }
            }
            Event::SnapshotFailed { .. } | Event::SnapshotRestored { .. } | Event::RepositoryRepaired { .. } => {}
            Event::SandboxUnavailable { .. } => self.sandbox_noted = true,
            Event::CheckoutFailed { reason, tries, .. } => self.checkout_failed = Some((*tries, reason.clone())),
            Event::Delivered(delivery) => {
                self.forge.deliveries.push(delivery.clone());
                self.forge.delivery_failures.clear();
            }
            Event::DeliveryFailed { message, retry_at, .. } => {
                self.forge.delivery_failures.push((message.clone(), *retry_at));
            }
            Event::CiReported { round, head, outcome } => {
                self.forge.reports.push((*round, head.clone(), outcome.clone()));
            }
            Event::CiRetried { round, target, reset, brief } => {
                self.reset_stages(reset);
                self.stage_mut(target).feedback_brief = Some(brief.clone());
                self.forge.round = *round;
                self.forge.answer = None;
                self.forge.reviews.clear();
                self.forge.moved_to = None;
                self.forge.merge_failed = None;
            }
            Event::ReviewReceived { by, text } => self.forge.reviews.push((by.clone(), text.clone())),
            Event::ApprovalReceived { by, head } => {
                self.forge.approvals.push((by.clone(), head.clone()));
                self.forge.merge_failed = None;
            }
            Event::ReviewAwaited { .. } => {}
            Event::HeadMoved { head } => self.forge.moved_to = Some(head.clone()),
            Event::Merged { .. } => self.forge.merged = true,
            Event::MergeFailed { head, .. } => self.forge.merge_failed = Some(head.clone()),
            Event::CiEscalated { .. } => self.forge.escalated = true,
            Event::CiAwaited { .. } => {}
            Event::FailureReported { .. } => self.forge.failure_reported = true,
            Event::ChangesCommitted { stage, commit, .. } => self.stage_mut(stage).commits.push(commit.clone()),
            Event::RollbackStarted { trigger, stages } => {
                self.rollback = Some(RollbackState {
                    trigger: trigger.clone(),
                    stages: stages.clone(),
                    overall: None,
                    completed_at: None,
                });
            }
            Event::StageRolledBack { stage, strategy, status, detail } => {
                let s = self.stage_mut(stage);
                s.rollback = Some((*strategy, *status, detail.clone()));
                if s.status == StageStatus::Success && *status == crate::event::RollbackStatus::Success {
                    s.status = StageStatus::RolledBack;
                }
                if *strategy == loopwright_spec::pipeline::RollbackStrategy::MemoryCleanup
                    && *status == crate::event::RollbackStatus::Success
                {
                    s.outputs.clear();
                }
            }
            Event::RollbackFinished { overall } => {
                if let Some(r) = self.rollback.as_mut() {
                    r.overall = Some(*overall);
                    r.completed_at = Some(record.at);
                }
            }
            Event::RunCancelled { stage, rollback, .. } => {
                self.rollback_requested |= *rollback;
                if let Some(stage) = stage {
                    let s = self.stage_mut(stage);
                    s.status = StageStatus::Cancelled;
                    s.process_groups.clear();
                }
            }
            Event::AttemptSucceeded { stage, duration_ms, outputs, .. } => {
                let s = self.stage_mut(stage);
                if let Some(a) = s.attempt_log.last_mut() {
                    a.status = AttemptStatus::Success;
                    a.duration_ms = a.duration_ms.max(*duration_ms);
                }
                if let Some(lp) = s.closed.as_mut() {
                    lp.succeeded = true;
                }
                // Its layer, if it had one, was copied into the workspace.
                s.layer = None;
                s.restarted = false;
                s.status = StageStatus::Success;
                s.duration_ms += duration_ms;
                s.outputs = outputs.clone();
                s.process_groups.clear();
            }
            Event::AttemptFailed { stage, duration_ms, error, .. } => {
                let s = self.stage_mut(stage);
                if let Some(a) = s.attempt_log.last_mut() {
                    a.status = AttemptStatus::Failed;
                    a.duration_ms = *duration_ms;
                    a.error = Some(error.kind.as_str().to_owned());
                    a.message = Some(error.message.clone());
                }
                s.status = StageStatus::AttemptFailed;
                s.restarted = false;
                s.duration_ms += duration_ms;
                s.last_error = Some(error.clone());
                s.process_groups.clear();
            }
            Event::RetryScheduled { stage, delay_ms, reason, .. } => {
                self.retries_used += 1;
                let at = record.at;
                let s = self.stage_mut(stage);
                if let Some(a) = s.attempt_log.last_mut() {
                    a.retry_delay_ms = Some(*delay_ms);
                    a.retry_reason = Some(reason.clone());
                }
                s.status = StageStatus::RetryWaiting;
                if let Some(lp) = s.closed.as_mut() {
                    // A new pass of the closed loop, with a fresh budget.
                    lp.base = lp.iterations.len();
                    lp.passes += 1;
                }
                s.retry_at = at
                    .checked_add(jiff::SignedDuration::from_millis(i64::try_from(*delay_ms).unwrap_or(i64::MAX)))
                    .ok();
            }
            Event::CandidateStarted { stage, attempt, candidate, agent, layer } => {
                let s = self.stage_mut(stage);
                // A new round.
                if s.round != *attempt {
                    s.candidates.clear();
                    s.chosen = None;
                    s.round = *attempt;
                }
                s.candidates.retain(|c| c.candidate != *candidate);
                s.candidates.push(CandidateState {
                    candidate: *candidate,
                    agent: agent.clone(),
                    layer: layer.clone(),
                    result: None,
                });
                s.candidates.sort_by_key(|c| c.candidate);
            }
            Event::CandidateEnded { stage, candidate, result, .. } => {
                let s = self.stage_mut(stage);
                if let Some(c) = s.candidates.iter_mut().find(|c| c.candidate == *candidate) {
                    c.result = Some(result.clone());
                }
            }
            Event::CandidateChosen { stage, winner, .. } => {
                self.stage_mut(stage).chosen = Some(*winner);
            }
            Event::AgentFellBack { stage, attempt, from, to, reason } => {
                let s = self.stage_mut(stage);
                s.fell_back.retain(|f| f.attempt != *attempt);
                s.fell_back.push(FellBack { attempt: *attempt, from: from.clone(), to: to.clone(), reason: *reason });
                s.agent = Some(to.clone());
                s.agent_since = s.attempts;
                s.status = StageStatus::RetryWaiting;
                s.retry_at = None;
                if let Some(lp) = s.closed.as_mut() {
                    // The agent that takes over has the loop's whole budget.
                    lp.base = lp.iterations.len();
                }
            }
            Event::StageFailed { stage, error } => {
                let timeout = error.kind == crate::event::FailureKind::Timeout;
                let s = self.stage_mut(stage);
                s.status = if timeout { StageStatus::Timeout } else { StageStatus::Failed };
                s.last_error = Some(error.clone());
                self.failed_stage = Some(stage.clone());
            }
            Event::RunFinished { .. } => {}
            Event::Generated { stage, attempt, duration_ms, outputs, files, failure, .. } => {
                let at = record.at;
                let s = self.stage_mut(stage);
                s.status = StageStatus::Looping;
                s.duration_ms += duration_ms;
                s.process_groups.clear();
                if let Some(a) = s.attempt_log.iter_mut().rev().find(|a| a.attempt == *attempt) {
                    a.duration_ms = *duration_ms;
                }
                let lp = s.closed_mut();
                lp.iterations.retain(|i| i.attempt != *attempt);
                lp.iterations.push(Iteration {
                    attempt: *attempt,
                    at,
                    duration_ms: *duration_ms,
                    outputs: outputs.clone(),
                    files: files.clone(),
                    validation: None,
                    checks: None,
                    regression: None,
                    failure: None,
                    analysis: None,
                    fix: None,
                    fix_at: None,
                });
                s.loop_failure(*attempt, failure.as_deref());
            }
            Event::Validated { stage, attempt, gates, violations, failure } => {
                let s = self.stage_mut(stage);
                if let Some(it) = s.iteration_mut(*attempt) {
                    it.validation = Some((gates.clone(), violations.clone()));
                }
                s.loop_failure(*attempt, failure.as_deref());
            }
            Event::Evaluated { stage, attempt, checks, failure } => {
                let s = self.stage_mut(stage);
                s.duration_ms += checks.iter().map(|c| c.duration_ms).sum::<u64>();
                if let Some(it) = s.iteration_mut(*attempt) {
                    it.checks = Some(checks.clone());
                }
                s.loop_failure(*attempt, failure.as_deref());
            }
            Event::RegressionGate { stage, baseline, .. } => {
                self.stage_mut(stage).closed_mut().regression_gate = Some(baseline.clone());
            }
            Event::RegressionChecked { stage, attempt, dependents, regressions, failure } => {
                let s = self.stage_mut(stage);
                if let Some(it) = s.iteration_mut(*attempt) {
                    it.regression = Some((dependents.clone(), regressions.clone()));
                }
                s.loop_failure(*attempt, failure.as_deref());
            }
            Event::Analyzed { stage, attempt, analysis } => {
                if let Some(it) = self.stage_mut(stage).iteration_mut(*attempt) {
                    it.analysis = Some(analysis.clone());
                }
            }
            Event::FixApplied { stage, attempt, fix } => {
                let at = record.at;
                if let Some(it) = self.stage_mut(stage).iteration_mut(*attempt) {
                    it.fix = Some(fix.clone());
                    it.fix_at = Some(at);
                }
            }
            Event::LoopEscalated { stage, reason, .. } => {
                let lp = self.stage_mut(stage).closed_mut();
                lp.escalation = Some(reason.clone());
                lp.escalation_reason = Some(reason.clone());
            }
            Event::WorktreeMerged { .. } => {
                self.worktree_merged = true;
                self.merge_conflict = None;
            }
            Event::WorktreeConflict { files, .. } => {
                self.merge_conflict = Some(files.clone());
                self.merge_answer = None;
            }
            Event::UsageRecorded { stage, usage, .. } => {
                let spend = &mut self.stage_mut(stage).spend;
                spend.tokens += usage.input_tokens + usage.output_tokens;
                spend.cost_usd += usage.cost_usd.unwrap_or(0.0);
                spend.invocations += 1;
                spend.estimated |= usage.estimated;
            }
            Event::DeadLettered { stage, reason, .. } => {
                self.stage_mut(stage).closed_mut().dead_letter = Some(reason.clone());
            }
        }
    }

    /// The overall outcome of the run's rollback from its stages' outcomes: success when all
    /// succeeded, partial when some did, failed when none did.
    pub fn rollback_overall(&self) -> crate::event::RollbackStatus {
        use crate::event::RollbackStatus;
        let results: Vec<RollbackStatus> = self
            .rollback
            .as_ref()
            .map(|r| {
                r.stages
                    .iter()
                    .filter_map(|s| self.stage(s.as_str()).and_then(|s| s.rollback.as_ref()).map(|r| r.1))
                    .collect()
            })
            .unwrap_or_default();
        if results.iter().all(|r| *r == RollbackStatus::Success) {
            RollbackStatus::Success
        } else if results.contains(&RollbackStatus::Success) {
            RollbackStatus::Partial
        } else {
            RollbackStatus::Failed
        }
    }

    /// Stages that run again (a review's feedback loop, a red CI round): pending, their
    /// condition, approval and feedback to be decided afresh.
    fn reset_stages(&mut self, reset: &[StageId]) {
        for id in reset {
            let s = self.stage_mut(id);
            s.status = StageStatus::Pending;
            s.condition = None;
            s.condition_detail = None;
            s.approval = None;
            s.feedback = None;
            s.skip_reason = None;
            s.pass_base = s.attempts;
        }
        self.scan_hint.set(0);
    }

    /// Stages whose manual rollback waits for a human's confirmation.
    pub fn pending_manual_rollbacks(&self) -> Vec<(StageId, String)> {
        self.stages
            .iter()
            .filter_map(|s| match &s.rollback {
                Some((
                    loopwright_spec::pipeline::RollbackStrategy::Manual,
                    crate::event::RollbackStatus::Pending,
                    steps,
                )) => Some((s.id.clone(), steps.clone())),
                _ => None,
            })
            .collect()
    }

    /// The stage with an attempt in flight (or interrupted in flight).
    pub fn in_flight(&self) -> Option<&StageState> {
        self.stages.iter().find(|s| s.status == StageStatus::Running)
    }

    /// The stage whose approval gate the run waits at.
    pub fn waiting_for_approval(&self) -> Option<&StageState> {
        if self.status != RunStatus::Waiting || self.waiting_for_escalation().is_some() {
            return None;
        }
        self.stages.iter().rev().find(|s| s.status == StageStatus::Pending && s.approval.is_none())
    }

    /// Where the run's work came from and goes, for a run from a forge.
    pub fn forge_link(&self) -> Option<&crate::forge::ForgeLink> {
        self.started.as_ref()?.forge.as_ref()
    }

    /// The stage whose escalation the run waits on.
    pub fn waiting_for_escalation(&self) -> Option<&StageState> {
        if self.status != RunStatus::Waiting {
            return None;
        }
        if self.merge_conflict.is_some() {
            return self.stages.last();
        }
        if self.forge.escalated {
            let stage = &self.forge_link()?.stage;
            return self.stage(stage.as_str());
        }
        self.stages.iter().find(|s| {
            (s.feedback == Some(crate::event::FeedbackAction::Escalate) && s.escalation_answer.is_none())
                || s.closed.as_ref().is_some_and(|l| l.escalation.is_some())
        })
    }

    /// What a stage has spent (active time included).
    pub fn stage_spend(&self, id: &str) -> Spend {
        self.stage(id).map_or_else(Spend::default, |s| Spend { active_ms: s.duration_ms, ..s.spend })
    }

    /// What the run has spent so far.
    pub fn spend(&self) -> Spend {
        self.stages.iter().fold(Spend::default(), |mut total, s| {
            total.tokens += s.spend.tokens;
            total.cost_usd += s.spend.cost_usd;
            total.invocations += s.spend.invocations;
            total.estimated |= s.spend.estimated;
            total.active_ms += s.duration_ms;
            total
        })
    }

    /// Outputs of every stage that has them, keyed by stage id (what `stage_outputs` is).
    pub fn all_outputs(&self) -> BTreeMap<&str, &Outputs> {
        let mut all: BTreeMap<&str, &Outputs> = BTreeMap::new();
        if let Some(st) = &self.started {
            for (id, outputs) in &st.prior_outputs {
                all.insert(id.as_str(), outputs);
            }
        }
        for s in &self.stages {
            if s.status == StageStatus::Success {
                all.insert(s.id.as_str(), &s.outputs);
            }
        }
        all
    }
}

/// What the journal says of a run's forge side.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ForgeState {
    /// The current round: how many CI rounds were sent back.
    pub round: u32,
    /// Each delivery, oldest first.
    pub deliveries: Vec<crate::forge::Delivery>,
    /// Failed tries to deliver the current round, and when to try again.
    pub delivery_failures: Vec<(String, Option<jiff::Timestamp>)>,
    /// CI's result per round (the round, the head, how it ended).
    pub reports: Vec<(u32, String, crate::forge::CiOutcome)>,
    /// The run waits for a person after too many red rounds.
    pub escalated: bool,
    /// A person's answer to that, until it is acted on.
    pub answer: Option<crate::event::Answer>,
    /// The failure was reported on the forge (its comment's URL, when posted).
    pub failure_reported: bool,
    /// People's review feedback not yet sent back (who, what).
    pub reviews: Vec<(String, String)>,
    /// Approvals heard (who, the head each names).
    pub approvals: Vec<(String, String)>,
    /// A head loopwright did not push, found on the change request's branch this round.
    pub moved_to: Option<String>,
    /// The change request was merged (or auto-merge enabled).
    pub merged: bool,
    /// The head whose merge failed last, until an approval newer than that failure.
    pub merge_failed: Option<String>,
}

impl ForgeState {
    /// The current round's delivery, when it was made.
    pub fn delivered(&self) -> Option<&crate::forge::Delivery> {
        self.deliveries.iter().rev().find(|d| d.round == self.round)
    }

    /// The head the run watches this round: the one it delivered, or a commit someone else
    /// put on its branch since.
    pub fn head(&self) -> Option<&str> {
        let delivered = self.delivered()?;
        Some(self.moved_to.as_deref().unwrap_or(&delivered.head))
    }

    /// CI's result on the current round's head.
    pub fn report(&self) -> Option<&crate::forge::CiOutcome> {
        let head = self.head()?;
        self.reports.iter().rev().find(|(round, h, _)| *round == self.round && h == head).map(|(_, _, o)| o)
    }

    /// Whether a person approved the head the run watches.
    pub fn approved(&self) -> bool {
        self.head().is_some_and(|head| self.approvals.iter().any(|(_, h)| h == head))
    }

    /// The change request (the latest delivery's).
    pub fn change(&self) -> Option<&crate::forge::Delivery> {
        self.deliveries.last()
    }

    /// Whether the run waits for CI on what it delivered.
    pub fn waiting_for_ci(&self) -> bool {
        self.delivered().is_some_and(|d| d.watching) && self.report().is_none()
    }
}
