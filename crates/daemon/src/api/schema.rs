//! The shapes of what the API answers about runs — a run's result, an attempt, an event — for
//! `/openapi.json`. The handlers send the application layer's own types (the same values the
//! CLI prints with `--json`); these types say what those look like, field by field, so a
//! client (or schemathesis) can hold every answer to them. A test serializes real values and
//! checks them against these schemas.

use std::collections::BTreeMap;

use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, SchemaType, Type};

/// A run's status: one of the journal's statuses, by name.
pub struct RunStatusName;

impl utoipa::PartialSchema for RunStatusName {
    fn schema() -> RefOr<Schema> {
        let names = loopwright_engine::RunStatus::ALL.map(loopwright_engine::RunStatus::as_str);
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(names))
            .description(Some("A run's status"))
            .into()
    }
}

impl ToSchema for RunStatusName {}

/// A run's result (SPEC §2), as `status RUN --json` prints it.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct RunResult {
    /// The run.
    run_id: String,
    /// Its pipeline.
    pipeline: String,
    /// Its task.
    task_id: String,
    /// Its status.
    status: RunStatusName,
    /// The stages it reached, in order.
    stages_executed: Vec<StageResult>,
    /// The outputs of its successful stages.
    artifacts: BTreeMap<String, String>,
    /// The stage that failed it.
    failed_stage: Option<String>,
    /// Whether earlier stages were rolled back.
    rollback_performed: bool,
    /// What it waits for, when it waits.
    waiting: Option<Waiting>,
    /// Where a run from GitHub came from and what it delivered there.
    #[schema(required = false)]
    forge: Option<ForgeResult>,
    /// The answers people gave its gates and escalations (absent when none).
    #[schema(required = false)]
    answers: Vec<GivenAnswer>,
}

/// An answer a person gave a gate or an escalation.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct GivenAnswer {
    /// The stage it answered.
    stage: String,
    /// Who answered.
    by: String,
    /// `approved`, `rejected`, `retry`, `fix`, `skip` or `abort`.
    #[schema(pattern = "^(approved|rejected|retry|fix|skip|abort)$")]
    answer: String,
    /// Where it came from: `dashboard`, `cli`, `api`, `link` or `forge` (absent in journals
    /// written before it was kept).
    #[schema(required = false, pattern = "^(dashboard|cli|api|link|forge)$")]
    via: Option<String>,
    /// When (RFC 3339).
    at: String,
}

/// A run from GitHub: its issue, its pull request and each CI round.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ForgeResult {
    /// `OWNER/NAME`.
    repo: String,
    /// The issue it came from.
    issue: u64,
    /// Where a person reads it.
    issue_url: String,
    /// Its pull request, once delivered.
    pull_request: Option<PullRequestResult>,
    /// CI's result on each round's head, oldest first.
    ci_rounds: Vec<CiRoundResult>,
    /// loopwright merged the pull request (or enabled GitHub's auto-merge for it).
    merged: bool,
}

/// A delivered pull request.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct PullRequestResult {
    /// Its number.
    number: u64,
    /// Where a person opens it.
    url: String,
    /// The head commit pushed last.
    head: String,
}

/// One round of CI.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct CiRoundResult {
    /// The round.
    round: u32,
    /// The head it ran on.
    head: String,
    /// Whether every check passed.
    passed: bool,
    /// The check that failed.
    check: Option<String>,
    /// Its failure's pattern.
    category: Option<String>,
}

/// One stage in a run's result.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct StageResult {
    /// The stage.
    id: String,
    /// `success`, `failed`, `skipped`, `timeout`, `cancelled`, `rolled_back`, `running`, `pending`.
    status: String,
    /// Attempts made.
    attempts: u32,
    /// Time spent in attempts.
    duration_ms: u64,
    /// Why it was skipped (`condition_false`, `skip_list`, `escalation_skip`, `judge`: it runs
    /// only as the judge of another stage's candidates).
    reason: Option<String>,
    /// The closed loop's summary, on stages that ran it.
    #[schema(required = false)]
    closed_loop: Option<ClosedLoopSummary>,
}

/// A closed-loop stage's summary.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ClosedLoopSummary {
    /// `success`, `failed`, `escalated` or `running`.
    status: String,
    /// Attempts made.
    attempts: u64,
    /// The last failure's pattern, when it did not succeed.
    failure_pattern: Option<String>,
    /// Why it was escalated.
    escalation_reason: Option<String>,
}

/// What a waiting run waits for.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Waiting {
    /// `approval`, `escalation`, `ci` (a pull request's CI, nobody's answer) or `review` (a
    /// person's approval of the pull request's tested head, before loopwright merges it).
    kind: String,
    /// The stage.
    stage: String,
}

/// A stage's failure.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct StageError {
    /// `timeout`, `execution_error`, `output_missing`, …
    kind: String,
    /// One line for people.
    message: String,
    /// The failing process's exit code.
    #[schema(required = false)]
    exit_code: Option<i32>,
    /// The last lines of its output.
    #[schema(required = false)]
    output_tail: Option<String>,
    /// The failure pattern its output matched.
    #[schema(required = false)]
    pattern: Option<String>,
    /// What decided that pattern: `pattern`, `statistical`, `agent` or `none` (unclassified).
    #[schema(required = false)]
    classified_by: Option<String>,
    /// Why the attempt's agent cannot fix this failure, when that is what it is: another agent
    /// of the stage's `fallback:` takes over.
    #[schema(required = false)]
    unfixable: Option<Unfixable>,
}

/// A failure an agent cannot fix by trying again.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
pub enum Unfixable {
    /// Its provider kept refusing for too many requests, past the wait allowed.
    RateLimit,
    /// Its quota or credit is spent.
    Quota,
    /// Its credentials were refused or are missing.
    Authentication,
    /// Its model does not exist or is not available to it.
    ModelMissing,
    /// Its program is not installed.
    CliMissing,
    /// The prompt does not fit its model's context.
    ContextLength,
}

/// An agent that could not go on, and the agent that took the stage's attempts over.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct FellBack {
    /// The attempt that failed.
    attempt: u32,
    /// The agent that could not go on.
    from: String,
    /// The agent that took over.
    to: String,
    /// Why.
    reason: Unfixable,
}

/// What an agent attempt used.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Usage {
    /// Tokens in.
    input_tokens: u64,
    /// Tokens out.
    output_tokens: u64,
    /// Counted by loopwright (the agent reported none).
    estimated: bool,
    /// The model.
    #[schema(required = false)]
    model: Option<String>,
    /// Its cost, when the model has a price.
    #[schema(required = false)]
    cost_usd: Option<f64>,
    /// Time waited for the provider's quota.
    #[schema(required = false)]
    quota_wait_ms: Option<u64>,
}

/// One attempt of a stage.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Attempt {
    /// 1-based.
    number: u32,
    /// How it ended (`succeeded`, `failed`, `running`, or the closed-loop phase it ended in).
    status: String,
    /// When it began.
    #[schema(format = DateTime)]
    started_at: Option<String>,
    /// When it ended.
    #[schema(format = DateTime)]
    ended_at: Option<String>,
    /// How long it took.
    duration_ms: Option<u64>,
    /// The prompt it was given.
    prompt: Option<String>,
    /// What it printed.
    output: Option<String>,
    /// Its standard error.
    stderr: Option<String>,
    /// Its failure.
    error: Option<StageError>,
    /// The retry context it was given (from the second attempt on).
    retry_context: Option<String>,
    /// What it used.
    usage: Option<Usage>,
    /// The closed loop's phases of this attempt, as journal events.
    phases: Vec<Event>,
    /// The agent that made it, when the stage had fallen back from its own agent.
    agent: Option<String>,
    /// After it, the agent that took the stage over and why.
    fell_back: Option<FellBack>,
    /// Best of N: its candidates, side by side.
    candidates: Vec<Candidate>,
    /// Best of N: why the winner won, or why none did.
    chosen: Option<String>,
}

/// A candidate of an attempt (best of N).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Candidate {
    /// Which candidate (0-based).
    candidate: u32,
    /// Its agent.
    agent: String,
    /// What it did, once it ended.
    result: Option<CandidateResult>,
    /// It won.
    won: bool,
}

/// What a candidate did.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct CandidateResult {
    /// Its agent succeeded and every check passed.
    passed: bool,
    /// Each check: its name and whether it passed.
    #[schema(value_type = Vec<Vec<serde_json::Value>>)]
    checks: Vec<(String, bool)>,
    /// The files it changed.
    files: Vec<String>,
    /// Tokens its agent used.
    tokens: u64,
    /// Their cost, when its model has a price.
    #[schema(required = false)]
    cost_usd: Option<f64>,
    /// How long it ran.
    duration_ms: u64,
    /// Its declared outputs.
    #[schema(required = false)]
    outputs: Option<std::collections::BTreeMap<String, String>>,
    /// Why it failed, when it did.
    #[schema(required = false)]
    error: Option<String>,
    /// The end of what it (or its failing check) printed.
    #[schema(required = false)]
    output_tail: Option<String>,
}

/// One journal event: its `type` says which; each type's own fields are as `logs --json`
/// prints them.
pub struct Event;

impl utoipa::PartialSchema for Event {
    fn schema() -> RefOr<Schema> {
        let kinds = loopwright_engine::event::Event::KINDS.iter().copied();
        ObjectBuilder::new()
            .property("type", ObjectBuilder::new().schema_type(Type::String).enum_values(Some(kinds)))
            .required("type")
            .property(
                "stage",
                ObjectBuilder::new().schema_type(Type::String).description(Some("The stage it is about")),
            )
            .property(
                "attempt",
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(0))
                    .description(Some("The attempt it is about")),
            )
            .property(
                "by",
                ObjectBuilder::new().schema_type(Type::String).description(Some("The person who gave an answer")),
            )
            .additional_properties(Some(AdditionalProperties::FreeForm(true)))
            .description(Some("A journal event; `type` is one of the event kinds"))
            .into()
    }
}

impl ToSchema for Event {}

/// One event of a run's journal, as `GET /api/runs/{run}/events` and `logs RUN --json` give it.
pub struct EventRecord;

impl utoipa::PartialSchema for EventRecord {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .property("seq", ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(1)))
            .required("seq")
            .property(
                "at",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::DateTime))),
            )
            .required("at")
            .property("event", <Event as utoipa::PartialSchema>::schema())
            .required("event")
            .property(
                "run_id",
                ObjectBuilder::new()
                    .schema_type(SchemaType::from_iter([Type::String]))
                    .description(Some("The run (in the stream of every run's events)")),
            )
            .into()
    }
}

impl ToSchema for EventRecord {}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    /// What in `value` the schema does not describe: a property it does not name (where it
    /// allows no others), a required one missing, a type it does not allow — followed into
    /// `$ref`s, arrays, maps and `oneOf`s.
    fn misfits(value: &Value, schema: &Value, doc: &Value, at: &str, out: &mut Vec<String>) {
        if let Some(reference) = schema["$ref"].as_str() {
            let name = reference.trim_start_matches("#/components/schemas/");
            return misfits(value, &doc["components"]["schemas"][name], doc, at, out);
        }
        if let Some(options) = schema["oneOf"].as_array() {
            let fits = options.iter().any(|o| {
                let mut errs = Vec::new();
                misfits(value, o, doc, at, &mut errs);
                errs.is_empty()
            });
            if !fits {
                out.push(format!("{at}: fits none of oneOf"));
            }
            return;
        }
        let types: Vec<&str> = match &schema["type"] {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        let allowed = types.is_empty() || types.contains(&kind) || (kind == "integer" && types.contains(&"number"));
        if !allowed {
            out.push(format!("{at}: a {kind}, the schema says {types:?}"));
            return;
        }
        match value {
            Value::Object(map) => {
                let properties = schema["properties"].as_object();
                for required in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                    if !map.contains_key(required) {
                        out.push(format!("{at}.{required}: required, missing"));
                    }
                }
                for (key, v) in map {
                    match properties.and_then(|p| p.get(key)) {
                        Some(s) => misfits(v, s, doc, &format!("{at}.{key}"), out),
                        None => match &schema["additionalProperties"] {
                            Value::Bool(true) => {}
                            extra @ Value::Object(_) => misfits(v, extra, doc, &format!("{at}.{key}"), out),
                            _ if properties.is_none() => {}
                            _ => out.push(format!("{at}.{key}: not in the schema")),
                        },
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    misfits(item, &schema["items"], doc, &format!("{at}[{i}]"), out);
                }
            }
            _ => {}
        }
    }

    fn response_schema(doc: &Value, path: &str, method: &str) -> Value {
        doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"].clone()
    }

    #[test]
    fn a_real_result_attempt_and_journal_fit_their_schemas() {
        use loopwright_engine::event::{Event, FailureKind, StageError, Usage};
        use loopwright_engine::{EventRecord, RunId, RunState};
        let (_, doc) = crate::api::router();
        let doc = serde_json::to_value(&doc).expect("json");
        let stage = |s: &str| loopwright_spec::StageId::parse(s).expect("id");
        let started = json!({
            "pipeline": "p", "pipeline_path": "p.yml", "pipeline_source": "name: p", "task_id": "task-1", "task": "t",
            "vars": {}, "inputs": {}, "start_from": null, "skip": [], "prior_outputs": {}, "workspace": "/w", "by": "carol",
        });
        let error = StageError {
            kind: FailureKind::ExecutionError,
            message: "exited 1".into(),
            exit_code: Some(1),
            output_tail: "boom".into(),
            pattern: Some("test-failure".into()),
            classified_by: Some(loopwright_engine::closed_loop::ClassifiedBy::Pattern),
            unfixable: Some(loopwright_engine::event::Unfixable::Quota),
        };
        let events = vec![
            Event::RunStarted(Box::new(serde_json::from_value(started).expect("start"))),
            Event::AttemptStarted { stage: stage("build"), attempt: 1 },
            Event::UsageRecorded {
                stage: stage("build"),
                attempt: 1,
                usage: Usage {
                    input_tokens: 3,
                    output_tokens: 4,
                    estimated: true,
                    model: None,
                    cost_usd: Some(0.5),
                    quota_wait_ms: 0,
                },
            },
            Event::AttemptFailed { stage: stage("build"), attempt: 1, duration_ms: 5, error: error.clone() },
            Event::StageFailed { stage: stage("build"), error: error.clone() },
            Event::ApprovalRequested { stage: stage("ship") },
        ];
        let records: Vec<EventRecord> = events
            .into_iter()
            .enumerate()
            .map(|(i, event)| EventRecord { seq: i as u64 + 1, at: jiff::Timestamp::UNIX_EPOCH, event })
            .collect();
        let state = RunState::replay(RunId::new("r"), &records);
        let mut out = Vec::new();
        let result = serde_json::to_value(loopwright_engine::result::PipelineResult::from_state(&state)).expect("json");
        misfits(&result, &response_schema(&doc, "/api/runs/{run}", "get"), &doc, "result", &mut out);
        let journal: Vec<Value> =
            records.iter().map(|r| json!({"seq": r.seq, "at": r.at.to_string(), "event": r.event})).collect();
        misfits(
            &Value::Array(journal),
            &response_schema(&doc, "/api/runs/{run}/events", "get"),
            &doc,
            "events",
            &mut out,
        );
        let attempt = loopwright_app::ops::read::Attempt {
            number: 1,
            status: "failed".into(),
            started_at: Some(jiff::Timestamp::UNIX_EPOCH),
            ended_at: None,
            duration_ms: Some(5),
            prompt: Some("do it".into()),
            output: None,
            stderr: None,
            error: Some(error),
            retry_context: None,
            usage: Some(Usage {
                input_tokens: 3,
                output_tokens: 4,
                estimated: false,
                model: Some("m".into()),
                cost_usd: None,
                quota_wait_ms: 9,
            }),
            phases: vec![Event::LoopEscalated { stage: stage("build"), attempt: 1, reason: "r".into() }],
            agent: Some("b".into()),
            fell_back: Some(loopwright_engine::state::FellBack {
                attempt: 1,
                from: "b".into(),
                to: "c".into(),
                reason: loopwright_engine::event::Unfixable::Authentication,
            }),
            candidates: vec![loopwright_app::ops::read::Candidate {
                candidate: 0,
                agent: "b".into(),
                result: Some(loopwright_engine::event::CandidateResult {
                    passed: false,
                    checks: vec![("tests".into(), false)],
                    files: vec!["a.rs".into()],
                    tokens: 12,
                    cost_usd: Some(0.01),
                    duration_ms: 4,
                    outputs: Default::default(),
                    error: Some("check `tests` failed".into()),
                    output_tail: "1 failed".into(),
                    kept: None,
                }),
                won: false,
            }],
            chosen: Some("none of the 1 candidates passed".into()),
        };
        let attempts = serde_json::to_value(vec![attempt]).expect("json");
        misfits(
            &attempts,
            &response_schema(&doc, "/api/runs/{run}/stages/{stage}/attempts", "get"),
            &doc,
            "attempts",
            &mut out,
        );
        assert_eq!(out, Vec::<String>::new());
        // The check finds what does not fit.
        let mut bad = result.clone();
        bad["surprise"] = json!(1);
        bad["stages_executed"][0]["attempts"] = json!("one");
        let mut found = Vec::new();
        misfits(&bad, &response_schema(&doc, "/api/runs/{run}", "get"), &doc, "result", &mut found);
        assert_eq!(
            found,
            vec![
                "result.stages_executed[0].attempts: a string, the schema says [\"integer\"]".to_owned(),
                "result.surprise: not in the schema".to_owned()
            ]
        );
        // And the schemas say something: a run's result is not a bare object.
        assert!(doc["components"]["schemas"]["RunResult"]["properties"].as_object().is_some_and(|p| p.len() == 11));
    }
}
