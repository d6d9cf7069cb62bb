//! What goes over the wire: request and answer types apart from the domain's, so the journal's
//! types can change without changing the API (and the OpenAPI document is derived from these).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// `GET /api/health`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: String,
    /// loopwright's version.
    pub version: String,
}

/// A pipeline of the workspace, validated.
#[derive(Debug, Serialize, ToSchema)]
pub struct PipelineInfo {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its stage ids, in order.
    pub stages: Vec<String>,
    /// True when it compiles.
    pub valid: bool,
    /// Its problems.
    #[schema(value_type = Vec<Object>)]
    pub diagnostics: Vec<serde_json::Value>,
}

/// `POST /api/runs`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRun {
    /// The pipeline's name (`.loopwright/pipelines/NAME.yml`); no paths.
    pub pipeline: String,
    /// What the run should achieve.
    #[serde(default)]
    pub task: Option<String>,
    /// Reuse a task id (letters, digits, `-`, `_`, `.`).
    #[serde(default)]
    pub task_id: Option<String>,
    /// Task metadata and declared variables.
    #[serde(default)]
    pub vars: BTreeMap<String, String>,
    /// Initial inputs, by key: their text.
    #[serde(default)]
    pub inputs: BTreeMap<String, String>,
    /// Start at this stage.
    #[serde(default)]
    pub start_from: Option<String>,
    /// Stages not to run.
    #[serde(default)]
    pub skip: Vec<String>,
    /// Approve every gate up front.
    #[serde(default)]
    pub approve_all: bool,
    /// Work in a git worktree of its own.
    #[serde(default)]
    pub worktree: bool,
}

/// A run accepted, or asked to stop.
#[derive(Debug, Serialize, ToSchema)]
pub struct Accepted {
    /// The run.
    pub run_id: String,
    /// Its status now (`queued`, `running`, `cancelled`, …).
    pub status: String,
}

/// `GET /api/runs` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only runs in this status.
    pub status: Option<String>,
    /// Only runs of this pipeline.
    pub pipeline: Option<String>,
    /// At most this many (default 50, at most 1000).
    pub limit: Option<u32>,
}

/// A row of `GET /api/runs`, as `status --json` prints it.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunRow {
    /// The run.
    pub run_id: String,
    /// Its pipeline.
    pub pipeline: String,
    /// Its task.
    pub task_id: String,
    /// Its status.
    pub status: String,
    /// When it was created.
    pub created_at: String,
    /// When its last event was recorded.
    pub updated_at: String,
}

/// `GET /api/runs/{run}/events` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only events after this sequence number (`Last-Event-ID` does the same for streams).
    pub after: Option<u64>,
}

/// `POST /api/runs/{run}/approve` and `/reject`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    /// Who answers (default `api`).
    #[serde(default)]
    pub by: Option<String>,
    /// A note kept with the answer.
    #[serde(default)]
    pub comment: Option<String>,
    /// With reject: roll back the completed stages that declare a `rollback`.
    #[serde(default)]
    pub rollback: bool,
}

/// `POST /api/runs/{run}/respond`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Respond {
    /// `retry`, `skip`, `abort` or `fix`.
    pub answer: String,
    /// The instruction, for `fix`.
    #[serde(default)]
    pub text: Option<String>,
    /// Who answers (default `api`).
    #[serde(default)]
    pub by: Option<String>,
}

/// `POST /api/runs/{run}/cancel`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Cancel {
    /// Who cancels (default `api`).
    #[serde(default)]
    pub by: Option<String>,
    /// Roll back the completed stages that declare a `rollback`.
    #[serde(default)]
    pub rollback: bool,
}

/// `POST /api/patterns/test`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatternTest {
    /// The error output.
    pub text: String,
    /// The command that printed it.
    #[serde(default)]
    pub command: Option<String>,
    /// Its exit code.
    #[serde(default)]
    pub exit_code: Option<i32>,
}

/// Who answered, checked: at most 100 characters, no control characters.
pub fn who(by: Option<String>) -> Result<String, super::error::ApiError> {
    let by = by.map(|b| b.trim().to_owned()).filter(|b| !b.is_empty()).unwrap_or_else(|| "api".into());
    if by.chars().count() > 100 || by.chars().any(char::is_control) {
        return Err(super::error::ApiError::invalid("`by`: at most 100 characters, no control characters"));
    }
    Ok(by)
}
