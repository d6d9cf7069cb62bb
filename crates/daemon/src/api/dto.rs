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
    #[schema(min_length = 1, max_length = 100, pattern = "^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")]
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
    #[param(value_type = Option<String>, pattern = "^(running|success|failed|cancelled|waiting|interrupted|queued)?$")]
    pub status: Option<String>,
    /// Only runs of this pipeline.
    pub pipeline: Option<String>,
    /// At most this many (default 50, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
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
    #[schema(max_length = 100, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub by: Option<String>,
    /// A note kept with the answer.
    #[serde(default)]
    pub comment: Option<String>,
    /// With reject: roll back the completed stages that declare a `rollback`.
    #[serde(default)]
    pub rollback: bool,
}

/// `POST /api/runs/{run}/respond`.
#[derive(Debug, Default, Deserialize)]
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
    #[schema(max_length = 100, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
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
    #[serde(default, deserialize_with = "integral")]
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

/// An optional `i32` that JSON may write as `3` or `3.0` (both are integers to JSON Schema).
fn integral<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i32>, D::Error> {
    use serde::de::Error as _;
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else { return Ok(None) };
    let v = n.as_i64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 1e15).map(|f| f as i64));
    v.and_then(|v| i32::try_from(v).ok()).map(Some).ok_or_else(|| D::Error::custom(format!("{n} is not an exit code")))
}

/// `retry`, `skip` or `abort` with no text, or `fix` with the instruction: two shapes.
impl utoipa::PartialSchema for Respond {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
        let by = || {
            ObjectBuilder::new()
                .schema_type(utoipa::openapi::schema::SchemaType::from_iter([Type::String, Type::Null]))
                .max_length(Some(100))
                .pattern(Some("^[^\\u0000-\\u001f\\u007f-\\u009f]*$"))
                .description(Some("Who answers (default `api`)"))
        };
        let plain = ObjectBuilder::new()
            .property(
                "answer",
                ObjectBuilder::new().schema_type(Type::String).enum_values(Some(["retry", "skip", "abort"])),
            )
            .required("answer")
            .property("text", ObjectBuilder::new().schema_type(Type::Null))
            .property("by", by())
            .additional_properties(Some(utoipa::openapi::schema::AdditionalProperties::FreeForm(false)));
        let fix = ObjectBuilder::new()
            .property("answer", ObjectBuilder::new().schema_type(Type::String).enum_values(Some(["fix"])))
            .required("answer")
            .property(
                "text",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .pattern(Some("\\S"))
                    .description(Some("The instruction for the next attempt")),
            )
            .required("text")
            .property("by", by())
            .additional_properties(Some(utoipa::openapi::schema::AdditionalProperties::FreeForm(false)));
        OneOfBuilder::new().item(plain).item(fix).into()
    }
}

impl utoipa::ToSchema for Respond {}
