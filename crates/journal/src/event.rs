//! Journal events: every state change of a run, in the order it happened.
//!
//! A run's state is a fold over its events ([`crate::state::RunState::apply`]); nothing about a
//! run is known that its journal does not say.

use std::collections::BTreeMap;

use loopwright_spec::StageId;
use serde::{Deserialize, Serialize};

pub use crate::closed_loop::Unfixable;
use crate::closed_loop::{Analysis, Baseline, CheckResult, Failure, FileChanges, FixResult, Regression, Violation};
use crate::ids::TaskId;

/// Outputs of one stage: key -> text.
pub type Outputs = BTreeMap<String, String>;

/// A process group a stage started: its id, its leader's start time and the machine.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessGroup {
    /// The group id (the leader's pid).
    pub pgid: i32,
    /// The leader's start time in clock ticks since boot, when known.
    pub start_time: Option<u64>,
    /// The machine it runs on (none in journals older than workers: this machine's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// Who a gate approved up front by the run's `--yes` (`approve_all`) is journaled as.
pub const AUTO_APPROVED_BY: &str = "--yes";

/// One state change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// The run was created with these parameters.
    RunStarted(Box<RunStarted>),
    /// A stage's condition was evaluated.
    ConditionEvaluated {
        /// The stage.
        stage: StageId,
        /// The expression.
        condition: String,
        /// The variables it read, with the values they had.
        values: serde_json::Value,
        /// What it gave.
        outcome: ConditionOutcome,
    },
    /// A stage was not run.
    StageSkipped {
        /// The stage.
        stage: StageId,
        /// Why.
        reason: SkipReason,
    },
    /// A stage with `requires_approval` waits for a human.
    ApprovalRequested {
        /// The stage.
        stage: StageId,
    },
    /// A human (or `--yes`) approved the stage.
    ApprovalGranted {
        /// The stage.
        stage: StageId,
        /// Who approved (OS user, `--by`, or `--yes`).
        by: String,
        /// Their comment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        comment: Option<String>,
        /// Where the answer came from (`dashboard`, `cli`, `api`, `link`); absent in journals
        /// written before it was kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        via: Option<Via>,
    },
    /// A human refused the stage: the run is cancelled.
    ApprovalRejected {
        /// The stage.
        stage: StageId,
        /// Who refused.
        by: String,
        /// Their comment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        comment: Option<String>,
        /// Roll back the completed stages that have a `rollback`.
        #[serde(default)]
        rollback: bool,
        /// Where the answer came from (`dashboard`, `cli`, `api`, `link`); absent in journals
        /// written before it was kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        via: Option<Via>,
    },
    /// An attempt of a stage began.
    AttemptStarted {
        /// The stage.
        stage: StageId,
        /// 1-based attempt number.
        attempt: u32,
    },
    /// A process of the stage was started in its own process group.
    ProcessStarted {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// The process group id (the leader's pid).
        pgid: i32,
        /// The leader's start time (clock ticks since boot), so a later run never signals an
        /// unrelated process that reused the id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_time: Option<u64>,
        /// The machine it runs on (a run continued on another machine leaves it alone).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host: Option<String>,
        /// What was run.
        command: String,
    },
    /// An attempt ended well and produced these outputs.
    AttemptSucceeded {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// How long it ran.
        duration_ms: u64,
        /// Declared outputs.
        outputs: Outputs,
    },
    /// An attempt failed.
    AttemptFailed {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// How long it ran.
        duration_ms: u64,
        /// What went wrong.
        error: StageError,
    },
    /// Another attempt will run after a delay.
    RetryScheduled {
        /// The stage.
        stage: StageId,
        /// The attempt that will run.
        attempt: u32,
        /// The delay chosen.
        delay_ms: u64,
        /// Why this delay (`exponential backoff 5s * 2^1`).
        reason: String,
    },
    /// An attempt failed in a way its agent cannot fix (SPEC §16 "Fallback"): the stage's next
    /// agent takes the next attempt, with a retry budget of its own.
    AgentFellBack {
        /// The stage.
        stage: StageId,
        /// The attempt that failed.
        attempt: u32,
        /// The agent that could not go on.
        from: String,
        /// The agent that takes over.
        to: String,
        /// Why `from` could not go on.
        reason: Unfixable,
    },
    /// Best of N: a candidate of a stage's attempt started, in its own layer.
    CandidateStarted {
        /// The stage.
        stage: StageId,
        /// The attempt (the round of candidates).
        attempt: u32,
        /// Which candidate (0-based).
        candidate: u32,
        /// Its agent.
        agent: String,
        /// Its layer.
        layer: String,
    },
    /// Best of N: a candidate ended and was checked.
    CandidateEnded {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// Which candidate.
        candidate: u32,
        /// What it did.
        result: CandidateResult,
    },
    /// Best of N: the winner among the candidates of an attempt, or none, and why.
    CandidateChosen {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// The winner, when one passed.
        winner: Option<u32>,
        /// Why, in words (what decided, against whom).
        why: String,
    },
    /// A stage failed for good.
    StageFailed {
        /// The stage.
        stage: StageId,
        /// The last error.
        error: StageError,
    },
    /// The workspace's files were recorded before an attempt, so its changes can be undone.
    SnapshotTaken {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// The snapshot's name.
        snapshot: String,
        /// Files recorded.
        files: usize,
    },
    /// No snapshot could be taken (the attempt runs anyway; its changes cannot be restored).
    SnapshotFailed {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// Why.
        reason: String,
    },
    /// The attempt writes into a layer over the workspace (SPEC §12): the workspace is not
    /// changed until the attempt passes, when the layer is copied into it.
    LayerMade {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// The layer's name (its folder in the run's `layers/`).
        layer: String,
        /// How it is mounted, in words (`a kernel overlay in a user namespace`).
        how: String,
    },
    /// An attempt's layer was discarded: what the attempt wrote is gone, and nothing of the
    /// workspace had to be restored.
    LayerDropped {
        /// The stage.
        stage: StageId,
        /// The attempt whose layer it was.
        attempt: u32,
        /// Files and folders the layer held.
        files: usize,
        /// Why, in words.
        reason: String,
    },
    /// A sandboxed process asked for a host it may not reach, and was refused.
    NetworkRefused {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// What was asked for (`host:port`).
        target: String,
        /// Why it was refused.
        why: String,
    },
    /// This run's stages run without a sandbox although one was asked for (`sandbox = "auto"`
    /// on a machine that cannot make one): why.
    SandboxUnavailable {
        /// What is missing, in words.
        reason: String,
    },
    /// loopwright repaired what a crash left in the repository before using it (a stale
    /// `.git/index.lock` that no live process held, which would fail every commit).
    RepositoryRepaired {
        /// The stage about to commit or roll back.
        stage: StageId,
        /// What was done.
        detail: String,
    },
    /// An interrupted attempt's partial file changes were undone before it was run again.
    SnapshotRestored {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// What was put back.
        report: RestoreCounts,
    },
    /// An agent-mode stage's file changes were committed (git workspaces).
    ChangesCommitted {
        /// The stage.
        stage: StageId,
        /// The commit.
        commit: String,
        /// Files in it.
        files: usize,
    },
    /// Rollback of completed stages began (seed 004 "Rollback Protocol").
    RollbackStarted {
        /// The stage whose failure triggered it (none for a cancellation).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trigger: Option<StageId>,
        /// The stages to roll back, most recent first.
        stages: Vec<StageId>,
    },
    /// One stage was rolled back (or could not be).
    StageRolledBack {
        /// The stage.
        stage: StageId,
        /// How.
        strategy: loopwright_spec::pipeline::RollbackStrategy,
        /// The outcome.
        status: RollbackStatus,
        /// What was done (`reverted 2 commits`, `restored 3 files`, the manual steps).
        detail: String,
    },
    /// Rollback ended.
    RollbackFinished {
        /// `success`, `partial` or `failed`.
        overall: RollbackStatus,
    },
    /// A review stage's `feedback_items` were checked (seed 004 "feedback loop").
    FeedbackChecked {
        /// The review stage.
        stage: StageId,
        /// Items found.
        items: usize,
        /// Blocking items found.
        blocking: usize,
        /// Iterations of this loop so far, this one included when it loops.
        iteration: u32,
        /// What happens next.
        action: FeedbackAction,
    },
    /// A human answered an escalation.
    EscalationAnswered {
        /// The stage that escalated.
        stage: StageId,
        /// The answer.
        answer: Answer,
        /// Who answered.
        by: String,
        /// Where the answer came from (`dashboard`, `cli`, `api`, `link`); absent in journals
        /// written before it was kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        via: Option<Via>,
    },
    /// The run's work was delivered to the forge: its branch pushed and its change request
    /// opened (or, after a CI retry, updated).
    Delivered(crate::forge::Delivery),
    /// Delivering failed; it is tried again at `retry_at` when that is given.
    DeliveryFailed {
        /// The round.
        round: u32,
        /// What went wrong.
        message: String,
        /// When to try again (none: the run fails).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_at: Option<jiff::Timestamp>,
    },
    /// CI finished on the delivered head (recorded by whoever watches the change request).
    CiReported {
        /// The round.
        round: u32,
        /// The head commit CI ran on.
        head: String,
        /// How it ended.
        #[serde(flatten)]
        outcome: crate::forge::CiOutcome,
    },
    /// The run, taken up again while its pull request's CI still runs, waits for it again.
    CiAwaited {
        /// The round.
        round: u32,
    },
    /// A person with the permission asked for changes on the pull request (a review, or a
    /// comment on a line): their words go back to the delivering stage.
    ReviewReceived {
        /// Who, and by which review or comment (`erin@github#review-5`).
        by: String,
        /// What they said (with the file and line a line's comment is on).
        text: String,
    },
    /// A failed CI round goes back to the delivering stage: these stages run again, the target
    /// with the failure as its feedback.
    CiRetried {
        /// The round that starts.
        round: u32,
        /// The delivering stage.
        target: StageId,
        /// The stages that run again, in pipeline order.
        reset: Vec<StageId>,
        /// What the target's next prompt is told.
        brief: String,
    },
    /// CI failed in more rounds than `ci_retries` allows: the run waits for a person.
    CiEscalated {
        /// The round.
        round: u32,
        /// The delivering stage (what an answer names).
        stage: StageId,
        /// The comment on the pull request that asks, when it could be posted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        comment: Option<String>,
    },
    /// A person with the permission approved the change request at `head` (`merge = "auto"`:
    /// an approval counts for the head it names only).
    ApprovalReceived {
        /// Who, and by which review (`erin@github#review-5`).
        by: String,
        /// The head commit the approval names.
        head: String,
    },
    /// CI passed on `head`: the run waits for a person to approve that head before it merges.
    ReviewAwaited {
        /// The head that waits for an approval.
        head: String,
    },
    /// The change request's head is a commit loopwright did not push: merging stops until a
    /// person approves that head and its CI passes.
    HeadMoved {
        /// The head found.
        head: String,
    },
    /// The change request was merged at `head` (or GitHub's auto-merge enabled for it, when
    /// branch protection requires an approving review).
    Merged {
        /// The change request.
        number: u64,
        /// The head merged: the one tested and approved.
        head: String,
        /// GitHub merges it once protection is satisfied (auto-merge), rather than loopwright.
        auto_merge: bool,
    },
    /// Merging `head` did not work: the run waits for a person (a new approval tries again).
    MergeFailed {
        /// The head it tried.
        head: String,
        /// What the forge said.
        message: String,
    },
    /// The run's failure was reported on the forge (one comment), or could not be.
    FailureReported {
        /// The comment, when it was posted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        /// Why it could not be.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// loopwright was stopped by a signal; the stage in flight was ended. `resume` continues.
    RunInterrupted {
        /// The stage that was running.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stage: Option<StageId>,
        /// The signal (`SIGINT`, `SIGTERM`).
        signal: String,
    },
    /// The daemon accepted the run but has no free slot (or its working tree is busy): it waits
    /// in line, in the order runs were queued, until the daemon takes it up (`run_resumed`).
    RunQueued {},
    /// An attempt of a stage waits for what a provider allows (`[[limits]]`, SPEC §13): a
    /// free slot, the requests or tokens left this minute or hour, or the end of a pause after
    /// a rate limit. The run is `queued` until `limit_taken`.
    LimitWaiting {
        /// The stage.
        stage: StageId,
        /// The attempt that waits.
        attempt: u32,
        /// Why, in words (`anthropic: 2 of 2 concurrent stages in use`).
        reason: String,
        /// When it can go on at the latest, when that is known (a pause's end).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until: Option<jiff::Timestamp>,
    },
    /// A worker could not make the run's work tree (its repository out of reach, its base not
    /// pushed): the run is tried again a lease later, and fails after
    /// [`Event::CHECKOUT_TRIES`] such tries.
    CheckoutFailed {
        /// The worker.
        worker: String,
        /// Why, in words.
        reason: String,
        /// How many tries failed so far, this one included.
        tries: u32,
    },
    /// While a plan-mode stage ran without a sandbox, commits were made on its work tree's
    /// branch by someone else (a person in a terminal): they are kept, and what they account
    /// for is not taken for the stage's write.
    CommitsKept {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// `SHA subject` of each.
        commits: Vec<String>,
    },
    /// The waiting attempt got what it waited for: the run works again.
    LimitTaken {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
    },
    /// A loopwright process took the run up again (after an interruption or a crash).
    RunResumed {
        /// The process now driving the run.
        owner: Owner,
        /// Who asked for it, when a person did (the daemon's `resume`; not a restart's
        /// recovery or a process taking up a run it was answered for).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// Someone asked, from another process, to cancel the run; its owner stops it.
    CancelRequested {
        /// Who asked.
        by: String,
        /// Roll back completed stages too.
        #[serde(default)]
        rollback: bool,
    },
    /// The run was cancelled.
    RunCancelled {
        /// The stage that was running or waiting, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stage: Option<StageId>,
        /// Who cancelled it.
        by: String,
        /// Roll back the completed stages that have a `rollback`.
        #[serde(default)]
        rollback: bool,
    },
    /// Closed loop, GENERATE + EXECUTE: the agent's attempt ended, with the files it changed
    /// and, when it failed, its failure classified.
    Generated {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// How long the agent ran.
        duration_ms: u64,
        /// Its outputs (kept until EVALUATE passes).
        #[serde(default, skip_serializing_if = "Outputs::is_empty")]
        outputs: Outputs,
        /// Files it changed.
        #[serde(default)]
        files: FileChanges,
        /// What it printed (the last 2000 characters; the whole output is in the run's
        /// `outputs/` folder).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        output: String,
        /// Its exit code, when it exited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// Its failure, when the agent itself failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<Box<Failure>>,
    },
    /// Closed loop, VALIDATE: the pre-execution gates ran.
    Validated {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// Gates checked.
        gates: Vec<crate::closed_loop::Gate>,
        /// What they found.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        violations: Vec<Violation>,
        /// The failure, when a gate failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<Box<Failure>>,
    },
    /// Closed loop, EVALUATE: the success checks ran (up to the first that failed).
    Evaluated {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// Each check run.
        checks: Vec<CheckResult>,
        /// The first failure, classified.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<Box<Failure>>,
    },
    /// Closed loop: regression detection's complexity gate, before the first attempt, with
    /// the baseline test results when it is on.
    RegressionGate {
        /// The stage.
        stage: StageId,
        /// The task's complexity.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        complexity: Option<String>,
        /// Why it is on or off.
        reason: String,
        /// The baseline, when on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        baseline: Option<Baseline>,
    },
    /// Closed loop: the dependents' tests were compared with the baseline after EVALUATE passed.
    RegressionChecked {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// Files that import the changed ones.
        dependents: Vec<String>,
        /// New failures among them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        regressions: Vec<Regression>,
        /// The `regression-detected` failure, when there are regressions.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<Box<Failure>>,
    },
    /// Closed loop, ANALYZE: what to do about the attempt's failure.
    Analyzed {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// The decision.
        analysis: Analysis,
    },
    /// Closed loop, FIX: a strategy ran.
    FixApplied {
        /// The stage.
        stage: StageId,
        /// The attempt whose failure it addressed.
        attempt: u32,
        /// What it did and found.
        fix: FixResult,
    },
    /// Closed loop, ESCALATE: the run waits for `loopwright respond`.
    LoopEscalated {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// Why.
        reason: String,
    },
    /// Closed loop, DEAD LETTER: the loop gave up; the dead letter is written.
    DeadLettered {
        /// The stage.
        stage: StageId,
        /// The last attempt.
        attempt: u32,
        /// `retry_budget_exhausted` or `unrecoverable_error`.
        reason: String,
        /// In a sentence.
        detail: String,
    },
    /// What an agent attempt used: tokens (as the agent reported them, else counted) and cost.
    UsageRecorded {
        /// The stage.
        stage: StageId,
        /// The attempt.
        attempt: u32,
        /// The usage.
        usage: Usage,
    },
    /// The worktree's branch was merged back into the workspace's branch.
    WorktreeMerged {
        /// The branch.
        branch: String,
        /// How.
        how: MergeHow,
        /// The workspace's commit afterwards.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        commit: Option<String>,
    },
    /// Merging the worktree's branch back conflicts: a `merge-conflict` escalation; the
    /// worktree is kept.
    WorktreeConflict {
        /// The branch.
        branch: String,
        /// The conflicting files.
        files: Vec<String>,
    },
    /// The run ended (or paused) with this status.
    RunFinished {
        /// Final status.
        status: RunStatus,
    },
}

impl Event {
    /// The stage the event is about, if any.
    pub fn stage(&self) -> Option<&StageId> {
        match self {
            Event::ConditionEvaluated { stage, .. }
            | Event::StageSkipped { stage, .. }
            | Event::ApprovalRequested { stage }
            | Event::ApprovalGranted { stage, .. }
            | Event::ApprovalRejected { stage, .. }
            | Event::AttemptStarted { stage, .. }
            | Event::ProcessStarted { stage, .. }
            | Event::AttemptSucceeded { stage, .. }
            | Event::AttemptFailed { stage, .. }
            | Event::RetryScheduled { stage, .. }
            | Event::AgentFellBack { stage, .. }
            | Event::CandidateStarted { stage, .. }
            | Event::CandidateEnded { stage, .. }
            | Event::CandidateChosen { stage, .. }
            | Event::StageFailed { stage, .. }
            | Event::FeedbackChecked { stage, .. }
            | Event::SnapshotTaken { stage, .. }
            | Event::SnapshotFailed { stage, .. }
            | Event::LayerMade { stage, .. }
            | Event::LayerDropped { stage, .. }
            | Event::NetworkRefused { stage, .. }
            | Event::RepositoryRepaired { stage, .. }
            | Event::SnapshotRestored { stage, .. }
            | Event::ChangesCommitted { stage, .. }
            | Event::StageRolledBack { stage, .. }
            | Event::EscalationAnswered { stage, .. }
            | Event::Generated { stage, .. }
            | Event::Validated { stage, .. }
            | Event::Evaluated { stage, .. }
            | Event::RegressionGate { stage, .. }
            | Event::RegressionChecked { stage, .. }
            | Event::Analyzed { stage, .. }
            | Event::FixApplied { stage, .. }
            | Event::LoopEscalated { stage, .. }
            | Event::DeadLettered { stage, .. }
            | Event::UsageRecorded { stage, .. }
            | Event::LimitWaiting { stage, .. }
            | Event::LimitTaken { stage, .. }
            | Event::CiEscalated { stage, .. }
            | Event::CiRetried { target: stage, .. }
            | Event::CommitsKept { stage, .. } => Some(stage),
            Event::RunInterrupted { stage, .. } | Event::RunCancelled { stage, .. } => stage.as_ref(),
            Event::RunStarted(_)
            | Event::RunFinished { .. }
            | Event::RunResumed { .. }
            | Event::RunQueued { .. }
            | Event::CancelRequested { .. }
            | Event::RollbackStarted { .. }
            | Event::RollbackFinished { .. }
            | Event::WorktreeMerged { .. }
            | Event::WorktreeConflict { .. }
            | Event::SandboxUnavailable { .. }
            | Event::Delivered(_)
            | Event::DeliveryFailed { .. }
            | Event::CiReported { .. }
            | Event::CiAwaited { .. }
            | Event::ReviewReceived { .. }
            | Event::ApprovalReceived { .. }
            | Event::ReviewAwaited { .. }
            | Event::HeadMoved { .. }
            | Event::Merged { .. }
            | Event::MergeFailed { .. }
            | Event::FailureReported { .. }
            | Event::CheckoutFailed { .. } => None,
        }
    }

    /// How many times workers try to make a run's work tree before the run fails.
    pub const CHECKOUT_TRIES: u32 = 5;

    /// Every event type's name, as [`Event::kind`] gives it (the dashboard listens for each).
    pub const KINDS: &[&str] = &[
        "run_started",
        "condition_evaluated",
        "stage_skipped",
        "approval_requested",
        "approval_granted",
        "approval_rejected",
        "attempt_started",
        "process_started",
        "attempt_succeeded",
        "attempt_failed",
        "retry_scheduled",
        "agent_fell_back",
        "candidate_started",
        "candidate_ended",
        "candidate_chosen",
        "stage_failed",
        "feedback_checked",
        "snapshot_taken",
        "snapshot_failed",
        "layer_made",
        "layer_dropped",
        "network_refused",
        "sandbox_unavailable",
        "repository_repaired",
        "snapshot_restored",
        "changes_committed",
        "rollback_started",
        "stage_rolled_back",
        "rollback_finished",
        "escalation_answered",
        "run_interrupted",
        "run_queued",
        "limit_waiting",
        "limit_taken",
        "commits_kept",
        "checkout_failed",
        "run_resumed",
        "cancel_requested",
        "run_cancelled",
        "run_finished",
        "generated",
        "validated",
        "evaluated",
        "regression_gate",
        "regression_checked",
        "analyzed",
        "fix_applied",
        "loop_escalated",
        "dead_lettered",
        "usage_recorded",
        "worktree_merged",
        "worktree_conflict",
        "delivered",
        "delivery_failed",
        "ci_reported",
        "ci_awaited",
        "review_received",
        "ci_retried",
        "ci_escalated",
        "approval_received",
        "review_awaited",
        "head_moved",
        "merged",
        "merge_failed",
        "failure_reported",
    ];

    /// The event's type name, as stored.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::RunStarted(_) => "run_started",
            Event::ConditionEvaluated { .. } => "condition_evaluated",
            Event::StageSkipped { .. } => "stage_skipped",
            Event::ApprovalRequested { .. } => "approval_requested",
            Event::ApprovalGranted { .. } => "approval_granted",
            Event::ApprovalRejected { .. } => "approval_rejected",
            Event::AttemptStarted { .. } => "attempt_started",
            Event::ProcessStarted { .. } => "process_started",
            Event::AttemptSucceeded { .. } => "attempt_succeeded",
            Event::AttemptFailed { .. } => "attempt_failed",
            Event::RetryScheduled { .. } => "retry_scheduled",
            Event::AgentFellBack { .. } => "agent_fell_back",
            Event::CandidateStarted { .. } => "candidate_started",
            Event::CandidateEnded { .. } => "candidate_ended",
            Event::CandidateChosen { .. } => "candidate_chosen",
            Event::StageFailed { .. } => "stage_failed",
            Event::FeedbackChecked { .. } => "feedback_checked",
            Event::SnapshotTaken { .. } => "snapshot_taken",
            Event::SnapshotFailed { .. } => "snapshot_failed",
            Event::LayerMade { .. } => "layer_made",
            Event::LayerDropped { .. } => "layer_dropped",
            Event::NetworkRefused { .. } => "network_refused",
            Event::SandboxUnavailable { .. } => "sandbox_unavailable",
            Event::RepositoryRepaired { .. } => "repository_repaired",
            Event::SnapshotRestored { .. } => "snapshot_restored",
            Event::ChangesCommitted { .. } => "changes_committed",
            Event::RollbackStarted { .. } => "rollback_started",
            Event::StageRolledBack { .. } => "stage_rolled_back",
            Event::RollbackFinished { .. } => "rollback_finished",
            Event::EscalationAnswered { .. } => "escalation_answered",
            Event::RunInterrupted { .. } => "run_interrupted",
            Event::RunQueued { .. } => "run_queued",
            Event::LimitWaiting { .. } => "limit_waiting",
            Event::LimitTaken { .. } => "limit_taken",
            Event::CommitsKept { .. } => "commits_kept",
            Event::CheckoutFailed { .. } => "checkout_failed",
            Event::RunResumed { .. } => "run_resumed",
            Event::CancelRequested { .. } => "cancel_requested",
            Event::RunCancelled { .. } => "run_cancelled",
            Event::RunFinished { .. } => "run_finished",
            Event::Generated { .. } => "generated",
            Event::Validated { .. } => "validated",
            Event::Evaluated { .. } => "evaluated",
            Event::RegressionGate { .. } => "regression_gate",
            Event::RegressionChecked { .. } => "regression_checked",
            Event::Analyzed { .. } => "analyzed",
            Event::FixApplied { .. } => "fix_applied",
            Event::LoopEscalated { .. } => "loop_escalated",
            Event::DeadLettered { .. } => "dead_lettered",
            Event::UsageRecorded { .. } => "usage_recorded",
            Event::WorktreeMerged { .. } => "worktree_merged",
            Event::WorktreeConflict { .. } => "worktree_conflict",
            Event::Delivered(_) => "delivered",
            Event::DeliveryFailed { .. } => "delivery_failed",
            Event::CiReported { .. } => "ci_reported",
            Event::CiAwaited { .. } => "ci_awaited",
            Event::ReviewReceived { .. } => "review_received",
            Event::CiRetried { .. } => "ci_retried",
            Event::CiEscalated { .. } => "ci_escalated",
            Event::ApprovalReceived { .. } => "approval_received",
            Event::ReviewAwaited { .. } => "review_awaited",
            Event::HeadMoved { .. } => "head_moved",
            Event::Merged { .. } => "merged",
            Event::MergeFailed { .. } => "merge_failed",
            Event::FailureReported { .. } => "failure_reported",
        }
    }

    /// The person this event names as having acted on the run: who started or re-ran it (from
    /// the daemon), approved, rejected, answered, asked to cancel or to resume it. A gate
    /// approved up front by the run's own `--yes` names nobody.
    pub fn person(&self) -> Option<&str> {
        match self {
            Event::RunStarted(started) => started.by.as_deref(),
            Event::RunResumed { by, .. } => by.as_deref(),
            Event::ApprovalGranted { by, .. } if by == AUTO_APPROVED_BY => None,
            Event::ApprovalGranted { by, .. }
            | Event::ApprovalRejected { by, .. }
            | Event::ReviewReceived { by, .. }
            | Event::ApprovalReceived { by, .. }
            | Event::EscalationAnswered { by, .. }
            | Event::CancelRequested { by, .. } => Some(by),
            _ => None,
        }
    }

    /// True when the event is the run at work (it left the queue): anything but its start,
    /// its queueing, and its ending while still queued.
    pub fn is_work(&self) -> bool {
        !matches!(
            self,
            Event::RunStarted(_)
                | Event::RunQueued {}
                | Event::CancelRequested { .. }
                | Event::RunCancelled { .. }
                | Event::RunFinished { .. }
        )
    }

    /// The run status this event moves the run to, when it changes it.
    pub fn run_status(&self) -> Option<RunStatus> {
        match self {
            Event::RunStarted(_) | Event::ApprovalGranted { .. } | Event::RunResumed { .. } => Some(RunStatus::Running),
            Event::RunInterrupted { .. } => Some(RunStatus::Interrupted),
            Event::RunQueued { .. } | Event::LimitWaiting { .. } => Some(RunStatus::Queued),
            Event::LimitTaken { .. } => Some(RunStatus::Running),
            Event::RunCancelled { .. } => Some(RunStatus::Cancelled),
            Event::ApprovalRequested { .. } => Some(RunStatus::Waiting),
            Event::FeedbackChecked { action: FeedbackAction::Escalate, .. }
            | Event::LoopEscalated { .. }
            | Event::CiEscalated { .. }
            | Event::CiAwaited { .. }
            | Event::ReviewAwaited { .. }
            | Event::HeadMoved { .. }
            | Event::MergeFailed { .. }
            | Event::WorktreeConflict { .. } => Some(RunStatus::Waiting),
            Event::Delivered(d) if d.watching => Some(RunStatus::Waiting),
            // CI's result takes the run up again (it decides what follows).
            Event::CiReported { .. } | Event::ReviewReceived { .. } | Event::ApprovalReceived { .. } => {
                Some(RunStatus::Running)
            }
            Event::EscalationAnswered { answer: Answer::Abort, .. } => Some(RunStatus::Cancelled),
            Event::EscalationAnswered { .. } => Some(RunStatus::Running),
            Event::ApprovalRejected { .. } => Some(RunStatus::Rejected),
            Event::RunFinished { status } => Some(*status),
            _ => None,
        }
    }
}

/// Everything a run was started with. Enough to run it again from its journal alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStarted {
    /// Pipeline name.
    pub pipeline: String,
    /// Where the pipeline file was.
    pub pipeline_path: String,
    /// The pipeline file's text when the run started.
    pub pipeline_source: String,
    /// The task.
    pub task_id: TaskId,
    /// The task's description.
    pub task: String,
    /// `--var` values as given.
    pub vars: BTreeMap<String, String>,
    /// Initial inputs (`task_description`, `--input`).
    pub inputs: BTreeMap<String, String>,
    /// `--start-from`.
    pub start_from: Option<StageId>,
    /// `--skip`.
    pub skip: Vec<StageId>,
    /// `--yes`: approval gates of this run are approved up front.
    #[serde(default)]
    pub auto_approve: bool,
    /// Outputs of stages before `start_from`, from earlier runs of the same task.
    pub prior_outputs: BTreeMap<StageId, Outputs>,
    /// The workspace the run works in.
    pub workspace: String,
    /// The process driving the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// Prices per model when the run started (config.toml `[prices]`), for its budget.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, loopwright_spec::config::Price>,
    /// The git worktree the run works in (`run --worktree`), merged back when it succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<Worktree>,
    /// The pipeline's run budget when the run started (shown with the spend).
    #[serde(default, skip_serializing_if = "loopwright_spec::pipeline::Budget::is_unlimited")]
    pub budget: loopwright_spec::pipeline::Budget,
    /// Who started it, when a person did through the daemon (the CLI's runs name nobody).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The run this one runs again (a re-run, or a retry from a stage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_of: Option<crate::ids::RunId>,
    /// The forge issue the run's work came from, and where it is delivered (SPEC §14).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forge: Option<crate::forge::ForgeLink>,
    /// The run's trace id (32 hex), when traces were exported as it started (SPEC §15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// How a worktree's branch went back into the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeHow {
    /// The workspace's branch moved to it.
    FastForward,
    /// A merge commit joins them.
    MergeCommit,
    /// It had nothing new.
    UpToDate,
}

impl MergeHow {
    /// As written in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            MergeHow::FastForward => "fast_forward",
            MergeHow::MergeCommit => "merge_commit",
            MergeHow::UpToDate => "up_to_date",
        }
    }
}

/// A run's own git worktree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worktree {
    /// The repository it belongs to (the workspace).
    pub repo: String,
    /// Where it is checked out.
    pub path: String,
    /// Its branch (`loopwright/TASK`).
    pub branch: String,
}

/// The loopwright process driving a run: its pid and start time (clock ticks since boot),
/// which together name one process even after the pid is reused, and its machine.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks since boot (`/proc/PID/stat` field 22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    /// The process is a daemon (`loopwright serve`): after a crash, the next daemon of the
    /// workspace takes the run up again (SPEC §9 "Recovery").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub daemon: bool,
    /// The machine it runs on (none in journals older than workers: this machine's). A
    /// process on another machine cannot be looked at from here: it counts as alive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The worker driving the run under a lease (`loopwright worker`), if one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}

/// What a restore put back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreCounts {
    /// Modified files restored.
    pub restored: usize,
    /// Deleted files recreated.
    pub recreated: usize,
    /// Created files removed.
    pub removed: usize,
    /// Changes that could not be undone (files recorded by their stat only, folders compared
    /// by fingerprint).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unrestorable: Vec<String>,
    /// Commits a branch pointed to before it was put back, kept under `refs/loopwright/undone/`
    /// (`REF was COMMIT`): a restore never discards a commit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<String>,
}

/// The outcome of a rollback (of one stage, or overall).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RollbackStatus {
    /// Done.
    Success,
    /// Some of it done.
    Partial,
    /// Not done.
    Failed,
    /// Waits for a human (manual steps).
    Pending,
}

impl RollbackStatus {
    /// The name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RollbackStatus::Success => "success",
            RollbackStatus::Partial => "partial",
            RollbackStatus::Failed => "failed",
            RollbackStatus::Pending => "pending",
        }
    }
}

/// What a feedback check decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum FeedbackAction {
    /// No blocking items: go on.
    Continue,
    /// Blocking items: run these stages again, from the target, with this brief.
    ReImplement {
        /// The implementation stage to run again.
        target: StageId,
        /// The stages reset, from the target to the review.
        reset: Vec<StageId>,
        /// What the target is told to fix.
        brief: String,
    },
    /// Blocking items after the last iteration: a human decides.
    Escalate,
    /// A human accepted the review as it is.
    Accepted,
}

/// Tokens and cost of one agent attempt.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Answer tokens.
    pub output_tokens: u64,
    /// Counted by loopwright (o200k) because the agent reported none.
    #[serde(default)]
    pub estimated: bool,
    /// The model, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Cost in US dollars, when the model has a price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Time spent waiting out the API's rate limits (not a failure).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub quota_wait_ms: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where a person's answer came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// The dashboard, in a browser.
    Dashboard,
    /// `loopwright approve`, `reject`, `respond` or a run's own prompt.
    Cli,
    /// The REST API with a token.
    Api,
    /// A one-tap link from a notification.
    Link,
    /// A comment on the forge (GitHub).
    Forge,
}

impl Via {
    /// The channel as written in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Dashboard => "dashboard",
            Via::Cli => "cli",
            Via::Api => "api",
            Via::Link => "link",
            Via::Forge => "forge",
        }
    }
}

/// A human's answer to an escalation (seed 001).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Answer {
    /// Try again.
    Retry,
    /// Try again with this instruction.
    Fix {
        /// The instruction.
        text: String,
    },
    /// Accept and continue.
    Skip,
    /// Stop the run.
    Abort,
}

/// What a condition gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum ConditionOutcome {
    /// Run the stage.
    True,
    /// Skip the stage.
    False,
    /// Skip the stage: it reads the output of a stage that was skipped or not run.
    ReadsSkippedStage {
        /// That stage.
        stage: StageId,
    },
    /// The expression failed to evaluate (e.g. compared a text with a number).
    Error {
        /// The evaluator's message.
        message: String,
    },
}

/// Why a stage was not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// Its condition was false.
    ConditionFalse,
    /// It was named with `--skip`.
    SkipList,
    /// A human answered its escalation with `skip`.
    EscalationSkip,
    /// It judges another stage's candidates (`select: {judge: …}`): it runs only as their judge.
    Judge,
}

impl SkipReason {
    /// The name used in result JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::ConditionFalse => "condition_false",
            SkipReason::SkipList => "skip_list",
            SkipReason::EscalationSkip => "escalation_skip",
            SkipReason::Judge => "judge",
        }
    }
}

/// The kinds of stage failure (seed 004: retryable or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The stage ran past `timeout_minutes`.
    Timeout,
    /// The stage's process exited non-zero or died by a signal.
    ExecutionError,
    /// A passing fault (network, rate limit).
    TransientError,
    /// The stage ran but did not produce every declared output.
    PartialFailure,
    /// The stage cannot run as configured (program not found, runner unavailable).
    ValidationError,
    /// A human stopped it.
    UserAbort,
    /// A plan-mode stage changed files.
    SecurityViolation,
    /// The stage's condition could not be evaluated.
    ConditionError,
    /// A budget (tokens, cost, time, invocations) ran out.
    BudgetExceeded,
}

impl FailureKind {
    /// Seed 004: timeout, transient and partial failures (and a failing process) are retried;
    /// validation errors, user aborts and security violations never are.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            FailureKind::Timeout
                | FailureKind::ExecutionError
                | FailureKind::TransientError
                | FailureKind::PartialFailure
        )
    }

    /// The name used in events and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Timeout => "timeout",
            FailureKind::ExecutionError => "execution_error",
            FailureKind::TransientError => "transient_error",
            FailureKind::PartialFailure => "partial_failure",
            FailureKind::ValidationError => "validation_error",
            FailureKind::UserAbort => "user_abort",
            FailureKind::SecurityViolation => "security_violation",
            FailureKind::ConditionError => "condition_error",
            FailureKind::BudgetExceeded => "budget_exceeded",
        }
    }
}

/// A stage failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageError {
    /// Kind.
    pub kind: FailureKind,
    /// One line for humans.
    pub message: String,
    /// Exit code of the failing process, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The last lines of its output (stderr, else stdout), capped.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output_tail: String,
    /// The failure pattern its output matched (SPEC §6), when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// What decided that pattern, when its output was classified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classified_by: Option<crate::closed_loop::ClassifiedBy>,
    /// Why the attempt's agent cannot fix this failure, when that is what it is (its runner
    /// knows: the provider's answer, a CLI's own words, a program not found).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unfixable: Option<Unfixable>,
}

/// What a candidate of best of N did: its checks, its change and what it cost.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CandidateResult {
    /// Its agent's process succeeded and every check passed.
    pub passed: bool,
    /// Each check, by name, and whether it passed.
    #[serde(default)]
    pub checks: Vec<(String, bool)>,
    /// The files it changed.
    #[serde(default)]
    pub files: Vec<String>,
    /// Tokens its agent used.
    #[serde(default)]
    pub tokens: u64,
    /// What they cost, when its model has a price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// How long it ran.
    #[serde(default)]
    pub duration_ms: u64,
    /// Its declared outputs (the stage's, should it win).
    #[serde(default, skip_serializing_if = "Outputs::is_empty")]
    pub outputs: Outputs,
    /// Why it failed, in one line, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The end of what it (or its failing check) printed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output_tail: String,
    /// Where its layer is kept for another machine to make again (a worker's run: the commit
    /// of what the layer changes, pushed to the fleet's repository).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
}

/// Status of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Stages are running.
    Running,
    /// Every stage succeeded or was skipped.
    Success,
    /// A stage failed for good.
    Failed,
    /// A human cancelled it.
    Cancelled,
    /// A human rejected it at an approval gate (who, in its answers).
    Rejected,
    /// It waits for a human.
    Waiting,
    /// loopwright was stopped; `resume` continues it.
    Interrupted,
    /// The daemon accepted it and will start it when a slot is free (SPEC §9).
    Queued,
}

impl RunStatus {
    /// The status as written in JSON and the store.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Success => "success",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Rejected => "rejected",
            RunStatus::Waiting => "waiting",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Queued => "queued",
        }
    }

    /// Every status.
    pub const ALL: [RunStatus; 8] = [
        RunStatus::Running,
        RunStatus::Success,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Rejected,
        RunStatus::Waiting,
        RunStatus::Interrupted,
        RunStatus::Queued,
    ];

    /// Parses a stored status.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// True when the run will not continue by itself or by `resume`.
    pub fn is_final(self) -> bool {
        matches!(self, RunStatus::Success | RunStatus::Failed | RunStatus::Cancelled | RunStatus::Rejected)
    }

    /// The process exit code for a run that ended with this status (SPEC §1).
    pub fn exit_code(self) -> u8 {
        match self {
            RunStatus::Success => 0,
            RunStatus::Failed => 1,
            RunStatus::Waiting => 3,
            // A rejection is a person stopping the run, as a cancel is.
            RunStatus::Cancelled | RunStatus::Rejected => 4,
            RunStatus::Interrupted | RunStatus::Running | RunStatus::Queued => 130,
        }
    }
}

/// An event as stored: its place in the run's journal and when it was recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// 1-based position in the run's journal.
    pub seq: u64,
    /// When it was recorded.
    pub at: jiff::Timestamp,
    /// The event.
    pub event: Event,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_serialize_with_a_type_tag() {
        let e = Event::StageSkipped { stage: StageId::parse("plan").expect("id"), reason: SkipReason::ConditionFalse };
        let json = serde_json::to_string(&e).expect("json");
        assert_eq!(json, r#"{"type":"stage_skipped","stage":"plan","reason":"condition_false"}"#);
        assert_eq!(serde_json::from_str::<Event>(&json).expect("parse"), e);
    }

    #[test]
    fn kinds_lists_every_name_kind_gives_in_its_order() {
        let source = include_str!("event.rs");
        let body = &source[source.find("pub fn kind(&self)").expect("kind")..];
        let body = &body[..body.find("\n    }\n").expect("end of kind")];
        let names: Vec<&str> = body.split("=> \"").skip(1).filter_map(|s| s.split('"').next()).collect();
        assert_eq!(names, Event::KINDS);
    }

    #[test]
    fn retryability_follows_seed() {
        let retryable: Vec<&str> = [
            FailureKind::Timeout,
            FailureKind::ExecutionError,
            FailureKind::TransientError,
            FailureKind::PartialFailure,
            FailureKind::ValidationError,
            FailureKind::UserAbort,
            FailureKind::SecurityViolation,
            FailureKind::ConditionError,
        ]
        .into_iter()
        .filter(|k| k.is_retryable())
        .map(FailureKind::as_str)
        .collect();
        assert_eq!(retryable, vec!["timeout", "execution_error", "transient_error", "partial_failure"]);
    }
}
