//! The runs list (`/`): its filters, its search, a page of runs, and one row for updating it
//! in place (`/runs/{run}/row`).

use crate::Shared;
use crate::api::auth::{Caller, caller_of_token};
use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use loopwright_app::ops::{self, read};
use loopwright_engine::{RunId, RunStatus};
use serde::Deserialize;
use serde::Serialize;
use std::sync::Arc;

use super::{Moment, Page, RunsQuery, duration, header_context, icon, page, signin, waiting_count};

/// How many runs a page of the list shows.
pub(super) const PAGE_SIZE: usize = 50;

/// A row of the runs list.
#[derive(Debug, Serialize)]
pub(super) struct RowView {
    run_id: String,
    pipeline: String,
    task_id: String,
    /// The task's first line, at most 140 characters.
    task: String,
    status: &'static str,
    icon: &'static str,
    started: Moment,
    /// How long it waited in the queue (empty when it did not wait a second).
    queued: String,
    /// How long it has worked (empty while queued).
    ran: String,
    people: Vec<String>,
    /// The pull request a run from GitHub delivered: its number and address.
    pull: Option<PullView>,
    /// What it waits for ("gate at `ship`"), or the first line of why it failed.
    why: Option<String>,
    /// Since when it waits for a person (its clock ticks on the page).
    waiting_since: Option<Moment>,
    /// How long it has waited for people (ended waits, and the one going on).
    waited: String,
    /// How long the wait going on has lasted.
    waiting: String,
    /// Where the page's clock of its working time counts from: its start of work moved on by
    /// its waits (a running run only).
    ran_from: Option<String>,
}

/// A pull request as a row links it.
#[derive(Debug, Serialize)]
struct PullView {
    number: u64,
    url: String,
}

/// What a row tells of a run beyond its summary, from its folded state.
#[derive(Debug, Default)]
pub(super) struct RowState {
    why: Option<String>,
    waiting_since: Option<jiff::Timestamp>,
    waited_ms: i64,
}

impl RowState {
    /// The run's state as the daemon last folded it.
    pub(super) async fn of(shared: &Shared, r: &loopwright_engine::RunSummary) -> Self {
        let Ok(state) = shared.folds.state(&shared.store, &r.run_id).await else { return Self::default() };
        Self {
            why: ops::why::row_line(&state, r.status),
            waiting_since: state.waiting_since.filter(|_| r.status == RunStatus::Waiting),
            waited_ms: state.waited_ms,
        }
    }
}

impl RowView {
    fn of(r: &loopwright_engine::RunSummary, row: RowState, now: jiff::Timestamp) -> Self {
        let end = if r.status.is_final() { r.updated_at } else { now };
        let ms = |from: jiff::Timestamp, to: jiff::Timestamp| to.duration_since(from).as_millis().max(0) as i64;
        let waiting_ms = row.waiting_since.map_or(0, |since| ms(since, now));
        let waited_ms = row.waited_ms + waiting_ms;
        let queued_ms = ms(r.created_at, r.running_at.unwrap_or(end));
        let first_line = r.task.lines().next().unwrap_or_default();
        let task = if first_line.chars().count() > 140 {
            format!("{}…", first_line.chars().take(139).collect::<String>())
        } else {
            first_line.to_owned()
        };
        Self {
            run_id: r.run_id.to_string(),
            pipeline: r.pipeline.clone(),
            task_id: r.task_id.to_string(),
            task,
            status: r.status.as_str(),
            icon: icon(r.status.as_str()),
            started: Moment::of(r.created_at),
            queued: if queued_ms >= 1000 { duration(queued_ms) } else { String::new() },
            ran: r.running_at.map(|at| duration((ms(at, end) - waited_ms).max(0))).unwrap_or_default(),
            people: r.people.clone(),
            pull: r.pull_request.as_ref().map(|p| PullView { number: p.number, url: p.url.clone() }),
            why: row.why,
            waiting_since: row.waiting_since.map(Moment::of),
            waited: if waited_ms >= 1000 { duration(waited_ms) } else { String::new() },
            waiting: duration(waiting_ms),
            ran_from: r
                .running_at
                .filter(|_| r.status == RunStatus::Running)
                .and_then(|at| at.checked_add(jiff::SignedDuration::from_millis(row.waited_ms)).ok())
                .map(|at| at.to_string()),
        }
    }
}

/// `/?…`: the filters, the search and the page of the runs list.
#[derive(Debug, Default, Deserialize, Serialize)]
pub(super) struct ListParams {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pipeline: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    q: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    by: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    since: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    until: String,
}

/// What is wrong with the runs list's filter.
#[derive(Debug, thiserror::Error)]
pub(super) enum BadFilter {
    /// Not a run status.
    #[error("unknown status `{0}`")]
    Status(String),
    /// Not a day the list can start or end on.
    #[error("{name} `{text}`: expected a date such as 2026-11-25")]
    Date { name: &'static str, text: String },
}

impl ListParams {
    /// The filter these ask for, or what is wrong with them.
    fn filter(&self, page: usize) -> Result<read::PageFilter, BadFilter> {
        let some = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
        let status = match some(&self.status) {
            Some(s) => Some(RunStatus::parse(&s).ok_or(BadFilter::Status(s))?),
            None => None,
        };
        let day = |text: &str, name: &'static str, next: bool| -> Result<Option<jiff::Timestamp>, BadFilter> {
            let Some(text) = some(text) else { return Ok(None) };
            let bad = || BadFilter::Date { name, text: text.clone() };
            let date: jiff::civil::Date = text.parse().map_err(|_| bad())?;
            let date = if next { date.tomorrow().map_err(|_| bad())? } else { date };
            Ok(Some(date.to_zoned(jiff::tz::TimeZone::UTC).map_err(|_| bad())?.timestamp()))
        };
        Ok(read::PageFilter {
            status,
            pipeline: some(&self.pipeline),
            text: some(&self.q).map(|t| t.chars().take(200).collect()),
            person: some(&self.by).map(|t| t.chars().take(100).collect()),
            since: day(&self.since, "from", false)?,
            // The "to" day is included: runs created before the next day begins.
            until: day(&self.until, "to", true)?,
            offset: page.saturating_sub(1) * PAGE_SIZE,
            limit: PAGE_SIZE,
        })
    }

    fn any(&self) -> bool {
        [&self.status, &self.pipeline, &self.q, &self.by, &self.since, &self.until].iter().any(|s| !s.trim().is_empty())
    }

    /// The query string of page `page` with these filters.
    fn link(&self, page: usize) -> String {
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        let page_text = page.to_string();
        for (k, v) in [
            ("status", &self.status),
            ("pipeline", &self.pipeline),
            ("q", &self.q),
            ("by", &self.by),
            ("since", &self.since),
            ("until", &self.until),
        ] {
            if !v.trim().is_empty() {
                pairs.push((k, v.as_str()));
            }
        }
        if page > 1 {
            pairs.push(("page", &page_text));
        }
        match serde_urlencoded::to_string(&pairs) {
            Ok(query) if !query.is_empty() => format!("/?{query}"),
            _ => "/".into(),
        }
    }
}

/// `/?token=…` signs in; `/` is the runs list (filters, search, a page of runs).
pub(super) async fn runs_page(
    State(shared): State<Arc<Shared>>,
    Query(q): Query<RunsQuery>,
    Query(params): Query<ListParams>,
    caller: Option<Extension<Caller>>,
) -> Response {
    if let Some(token) = q.token {
        if caller_of_token(&shared, &token).is_none() {
            return signin(&shared, StatusCode::UNAUTHORIZED, true);
        }
        let cookie =
            format!("{}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}", shared.cookie, shared.session_seconds);
        return (StatusCode::SEE_OTHER, [(header::SET_COOKIE, cookie), (header::LOCATION, "/".to_owned())])
            .into_response();
    }
    let Some(Extension(caller)) = caller else { return signin(&shared, StatusCode::UNAUTHORIZED, false) };
    let page_no =
        q.page.as_deref().and_then(|p| p.parse::<usize>().ok()).filter(|p| (1..=1_000_000).contains(p)).unwrap_or(1);
    let (filter, problem) = match params.filter(page_no) {
        Ok(f) => (f, None),
        Err(problem) => (read::PageFilter { limit: PAGE_SIZE, ..Default::default() }, Some(problem.to_string())),
    };
    let found = read::page(&shared.store, &filter).await;
    let (runs, total, problem) = match found {
        Ok(p) => (p.runs, p.total, problem),
        Err(e) => (Vec::new(), 0, Some(e.message())),
    };
    let now = jiff::Timestamp::now();
    let mut rows: Vec<RowView> = Vec::with_capacity(runs.len());
    for r in &runs {
        rows.push(RowView::of(r, RowState::of(&shared, r).await, now));
    }
    let first = filter.offset + 1;
    let last = filter.offset + rows.len();
    let pages = (total as usize).div_ceil(PAGE_SIZE).max(1);
    let pipelines: Vec<PipelineChoice> = ops::validate::pipelines(&shared.ws)
        .map(|p| {
            p.into_iter().map(|c| PipelineChoice { name: c.name, valid: c.valid, description: c.description }).collect()
        })
        .unwrap_or_default();
    let body = RunsPage {
        runs: rows,
        pipelines,
        statuses: ["waiting", "running", "queued", "interrupted", "success", "failed", "cancelled", "rejected"],
        filtered: params.any(),
        paging: Paging {
            total,
            first,
            last,
            page: page_no,
            pages,
            here: params.link(page_no),
            previous: (page_no > 1).then(|| params.link(page_no - 1)),
            next: (page_no < pages).then(|| params.link(page_no + 1)),
        },
        filter: params,
        problem,
    };
    page("runs.html", &Page { header: header_context(&shared, &caller, "runs").await, body })
}

/// The runs list.
#[derive(Debug, Serialize)]
struct RunsPage {
    /// This page's rows.
    runs: Vec<RowView>,
    /// The pipelines a run can be started with.
    pipelines: Vec<PipelineChoice>,
    /// The statuses the list can be filtered by.
    statuses: [&'static str; 8],
    /// The filters and search asked for.
    filter: ListParams,
    /// Whether any is set.
    filtered: bool,
    /// Where this page is among all.
    paging: Paging,
    /// What is wrong with the filters, or why the list could not be read.
    problem: Option<String>,
}

/// A pipeline of the start form.
#[derive(Debug, Serialize)]
struct PipelineChoice {
    name: String,
    valid: bool,
    description: String,
}

/// Where a page of the runs list is.
#[derive(Debug, Serialize)]
struct Paging {
    /// Runs matching the filters.
    total: u64,
    /// The first shown, counting from 1.
    first: usize,
    /// The last shown.
    last: usize,
    /// This page's number.
    page: usize,
    /// How many pages there are.
    pages: usize,
    /// This page's link, with its filters.
    here: String,
    /// The previous page's, if any.
    previous: Option<String>,
    /// The next page's, if any.
    next: Option<String>,
}

/// One row, alone.
#[derive(Debug, Serialize)]
struct RowPage {
    r: RowView,
}

/// `/runs/{run}/row`: one row of the runs list, for the page to update in place; the count of
/// runs and loops that wait for a person in `X-Waiting-Count`.
pub(super) async fn run_row(
    State(shared): State<Arc<Shared>>,
    Path(run): Path<String>,
    caller: Option<Extension<Caller>>,
) -> Response {
    if caller.is_none() {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let Some(run) = RunId::parse(&run) else { return StatusCode::NOT_FOUND.into_response() };
    let filter = read::PageFilter { text: Some(run.to_string()), limit: 5, ..Default::default() };
    let Ok(found) = read::page(&shared.store, &filter).await else { return StatusCode::NOT_FOUND.into_response() };
    let Some(summary) = found.runs.iter().find(|r| r.run_id == run) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let row = RowState::of(&shared, summary).await;
    let mut response = page("run_row.html", &RowPage { r: RowView::of(summary, row, jiff::Timestamp::now()) });
    let waiting = waiting_count(&shared).await;
    response.headers_mut().insert("x-waiting-count", waiting.into());
    response
}
