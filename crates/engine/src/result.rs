//! The result of a run (SPEC §2): what `run --json` and `status RUN --json` print.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::RunStatus;
use crate::state::{RunState, StageStatus};

/// A run's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineResult {
    /// The run.
    pub run_id: String,
    /// The pipeline's name.
    pub pipeline: String,
    /// The task.
    pub task_id: String,
    /// `success | failed | cancelled | waiting | running | interrupted`.
    pub status: RunStatus,
    /// Stages in execution order (those before `--start-from` are not listed).
    pub stages_executed: Vec<StageResult>,
    /// Merged outputs of the stages: key -> text.
    pub artifacts: BTreeMap<String, String>,
    /// The stage that failed for good.
    pub failed_stage: Option<String>,
    /// Whether rollback ran.
    pub rollback_performed: bool,
    /// What the run waits for, when `status` is `waiting`.
    pub waiting: Option<Waiting>,
    /// Where a run from a forge came from and what it delivered there (SPEC §14).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forge: Option<ForgeResult>,
    /// The answers people gave its gates and escalations: who, what, when and through what
    /// (`via`: dashboard, cli, api, link, forge); absent when nobody answered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<crate::state::GivenAnswer>,
}

/// A run from a forge: its issue, its pull request and each CI round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgeResult {
    /// `OWNER/NAME`.
    pub repo: String,
    /// The issue it came from.
    pub issue: u64,
    /// Where a person reads it.
    pub issue_url: String,
    /// Its pull request, once delivered.
    pub pull_request: Option<PullRequestResult>,
    /// CI's result on each round's head, oldest first.
    pub ci_rounds: Vec<CiRoundResult>,
    /// loopwright merged the pull request (or enabled GitHub's auto-merge for it).
    #[serde(default)]
    pub merged: bool,
}

/// A delivered pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullRequestResult {
    /// Its number.
    pub number: u64,
    /// Where a person opens it.
    pub url: String,
    /// The head commit pushed last.
    pub head: String,
}

/// One round of CI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CiRoundResult {
    /// The round.
    pub round: u32,
    /// The head it ran on.
    pub head: String,
    /// Whether every check passed.
    pub passed: bool,
    /// The check that failed.
    pub check: Option<String>,
    /// Its failure's pattern.
    pub category: Option<String>,
}

/// One stage in a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageResult {
    /// The stage.
    pub id: String,
    /// `success | failed | skipped | timeout | cancelled | rolled_back` (or `running`/`pending`
    /// while the run goes on).
    pub status: String,
    /// Attempts made.
    pub attempts: u32,
    /// Time spent in attempts.
    pub duration_ms: u64,
    /// `condition_false | skip_list | null`.
    pub reason: Option<String>,
    /// Closed-loop summary, on stages that ran the closed loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_loop: Option<serde_json::Value>,
}

/// What a waiting run waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// A gate's answer or an escalation's.
    pub kind: WaitKind,
    /// The stage.
    pub stage: String,
}

/// What a person is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// To approve or reject a gate.
    Approval,
    /// To answer an escalation: retry, fix, skip or abort.
    Escalation,
    /// Nobody: the pull request's CI, on the head it delivered.
    Ci,
    /// A person to approve the pull request's tested head (`merge = "auto"`).
    Review,
}

impl WaitKind {
    /// Its name in the result JSON (`approval`).
    pub fn as_str(self) -> &'static str {
        match self {
            WaitKind::Approval => "approval",
            WaitKind::Escalation => "escalation",
            WaitKind::Ci => "ci",
            WaitKind::Review => "review",
        }
    }
}

impl PipelineResult {
    /// The result of a run as its state stands.
    pub fn from_state(state: &RunState) -> Self {
        let started = state.started.as_ref();
        let mut artifacts = BTreeMap::new();
        for s in &state.stages {
            if s.status == StageStatus::Success {
                artifacts.extend(s.outputs.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        Self {
            run_id: state.run_id.to_string(),
            pipeline: started.map(|s| s.pipeline.clone()).unwrap_or_default(),
            task_id: started.map(|s| s.task_id.to_string()).unwrap_or_default(),
            status: state.status,
            stages_executed: state
                .stages
                .iter()
                .map(|s| StageResult {
                    id: s.id.to_string(),
                    status: s.status.as_str().to_owned(),
                    attempts: s.attempts,
                    duration_ms: s.duration_ms,
                    reason: s.skip_reason.map(|r| r.as_str().to_owned()),
                    closed_loop: s.closed.as_deref().filter(|l| !l.iterations.is_empty()).map(|l| {
                        serde_json::json!({
                            "status": l.status(),
                            "attempts": l.iterations.len(),
                            "failure_pattern": if l.succeeded { None } else { l.last_pattern() },
                            "escalation_reason": l.escalation_reason,
                        })
                    }),
                })
                .collect(),
            artifacts,
            failed_stage: state.failed_stage.as_ref().map(ToString::to_string),
            rollback_performed: state.rollback.as_ref().is_some_and(|r| r.overall.is_some()),
            waiting: state
                .waiting_for_approval()
                .map(|s| Waiting { kind: WaitKind::Approval, stage: s.id.to_string() })
                .or_else(|| {
                    state
                        .waiting_for_escalation()
                        .map(|s| Waiting { kind: WaitKind::Escalation, stage: s.id.to_string() })
                })
                .or_else(|| {
                    let link = state.forge_link()?;
                    let kind = if state.forge.waiting_for_ci() {
                        WaitKind::Ci
                    } else if state.status == crate::event::RunStatus::Waiting
                        && link.merge.is_some()
                        && !state.forge.merged
                    {
                        WaitKind::Review
                    } else {
                        return None;
                    };
                    Some(Waiting { kind, stage: link.stage.to_string() })
                }),
            forge: state.forge_link().map(|link| forge_result(link, state)),
            answers: state.answers.clone(),
        }
    }
}

fn forge_result(link: &crate::forge::ForgeLink, state: &RunState) -> ForgeResult {
    use crate::forge::CiOutcome;
    ForgeResult {
        repo: link.repo.clone(),
        issue: link.issue,
        issue_url: link.issue_url.clone(),
        pull_request: state.forge.change().map(|d| PullRequestResult {
            number: d.number,
            url: d.url.clone(),
            head: d.head.clone(),
        }),
        ci_rounds: state
            .forge
            .reports
            .iter()
            .map(|(round, head, outcome)| match outcome {
                CiOutcome::Passed { .. } => {
                    CiRoundResult { round: *round, head: head.clone(), passed: true, check: None, category: None }
                }
                CiOutcome::Failed { check, failure, .. } => CiRoundResult {
                    round: *round,
                    head: head.clone(),
                    passed: false,
                    check: Some(check.clone()),
                    category: failure.pattern.clone(),
                },
            })
            .collect(),
        merged: state.forge.merged,
    }
}
