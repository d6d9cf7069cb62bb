//! Auto mode's endpoints (SPEC §10, seed 002's paths and bodies): start, stop and read the
//! loop of a session, find the session working on a task directory; and for the dashboard
//! every loop, a loop's live screen and its supervision journal.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use loopwright_app::ops::auto::{self, StartRequest};

use super::auth::Caller;
use super::dto::{
    AutoApproveChecks, AutoChoice, AutoKeys, AutoLogEntry, AutoLogQuery, AutoLookup, AutoLoop, AutoNotice, AutoReport,
    AutoScreen, LookupQuery, NoticesQuery, StartAuto,
};
use super::error::{ApiError, ErrorBody, Json, Query};
use crate::Shared;
use loopwright_app::ops::people::Role;

type ApiResult<T> = Result<T, ApiError>;

/// Runs a blocking read of the journal or a holder off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, loopwright_app::Error> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::from(loopwright_app::Error::Internal(e.into())))?
        .map_err(ApiError::from)
}

/// Starts an auto loop in session `id`: the agent gets the protocol as its first message and
/// runs the task module's loop; the daemon supervises it.
#[utoipa::path(post, path = "/api/sessions/{id}/task-auto", tag = "auto", request_body = StartAuto,
    params(("id" = String, Path, description = "The session's name (letters, digits, `-`, `_`, `.`)")),
    responses((status = 201, description = "The loop started", body = AutoLoop),
              (status = 403, description = "taskDir lies outside the workspace", body = ErrorBody),
              (status = 404, description = "No task module at taskDir, or no such agent", body = ErrorBody),
              (status = 409, description = "The session or the task directory already runs a loop", body = ErrorBody),
              (status = 413, body = ErrorBody),
              (status = 422, description = "`.target.md` has no substance (\"fill .target.md first\"), or a bad value", body = ErrorBody)))]
pub async fn start(
    State(shared): State<Arc<Shared>>,
    caller: Caller,
    Path(id): Path<String>,
    Json(body): Json<StartAuto>,
) -> ApiResult<Response> {
    caller.needs(Role::Admin)?;
    let req = StartRequest {
        task_dir: PathBuf::from(body.task_dir),
        session: Some(id),
        agent: body.agent,
        max_iterations: body.max_iterations,
        timeout_minutes: body.timeout_minutes,
        heartbeat_seconds: body.heartbeat_seconds,
    };
    let status = shared.auto.start(req).await?;
    Ok((StatusCode::CREATED, axum::Json(AutoLoop::from(status))).into_response())
}

/// The status object of session `id`'s loop (the latest one).
#[utoipa::path(get, path = "/api/sessions/{id}/task-auto", tag = "auto",
    params(("id" = String, Path, description = "The session's name")),
    responses((status = 200, body = AutoLoop), (status = 404, body = ErrorBody)))]
pub async fn get(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> ApiResult<axum::Json<AutoLoop>> {
    let store = Arc::clone(&shared.auto_store);
    Ok(axum::Json(blocking(move || auto::session_status(&store, &id)).await?.into()))
}

/// Asks session `id`'s loop to stop gracefully: `.auto-stop` with reason `user_stop`; the
/// agent finishes its step and leaves the loop (ended after the stop grace otherwise).
#[utoipa::path(delete, path = "/api/sessions/{id}/task-auto", tag = "auto",
    params(("id" = String, Path, description = "The session's name")),
    responses((status = 200, description = "The stop was asked for: the loop's status", body = AutoLoop),
              (status = 404, body = ErrorBody),
              (status = 409, description = "The loop already ended", body = ErrorBody)))]
pub async fn stop(
    State(shared): State<Arc<Shared>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<AutoLoop>> {
    let by = caller.by(None)?;
    let (ws, store) = (shared.ws.clone(), Arc::clone(&shared.auto_store));
    Ok(axum::Json(
        blocking(move || {
            let status = auto::session_status(&store, &id)?;
            auto::stop(&ws, &store, &status.session_name, &by)
        })
        .await?
        .into(),
    ))
}

/// Every auto loop of the workspace, newest first.
#[utoipa::path(get, path = "/api/task-auto", tag = "auto", responses((status = 200, body = Vec<AutoLoop>)))]
pub async fn list(State(shared): State<Arc<Shared>>) -> ApiResult<axum::Json<Vec<AutoLoop>>> {
    let store = Arc::clone(&shared.auto_store);
    let all = blocking(move || auto::list(&store)).await?;
    Ok(axum::Json(all.into_iter().map(AutoLoop::from).collect()))
}

/// The session whose loop works on a task directory.
#[utoipa::path(get, path = "/api/task-auto/lookup", tag = "auto", params(LookupQuery),
    responses((status = 200, body = AutoLookup), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 422, body = ErrorBody)))]
pub async fn lookup(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<LookupQuery>,
) -> ApiResult<axum::Json<AutoLookup>> {
    let (ws, store) = (shared.ws.clone(), Arc::clone(&shared.auto_store));
    let found = blocking(move || auto::lookup(&ws, &store, std::path::Path::new(&q.task_dir))).await?;
    Ok(axum::Json(AutoLookup { session_name: found.session_name, status: found.status }))
}

/// What session `id`'s agent shows in its terminal now (read-only).
#[utoipa::path(get, path = "/api/sessions/{id}/task-auto/screen", tag = "auto",
    params(("id" = String, Path, description = "The session's name")),
    responses((status = 200, body = AutoScreen), (status = 404, body = ErrorBody)))]
pub async fn screen(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> ApiResult<axum::Json<AutoScreen>> {
    let (ws, store) = (shared.ws.clone(), Arc::clone(&shared.auto_store));
    let s = blocking(move || auto::screen(&ws, &store, &id)).await?;
    let choices = s.choices.into_iter().map(|c| AutoChoice { key: c.key, label: c.label }).collect();
    Ok(axum::Json(AutoScreen { session_name: s.session_name, screen: s.screen, alive: s.alive, choices }))
}

/// The most notices sent at once.
const NOTICES: usize = 200;

/// What people should hear about the loops: one needs a person (a prompt the policy will not
/// answer, added checks to approve), one ended. JSON, or a live stream with `Accept:
/// text/event-stream` (each event named by its kind, its `id:` the position to resume after).
#[utoipa::path(get, path = "/api/task-auto/notices", tag = "auto",
    params(NoticesQuery, ("Last-Event-ID" = Option<u64>, Header, nullable = false, description = "Resume a stream after this position")),
    responses((status = 200, description = "The notices (a JSON array, or `text/event-stream`)",
               content((Vec<AutoNotice> = "application/json"), (String = "text/event-stream"))),
              (status = 422, body = ErrorBody)))]
pub async fn notices(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<NoticesQuery>,
    headers: axum::http::HeaderMap,
) -> ApiResult<Response> {
    if headers.get("last-event-id").is_some_and(|v| v.to_str().map_or(true, |t| t.trim().is_empty())) {
        return Err(ApiError::invalid("Last-Event-ID: expected a position (a number)"));
    }
    let after = q.after.map(|a| u64::try_from(a).map_err(|_| ApiError::invalid("after: expected a position ≥ 0")));
    let after = super::events::resume_from(&headers, after.transpose()?)?;
    let after = i64::try_from(after).map_err(|_| ApiError::invalid("Last-Event-ID: too large for a position"))?;
    let store = Arc::clone(&shared.auto_store);
    if !super::events::wants_stream(&headers) {
        let list = blocking(move || auto::notices(&store, after, NOTICES)).await?;
        return Ok(axum::Json(list.into_iter().map(AutoNotice::from).collect::<Vec<_>>()).into_response());
    }
    let shutdown = shared.shutdown.clone();
    let state = (store, after, std::collections::VecDeque::<AutoNotice>::new(), shutdown);
    let stream = futures_util::stream::unfold(state, |(store, mut last, mut pending, mut shutdown)| async move {
        loop {
            if let Some(n) = pending.pop_front() {
                last = n.id;
                let data = serde_json::to_string(&n).unwrap_or_default();
                let kind =
                    serde_json::to_value(n.kind).ok().and_then(|k| k.as_str().map(str::to_owned)).unwrap_or_default();
                let sse = axum::response::sse::Event::default().id(n.id.to_string()).event(kind).data(data);
                return Some((Ok::<_, std::convert::Infallible>(sse), (store, last, pending, shutdown)));
            }
            if *shutdown.borrow() {
                return None;
            }
            let reader = Arc::clone(&store);
            let found = tokio::task::spawn_blocking(move || auto::notices(&reader, last, NOTICES)).await;
            match found {
                Ok(Ok(list)) if !list.is_empty() => pending.extend(list.into_iter().map(AutoNotice::from)),
                Ok(Ok(_)) => {
                    tokio::select! {
                        () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                        _ = shutdown.changed() => return None,
                    }
                }
                _ => return None,
            }
        }
    });
    Ok(super::events::sse_response(&shared, stream))
}

/// The night's summary of session `id`'s loop (its latest): each step the agent reported,
/// the checks, waits for the provider, recoveries and restarts with why, what a person was
/// asked, the module's changes since the start and the cost where the CLI printed it.
#[utoipa::path(get, path = "/api/sessions/{id}/task-auto/report", tag = "auto",
    params(("id" = String, Path, description = "The session's name")),
    responses((status = 200, body = AutoReport), (status = 404, body = ErrorBody)))]
pub async fn report(State(shared): State<Arc<Shared>>, Path(id): Path<String>) -> ApiResult<axum::Json<AutoReport>> {
    let (ws, store) = (shared.ws.clone(), Arc::clone(&shared.auto_store));
    let r = blocking(move || {
        let status = auto::session_status(&store, &id)?;
        auto::report(&ws, &store, &status.session_name)
    })
    .await?;
    Ok(axum::Json(r.into()))
}

/// Session `id`'s supervision journal (its latest loop): every signal, verdict, keystroke
/// sent with the screen excerpt it answered, wait, restart and stop.
#[utoipa::path(get, path = "/api/sessions/{id}/task-auto/log", tag = "auto",
    params(("id" = String, Path, description = "The session's name"), AutoLogQuery),
    responses((status = 200, body = Vec<AutoLogEntry>), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn log(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    Query(q): Query<AutoLogQuery>,
) -> ApiResult<axum::Json<Vec<AutoLogEntry>>> {
    let store = Arc::clone(&shared.auto_store);
    let entries = blocking(move || {
        let status = auto::session_status(&store, &id)?;
        Ok(store.auto_log_since(&status.loop_id, q.after.unwrap_or(0))?)
    })
    .await?;
    Ok(axum::Json(
        entries
            .into_iter()
            .map(|e| AutoLogEntry {
                id: e.id,
                at: e.at,
                kind: e.kind,
                data: serde_json::from_str(&e.data).unwrap_or_else(|_| serde_json::json!({ "text": e.data })),
            })
            .collect(),
    ))
}

/// Types into session `id`'s agent terminal for a person: the answer to a prompt the policy
/// would not give (status `needs_human`). Journaled as `keys` with who typed.
#[utoipa::path(post, path = "/api/sessions/{id}/task-auto/keys", tag = "auto", request_body = AutoKeys,
    params(("id" = String, Path, description = "The session's name")),
    responses((status = 200, description = "Typed: the loop's status", body = AutoLoop), (status = 404, body = ErrorBody),
              (status = 409, description = "The loop ended, or its agent cannot be reached", body = ErrorBody),
              (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn keys(
    State(shared): State<Arc<Shared>>,
    caller: Caller,
    Path(id): Path<String>,
    Json(body): Json<AutoKeys>,
) -> ApiResult<axum::Json<AutoLoop>> {
    let by = caller.by(body.by)?;
    let (ws, store) = (shared.ws.clone(), Arc::clone(&shared.auto_store));
    let status =
        blocking(move || auto::send_keys(&ws, &store, &id, &body.text, body.enter, body.confirm.as_deref(), &by))
            .await?;
    Ok(axum::Json(status.into()))
}

/// A person approves the checks the agent added to session `id`'s module after its loop
/// started (`checks_to_approve` in the status): journaled as `checks_approved` with who; the
/// supervisor runs them at its next look.
#[utoipa::path(post, path = "/api/sessions/{id}/task-auto/checks", tag = "auto", request_body = AutoApproveChecks,
    params(("id" = String, Path, description = "The session's name")),
    responses((status = 200, description = "Approved: the loop's status", body = AutoLoop), (status = 404, body = ErrorBody),
              (status = 409, description = "No added check waits for approval, or the list changed since `checks`", body = ErrorBody),
              (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn approve_checks(
    State(shared): State<Arc<Shared>>,
    caller: Caller,
    Path(id): Path<String>,
    Json(body): Json<AutoApproveChecks>,
) -> ApiResult<axum::Json<AutoLoop>> {
    let by = caller.by(body.by)?;
    let (ws, store) = (shared.ws.clone(), Arc::clone(&shared.auto_store));
    let status = blocking(move || {
        auto::session_status(&store, &id)?;
        auto::approve_checks(&ws, &store, &id, body.checks.as_deref(), &by)
    })
    .await?;
    Ok(axum::Json(status.into()))
}
