//! The handlers of `/api/`: each parses the request, calls one operation of the application
//! layer and maps its outcome (errors through [`ApiError`]).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use loopwright_app::ops::{self, answer, read};
use loopwright_app::ownership::this_process;
use loopwright_engine::result::PipelineResult;
use loopwright_engine::{RunId, RunStatus};

use super::auth::Caller;
use super::dto::{
    Accepted, Approval, Cancel, Health, ListQuery, PatternTest, PipelineInfo, Rerun, Respond, Resume, RunRow, StartRun,
};
use super::error::{ApiError, ErrorBody, Json, OptionalJson, Query};
use crate::Shared;
use crate::host::Job;

type ApiResult<T> = Result<T, ApiError>;

fn run_id(run: &str) -> ApiResult<RunId> {
    RunId::parse(run).ok_or_else(|| ApiError::from(loopwright_app::Error::no_run(run)))
}

fn json(value: impl serde::Serialize) -> Response {
    axum::Json(value).into_response()
}

/// Liveness: no token needed.
#[utoipa::path(get, path = "/api/health", tag = "daemon", security(()),
    responses((status = 200, description = "The daemon serves", body = Health)))]
pub async fn health() -> axum::Json<Health> {
    axum::Json(Health { status: "ok".into(), version: env!("CARGO_PKG_VERSION").into() })
}

/// The workspace's pipelines, validated.
#[utoipa::path(get, path = "/api/pipelines", tag = "pipelines",
    responses((status = 200, body = Vec<PipelineInfo>), (status = 401, body = ErrorBody)))]
pub async fn pipelines(State(shared): State<Arc<Shared>>) -> ApiResult<axum::Json<Vec<PipelineInfo>>> {
    let checked = ops::validate::pipelines(&shared.ws)?;
    Ok(axum::Json(
        checked
            .into_iter()
            .map(|c| PipelineInfo {
                name: c.name,
                description: c.description,
                stages: c.stages,
                valid: c.valid,
                diagnostics: c.diagnostics.iter().filter_map(|d| serde_json::to_value(d).ok()).collect(),
            })
            .collect(),
    ))
}

/// Starts a run: it is queued and started when a slot (and its working tree) is free.
#[utoipa::path(post, path = "/api/runs", tag = "runs", request_body = StartRun,
    responses((status = 202, body = Accepted), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
              (status = 409, body = ErrorBody), (status = 413, body = ErrorBody)))]
pub async fn start(
    State(shared): State<Arc<Shared>>,
    caller: Caller,
    Json(body): Json<StartRun>,
) -> ApiResult<Response> {
    // Only what the pipeline declares may be given: a stray key is a mistake, not an input.
    if let Some(declared) = ops::start::declared_inputs(&shared.ws, &body.pipeline)?
        && let Some(stray) = body.inputs.keys().find(|k| !declared.contains(k))
    {
        return Err(ApiError::invalid(format!(
            "inputs.{stray}: pipeline `{}` declares no initial input `{stray}` (it takes {}); declare it under \
             `initial_inputs:`",
            body.pipeline,
            declared.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
        )));
    }
    let request = ops::start::StartRequest {
        pipeline: body.pipeline,
        name_only: true,
        task: body.task,
        task_id: body.task_id,
        vars: body.vars,
        inputs: body.inputs,
        start_from: body.start_from,
        skip: body.skip,
        approve_all: body.approve_all,
        worktree: body.worktree,
        by: caller.person,
        rerun_of: None,
        forge: None,
        run_id: None,
    };
    if body.submit {
        if body.worktree {
            return Err(ApiError::invalid("`worktree` does not go with `submit`: workers work in clones of their own"));
        }
        let target = ops::start::Target { repo: body.repo, base: body.base };
        let (run, _) = ops::start::submit(&shared.ws, &shared.store, request, target).await?;
        let accepted = Accepted { run_id: run.to_string(), status: RunStatus::Queued.as_str().into() };
        return Ok((StatusCode::ACCEPTED, axum::Json(accepted)).into_response());
    }
    if body.repo.is_some() || body.base.is_some() {
        return Err(ApiError::invalid("`repo` and `base` go with `submit` only"));
    }
    queue(&shared, request).await
}

/// Prepares and queues a run; 202 with its id.
async fn queue(shared: &Shared, request: ops::start::StartRequest) -> ApiResult<Response> {
    let prepared = ops::start::prepare(&shared.ws, request, this_process(true)).await?;
    let run = ops::start::enqueue(&shared.store, prepared).await?;
    shared.runs.wake.notify_one();
    let accepted = Accepted { run_id: run.to_string(), status: RunStatus::Queued.as_str().into() };
    Ok((StatusCode::ACCEPTED, axum::Json(accepted)).into_response())
}

/// Runs a run again — the same pipeline (as its file says now), task, variables and inputs —
/// from its first stage, or from `from` with the earlier stages' outputs taken from the
/// journal of the same task. The new run names the old one and who asked.
#[utoipa::path(post, path = "/api/runs/{run}/rerun", tag = "runs", request_body(content = Rerun, description = "Optional"),
    params(("run" = String, Path, description = "The run to run again")),
    responses((status = 202, body = Accepted), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody),
              (status = 409, body = ErrorBody)))]
pub async fn rerun(
    State(shared): State<Arc<Shared>>,
    caller: Caller,
    Path(run): Path<String>,
    OptionalJson(body): OptionalJson<Rerun>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let by = caller.by(body.by)?;
    let (_, state) = read::load_run(&shared.ws, &shared.store, &run).await?;
    let from = body.from.filter(|f| !f.is_empty());
    let request = ops::start::rerun(&shared.ws, &state, from, Some(by), true)?;
    queue(&shared, request).await
}

/// Recent runs, those waiting for a human first, a page at a time; `X-Total-Count` says how
/// many the filters select in all.
#[utoipa::path(get, path = "/api/runs", tag = "runs", params(ListQuery),
    responses((status = 200, body = Vec<RunRow>,
               headers(("X-Total-Count" = u64, description = "How many runs the filters select, over all pages"))),
              (status = 422, body = ErrorBody)))]
pub async fn list(State(shared): State<Arc<Shared>>, Query(q): Query<ListQuery>) -> ApiResult<Response> {
    let status = match q.status.as_deref().filter(|s| !s.is_empty()) {
        Some(s) => Some(RunStatus::parse(s).ok_or_else(|| {
            ApiError::invalid(format!(
                "status `{s}`: expected running, success, failed, cancelled, waiting, interrupted or queued"
            ))
        })?),
        None => None,
    };
    let limit = match q.limit.unwrap_or(50) {
        n @ 1..=1000 => n as usize,
        n => return Err(ApiError::invalid(format!("limit {n}: expected 1 to 1000"))),
    };
    let offset = match q.offset.unwrap_or(0) {
        n @ 0..=100_000_000 => n as usize,
        n => return Err(ApiError::invalid(format!("offset {n}: expected 0 to 100000000"))),
    };
    let text = |v: Option<String>, name: &str, max: usize| -> ApiResult<Option<String>> {
        match v.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()) {
            Some(t) if t.chars().count() > max || t.chars().any(char::is_control) => {
                Err(ApiError::invalid(format!("`{name}`: at most {max} characters, no control characters")))
            }
            other => Ok(other),
        }
    };
    let filter = read::PageFilter {
        status,
        pipeline: q.pipeline.filter(|p| !p.is_empty()),
        text: text(q.q, "q", 200)?,
        person: text(q.by, "by", 100)?,
        since: q.since.as_deref().map(|t| moment(t, "since")).transpose()?,
        until: q.until.as_deref().map(|t| moment(t, "until")).transpose()?,
        offset,
        limit,
    };
    let page = read::page(&shared.store, &filter).await?;
    let mut response = json(&page.runs);
    response.headers_mut().insert("x-total-count", page.total.into());
    Ok(response)
}

/// A time in a query: RFC 3339, or a date (its midnight, UTC).
pub fn moment(text: &str, name: &str) -> ApiResult<jiff::Timestamp> {
    text.parse::<jiff::Timestamp>()
        .or_else(|_| {
            text.parse::<jiff::civil::Date>().and_then(|d| d.to_zoned(jiff::tz::TimeZone::UTC)).map(|z| z.timestamp())
        })
        .map_err(|_| {
            ApiError::invalid(format!("`{name}` {text}: expected a time (2026-11-25T09:00:00Z) or a date (2026-11-25)"))
        })
}

/// One run: the same result as `status RUN --json`.
#[utoipa::path(get, path = "/api/runs/{run}", tag = "runs", params(("run" = String, Path, description = "The run id")),
    responses((status = 200, description = "The run's result (SPEC §2)", body = super::schema::RunResult), (status = 404, body = ErrorBody)))]
pub async fn get(State(shared): State<Arc<Shared>>, Path(run): Path<String>) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let (result, _) = shared.folds.status(&shared.store, &run).await?;
    Ok(json(result))
}

/// A stage's attempts: prompt, output, stderr, error, retry context, usage, the closed loop's
/// phases.
#[utoipa::path(get, path = "/api/runs/{run}/stages/{stage}/attempts", tag = "runs",
    params(("run" = String, Path, description = "The run id"), ("stage" = String, Path, description = "The stage id")),
    responses((status = 200, body = Vec<super::schema::Attempt>), (status = 404, body = ErrorBody)))]
pub async fn attempts(
    State(shared): State<Arc<Shared>>,
    Path((run, stage)): Path<(String, String)>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    Ok(json(read::attempts(&shared.ws, &shared.store, &run, &stage).await?))
}

/// The result of a run after an answer.
async fn result_of(shared: &Shared, run: &RunId) -> ApiResult<PipelineResult> {
    Ok(shared.folds.status(&shared.store, run).await?.0)
}

async fn approve_or_reject(
    shared: Arc<Shared>,
    caller: Caller,
    run: String,
    body: Approval,
    granted: bool,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    let who = caller.answerer(body.by)?;
    answer_gate(&shared, &run, granted, &who, body.comment, body.rollback).await?;
    Ok(json(result_of(&shared, &run).await?))
}

/// Whether `who` may give this answer to the gate `run` waits at (403 with why, the run keeps
/// waiting): the gate's `approvers` and `prevent_self_approval`.
pub async fn check_gate(shared: &Shared, run: &RunId, granted: bool, who: &answer::Answerer) -> ApiResult<()> {
    let (pipeline, state) = read::load_run(&shared.ws, &shared.store, run).await?;
    Ok(gate_policy(shared, &pipeline).allows(&state, granted, who)?)
}

/// Who may answer `pipeline`'s gates here: with the daemon's default for
/// `prevent_self_approval`.
fn gate_policy<'a>(shared: &Shared, pipeline: &'a loopwright_spec::Pipeline) -> answer::GatePolicy<'a> {
    answer::GatePolicy { pipeline, prevent_self: shared.ws.config.serve.prevent_self_approval }
}

/// Answers the gate `run` waits at as `who` (one compare-and-append) when the gate lets them;
/// the daemon goes on with the run (or rolls it back).
pub async fn answer_gate(
    shared: &Shared,
    run: &RunId,
    granted: bool,
    who: &answer::Answerer,
    comment: Option<String>,
    rollback: bool,
) -> ApiResult<()> {
    let (pipeline, mut state) = read::load_run(&shared.ws, &shared.store, run).await?;
    let rollback = rollback && !granted;
    let event = answer::approval(gate_policy(shared, &pipeline), &state, granted, who, comment, rollback)?;
    let for_workers = answer::record_answer(&shared.store, &mut state, event, this_process(true)).await?;
    if rollback && !for_workers {
        shared.runs.host(Job { run: run.clone(), claim: false });
    }
    shared.runs.wake.notify_one();
    Ok(())
}

/// Answers the escalation `run` waits on as `by`, through `via`; the daemon goes on with the run.
pub async fn answer_escalation(
    shared: &Shared,
    run: &RunId,
    reply: loopwright_engine::event::Answer,
    by: String,
    via: loopwright_engine::event::Via,
) -> ApiResult<()> {
    let (_, mut state) = read::load_run(&shared.ws, &shared.store, run).await?;
    let (_, event) = answer::escalation(&state, reply, by, via)?;
    answer::record_answer(&shared.store, &mut state, event, this_process(true)).await?;
    shared.runs.wake.notify_one();
    Ok(())
}

/// Approves the gate the run waits at; the daemon continues the run.
#[utoipa::path(post, path = "/api/runs/{run}/approve", tag = "answers", request_body(content = Approval, description = "Optional"),
    params(("run" = String, Path, description = "The run id")),
    responses((status = 200, description = "The run's result", body = super::schema::RunResult), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn approve(
    State(shared): State<Arc<Shared>>,
    caller: Caller,
    Path(run): Path<String>,
    OptionalJson(body): OptionalJson<Approval>,
) -> ApiResult<Response> {
    approve_or_reject(shared, caller, run, body, true).await
}

/// Rejects the gate the run waits at: the run is cancelled (and rolled back with `rollback`).
#[utoipa::path(post, path = "/api/runs/{run}/reject", tag = "answers", request_body(content = Approval, description = "Optional"),
    params(("run" = String, Path, description = "The run id")),
    responses((status = 200, description = "The run's result", body = super::schema::RunResult), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn reject(
    State(shared): State<Arc<Shared>>,
    caller: Caller,
    Path(run): Path<String>,
    OptionalJson(body): OptionalJson<Approval>,
) -> ApiResult<Response> {
    approve_or_reject(shared, caller, run, body, false).await
}

/// Answers the escalation the run waits on.
#[utoipa::path(post, path = "/api/runs/{run}/respond", tag = "answers", request_body = Respond,
    params(("run" = String, Path, description = "The run id")),
    responses((status = 200, description = "The run's result", body = super::schema::RunResult), (status = 404, body = ErrorBody),
              (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn respond(
    State(shared): State<Arc<Shared>>,
    caller: Caller,
    Path(run): Path<String>,
    Json(body): Json<Respond>,
) -> ApiResult<Response> {
    let run = run_id(&run)?;
    if body.answer != "fix" && body.text.is_some() {
        return Err(ApiError::invalid(format!("`text` goes with `fix` only, not with `{}`", body.answer)));
    }
    let reply = answer::parse_answer(&body.answer, body.text.as_deref())?;
    answer_escalation(&shared, &run, reply, caller.by(body.by)?, caller.via).await?;
    Ok(json(result_of(&shared, &run).await?))
}

/// Stops a run: its owner ends the stage in flight (a run driven here or by a CLI process), or
/// it is cancelled at once (waiting, queued, interrupted).
#[utoipa::path(post, path = "/api/runs/{run}/cancel", tag = "answers", request_body(content = Cancel, description = "Optional"),
    params(("run" = String, Path, description = "The run id")),
    responses((status = 202, body = Accepted), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn cancel(
    State(shared): State<Arc<Shared>>,
    caller: Caller,
    Path(run): Path<String>,
    OptionalJson(body): OptionalJson<Cancel>,
) -> ApiResult<Response> {
    use loopwright_app::ops::cancel::Cancelled;
    let run = run_id(&run)?;
    let by = caller.by(body.by)?;
    let runs = Arc::clone(&shared.runs);
    let outcome =
        ops::cancel::cancel(&shared.ws, &shared.store, &run, by, body.rollback, |r| runs.is_hosted(r)).await?;
    let status = match outcome {
        Cancelled::Requested(state) | Cancelled::Done(state) => state.status,
        Cancelled::RollBack(event) => {
            let (_, mut state) = read::load_run(&shared.ws, &shared.store, &run).await?;
            if !answer::record_answer(&shared.store, &mut state, event, this_process(true)).await? {
                shared.runs.host(Job { run: run.clone(), claim: false });
            }
            state.status
        }
    };
    shared.runs.wake.notify_one();
    Ok((StatusCode::ACCEPTED, axum::Json(Accepted { run_id: run.to_string(), status: status.as_str().into() }))
        .into_response())
}

/// Continues an interrupted run (or one a crashed process left running) in the daemon.
#[utoipa::path(post, path = "/api/runs/{run}/resume", tag = "answers", request_body(content = Resume, description = "Optional"), params(("run" = String, Path, description = "The run id")),
    responses((status = 202, body = Accepted), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn resume(
    State(shared): State<Arc<Shared>>,
    caller: Caller,
    Path(run): Path<String>,
    OptionalJson(body): OptionalJson<Resume>,
) -> ApiResult<Response> {
    use loopwright_app::ops::resume::Resumable;
    let run = run_id(&run)?;
    let (_, mut state) = read::load_run(&shared.ws, &shared.store, &run).await?;
    if shared.runs.is_hosted(&run) {
        return Err(ApiError::from(loopwright_app::Error::conflict(format!(
            "run {run} is being driven by this daemon"
        ))));
    }
    if answer::submitted(&shared.store, &run).await? {
        return Err(ApiError::from(loopwright_app::Error::conflict(format!(
            "run {run} was submitted to workers: a worker continues it once no live lease holds it"
        ))));
    }
    match ops::resume::check(&state)? {
        Resumable::Yes => {}
        Resumable::WaitsForApproval(stage) => {
            return Err(loopwright_app::Error::conflict(format!(
                "run {run} waits for approval of stage `{stage}`: approve or reject it"
            ))
            .into());
        }
        Resumable::Waits => {
            return Err(
                loopwright_app::Error::conflict(format!("run {run} waits on an escalation: respond to it")).into()
            );
        }
        Resumable::Ended(status) => {
            return Err(
                loopwright_app::Error::conflict(format!("run {run} already ended ({})", status.as_str())).into()
            );
        }
    }
    loopwright_app::session::same_workspace(&shared.ws, &state)?;
    let by = caller.by(body.by)?;
    answer::resume_in_store(&shared.store, &mut state, this_process(true), by).await?;
    shared.runs.wake.notify_one();
    Ok((StatusCode::ACCEPTED, axum::Json(Accepted { run_id: run.to_string(), status: state.status.as_str().into() }))
        .into_response())
}

/// The dead letters, as `dead-letters list --json`.
#[utoipa::path(get, path = "/api/dead-letters", tag = "insight", responses((status = 200, body = Vec<super::dto::DeadLetterRow>)))]
pub async fn dead_letters(State(shared): State<Arc<Shared>>) -> Response {
    json(ops::dead_letters::list(&shared.ws).into_iter().map(super::dto::DeadLetterRow::from).collect::<Vec<_>>())
}

/// One dead letter, as `dead-letters show TASK --json`.
#[utoipa::path(get, path = "/api/dead-letters/{task}", tag = "insight", params(("task" = String, Path, description = "The task id")),
    responses((status = 200, body = super::dto::DeadLetter), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn dead_letter(State(shared): State<Arc<Shared>>, Path(task): Path<String>) -> ApiResult<Response> {
    Ok(json(super::dto::DeadLetter::from(ops::dead_letters::show(&shared.ws, &task)?)))
}

/// Retry and failure metrics, as `stats --json`.
#[utoipa::path(get, path = "/api/stats", tag = "insight", responses((status = 200, body = super::dto::Stats), (status = 404, body = ErrorBody)))]
pub async fn stats(State(shared): State<Arc<Shared>>) -> ApiResult<Response> {
    Ok(json(super::dto::Stats::from(ops::stats::stats(&shared.ws, 100).await?.report())))
}

/// Each `[[spend]]` cap and what its period has used so far, as `spend --json`.
#[utoipa::path(get, path = "/api/spend", tag = "insight", responses((status = 200, body = Vec<super::dto::SpendCap>)))]
pub async fn spend(State(shared): State<Arc<Shared>>) -> ApiResult<Response> {
    let caps = loopwright_app::spend::standing(&shared.ws.config.spend, &shared.store, jiff::Timestamp::now()).await?;
    Ok(json(caps.into_iter().map(super::dto::SpendCap::from).collect::<Vec<_>>()))
}

/// The workers sharing the store (PostgreSQL; none with the SQLite store): labels, slots, the
/// runs they hold leases on, their last heartbeat.
#[utoipa::path(get, path = "/api/workers", tag = "insight", responses((status = 200, body = Vec<super::dto::Worker>)))]
pub async fn workers(State(shared): State<Arc<Shared>>) -> ApiResult<Response> {
    let views = ops::fleet::workers(&shared.store, jiff::Timestamp::now()).await?;
    Ok(json(views.into_iter().map(super::dto::Worker::from).collect::<Vec<_>>()))
}

/// The agents found, as `agents --json`.
#[utoipa::path(get, path = "/api/agents", tag = "insight", responses((status = 200, body = Vec<super::dto::AgentInfo>)))]
pub async fn agents(State(shared): State<Arc<Shared>>) -> Response {
    let (agents, _) = ops::agents::list(&shared.ws);
    json(agents.values().map(super::dto::AgentInfo::from).collect::<Vec<_>>())
}

/// Classifies an error output, as `patterns test --json`.
#[utoipa::path(post, path = "/api/patterns/test", tag = "insight", request_body = PatternTest,
    responses((status = 200, body = super::dto::Classification), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn patterns_test(State(shared): State<Arc<Shared>>, Json(body): Json<PatternTest>) -> ApiResult<Response> {
    if body.check_type.as_ref().is_some_and(|t| t.chars().count() > 64) {
        return Err(ApiError::invalid("`check_type`: at most 64 characters"));
    }
    let context = loopwright_engine::patterns::Context {
        command: body.command,
        exit_code: body.exit_code,
        signal: body.signal.map(|s| s.0.to_owned()),
        check_type: body.check_type,
        timed_out: body.timed_out,
    };
    Ok(json(super::dto::Classification::from(ops::patterns::test(&shared.ws, &body.text, &context)?)))
}
