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
    /// Hand the run to workers instead (the store must be PostgreSQL): queued until a worker
    /// whose labels hold the pipeline's `runs_on:` claims it.
    #[serde(default)]
    pub submit: bool,
    /// With `submit`: the repository workers clone (default: the pipeline's `repo:`, else the
    /// workspace's `origin`).
    #[serde(default)]
    #[schema(max_length = 2000)]
    pub repo: Option<String>,
    /// With `submit`: the branch, tag or commit to start from (default: the workspace's branch).
    #[serde(default)]
    #[schema(max_length = 250)]
    pub base: Option<String>,
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
    #[param(value_type = Option<String>, pattern = "^(running|success|failed|cancelled|rejected|waiting|interrupted|queued)?$")]
    pub status: Option<String>,
    /// Only runs of this pipeline.
    pub pipeline: Option<String>,
    /// At most this many (default 50, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// Skip this many (paging; the total is in `X-Total-Count`).
    #[param(minimum = 0, maximum = 100000000)]
    pub offset: Option<u32>,
    /// Only runs whose task text, task id or run id contains this (ignoring case).
    #[param(max_length = 200, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub q: Option<String>,
    /// Only runs this person acted on (started, re-ran, approved, rejected, answered,
    /// cancelled or resumed).
    #[param(max_length = 100, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub by: Option<String>,
    /// Only runs created at or after this day (`2026-11-25`, UTC; an RFC 3339 time is taken
    /// too).
    #[param(format = Date)]
    pub since: Option<String>,
    /// Only runs created before this day begins (`2026-11-26`; an RFC 3339 time is taken too).
    #[param(format = Date)]
    pub until: Option<String>,
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
    /// What it was asked to achieve (absent when empty).
    pub task: Option<String>,
    /// When it left the queue and began to work (absent while queued).
    pub running_at: Option<String>,
    /// Who acted on it, each once (absent when nobody did).
    pub people: Option<Vec<String>>,
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

/// `POST /api/runs/{run}/rerun`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rerun {
    /// Start at this stage (a retry from a stage); the earlier stages' outputs come from the
    /// journal of the same task. Default: the first stage.
    #[serde(default)]
    #[schema(max_length = 64, pattern = "^[a-z][a-z0-9_]*$")]
    pub from: Option<String>,
    /// Who asks (ignored when the token is a person's; default `api`).
    #[serde(default)]
    #[schema(max_length = 100, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub by: Option<String>,
}

/// `POST /api/runs/{run}/resume`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Resume {
    /// Who asks (ignored when the token is a person's; default `api`).
    #[serde(default)]
    #[schema(max_length = 100, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub by: Option<String>,
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
    /// The signal that ended it.
    #[serde(default)]
    pub signal: Option<Signal>,
    /// The check's type (`lint`, `format`, `type`, `test`, `build`, `syntax`, …).
    #[serde(default)]
    #[schema(max_length = 64)]
    pub check_type: Option<String>,
    /// loopwright's own timeout ended it.
    #[serde(default)]
    pub timed_out: bool,
}

/// A signal that can end a command, by its name (`SIGKILL`): one of the engine's list, which
/// the schema enumerates.
#[derive(Debug, Clone, Copy)]
pub struct Signal(pub &'static str);

impl<'de> Deserialize<'de> for Signal {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let name = String::deserialize(d)?;
        let known = loopwright_engine::patterns::signal_names().iter().find(|n| **n == name);
        known.map(|n| Signal(n)).ok_or_else(|| D::Error::custom(format!("`{name}` is not a signal name (SIGKILL)")))
    }
}

impl utoipa::PartialSchema for Signal {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(loopwright_engine::patterns::signal_names().iter().copied()))
            .description(Some("A signal's name"))
            .into()
    }
}

impl utoipa::ToSchema for Signal {}

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

/// `POST /api/sessions/{id}/task-auto` (seed 002's body; `auto start` sends it to a daemon).
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StartAuto {
    /// The task module: a directory inside the workspace holding `.target.md` and `.index.md`
    /// (`loopwright auto init`), relative to the workspace's root or absolute.
    #[schema(min_length = 1)]
    pub task_dir: String,
    /// Iterations before the loop is stopped (default `[auto] max_iterations`, 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub max_iterations: Option<u32>,
    /// Minutes before the loop is stopped, quota waits excluded (default `[auto]
    /// timeout_minutes`, 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0)]
    pub timeout_minutes: Option<f64>,
    /// The agent: an agent file's name or a preset (default: the workspace's default runner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Seconds between two looks at the agent's screen (default `[auto] heartbeat_seconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(exclusive_minimum = 0)]
    pub heartbeat_seconds: Option<f64>,
}

/// A verification command the supervisor ran when the loop said it was done.
#[derive(Debug, Serialize, ToSchema)]
pub struct AutoCheck {
    /// The command.
    pub command: String,
    /// Its exit code (null: ended by a signal or its deadline).
    pub exit_code: Option<i32>,
    /// True when it passed.
    pub passed: bool,
    /// The end of its output.
    pub output_tail: String,
}

/// An auto loop's status object (SPEC §10), as `auto status --json` prints it.
#[derive(Debug, Serialize, ToSchema)]
pub struct AutoLoop {
    /// Checks the agent added after the loop started, waiting for a person's approval.
    pub checks_to_approve: Vec<String>,
    /// The session.
    pub session_name: String,
    /// The task module (absolute).
    pub task_dir: String,
    /// `running`, `needs_human`, `quota_wait`, `complete`, `blocked`, `stopped` or `failed`.
    pub status: String,
    /// The agent.
    pub agent: String,
    /// Iterations completed.
    pub iteration: u64,
    /// `maxIterations`.
    pub max_iterations: u64,
    /// Seconds supervised, quota waits excluded.
    pub elapsed_s: f64,
    /// `timeoutMinutes` in seconds.
    pub timeout_s: f64,
    /// The latest signal's step.
    pub step: String,
    /// Its result.
    pub result: String,
    /// What the agent runs next.
    pub next: String,
    /// Its checkpoint.
    pub checkpoint: String,
    /// When the latest valid signal came.
    pub last_signal_at: Option<String>,
    /// Unchanged screens in a row.
    pub stall_count: u32,
    /// Recoveries in this iteration.
    pub recovery_count_step: u32,
    /// Recoveries in all.
    pub recovery_count_total: u32,
    /// Restarts of the agent.
    pub restart_count: u32,
    /// When the current quota wait began.
    pub quota_wait_since: Option<String>,
    /// When the quota resets.
    pub quota_resets_at: Option<String>,
    /// The agent's own conversation id.
    pub agent_session_id: Option<String>,
    /// Why the loop was stopped: `timeout`, `max_iterations`, `user_stop` or `stall_limit`.
    pub stop_reason: Option<String>,
    /// When the loop started.
    pub started_at: String,
    /// What a person must look at (status `needs_human`), with the screen excerpt.
    pub needs_human: Option<String>,
    /// The verification checks, latest run.
    pub checks: Vec<AutoCheck>,
    /// Seconds spent in quota waits.
    pub quota_paused_s: f64,
    /// When the current wait for a person (`needs_human`) began: not counted against the
    /// timeout.
    pub human_wait_since: Option<String>,
    /// Seconds spent waiting for a person, the current wait not counted.
    pub human_paused_s: f64,
    /// Which loop of the session this is (keys its supervision journal).
    pub loop_id: String,
}

impl From<loopwright_auto::report::Report> for AutoReport {
    fn from(r: loopwright_auto::report::Report) -> Self {
        Self {
            session_name: r.session_name.clone(),
            status: r.status.as_str().to_owned(),
            iterations: r.iterations,
            elapsed_s: r.elapsed_s,
            waited_s: r.waited_s,
            restarts: r.restart_count,
            needs_human: r.needs_human.len(),
            cost: r.cost.clone(),
            markdown: r.to_markdown(),
            report: serde_json::to_value(&r).unwrap_or_default(),
        }
    }
}

impl From<loopwright_auto::supervisor::AutoStatus> for AutoLoop {
    fn from(s: loopwright_auto::supervisor::AutoStatus) -> Self {
        Self {
            session_name: s.session_name,
            task_dir: s.task_dir,
            status: s.status.as_str().to_owned(),
            agent: s.agent,
            iteration: s.iteration,
            max_iterations: s.max_iterations,
            elapsed_s: s.elapsed_s,
            timeout_s: s.timeout_s,
            step: s.step,
            result: s.result,
            next: s.next,
            checkpoint: s.checkpoint,
            last_signal_at: s.last_signal_at.map(|t| t.to_string()),
            stall_count: s.stall_count,
            recovery_count_step: s.recovery_count_step,
            recovery_count_total: s.recovery_count_total,
            restart_count: s.restart_count,
            quota_wait_since: s.quota_wait_since.map(|t| t.to_string()),
            quota_resets_at: s.quota_resets_at.map(|t| t.to_string()),
            agent_session_id: s.agent_session_id,
            stop_reason: s.stop_reason.map(|r| r.as_str().to_owned()),
            started_at: s.started_at.to_string(),
            needs_human: s.needs_human,
            checks: s
                .checks
                .into_iter()
                .map(|c| AutoCheck {
                    command: c.command,
                    exit_code: c.exit_code,
                    passed: c.passed,
                    output_tail: c.output_tail,
                })
                .collect(),
            quota_paused_s: s.quota_paused_s,
            human_wait_since: s.human_wait_since.map(|t| t.to_string()),
            human_paused_s: s.human_paused_s,
            loop_id: s.loop_id,
            checks_to_approve: s.checks_to_approve,
        }
    }
}

/// `GET /api/task-auto/lookup` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct LookupQuery {
    /// The task module's directory (relative to the workspace's root, or absolute).
    pub task_dir: String,
}

/// `GET /api/task-auto/lookup`.
#[derive(Debug, Serialize, ToSchema)]
pub struct AutoLookup {
    /// The session whose loop works on the directory.
    pub session_name: String,
    /// Its status.
    pub status: String,
}

/// `GET /api/sessions/{id}/task-auto/screen`: the agent's terminal now, read-only.
#[derive(Debug, Serialize, ToSchema)]
pub struct AutoScreen {
    /// The session.
    pub session_name: String,
    /// The visible rows, one line each (the last screen once the agent exited).
    pub screen: String,
    /// True while the agent runs.
    pub alive: bool,
    /// The choices of the numbered menu the agent shows, as its CLI labels them: answer one
    /// by posting its `key` to `…/task-auto/keys` (empty when no menu is shown).
    pub choices: Vec<AutoChoice>,
}

/// One choice of the menu an agent shows.
#[derive(Debug, Serialize, ToSchema)]
pub struct AutoChoice {
    /// The key that picks it (its number).
    pub key: String,
    /// Its label, as the CLI draws it.
    pub label: String,
}

/// `GET /api/sessions/{id}/task-auto/report`: the night's summary of a loop.
#[derive(Debug, Serialize, ToSchema)]
pub struct AutoReport {
    /// The session.
    pub session_name: String,
    /// The loop's status.
    pub status: String,
    /// Iterations completed.
    pub iterations: u64,
    /// Seconds supervised, waits for the provider excluded.
    pub elapsed_s: f64,
    /// Seconds waited for the provider.
    pub waited_s: f64,
    /// Restarts of the agent.
    pub restarts: usize,
    /// Times a person was needed.
    pub needs_human: usize,
    /// The cost or token use the agent's CLI printed, if it did.
    pub cost: Option<String>,
    /// The whole report as Markdown (`loopwright auto report --markdown`).
    pub markdown: String,
    /// The whole report: steps, checks, waits, recoveries, restarts, what a person was asked,
    /// what people answered and the working tree's changes since the start (`loopwright auto
    /// report --json`).
    #[schema(value_type = Object)]
    pub report: serde_json::Value,
}

/// `GET /api/task-auto/notices`: a loop needs a person, or ended.
#[derive(Debug, Serialize, ToSchema)]
pub struct AutoNotice {
    /// Its position (resume after it: `?after=` or `Last-Event-ID`).
    pub id: i64,
    /// The loop's session.
    pub session_name: String,
    /// When (RFC 3339).
    pub at: String,
    /// What.
    #[schema(value_type = String, example = "needs_human")]
    pub kind: loopwright_auto::event::NoticeKind,
    /// In words.
    pub text: String,
}

impl From<loopwright_app::ops::auto::Notice> for AutoNotice {
    fn from(n: loopwright_app::ops::auto::Notice) -> Self {
        Self { id: n.id, session_name: n.session_name, at: n.at.to_string(), kind: n.kind, text: n.text }
    }
}

/// `GET /api/task-auto/notices` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct NoticesQuery {
    /// Only notices after this position (`Last-Event-ID` does the same for streams).
    #[param(minimum = 0)]
    pub after: Option<i64>,
}

/// `GET /api/sessions/{id}/task-auto/log` query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AutoLogQuery {
    /// Only entries after this id.
    pub after: Option<i64>,
}

/// An entry of a loop's supervision journal.
#[derive(Debug, Serialize, ToSchema)]
pub struct AutoLogEntry {
    /// Its id (increasing).
    pub id: i64,
    /// When.
    pub at: String,
    /// `started`, `signal`, `signal_invalid`, `verdict`, `keys`, `needs_human`, `stall`,
    /// `quota_wait`, `quota_resume`, `exited`, `restart`, `stop_requested`, `verified`,
    /// `finished`, …
    pub kind: String,
    /// Its details (the screen excerpt it was based on, …).
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

/// `POST /api/sessions/{id}/task-auto/keys`: what a person types into the agent's terminal.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AutoKeys {
    /// The text (`1`, `y`, a sentence); may be empty with `enter`.
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub text: String,
    /// Press Enter after it. At a numbered menu the choice's number is typed alone (free text
    /// is refused there: a menu takes Enter for its highlighted choice).
    #[serde(default)]
    pub enter: bool,
    /// At a menu, a choice that approves a command or edit the policy refused is typed only when
    /// this repeats that command (or those files).
    #[serde(default)]
    #[schema(max_length = 4096)]
    pub confirm: Option<String>,
    /// Who types (default `api`).
    #[serde(default)]
    #[schema(max_length = 100, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub by: Option<String>,
}

/// `POST /api/sessions/{id}/task-auto/checks`: a person approves the checks the agent added.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AutoApproveChecks {
    /// The checks the person was shown (`checks_to_approve`): when the list changed since,
    /// nothing is approved (409).
    #[serde(default)]
    #[schema(max_items = 100)]
    pub checks: Option<Vec<String>>,
    /// Who approves (default `api`).
    #[serde(default)]
    #[schema(max_length = 100, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub by: Option<String>,
}

/// Whether a worker is at work.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    /// It said it was alive within its lease.
    Alive,
    /// Silent for longer than its lease: its runs go to other workers.
    Silent,
    /// It stopped and gave its leases back.
    Stopped,
}

/// A run a worker holds a lease on.
#[derive(Debug, Serialize, ToSchema)]
pub struct Lease {
    /// The run.
    pub run_id: String,
    /// The lease's epoch (one more with every worker that took the run).
    pub epoch: u64,
    /// When it runs out unless renewed (RFC 3339).
    pub expires_at: String,
}

/// A worker sharing the store (`GET /api/workers`).
#[derive(Debug, Serialize, ToSchema)]
pub struct Worker {
    /// Its id (`HOST-PID`).
    pub id: String,
    /// Its machine.
    pub host: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// How many runs it drives at once.
    pub slots: u32,
    /// Seconds its leases last without a heartbeat.
    pub lease_seconds: u64,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// When it last said it was alive (RFC 3339).
    pub heartbeat_at: String,
    /// When it stopped, if it did (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<String>,
    /// Alive, silent or stopped.
    pub state: WorkerState,
    /// The runs it holds leases on.
    pub leases: Vec<Lease>,
}

impl From<loopwright_app::ops::fleet::WorkerView> for Worker {
    fn from(w: loopwright_app::ops::fleet::WorkerView) -> Self {
        use loopwright_app::ops::fleet::WorkerState as S;
        Worker {
            id: w.id,
            host: w.host,
            labels: w.labels,
            slots: w.slots,
            lease_seconds: w.lease_seconds,
            started_at: w.started_at.to_string(),
            heartbeat_at: w.heartbeat_at.to_string(),
            stopped_at: w.stopped_at.map(|t| t.to_string()),
            state: match w.state {
                S::Alive => WorkerState::Alive,
                S::Silent => WorkerState::Silent,
                S::Stopped => WorkerState::Stopped,
            },
            leases: w
                .leases
                .into_iter()
                .map(|l| Lease {
                    run_id: l.run_id.to_string(),
                    epoch: l.epoch.get(),
                    expires_at: l.expires_at.to_string(),
                })
                .collect(),
        }
    }
}

/// A dead letter in the list (`GET /api/dead-letters`, as `dead-letters list --json`).
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetterRow {
    /// The task the closed loop gave up on.
    pub task_id: String,
    /// Its stage.
    pub stage: String,
    /// The run.
    pub run_id: String,
    /// The last failure's pattern.
    pub final_pattern: String,
    /// Attempts made.
    pub total_attempts: u64,
    /// When (RFC 3339).
    pub blocked_at: String,
    /// Why the loop gave up.
    pub blocked_reason: String,
    /// `pattern:extension:error`, what similar failures share.
    pub error_signature: String,
    /// Dead letters of other tasks with the same signature.
    pub similar_failures: u64,
}

impl From<loopwright_app::ops::dead_letters::Row> for DeadLetterRow {
    fn from(r: loopwright_app::ops::dead_letters::Row) -> Self {
        Self {
            task_id: r.task_id,
            stage: r.stage,
            run_id: r.run_id,
            final_pattern: r.final_pattern,
            total_attempts: r.total_attempts,
            blocked_at: r.blocked_at,
            blocked_reason: r.blocked_reason,
            error_signature: r.error_signature,
            similar_failures: r.similar_failures,
        }
    }
}

/// One dead letter (`GET /api/dead-letters/{task}`, as `dead-letters show TASK --json`): its
/// Markdown, and what its front matter says when it reads.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadLetter {
    /// The task.
    pub task_id: Option<String>,
    /// `pattern:extension:error`.
    pub error_signature: Option<String>,
    /// The last failure's pattern.
    pub final_pattern: Option<String>,
    /// The dead letter, whole.
    pub text: String,
}

impl From<loopwright_app::ops::dead_letters::Letter> for DeadLetter {
    fn from(l: loopwright_app::ops::dead_letters::Letter) -> Self {
        Self { task_id: l.task_id, error_signature: l.error_signature, final_pattern: l.final_pattern, text: l.text }
    }
}

/// What the classifier made of a text (`POST /api/patterns/test`, as `patterns test --json`).
#[derive(Debug, Serialize, ToSchema)]
pub struct Classification {
    /// The pattern, when one matched with enough confidence.
    pub matched_pattern: Option<String>,
    /// 0..1.
    pub confidence: f64,
    /// The fix strategy it calls for.
    #[schema(example = "analyze_then_fix")]
    pub strategy: String,
    /// That pattern's signals that matched.
    pub signals: Vec<String>,
    /// What counted, strongest first.
    pub evidence: Vec<EvidenceItem>,
    /// What decided: `pattern`, `statistical`, `agent` or `none`.
    #[schema(example = "pattern")]
    pub classified_by: String,
}

/// One piece of evidence of a classification.
#[derive(Debug, Serialize, ToSchema)]
pub struct EvidenceItem {
    /// `signal`, `exit_code`, `exit_signal`, `timeout`, `command`, `check_type`, …
    #[schema(example = "exit_code")]
    pub kind: String,
    /// What it was (a signal as written, `127`, a tool's name).
    pub value: String,
    /// How much it counted, 0..1.
    pub strength: f64,
}

impl From<loopwright_engine::patterns::Classification> for Classification {
    fn from(c: loopwright_engine::patterns::Classification) -> Self {
        Self {
            matched_pattern: c.matched_pattern,
            confidence: c.confidence,
            strategy: c.strategy.as_str().to_owned(),
            signals: c.signals,
            evidence: c
                .evidence
                .into_iter()
                .map(|e| EvidenceItem { kind: e.kind.as_str().to_owned(), value: e.value, strength: e.strength })
                .collect(),
            classified_by: c.classified_by.as_str().to_owned(),
        }
    }
}

/// An agent of the workspace (`GET /api/agents`, as `agents --json`).
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentInfo {
    /// Its name.
    pub name: String,
    /// What it is for.
    pub description: Option<String>,
    /// How it is run: `command`, `claude`, `codex`, `gemini`, `aider`, `opencode`, `openai`, `anthropic`.
    #[schema(example = "claude")]
    pub runner: String,
    /// Its argv (command runners and presets).
    pub command: Vec<String>,
    /// Its model.
    pub model: Option<String>,
    /// Its API's base URL (HTTP runners).
    pub base_url: Option<String>,
    /// The variable holding its API key.
    pub api_key_env: Option<String>,
    /// The longest answer asked for (HTTP runners).
    pub max_tokens: Option<u32>,
    /// Its sampling temperature.
    pub temperature: Option<f64>,
    /// The modes it may run in (`plan`, `agent`); all when empty.
    pub modes: Vec<String>,
    /// What it may reach in a sandbox.
    pub network: Option<AgentNetwork>,
    /// The agents that take a stage's attempt over when it cannot go on, in order.
    pub fallback: Vec<String>,
    /// Its persona (the file's body).
    pub persona: String,
    /// Its file.
    pub file: String,
}

/// What an agent may reach in a sandbox.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentNetwork {
    /// Nothing.
    None,
    /// Its model's API host.
    Model,
    /// These hosts.
    Hosts(Vec<NetworkHost>),
}

/// A host (and port) a sandboxed process may reach; `unix:/path` with port 0 for a socket.
#[derive(Debug, Serialize, ToSchema)]
pub struct NetworkHost {
    /// The name or address.
    pub host: String,
    /// The port.
    pub port: u16,
}

impl From<&loopwright_spec::Agent> for AgentInfo {
    fn from(a: &loopwright_spec::Agent) -> Self {
        use loopwright_spec::sandbox::Network;
        Self {
            name: a.name.clone(),
            description: a.description.clone(),
            runner: a.runner.as_str().to_owned(),
            command: a.command.clone(),
            model: a.model.clone(),
            base_url: a.base_url.clone(),
            api_key_env: a.api_key_env.clone(),
            max_tokens: a.max_tokens,
            temperature: a.temperature,
            modes: a.modes.iter().map(|m| m.as_str().to_owned()).collect(),
            network: a.network.as_ref().map(|n| match n {
                Network::None => AgentNetwork::None,
                Network::Model => AgentNetwork::Model,
                Network::Hosts(hosts) => AgentNetwork::Hosts(
                    hosts.iter().map(|h| NetworkHost { host: h.host.clone(), port: h.port }).collect(),
                ),
            }),
            fallback: a.fallback.clone(),
            persona: a.persona.clone(),
            file: a.file.clone(),
        }
    }
}

/// A `[[spend]]` cap and its period's use (`GET /api/spend`, as `spend --json`).
#[derive(Debug, Serialize, ToSchema)]
pub struct SpendCap {
    /// Its identity (`day:workspace`, `week:pipeline=bug-fix`).
    pub key: String,
    /// In words.
    pub shown: String,
    /// `day`, `week` or `month`.
    pub period: String,
    /// When the period began.
    #[schema(value_type = String, format = DateTime)]
    pub since: jiff::Timestamp,
    /// When it ends.
    #[schema(value_type = String, format = DateTime)]
    pub until: jiff::Timestamp,
    /// Tokens used this period.
    pub tokens_used: u64,
    /// The cap's tokens, when it has some.
    pub tokens_cap: Option<u64>,
    /// US dollars spent this period.
    pub cost_used_usd: f64,
    /// The cap's US dollars, when it has some.
    pub cost_cap_usd: Option<f64>,
    /// The larger share used, in percent (may pass 100).
    pub percent: f64,
    /// What an attempt does once it is used up: `wait` or `fail`.
    pub on_exceed: String,
}

impl From<loopwright_app::spend::CapUse> for SpendCap {
    fn from(c: loopwright_app::spend::CapUse) -> Self {
        Self {
            key: c.key,
            shown: c.shown,
            period: c.period.to_owned(),
            since: c.since,
            until: c.until,
            tokens_used: c.tokens.0,
            tokens_cap: c.tokens.1,
            cost_used_usd: c.cost_usd.0,
            cost_cap_usd: c.cost_usd.1,
            percent: c.percent,
            on_exceed: c.on_exceed.to_owned(),
        }
    }
}

/// Retry and failure metrics (`GET /api/stats`, as `stats --json`).
#[derive(Debug, Serialize, ToSchema)]
pub struct Stats {
    /// Stage runs counted.
    pub stages_run: usize,
    /// Of them, passed at the first attempt.
    pub first_attempt_success: usize,
    /// Of them, with more than one attempt.
    pub retried: usize,
    /// Of those, passed in the end.
    pub retry_success: usize,
    /// Escalations to a person.
    pub escalations: usize,
    /// Stages a person's answer skipped.
    pub skipped: usize,
    /// Escalations per stage run.
    pub escalation_rate: f64,
    /// Dead letters.
    pub dead_letters: usize,
    /// Dead letters per stage run.
    pub dead_letter_rate: f64,
    /// VALIDATE phases run.
    pub pre_validation_runs: usize,
    /// Violations caught per VALIDATE phase.
    pub pre_validation_catch_rate: f64,
    /// Violations caught, by gate.
    pub most_common_pre_validation_catches: BTreeMap<String, usize>,
    /// Regression checks run.
    pub regression_checks_run: usize,
    /// Regression gates without a baseline.
    pub regression_checks_skipped: usize,
    /// Regression checks that found regressions.
    pub regressions_detected: usize,
    /// By failure pattern.
    pub by_pattern: BTreeMap<String, PatternStats>,
    /// Every stage run counted, newest run first.
    pub stages: Vec<StageRunStats>,
    /// By fix strategy.
    pub by_strategy: BTreeMap<String, StrategyStats>,
    /// Each (pattern, strategy) pair's measured success.
    pub strategy_effectiveness: Vec<PairStats>,
    /// Pattern-learning candidates, by what a person did with them.
    pub candidate_patterns: CandidateStats,
}

/// A failure pattern's figures.
#[derive(Debug, Serialize, ToSchema)]
pub struct PatternStats {
    /// Failed attempts classified as it.
    pub occurrences: usize,
    /// Of the stage runs it occurred in, the share that passed in the end.
    pub success_rate: f64,
    /// Their attempts, on average.
    pub avg_attempts: f64,
}

/// One stage of one run.
#[derive(Debug, Serialize, ToSchema)]
pub struct StageRunStats {
    /// The run.
    pub run_id: String,
    /// The stage.
    pub stage: String,
    /// Its attempts.
    pub attempts: u32,
    /// How it ended (`success`, `success (retry worked)`, `dead_letter`, `escalated`, …).
    pub result: String,
    /// The failure pattern of each failed attempt.
    pub patterns: Vec<String>,
}

/// A fix strategy's figures.
#[derive(Debug, Serialize, ToSchema)]
pub struct StrategyStats {
    /// Times applied.
    pub applied: usize,
    /// Times the attempt after it passed.
    pub succeeded: usize,
    /// `succeeded / applied`.
    pub success_rate: f64,
}

/// A (pattern, strategy) pair's measured success.
#[derive(Debug, Serialize, ToSchema)]
pub struct PairStats {
    /// The failure pattern.
    pub pattern: String,
    /// The strategy.
    pub strategy: String,
    /// Fixes whose next attempt has an outcome.
    pub attempts: u32,
    /// Of those, the next attempt passed.
    pub succeeded: u32,
    /// `succeeded / attempts`.
    pub success_rate: f64,
    /// `too_few`, `flagged`, `measured` or `reliable`.
    #[schema(example = "too_few")]
    pub verdict: String,
}

/// Pattern-learning candidates.
#[derive(Debug, Serialize, ToSchema)]
pub struct CandidateStats {
    /// Waiting for review.
    pub proposed: usize,
    /// Accepted.
    pub accepted: usize,
    /// Rejected.
    pub rejected: usize,
}

impl From<loopwright_app::ops::stats::Report> for Stats {
    fn from(r: loopwright_app::ops::stats::Report) -> Self {
        Self {
            stages_run: r.stages_run,
            first_attempt_success: r.first_attempt_success,
            retried: r.retried,
            retry_success: r.retry_success,
            escalations: r.escalations,
            skipped: r.skipped,
            escalation_rate: r.escalation_rate,
            dead_letters: r.dead_letters,
            dead_letter_rate: r.dead_letter_rate,
            pre_validation_runs: r.pre_validation_runs,
            pre_validation_catch_rate: r.pre_validation_catch_rate,
            most_common_pre_validation_catches: r.most_common_pre_validation_catches,
            regression_checks_run: r.regression_checks_run,
            regression_checks_skipped: r.regression_checks_skipped,
            regressions_detected: r.regressions_detected,
            by_pattern: r
                .by_pattern
                .into_iter()
                .map(|(p, s)| {
                    (
                        p,
                        PatternStats {
                            occurrences: s.occurrences,
                            success_rate: s.success_rate,
                            avg_attempts: s.avg_attempts,
                        },
                    )
                })
                .collect(),
            stages: r
                .stages
                .into_iter()
                .map(|s| StageRunStats {
                    run_id: s.run_id,
                    stage: s.stage,
                    attempts: s.attempts,
                    result: s.result,
                    patterns: s.patterns,
                })
                .collect(),
            by_strategy: r
                .by_strategy
                .into_iter()
                .map(|(n, s)| {
                    (n, StrategyStats { applied: s.applied, succeeded: s.succeeded, success_rate: s.success_rate })
                })
                .collect(),
            strategy_effectiveness: r
                .strategy_effectiveness
                .into_iter()
                .map(|p| PairStats {
                    pattern: p.pattern,
                    strategy: p.strategy.as_str().to_owned(),
                    attempts: p.attempts,
                    succeeded: p.succeeded,
                    success_rate: p.success_rate,
                    verdict: p.verdict.as_str().to_owned(),
                })
                .collect(),
            candidate_patterns: CandidateStats {
                proposed: r.candidate_patterns.proposed,
                accepted: r.candidate_patterns.accepted,
                rejected: r.candidate_patterns.rejected,
            },
        }
    }
}
