//! The dead letters (`/dead-letters`), the workers (`/workers`) and the figures (`/stats`).

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use loopwright_app::ops;
use serde::{Deserialize, Serialize};

use super::{Missing, Page, Rendered, header_context, page, render_markdown, signin};
use crate::Shared;
use crate::api::auth::Caller;

/// How many dead letters (and groups) a page shows.
const LETTERS_PAGE: usize = 50;

/// `/dead-letters?page=N&signature=S&pattern=P`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct LettersQuery {
    page: Option<String>,
    #[serde(default)]
    signature: String,
    #[serde(default)]
    pattern: String,
}

/// A dead letter in the list.
#[derive(Debug, Serialize)]
struct LetterRow {
    task_id: String,
    stage: String,
    run_id: String,
    pattern: String,
    attempts: u64,
    blocked_at: String,
    reason: String,
}

/// A group of dead letters as the page shows it, with the link that lists it alone.
#[derive(Debug, Serialize)]
struct GroupView {
    #[serde(flatten)]
    group: ops::dead_letters::Group,
    link: String,
}

/// The dead letters' page: their groups, and one page of the letters (of a group, if one is
/// chosen).
#[derive(Debug, Serialize)]
struct LettersPage {
    groups: Vec<GroupView>,
    /// Groups not shown (the smallest).
    more_groups: usize,
    /// The group chosen, if any.
    chosen: Option<GroupView>,
    letters: Vec<LetterRow>,
    total: usize,
    first: usize,
    last: usize,
    page: usize,
    pages: usize,
    previous: Option<String>,
    next: Option<String>,
}

fn letters_link(signature: &str, pattern: &str, page: usize) -> String {
    let mut pairs: Vec<(&str, String)> = Vec::new();
    if !signature.is_empty() {
        pairs.extend([("signature", signature.to_owned()), ("pattern", pattern.to_owned())]);
    }
    if page > 1 {
        pairs.push(("page", page.to_string()));
    }
    match serde_urlencoded::to_string(&pairs) {
        Ok(query) if !query.is_empty() => format!("/dead-letters?{query}"),
        _ => "/dead-letters".to_owned(),
    }
}

/// `/dead-letters`: grouped by error signature and pattern ("×487 coverage_gate: …"), then
/// paged on the server, newest first.
pub(super) async fn dead_letters_page(
    State(shared): State<Arc<Shared>>,
    caller: Option<Extension<Caller>>,
    Query(q): Query<LettersQuery>,
) -> Response {
    let Some(Extension(caller)) = caller else { return signin(&shared, StatusCode::UNAUTHORIZED, false) };
    let rows = ops::dead_letters::list(&shared.ws);
    let view = |group: ops::dead_letters::Group| GroupView {
        link: letters_link(&group.error_signature, &group.final_pattern, 1),
        group,
    };
    let mut groups = ops::dead_letters::groups(&rows);
    let chosen = groups
        .iter()
        .find(|g| !q.signature.is_empty() && g.error_signature == q.signature && g.final_pattern == q.pattern)
        .cloned()
        .map(view);
    let more_groups = groups.len().saturating_sub(LETTERS_PAGE);
    groups.truncate(LETTERS_PAGE);
    let matching: Vec<_> = rows
        .into_iter()
        .filter(|r| q.signature.is_empty() || (r.error_signature == q.signature && r.final_pattern == q.pattern))
        .collect();
    let total = matching.len();
    let pages = total.div_ceil(LETTERS_PAGE).max(1);
    let page_no = q.page.as_deref().and_then(|p| p.parse::<usize>().ok()).unwrap_or(1).clamp(1, pages);
    let letters: Vec<LetterRow> = matching
        .into_iter()
        .skip((page_no - 1) * LETTERS_PAGE)
        .take(LETTERS_PAGE)
        .map(|row| LetterRow {
            task_id: row.task_id,
            stage: row.stage,
            run_id: row.run_id,
            pattern: row.final_pattern,
            attempts: row.total_attempts,
            blocked_at: row.blocked_at,
            reason: row.blocked_reason,
        })
        .collect();
    let first = if total == 0 { 0 } else { (page_no - 1) * LETTERS_PAGE + 1 };
    let body = LettersPage {
        groups: groups.into_iter().map(view).collect(),
        more_groups,
        chosen,
        first,
        last: first + letters.len().saturating_sub(1),
        letters,
        total,
        page: page_no,
        pages,
        previous: (page_no > 1).then(|| letters_link(&q.signature, &q.pattern, page_no - 1)),
        next: (page_no < pages).then(|| letters_link(&q.signature, &q.pattern, page_no + 1)),
    };
    let header = header_context(&shared, &caller, "dead-letters").await;
    page("dead_letters.html", &Page { header, body })
}

/// One dead letter's page.
#[derive(Debug, Serialize)]
struct LetterPage {
    task_id: String,
    /// The dead letter, rendered.
    text: Rendered,
}

/// `/dead-letters/{task}`: one dead letter, whole.
pub(super) async fn dead_letter_page(
    State(shared): State<Arc<Shared>>,
    caller: Option<Extension<Caller>>,
    Path(task): Path<String>,
) -> Response {
    let Some(Extension(caller)) = caller else { return signin(&shared, StatusCode::UNAUTHORIZED, false) };
    let header = header_context(&shared, &caller, "dead-letters").await;
    match ops::dead_letters::show(&shared.ws, &task) {
        Ok(letter) => page(
            "dead_letter.html",
            &Page { header, body: LetterPage { task_id: task, text: render_markdown(&letter.text) } },
        ),
        Err(e) => {
            let mut response = page("dead_letter.html", &Page { header, body: Missing { missing: e.message() } });
            *response.status_mut() = StatusCode::NOT_FOUND;
            response
        }
    }
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
