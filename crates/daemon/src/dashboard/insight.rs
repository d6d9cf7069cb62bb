//! The dead letters (`/dead-letters`), the workers (`/workers`) and the figures (`/stats`).

use crate::Shared;
use crate::api::auth::Caller;
use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use loopwright_app::ops::{self};
use serde_json::{Value, json};
use std::sync::Arc;

use super::{header_context, page, render_markdown, signin};

pub(super) async fn dead_letters_page(
    State(shared): State<Arc<Shared>>,
    caller: Option<Extension<Caller>>,
) -> Response {
    let Some(Extension(caller)) = caller else { return signin(&shared, StatusCode::UNAUTHORIZED, false) };
    let letters: Vec<Value> = ops::dead_letters::list(&shared.ws)
        .into_iter()
        .map(|row| {
            let text =
                render_markdown(&ops::dead_letters::show(&shared.ws, &row.task_id).map(|l| l.text).unwrap_or_default());
            json!({
                "task_id": row.task_id, "stage": row.stage, "run_id": row.run_id, "pattern": row.final_pattern,
                "attempts": row.total_attempts, "blocked_at": row.blocked_at, "reason": row.blocked_reason,
                "similar": row.similar_failures, "text": text,
            })
        })
        .collect();
    page(
        "dead_letters.html",
        json!({"header": header_context(&shared, &caller, "dead-letters").await, "letters": letters}),
    )
}

/// The workers sharing the store: each one's state, labels, slots, last heartbeat and the runs
/// it holds leases on.
pub(super) async fn workers_page(State(shared): State<Arc<Shared>>, caller: Option<Extension<Caller>>) -> Response {
    let Some(Extension(caller)) = caller else { return signin(&shared, StatusCode::UNAUTHORIZED, false) };
    let header_ctx = header_context(&shared, &caller, "workers").await;
    let workers = ops::fleet::workers(&shared.store, jiff::Timestamp::now()).await.unwrap_or_default();
    let shared_store = shared.store.postgres().is_some();
    page("workers.html", json!({"header": header_ctx, "shared": shared_store, "workers": workers}))
}

pub(super) async fn stats_page(State(shared): State<Arc<Shared>>, caller: Option<Extension<Caller>>) -> Response {
    let Some(Extension(caller)) = caller else { return signin(&shared, StatusCode::UNAUTHORIZED, false) };
    let header_ctx = header_context(&shared, &caller, "stats").await;
    let stats = match ops::stats::stats(&shared.ws, 10_000).await {
        Ok(s) => s.report(),
        Err(e) => return page("stats.html", json!({"header": header_ctx, "missing": e.message()})),
    };
    page("stats.html", json!({"header": header_ctx, "stats": stats}))
}
