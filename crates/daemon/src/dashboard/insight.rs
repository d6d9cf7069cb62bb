//! The dead letters (`/dead-letters`), the workers (`/workers`) and the figures (`/stats`).

use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use loopwright_app::ops;
use serde::Serialize;

use super::{Missing, Page, Rendered, header_context, page, render_markdown, signin};
use crate::Shared;
use crate::api::auth::Caller;

/// A dead letter as its page shows it.
#[derive(Debug, Serialize)]
struct LetterView {
    task_id: String,
    stage: String,
    run_id: String,
    pattern: String,
    attempts: u64,
    blocked_at: String,
    reason: String,
    similar: u64,
    /// The dead letter, rendered.
    text: Rendered,
}

/// The dead letters' page.
#[derive(Debug, Serialize)]
struct LettersPage {
    letters: Vec<LetterView>,
}

pub(super) async fn dead_letters_page(
    State(shared): State<Arc<Shared>>,
    caller: Option<Extension<Caller>>,
) -> Response {
    let Some(Extension(caller)) = caller else { return signin(&shared, StatusCode::UNAUTHORIZED, false) };
    let letters = ops::dead_letters::list(&shared.ws)
        .into_iter()
        .map(|row| LetterView {
            text: render_markdown(
                &ops::dead_letters::show(&shared.ws, &row.task_id).map(|l| l.text).unwrap_or_default(),
            ),
            task_id: row.task_id,
            stage: row.stage,
            run_id: row.run_id,
            pattern: row.final_pattern,
            attempts: row.total_attempts,
            blocked_at: row.blocked_at,
            reason: row.blocked_reason,
            similar: row.similar_failures,
        })
        .collect();
    let header = header_context(&shared, &caller, "dead-letters").await;
    page("dead_letters.html", &Page { header, body: LettersPage { letters } })
}

/// The workers' page.
#[derive(Debug, Serialize)]
struct WorkersPage {
    /// Whether the store is shared (PostgreSQL): workers need one.
    shared: bool,
    workers: Vec<ops::fleet::WorkerView>,
}

/// The workers sharing the store: each one's state, labels, slots, last heartbeat and the runs
/// it holds leases on.
pub(super) async fn workers_page(State(shared): State<Arc<Shared>>, caller: Option<Extension<Caller>>) -> Response {
    let Some(Extension(caller)) = caller else { return signin(&shared, StatusCode::UNAUTHORIZED, false) };
    let header = header_context(&shared, &caller, "workers").await;
    let workers = ops::fleet::workers(&shared.store, jiff::Timestamp::now()).await.unwrap_or_default();
    page("workers.html", &Page { header, body: WorkersPage { shared: shared.store.postgres().is_some(), workers } })
}

/// The figures' page.
#[derive(Debug, Serialize)]
struct StatsPage {
    stats: ops::stats::Report,
    /// Each `[[spend]]` cap and its period's use.
    spend: Vec<loopwright_app::spend::CapUse>,
}

pub(super) async fn stats_page(State(shared): State<Arc<Shared>>, caller: Option<Extension<Caller>>) -> Response {
    let Some(Extension(caller)) = caller else { return signin(&shared, StatusCode::UNAUTHORIZED, false) };
    let header = header_context(&shared, &caller, "stats").await;
    let spend = loopwright_app::spend::standing(&shared.ws.config.spend, &shared.store, jiff::Timestamp::now())
        .await
        .unwrap_or_default();
    match ops::stats::stats(&shared.ws, 10_000).await {
        Ok(s) => page("stats.html", &Page { header, body: StatsPage { stats: s.report(), spend } }),
        Err(e) => page("stats.html", &Page { header, body: Missing { missing: e.message() } }),
    }
}
