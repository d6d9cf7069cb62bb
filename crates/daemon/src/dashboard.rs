//! The dashboard at `/`: pages rendered here from the application layer (the same operations
//! the API calls) with templates and one small script embedded in the binary; nothing is
//! fetched from elsewhere and nothing is built at run time. The script keeps a page live: it
//! follows `/api/events` (and the output of the stage in flight), fetches the page again when
//! an event concerns it and swaps the part that changed; buttons and the start form call the
//! JSON API. Without the script every page still reads.
//!
//! Access: opened through the URL the daemon prints, which carries the token once; it is then
//! kept in an `HttpOnly`, `SameSite=Strict` cookie. Every page is sent with a strict
//! Content-Security-Policy (scripts and styles only from here, nothing inline), and everything
//! an agent or a pipeline wrote is escaped by the templates.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use axum::Extension;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use loopwright_app::ops::people::Role;
use loopwright_app::ops::{self, output, read};
use loopwright_engine::event::Event;
use loopwright_engine::result::WaitKind;
use loopwright_engine::state::StageStatus;
use loopwright_engine::{RunId, RunState, RunStatus, Store};
use serde::Deserialize;
use serde::Serialize;
use serde_json::{Value, json};

use crate::Shared;
use crate::api::auth::{Caller, caller_of_token};

/// The embedded files: (path under `/assets/`, content type, bytes).
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.js", "text/javascript; charset=utf-8", include_str!("../assets/app.js")),
    ("app.css", "text/css; charset=utf-8", include_str!("../assets/app.css")),
    ("feed-worker.js", "text/javascript; charset=utf-8", include_str!("../assets/feed-worker.js")),
    ("link.js", "text/javascript; charset=utf-8", include_str!("../assets/link.js")),
];

static TEMPLATES: LazyLock<minijinja::Environment<'static>> = LazyLock::new(|| {
    let mut env = minijinja::Environment::new();
    for (name, text) in [
        ("base.html", include_str!("../assets/base.html")),
        ("runs.html", include_str!("../assets/runs.html")),
        ("headline.html", include_str!("../assets/headline.html")),
        ("run_row.html", include_str!("../assets/run_row.html")),
        ("run.html", include_str!("../assets/run.html")),
        ("dead_letters.html", include_str!("../assets/dead_letters.html")),
        ("workers.html", include_str!("../assets/workers.html")),
        ("stats.html", include_str!("../assets/stats.html")),
        ("auto.html", include_str!("../assets/auto.html")),
        ("auto_report.html", include_str!("../assets/auto_report.html")),
        ("signin.html", include_str!("../assets/signin.html")),
        ("link.html", include_str!("../assets/link.html")),
    ] {
        env.add_template(name, text).expect("the embedded templates parse");
    }
    env
});

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

/// The dashboard's routes.
pub fn router() -> Router<Arc<Shared>> {
    use axum::routing::get;
    Router::new()
        .route("/", get(runs_page))
        .route("/runs/{run}", get(run_page))
        .route("/runs/{run}/row", get(run_row))
        .route("/a/{token}", get(link_page).post(link_answer))
        .route("/dead-letters", get(dead_letters_page))
        .route("/stats", get(stats_page))
        .route("/workers", get(workers_page))
        .route("/auto", get(auto_page))
        .route("/auto/{session}/report", get(auto_report_page))
        .route("/assets/{file}", get(asset))
}

/// `/?token=…` and the runs list's page number.
#[derive(Debug, Default, Deserialize)]
struct RunsQuery {
    token: Option<String>,
    page: Option<String>,
}

fn page(template: &str, context: Value) -> Response {
    match TEMPLATES.get_template(template).and_then(|t| t.render(minijinja::value::Serde(&context))) {
        Ok(html) => {
            let mut response = Html(html).into_response();
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
            headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
            response
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("the page could not be rendered: {e:#}")).into_response(),
    }
}

/// The page a visitor without the cookie gets.
fn signin(shared: &Shared, status: StatusCode, wrong: bool) -> Response {
    let days = shared.session_seconds / 86_400;
    let mut response = page("signin.html", json!({"wrong": wrong, "days": days}));
    *response.status_mut() = status;
    response
}

async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, ..)| *name == file) {
        Some((_, kind, body)) => {
            ([(header::CONTENT_TYPE, *kind), (header::CACHE_CONTROL, "no-cache")], *body).into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// What every page shows in its header: who is signed in and what they may do, how many runs
/// and auto loops wait for a person.
async fn header_context(shared: &Shared, caller: &Caller, current: &str) -> Value {
    let waiting = runs_waiting(shared).await;
    let feed = shared.store.feed_last().await.unwrap_or(0);
    let auto_needs = auto_needing_you(shared).await;
    json!({
        "waiting_count": waiting + auto_needs.len() as u64,
        "auto_needs": auto_needs.len(),
        "auto_needs_list": auto_needs,
        "current": current,
        "person": caller.person,
        "role": caller.role.as_str(),
        "can_answer": caller.role.may_answer(),
        "can_admin": caller.role >= Role::Admin,
        "kinds": Event::KINDS,
        "feed": feed,
    })
}

/// How many runs wait for a person.
async fn runs_waiting(shared: &Shared) -> u64 {
    let filter = read::PageFilter { status: Some(RunStatus::Waiting), limit: 1, ..Default::default() };
    read::page(&shared.store, &filter).await.map_or(0, |p| p.total)
}

/// How many runs and auto loops wait for a person (the header's badge).
async fn waiting_count(shared: &Shared) -> u64 {
    runs_waiting(shared).await + auto_needing_you(shared).await.len() as u64
}

/// The auto loops that wait for a person (a prompt the policy will not answer).
async fn auto_needing_you(shared: &Shared) -> Vec<Value> {
    let store = Arc::clone(&shared.auto_store);
    let loops = tokio::task::spawn_blocking(move || ops::auto::list(&store)).await.ok().and_then(Result::ok);
    loops
        .unwrap_or_default()
        .into_iter()
        .filter(|l| l.status == loopwright_auto::state::LoopStatus::NeedsHuman)
        .map(|l| {
            json!({
                "session": l.session_name,
                "task_dir": shared.ws.shown(std::path::Path::new(&l.task_dir)),
                "why": l.needs_human.as_deref().and_then(|w| w.lines().next()).unwrap_or_default(),
            })
        })
        .collect()
}

fn icon(status: &str) -> &'static str {
    match status {
        "success" | "succeeded" => "✓",
        "failed" => "✗",
        "cancelled" => "⊘",
        "waiting" => "⚑",
        "running" | "looping" => "▶",
        "interrupted" => "⚠",
        "queued" | "pending" | "retry_waiting" => "…",
        "skipped" => "↷",
        _ => "•",
    }
}

fn duration(ms: i64) -> String {
    let s = ms / 1000;
    match s {
        _ if ms < 1000 => format!("{ms} ms"),
        0..60 => format!("{:.1} s", ms as f64 / 1000.0),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// Time left until a wait's end, in whole seconds as the page's clock ticks it (`app.js`
/// `left`): a backoff is never shown as "57 ms".
fn countdown(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as i64;
    match s {
        3600.. => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
        60.. => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{s} s"),
    }
}

fn when(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// How many runs a page of the list shows.
const PAGE_SIZE: usize = 50;

/// A row of the runs list.
#[derive(Debug, Serialize)]
struct RowView {
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
}

impl RowView {
    fn of(r: &loopwright_engine::RunSummary, now: jiff::Timestamp) -> Self {
        let end = if r.status.is_final() { r.updated_at } else { now };
        let ms = |from: jiff::Timestamp, to: jiff::Timestamp| to.duration_since(from).as_millis().max(0) as i64;
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
            ran: r.running_at.map(|at| duration(ms(at, end))).unwrap_or_default(),
            people: r.people.clone(),
        }
    }
}

/// `/?…`: the filters, the search and the page of the runs list.
#[derive(Debug, Default, Deserialize, Serialize)]
struct ListParams {
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
enum BadFilter {
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
async fn runs_page(
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
    let rows: Vec<RowView> = runs.iter().map(|r| RowView::of(r, now)).collect();
    let first = filter.offset + 1;
    let last = filter.offset + rows.len();
    let pages = (total as usize).div_ceil(PAGE_SIZE).max(1);
    let pipelines: Vec<Value> = ops::validate::pipelines(&shared.ws)
        .map(|p| {
            p.into_iter().map(|c| json!({"name": c.name, "valid": c.valid, "description": c.description})).collect()
        })
        .unwrap_or_default();
    let statuses = ["waiting", "running", "queued", "interrupted", "success", "failed", "cancelled"];
    page(
        "runs.html",
        json!({
            "header": header_context(&shared, &caller, "runs").await,
            "runs": rows,
            "pipelines": pipelines,
            "statuses": statuses,
            "filter": params,
            "filtered": params.any(),
            "paging": {
                "total": total, "first": first, "last": last, "page": page_no, "pages": pages,
                "here": params.link(page_no),
                "previous": (page_no > 1).then(|| params.link(page_no - 1)),
                "next": (page_no < pages).then(|| params.link(page_no + 1)),
            },
            "problem": problem,
        }),
    )
}

/// A one-tap link checked — signed here, unexpired, unused, its person still allowed to
/// answer — or the page that refuses it.
async fn check_link(shared: &Shared, token: &str) -> Result<crate::notifications::Link, Refusal> {
    use crate::notifications::LinkRefused;
    let link = shared.signer.check(token, jiff::Timestamp::now()).map_err(|r| match r {
        LinkRefused::Forged => {
            Refusal(StatusCode::FORBIDDEN, "This link was not made by this loopwright, or it was changed.".into())
        }
        LinkRefused::Expired => {
            Refusal(StatusCode::GONE, "This link has expired. Open the run in the dashboard to answer it.".into())
        }
    })?;
    let store = Arc::clone(&shared.auto_store);
    let key = link.key.clone();
    let used = tokio::task::spawn_blocking(move || store.notify_link_used(&key)).await;
    match used {
        Ok(Ok(Some(None))) => {}
        Ok(Ok(Some(Some(at)))) => {
            return Err(Refusal(
                StatusCode::GONE,
                format!("This link was already used ({at}). Each link answers once."),
            ));
        }
        _ => {
            return Err(Refusal(
                StatusCode::FORBIDDEN,
                "This link's notification is not in this workspace's journal.".into(),
            ));
        }
    }
    match shared.people.role_of(&link.answer_as) {
        Some(role) if !role.may_answer() => {
            return Err(Refusal(
                StatusCode::FORBIDDEN,
                format!("{} may not answer: their role is viewer.", link.answer_as),
            ));
        }
        None if link.person => {
            return Err(Refusal(
                StatusCode::FORBIDDEN,
                format!("{} may no longer answer: their access was revoked.", link.answer_as),
            ));
        }
        _ => {}
    }
    Ok(link)
}

/// A one-tap link checked: the link and the run it answers, or the page that refuses it.
async fn open_link(
    shared: &Shared,
    link: crate::notifications::Link,
) -> Result<(LinkFor, RunState, loopwright_spec::Pipeline), Refusal> {
    use crate::notifications::LinkAction;
    let run = RunId::parse(&link.run).ok_or_else(|| Refusal(StatusCode::NOT_FOUND, "No such run.".into()))?;
    let (pipeline, state) = read::load_run(&shared.ws, &shared.store, &run)
        .await
        .map_err(|e| Refusal(StatusCode::NOT_FOUND, e.message()))?;
    let result = loopwright_engine::result::PipelineResult::from_state(&state);
    let gate = matches!(link.action, LinkAction::Approve | LinkAction::Reject);
    let waits = result.waiting.as_ref().is_some_and(|w| {
        w.stage == link.stage && (w.kind == WaitKind::Approval) == gate && state.status == RunStatus::Waiting
    });
    // The run must still wait the wait the link was made for: a later escalation or gate at the
    // same stage is another question, which this link did not ask.
    let began = if waits && link.since > 0 {
        let events = loopwright_engine::Store::events(&shared.store, &run)
            .await
            .map_err(|e| Refusal(StatusCode::NOT_FOUND, e.to_string()))?;
        events.iter().rev().find(|r| r.event.run_status() == Some(RunStatus::Waiting)).map(|r| r.seq)
    } else {
        None
    };
    if waits && link.since > 0 && began != Some(link.since) {
        return Err(Refusal(
            StatusCode::CONFLICT,
            format!(
                "This link was for an earlier question at {} of run {run}, which was answered. Nothing was answered; open the run to answer the new one.",
                link.stage
            ),
        ));
    }
    if !waits {
        return Err(Refusal(
            StatusCode::CONFLICT,
            format!(
                "Run {run} no longer waits at {}: it is {}. Nothing was answered.",
                link.stage,
                state.status.as_str()
            ),
        ));
    }
    Ok((LinkFor { link, run }, state, pipeline))
}

/// A link that was checked, with its run's id.
struct LinkFor {
    link: crate::notifications::Link,
    run: RunId,
}

/// Why a link page refuses: its status and words.
struct Refusal(StatusCode, String);

impl Refusal {
    /// The refusal as the answer to a confirmation's `POST` (the page's script shows it).
    fn json(self) -> Response {
        (self.0, axum::Json(json!({"error": {"code": "conflict", "message": self.1}}))).into_response()
    }

    fn page(self) -> Response {
        let mut response = page("link.html", json!({"refused": self.1}));
        *response.status_mut() = self.0;
        response
    }
}

/// `/a/{token}`: the confirmation page of a one-tap link — the headline, and the change so far
/// (a gate) or the escalation's report (the question).
async fn link_page(State(shared): State<Arc<Shared>>, Path(token): Path<String>) -> Response {
    let link = match check_link(&shared, &token).await {
        Ok(link) => link,
        Err(refusal) => return refusal.page(),
    };
    if let (Some(session), Some(choice)) = (link.session.clone(), link.choice.clone()) {
        return match auto_question(&shared, &link, &session).await {
            Ok(q) => page(
                "link.html",
                json!({
                    "auto": true,
                    "session": session,
                    "label": format!("{}. {}", choice.key, choice.label),
                    "as": link.answer_as,
                    "why": legible(&q.why),
                    "approves": if choice.is_yes() { q.approves } else { None },
                }),
            ),
            Err(refusal) => refusal.page(),
        };
    }
    let (found, state, pipeline) = match open_link(&shared, link).await {
        Ok(found) => found,
        Err(refusal) => return refusal.page(),
    };
    let status = loopwright_app::ownership::shown_status(&state);
    let link = &found.link;
    let report = read::escalation_report(&state).map(|(_, m)| render_markdown(&m));
    let gate =
        matches!(link.action, crate::notifications::LinkAction::Approve | crate::notifications::LinkAction::Reject);
    page(
        "link.html",
        json!({
            "run": found.run.as_str(),
            "pipeline": state.started.as_ref().map(|s| s.pipeline.clone()),
            "task": state.started.as_ref().map(|s| s.task.clone()),
            "stage": link.stage,
            "action": link.action,
            "label": link.action.label(),
            "as": link.answer_as,
            "headline": ops::why::run_headline(&state, status, &pipeline),
            "diff": if gate { read::run_diff(&state, 400) } else { None },
            "report": if gate { None } else { report },
            "gate": gate,
        }),
    )
}

/// What a person adds when confirming a link.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkConfirm {
    #[serde(default)]
    comment: Option<String>,
    #[serde(default)]
    text: Option<String>,
}

/// `POST /a/{token}`: answers as the link says, once.
async fn link_answer(
    State(shared): State<Arc<Shared>>,
    Path(token): Path<String>,
    crate::api::error::OptionalJson(body): crate::api::error::OptionalJson<LinkConfirm>,
) -> Response {
    use crate::notifications::LinkAction;
    let refuse = |code: StatusCode, message: String| Refusal(code, message).json();
    let link = match check_link(&shared, &token).await {
        Ok(link) => link,
        Err(Refusal(code, message)) => return refuse(code, message),
    };
    if let (Some(session), Some(choice)) = (link.session.clone(), link.choice.clone()) {
        return auto_link_answer(&shared, link, session, choice).await;
    }
    let (found, _, _) = match open_link(&shared, link).await {
        Ok(found) => found,
        Err(Refusal(code, message)) => return refuse(code, message),
    };
    let link = found.link;
    let text = body.text.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
    if link.action == LinkAction::Fix && text.is_none() {
        return refuse(StatusCode::UNPROCESSABLE_ENTITY, "Write the guidance for the next attempt.".into());
    }
    let comment = body.comment.map(|c| c.trim().chars().take(2000).collect::<String>()).filter(|c| !c.is_empty());
    if let Err(Refusal(code, message)) = spend_link(shared.as_ref(), &link.key).await {
        return refuse(code, message);
    }
    use loopwright_engine::event::Answer;
    let by = link.answer_as.clone();
    let answered = match link.action {
        LinkAction::Approve => crate::api::runs::answer_gate(&shared, &found.run, true, by, comment, false).await,
        LinkAction::Reject => crate::api::runs::answer_gate(&shared, &found.run, false, by, comment, false).await,
        LinkAction::Retry => crate::api::runs::answer_escalation(&shared, &found.run, Answer::Retry, by).await,
        LinkAction::Fix => {
            let text = text.unwrap_or_default().chars().take(20_000).collect();
            crate::api::runs::answer_escalation(&shared, &found.run, Answer::Fix { text }, by).await
        }
        LinkAction::Skip => crate::api::runs::answer_escalation(&shared, &found.run, Answer::Skip, by).await,
        LinkAction::Abort => crate::api::runs::answer_escalation(&shared, &found.run, Answer::Abort, by).await,
        LinkAction::Choose => return refuse(StatusCode::FORBIDDEN, "This link answers no run.".into()),
    };
    match answered {
        Ok(()) => axum::Json(json!({
            "done": format!("{} — answered as {} on run {}", link.action.label(), link.answer_as, found.run),
            "run_url": format!("/runs/{}", found.run),
        }))
        .into_response(),
        Err(e) => e.into_response(),
    }
}

/// Spends the link `key` before its answer is recorded: two taps at once answer once.
async fn spend_link(shared: &Shared, key: &str) -> Result<(), Refusal> {
    let (store, key, at) = (Arc::clone(&shared.auto_store), key.to_owned(), jiff::Timestamp::now().to_string());
    match tokio::task::spawn_blocking(move || store.notify_use_link(&key, &at)).await {
        Ok(Ok(loopwright_store::notify::LinkUse::First)) => Ok(()),
        _ => Err(Refusal(StatusCode::GONE, "This link was already used. Each link answers once.".into())),
    }
}

/// The question an auto loop's link was made for, while the loop still waits on it.
async fn auto_question(
    shared: &Arc<Shared>,
    link: &crate::notifications::Link,
    session: &str,
) -> Result<ops::auto::Question, Refusal> {
    let (s, name) = (Arc::clone(shared), session.to_owned());
    let found = tokio::task::spawn_blocking(move || ops::auto::question(&s.ws, &s.auto_store, &name)).await;
    match found {
        Ok(Ok(Some(q))) if u64::try_from(q.asked).ok() == Some(link.since) => Ok(q),
        Ok(Err(e)) => Err(Refusal(StatusCode::NOT_FOUND, e.message())),
        _ => Err(Refusal(
            StatusCode::CONFLICT,
            format!(
                "Auto loop {session} no longer waits on the question this link was made for. Nothing was answered; open the Auto page to see where it is."
            ),
        )),
    }
}

/// `POST /a/{token}` of a link to an auto loop's menu: its choice typed, once, as the link's
/// person — journaled as typed through a link.
async fn auto_link_answer(
    shared: &Arc<Shared>,
    link: crate::notifications::Link,
    session: String,
    choice: loopwright_auto::screen::Choice,
) -> Response {
    let refuse = |code: StatusCode, message: String| Refusal(code, message).json();
    if let Err(Refusal(code, message)) = auto_question(shared, &link, &session).await {
        return refuse(code, message);
    }
    if let Err(Refusal(code, message)) = spend_link(shared.as_ref(), &link.key).await {
        return refuse(code, message);
    }
    let by = format!("{} (one-tap link)", link.answer_as);
    let asked = i64::try_from(link.since).unwrap_or_default();
    let (s, name, picked) = (Arc::clone(shared), session.clone(), choice.clone());
    let answered = tokio::task::spawn_blocking(move || {
        ops::auto::answer_question(&s.ws, &s.auto_store, &name, asked, &picked, &by)
    })
    .await;
    match answered {
        Ok(Ok(_)) => axum::Json(json!({
            "done": format!("{}. {} — typed as {} in auto loop {session}", choice.key, choice.label, link.answer_as),
            "run_url": format!("/auto#loop-{session}"),
        }))
        .into_response(),
        Ok(Err(e)) => refuse(StatusCode::CONFLICT, e.message()),
        Err(_) => refuse(StatusCode::INTERNAL_SERVER_ERROR, "the answer could not be typed".into()),
    }
}

/// `/runs/{run}/row`: one row of the runs list, for the page to update in place; the count of
/// runs and loops that wait for a person in `X-Waiting-Count`.
async fn run_row(
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
    let mut response = page("run_row.html", json!({"r": RowView::of(summary, jiff::Timestamp::now())}));
    let waiting = waiting_count(&shared).await;
    response.headers_mut().insert("x-waiting-count", waiting.into());
    response
}

async fn run_page(
    State(shared): State<Arc<Shared>>,
    Path(run): Path<String>,
    caller: Option<Extension<Caller>>,
) -> Response {
    let Some(Extension(caller)) = caller else { return signin(&shared, StatusCode::UNAUTHORIZED, false) };
    let header_ctx = header_context(&shared, &caller, "run").await;
    let not_found = |message: String| {
        let mut r = page("run.html", json!({"header": header_ctx, "missing": message}));
        *r.status_mut() = StatusCode::NOT_FOUND;
        r
    };
    let Some(run) = RunId::parse(&run) else { return not_found(format!("There is no run `{run}`.")) };
    // One read of the journal for the whole page, however many stages the run has.
    let (pipeline, state, events) = match read::load_run_events(&shared.ws, &shared.store, &run).await {
        Ok(loaded) => loaded,
        Err(e) => return not_found(e.message()),
    };
    let shown = loopwright_app::ownership::shown_status(&state);
    let run_dir = shared.ws.runs_dir().join(run.as_str());
    let by_stage = read::events_by_stage(&events);
    let mut attempts = BTreeMap::new();
    for stage in &state.stages {
        let id = stage.id.as_str();
        let of_stage = read::attempts_in(&run_dir, &state, id, by_stage.get(id).map_or(&[][..], Vec::as_slice));
        attempts.insert(id.to_owned(), of_stage);
    }
    let context = run_context(&shared, &pipeline, &state, shown, &events, &attempts);
    let store = Arc::clone(&shared.auto_store);
    let id = run.to_string();
    let notified: Vec<NotifiedView> = tokio::task::spawn_blocking(move || store.notifications(Some(&id), 100))
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default()
        .into_iter()
        .map(NotifiedView::of)
        .collect();
    page("run.html", json!({"header": header_ctx, "run": context, "notified": notified}))
}

/// Everything the run page shows.
fn run_context(
    shared: &Shared,
    pipeline: &loopwright_spec::Pipeline,
    state: &RunState,
    status: RunStatus,
    events: &[loopwright_engine::EventRecord],
    attempts: &BTreeMap<String, Vec<read::Attempt>>,
) -> Value {
    let started = state.started.as_ref();
    let first = events.first().map(|e| e.at);
    let last = events.last().map(|e| e.at);
    let now = jiff::Timestamp::now();
    let elapsed = match (first, last) {
        (Some(f), Some(l)) => (if status.is_final() { l } else { now }).duration_since(f).as_millis() as i64,
        _ => 0,
    };
    // A stage in flight has run for its finished attempts and the current one so far.
    let in_attempt_since = |id: &loopwright_spec::StageId| {
        events.iter().rev().find_map(|e| match &e.event {
            Event::AttemptStarted { stage, .. } if stage == id => Some(e.at),
            _ => None,
        })
    };
    let shown_ms = |st: &loopwright_engine::state::StageState| {
        let running = matches!(st.status, StageStatus::Running | StageStatus::Looping) && !status.is_final();
        let current = in_attempt_since(&st.id)
            .filter(|_| running)
            .map_or(0, |at| u64::try_from(now.duration_since(at).as_millis()).unwrap_or(0));
        st.duration_ms + current
    };
    let longest = state.stages.iter().map(shown_ms).max().unwrap_or(0).max(1);
    let in_flight = output::in_flight(state);
    let result = loopwright_engine::result::PipelineResult::from_state(state);
    // The stage at a gate or escalation the run waits on.
    let waiting_at = result.waiting.as_ref().filter(|_| status == RunStatus::Waiting).map(|w| w.stage.as_str());
    let mut stages = Vec::new();
    // Every stage of the pipeline, in its order; those not reached yet are pending.
    for stage in &pipeline.stages {
        let Some(st) = state.stage(stage.id.as_str()) else {
            stages.push(json!({
                "id": stage.id.as_str(), "status": "pending", "icon": icon("pending"), "attempts_count": 0,
                "duration": duration(0), "width": 0, "marks": [], "attempts": [], "spend": null,
                "in_flight": false, "outputs": [],
            }));
            continue;
        };
        let status_word = if waiting_at == Some(st.id.as_str()) {
            "waiting"
        } else if status.is_final() && matches!(st.status, StageStatus::Running | StageStatus::Looping) {
            // The run ended (interrupted, cancelled) while this stage was in flight.
            "interrupted"
        } else {
            stage_word(st.status)
        };
        let ms = shown_ms(st);
        let attempts: Vec<Value> = attempts
            .get(st.id.as_str())
            .map(|a| {
                a.iter()
                    .map(|attempt| {
                        // The attempt in flight prints into the live box below, not here too.
                        let live = !status.is_final()
                            && in_flight
                                .as_ref()
                                .is_some_and(|f| f.stage == st.id.as_str() && f.attempt == attempt.number);
                        attempt_context(attempt, live)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let budget = pipeline.stage(st.id.as_str()).map(|s| s.budget).unwrap_or_default();
        let spend = &st.spend;
        let spend_line = (spend.invocations > 0 || budget.tokens.is_some() || budget.cost_usd.is_some()).then(|| {
            let mut parts = vec![format!(
                "{} tokens{}",
                spend.tokens,
                budget.tokens.map(|b| format!(" of {b}")).unwrap_or_default()
            )];
            parts.push(format!(
                "${:.4}{}",
                spend.cost_usd,
                budget.cost_usd.map(|b| format!(" of ${b:.2}")).unwrap_or_default()
            ));
            parts.push(format!(
                "{} agent call(s){}",
                spend.invocations,
                budget.invocations.map(|b| format!(" of {b}")).unwrap_or_default()
            ));
            format!("{}{}", parts.join(" · "), if spend.estimated { " (tokens estimated)" } else { "" })
        });
        stages.push(json!({
            "id": st.id.as_str(),
            "status": status_word,
            "icon": icon(status_word),
            "attempts_count": st.attempts,
            "duration": duration(ms as i64),
            "width": (ms as f64 / longest as f64 * 100.0).clamp(1.0, 100.0).round(),
            "marks": (1..=st.attempts).collect::<Vec<u32>>(),
            "attempts": attempts,
            "spend": spend_line,
            "in_flight": in_flight.as_ref().is_some_and(|f| f.stage == st.id.as_str()),
            "outputs": st.outputs.keys().collect::<Vec<_>>(),
            "headline": ops::why::stage_headline(st, pipeline),
        }));
    }
    let waiting = result.waiting.as_ref().filter(|_| status == RunStatus::Waiting).map(|w| {
        let report = (w.kind == WaitKind::Escalation)
            .then(|| read::escalation_report(state).map(|(_, m)| render_markdown(&m)))
            .flatten();
        let impact = loopwright_spec::StageId::parse(&w.stage)
            .filter(|_| w.kind == WaitKind::Escalation)
            .map(|s| ops::answer::skip_impact(pipeline, state, &s));
        json!({"kind": w.kind, "stage": w.stage, "report": report, "skip_impact": impact})
    });
    let rollback: Vec<String> = events.iter().filter_map(|r| rollback_line(&r.event)).collect();
    let letters: Vec<Value> = ops::dead_letters::list(&shared.ws)
        .into_iter()
        .filter(|row| row.run_id == state.run_id.as_str())
        .filter_map(|row| ops::dead_letters::show(&shared.ws, &row.task_id).ok())
        .map(|l| json!({"task_id": l.task_id, "text": render_markdown(&l.text)}))
        .collect();
    let answers = read::answers(events);
    let resumable = matches!(ops::resume::check(state), Ok(ops::resume::Resumable::Yes))
        && matches!(status, RunStatus::Interrupted);
    json!({
        "id": state.run_id.as_str(),
        "pipeline": started.map(|s| s.pipeline.clone()),
        "task_id": started.map(|s| s.task_id.to_string()),
        "task": started.map(|s| s.task.clone()),
        "status": status.as_str(),
        "icon": icon(status.as_str()),
        "started": first.map(when),
        "duration": duration(elapsed),
        "final": status.is_final(),
        "retry_from": state.stages.iter().find(|s| s.status == StageStatus::Failed).map(|s| s.id.as_str()),
        "cancellable": !status.is_final(),
        "resumable": resumable,
        "stages": stages,
        "waiting": waiting,
        "ended_by": ended_by(status, &answers),
        // The worker that drives it now, or drove it last (runs submitted to workers).
        "worker": state.owner.as_ref().and_then(|o| o.worker.clone()),
        "headline": ops::why::run_headline(state, status, pipeline),
        "answers": answers.into_iter().map(AnswerView::of).collect::<Vec<_>>(),
        "artifacts": result.artifacts,
        "failed_stage": result.failed_stage,
        "rollback": rollback,
        "dead_letters": letters,
        "in_flight": in_flight.map(|f| json!({"stage": f.stage, "attempt": f.attempt})),
    })
}

fn stage_word(status: StageStatus) -> &'static str {
    // Finer than the result JSON's word while a stage is between attempts.
    match status {
        StageStatus::RetryWaiting => "retry_waiting",
        StageStatus::Looping => "looping",
        other => other.as_str(),
    }
}

/// How an attempt ended, in words (a closed-loop attempt ends in one of its phases).
fn attempt_word(status: &str) -> String {
    match status {
        "generated" => "generated, not checked yet",
        "validated" => "validated, its checks next",
        "evaluated" => "checked",
        "regression_checked" => "checked for regressions",
        "analyzed" => "failed; its failure analyzed",
        "fix_applied" => "failed; a fix was applied for the next attempt",
        "loop_escalated" => "failed; escalated to a person",
        "dead_lettered" => "failed; given up (dead letter)",
        other => other,
    }
    .to_owned()
}

/// A stage's error in words: what failed, how it ended and the pattern it matched.
fn error_words(e: &loopwright_engine::StageError) -> String {
    let mut text = e.message.trim().to_owned();
    if let Some(code) = e.exit_code
        && !text.contains(&format!("exit code {code}"))
    {
        text.push_str(&format!(" (exit code {code})"));
    }
    if let Some(p) = &e.pattern {
        text.push_str(&format!(" — failure pattern {p}"));
    }
    text
}

fn attempt_context(a: &read::Attempt, live: bool) -> Value {
    let usage = a.usage.as_ref().map(|u| {
        let cost = u.cost_usd.map(|c| format!(", ${c:.4}")).unwrap_or_default();
        let estimated = if u.estimated { " (estimated)" } else { "" };
        format!("{} tokens{cost}{estimated}", u.input_tokens + u.output_tokens)
    });
    // What the closed loop did and decided, phase by phase, in sentences.
    let phases: Vec<ops::why::Phase> = a.phases.iter().filter_map(ops::why::phase).collect();
    json!({
        "number": a.number,
        "status": attempt_word(&a.status),
        "icon": icon(&a.status),
        "started": a.started_at.map(when),
        "duration": a.duration_ms.map(|d| duration(d as i64)),
        "prompt": a.prompt,
        "output": if live { None } else { a.output.as_ref() },
        "stderr": if live { None } else { a.stderr.as_ref() },
        "live": live,
        "error": a.error.as_ref().map(error_words),
        // The error's output is the tail of the attempt's stderr or stdout: shown apart only
        // when neither is there to show it (one attempt, one output).
        "error_output": a
            .error
            .as_ref()
            .map(|e| e.output_tail.clone())
            .filter(|t| !t.trim().is_empty())
            .filter(|t| ![&a.output, &a.stderr].iter().any(|o| o.as_deref().is_some_and(|o| o.contains(t.trim())))),
        "retry_context": a.retry_context,
        "usage": usage,
        "phases": phases,
    })
}

async fn dead_letters_page(State(shared): State<Arc<Shared>>, caller: Option<Extension<Caller>>) -> Response {
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
async fn workers_page(State(shared): State<Arc<Shared>>, caller: Option<Extension<Caller>>) -> Response {
    let Some(Extension(caller)) = caller else { return signin(&shared, StatusCode::UNAUTHORIZED, false) };
    let header_ctx = header_context(&shared, &caller, "workers").await;
    let workers = ops::fleet::workers(&shared.store, jiff::Timestamp::now()).await.unwrap_or_default();
    let shared_store = shared.store.postgres().is_some();
    page("workers.html", json!({"header": header_ctx, "shared": shared_store, "workers": workers}))
}

async fn stats_page(State(shared): State<Arc<Shared>>, caller: Option<Extension<Caller>>) -> Response {
    let Some(Extension(caller)) = caller else { return signin(&shared, StatusCode::UNAUTHORIZED, false) };
    let header_ctx = header_context(&shared, &caller, "stats").await;
    let stats = match ops::stats::stats(&shared.ws, 10_000).await {
        Ok(s) => s.report(),
        Err(e) => return page("stats.html", json!({"header": header_ctx, "missing": e.message()})),
    };
    page("stats.html", json!({"header": header_ctx, "stats": stats}))
}

/// The auto loops' page: each loop's status object in words, its live screen and journal,
/// the stop button; the start dialog with the defaults of `[auto]`.
async fn auto_page(State(shared): State<Arc<Shared>>, caller: Option<Extension<Caller>>) -> Response {
    let Some(Extension(caller)) = caller else { return signin(&shared, StatusCode::UNAUTHORIZED, false) };
    let header_ctx = header_context(&shared, &caller, "auto").await;
    let (ws, store) = (shared.ws.clone(), Arc::clone(&shared.auto_store));
    let gathered = tokio::task::spawn_blocking(move || {
        let loops = ops::auto::list_with_settings(&store).unwrap_or_default();
        let now = jiff::Timestamp::now();
        let mut views: Vec<LoopView> =
            loops.into_iter().map(|(l, settings)| auto_view(&ws, &store, l, &settings, now)).collect();
        // Those that need a person first.
        views.sort_by_key(|v| v.status != "needs_human");
        (views, ops::auto::modules(&ws))
    })
    .await;
    let (loops, modules) = gathered.unwrap_or_default();
    let (agents, _) = ops::agents::list(&shared.ws);
    let mut names: Vec<String> = agents.keys().cloned().collect();
    for preset in ["claude", "codex", "gemini", "aider", "opencode", "goose"] {
        if !names.iter().any(|n| n == preset) {
            names.push(preset.to_owned());
        }
    }
    let defaults = &shared.ws.config.auto;
    page(
        "auto.html",
        json!({
            "header": header_ctx,
            "loops": loops,
            "modules": modules,
            "agents": names,
            "default_agent": shared.ws.config.defaults.runner,
            // `30`, not `30.0`: what a person would type.
            "defaults": {"max_iterations": defaults.max_iterations, "timeout_minutes": format!("{}", defaults.timeout_minutes)},
        }),
    )
}

/// A report's sections with what the reader can act on first: the suggested steps, then the
/// error (chain, details), then the others as written. Sections are the headings of the level
/// the "Suggested …" heading has; what comes before the first of them, and after a rule or a
/// heading of a higher level, stays where it is. The Markdown parser finds the headings (a `#`
/// in a code block is not one).
fn actionable_first(body: &str) -> String {
    use pulldown_cmark::{Event as Md, HeadingLevel, Options, Parser, Tag, TagEnd};
    // (offset, heading level and title), or a rule (level 0).
    let mut marks: Vec<(usize, HeadingLevel, String)> = Vec::new();
    let mut title: Option<(usize, HeadingLevel, String)> = None;
    for (event, range) in Parser::new_ext(body, Options::ENABLE_TABLES).into_offset_iter() {
        match event {
            Md::Start(Tag::Heading { level, .. }) => title = Some((range.start, level, String::new())),
            Md::Text(t) | Md::Code(t) => {
                if let Some((_, _, text)) = title.as_mut() {
                    text.push_str(&t);
                }
            }
            Md::End(TagEnd::Heading(_)) => marks.extend(title.take()),
            // A rule ends the sections: what follows it stays last.
            Md::Rule => marks.push((range.start, HeadingLevel::H1, String::new())),
            _ => {}
        }
    }
    let Some(level) = marks.iter().find(|(_, _, t)| t.to_lowercase().starts_with("suggested")).map(|(_, l, _)| *l)
    else {
        return body.to_owned();
    };
    let Some(first) = marks.iter().position(|(_, l, t)| *l == level && !t.is_empty()) else { return body.to_owned() };
    let mut sections: Vec<&str> = Vec::new();
    let mut end = body.len();
    let mut k = first;
    while k < marks.len() && marks[k].1 == level && !marks[k].2.is_empty() {
        let next = marks[k + 1..].iter().find(|(_, l, t)| *l <= level || t.is_empty()).map(|(o, ..)| *o);
        let stop = next.unwrap_or(body.len());
        sections.push(&body[marks[k].0..stop]);
        end = stop;
        k = marks.iter().position(|(o, ..)| *o == stop).unwrap_or(marks.len());
    }
    let rank = |s: &str| {
        let heading = s.lines().next().unwrap_or_default().to_lowercase();
        if heading.contains("suggested") {
            0
        } else if heading.contains("error") {
            1
        } else {
            2
        }
    };
    sections.sort_by_key(|s| rank(s));
    let mut out = body[..marks[first].0].to_owned();
    for section in sections {
        out.push_str(section.trim_end_matches('\n'));
        out.push_str("\n\n");
    }
    out.push_str(&body[end..]);
    out
}

/// A report written in Markdown (an escalation, a dead letter) as the page shows it: its body
/// rendered, its YAML frontmatter (the record's fields) apart, for the end.
#[derive(Debug, Serialize)]
struct Rendered {
    /// The body as HTML: headings, lists, tables, code; no raw HTML, link or image of the
    /// text's own (what an agent or a model wrote is in it).
    html: String,
    /// The frontmatter, as written.
    frontmatter: Option<String>,
}

fn render_markdown(text: &str) -> Rendered {
    use pulldown_cmark::{Event as Md, Options, Parser, Tag, TagEnd};
    let (frontmatter, body) = match text.strip_prefix("---\n").and_then(|rest| rest.split_once("\n---\n")) {
        Some((front, body)) => (Some(front.to_owned()), body),
        None => (None, text),
    };
    let body = actionable_first(body);
    let events = Parser::new_ext(&body, Options::ENABLE_TABLES).filter_map(|e| match e {
        // HTML in the text is shown as text; links and images keep only their words.
        Md::Html(raw) | Md::InlineHtml(raw) => Some(Md::Text(raw)),
        Md::Start(Tag::Link { .. } | Tag::Image { .. }) | Md::End(TagEnd::Link | TagEnd::Image) => None,
        other => Some(other),
    });
    let mut html = String::new();
    pulldown_cmark::html::push_html(&mut html, events);
    Rendered { html, frontmatter }
}

/// A rollback's step in words: what was undone, how, and how it went.
fn rollback_line(event: &Event) -> Option<String> {
    use loopwright_spec::pipeline::RollbackStrategy;
    let names = |stages: &[loopwright_spec::StageId]| stages.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
    Some(match event {
        Event::RollbackStarted { trigger: Some(t), stages } => {
            format!("Rolling back {} after {} failed", names(stages), t.as_str())
        }
        Event::RollbackStarted { trigger: None, stages } => format!("Rolling back {} (asked for)", names(stages)),
        Event::StageRolledBack { stage, strategy, status, detail } => {
            let how = match strategy {
                RollbackStrategy::GitRevert => "its commits reverted",
                RollbackStrategy::FileRestore => "its files restored",
                RollbackStrategy::MemoryCleanup => "its artifacts and state removed",
                RollbackStrategy::Manual => "manual steps",
            };
            let detail = if detail.trim().is_empty() { String::new() } else { format!(": {}", detail.trim()) };
            format!("{} — {how}, {}{detail}", stage.as_str(), status.as_str())
        }
        Event::RollbackFinished { overall } => format!("Rollback finished: {}", overall.as_str()),
        _ => return None,
    })
}

/// Why a cancelled run ended, when a person ended it: a rejected gate (and the comment) or a
/// cancel, with who — so the header does not just say "cancelled".
fn ended_by(status: RunStatus, answers: &[read::PersonAnswer]) -> Option<String> {
    if status != RunStatus::Cancelled {
        return None;
    }
    answers.iter().rev().find_map(|a| match a.action {
        read::PersonAction::Rejected => Some(format!(
            "Rejected by {} at {}{}",
            a.by,
            a.stage.as_deref().unwrap_or("its gate"),
            a.comment.as_ref().map(|c| format!(": {c}")).unwrap_or_default()
        )),
        read::PersonAction::Cancelled => Some(format!("Cancelled by {}", a.by)),
        _ => None,
    })
}

/// A notification about the run, as its page lists it.
#[derive(Debug, Serialize)]
struct NotifiedView {
    at: Option<Moment>,
    event: String,
    target: String,
    outcome: String,
}

impl NotifiedView {
    fn of(n: loopwright_store::notify::Notification) -> Self {
        use loopwright_store::notify::NotificationStatus;
        let tries = if n.attempts == 1 { "1 try".to_owned() } else { format!("{} tries", n.attempts) };
        let outcome = match n.status {
            NotificationStatus::Pending => format!(
                "being sent ({tries} so far{})",
                if n.detail.is_empty() { String::new() } else { format!(": {}", n.detail) }
            ),
            NotificationStatus::NotificationSent => format!("sent ({tries})"),
            NotificationStatus::NotificationFailed => format!("not delivered after {tries}: {}", n.detail),
        };
        let outcome = match &n.link_used_at {
            Some(at) => format!("{outcome}; its link was used at {at}"),
            None => outcome,
        };
        Self { at: n.at.parse().ok().map(Moment::of), event: n.event.replace('_', " "), target: n.target, outcome }
    }
}

/// An answer a person gave the run, as its page shows it.
#[derive(Debug, Serialize)]
struct AnswerView {
    at: Moment,
    by: String,
    verb: &'static str,
    stage: Option<String>,
    detail: Option<String>,
    comment: Option<String>,
}

impl AnswerView {
    fn of(a: read::PersonAnswer) -> Self {
        Self {
            at: Moment::of(a.at),
            by: a.by,
            verb: a.action.verb(),
            stage: a.stage,
            detail: a.detail,
            comment: a.comment,
        }
    }
}

/// One loop as the auto page shows it.
#[derive(Debug, Serialize)]
struct LoopView {
    session: String,
    status: &'static str,
    status_word: &'static str,
    status_class: &'static str,
    icon: &'static str,
    active: bool,
    task_dir: String,
    agent: String,
    agent_session_id: Option<String>,
    started: Moment,
    iteration: u64,
    max_iterations: u64,
    elapsed: String,
    timeout: String,
    /// Time waited for the provider (not counted), if any.
    paused: Option<String>,
    step: String,
    result: String,
    next: String,
    checkpoint: String,
    last_signal_at: Option<Moment>,
    stall_count: u32,
    recovery_count_step: u32,
    recovery_count_total: u32,
    restart_count: u32,
    limits: LoopLimits,
    quota_wait_since: Option<Moment>,
    quota_resets_at: Option<Moment>,
    quota_left: Option<String>,
    /// A wait for the provider's rate limit rather than a usage limit.
    rate_limited: bool,
    checks_to_approve: Vec<String>,
    stop_reason: Option<&'static str>,
    needs_human: Option<String>,
    /// Its first line: why the policy did not answer (shown above the choices).
    needs_why: Option<String>,
    checks: Vec<loopwright_auto::state::CheckRun>,
    screen: Option<String>,
    /// The menu the agent shows, as (key, label): a person answers with one of them.
    choices: Vec<(String, String)>,
    alive: bool,
    log: Vec<LogLine>,
    log_count: usize,
}

/// A moment: ISO 8601 for the page's script (which says it in the viewer's zone and words)
/// and UTC text for a page without it.
#[derive(Debug, Serialize)]
struct Moment {
    iso: String,
    text: String,
}

impl Moment {
    fn of(t: jiff::Timestamp) -> Self {
        Self { iso: t.to_string(), text: when(t) }
    }
}

#[derive(Debug, Serialize)]
struct LoopLimits {
    recoveries_per_iteration: u32,
    recoveries_total: u32,
    restarts: u32,
    /// The window the restart budget counts in, in words.
    restart_window: String,
}

/// One supervision journal entry, in words.
#[derive(Debug, Serialize)]
struct LogLine {
    at: Moment,
    kind: String,
    said: String,
}

/// A loop's summary page.
#[derive(Debug, Serialize)]
struct ReportView {
    session: String,
    status: &'static str,
    steps: usize,
    checks_passed: usize,
    checks_failed: usize,
    waits: usize,
    recoveries: usize,
    restarts: usize,
    needs_human: usize,
    cost: Option<String>,
    markdown: String,
}

/// `/auto/{session}/report`: the night's summary of a loop (git is asked for the module's
/// changes: on demand, not in the page that refreshes every second).
async fn auto_report_page(
    State(shared): State<Arc<Shared>>,
    Path(session): Path<String>,
    caller: Option<Extension<Caller>>,
) -> Response {
    let Some(Extension(caller)) = caller else { return signin(&shared, StatusCode::UNAUTHORIZED, false) };
    let header_ctx = header_context(&shared, &caller, "auto").await;
    let (ws, store) = (shared.ws.clone(), Arc::clone(&shared.auto_store));
    let found = tokio::task::spawn_blocking(move || {
        let status = ops::auto::session_status(&store, &session)?;
        ops::auto::report(&ws, &store, &status.session_name)
    })
    .await;
    let Ok(Ok(r)) = found else {
        return (StatusCode::NOT_FOUND, Html("no such auto loop".to_owned())).into_response();
    };
    let view = ReportView {
        session: r.session_name.clone(),
        status: r.status.as_str(),
        steps: r.steps.len(),
        checks_passed: r.checks.iter().filter(|c| c.passed).count(),
        checks_failed: r.checks.iter().filter(|c| !c.passed).count(),
        waits: r.waits.len(),
        recoveries: r.recoveries.len(),
        restarts: r.restart_count,
        needs_human: r.needs_human.len(),
        cost: r.cost.clone(),
        markdown: r.to_markdown(),
    };
    page("auto_report.html", json!({ "header": header_ctx, "report": view }))
}

fn auto_view(
    ws: &loopwright_app::workspace::Workspace,
    store: &loopwright_store::SqliteStore,
    l: loopwright_auto::supervisor::AutoStatus,
    settings: &loopwright_auto::Settings,
    now: jiff::Timestamp,
) -> LoopView {
    use loopwright_auto::event::AutoEvent;
    use loopwright_auto::state::{LoopStatus, WaitKind};
    let active = !l.status.is_final();
    let secs = |s: f64| duration((s * 1000.0) as i64);
    let screen = ops::auto::screen(ws, store, &l.session_name).ok().filter(|s| s.alive || !s.screen.trim().is_empty());
    let entries = store.auto_log_since(&l.loop_id, 0).unwrap_or_default();
    let log: Vec<LogLine> = entries
        .iter()
        .rev()
        .take(50)
        .rev()
        .map(|e| {
            let at =
                e.at.parse::<jiff::Timestamp>()
                    .map_or_else(|_| Moment { iso: e.at.clone(), text: e.at.clone() }, Moment::of);
            let said = AutoEvent::from_entry(&e.kind, &e.data).map_or_else(|| e.data.clone(), |ev| ev.describe());
            LogLine { at, kind: e.kind.clone(), said }
        })
        .collect();
    let waiting_for_rate = entries
        .iter()
        .rev()
        .find(|e| e.kind == "quota_wait")
        .and_then(|e| AutoEvent::from_entry(&e.kind, &e.data))
        .is_some_and(|e| matches!(e, AutoEvent::QuotaWait { wait: WaitKind::RateLimit, .. }));
    let (status_word, status_class, icon) = match l.status {
        LoopStatus::NeedsHuman => ("needs you", "waiting", "⚑"),
        LoopStatus::QuotaWait if waiting_for_rate => ("rate limited", "waiting", "‖"),
        LoopStatus::QuotaWait => ("quota wait", "waiting", "‖"),
        LoopStatus::Complete => ("complete", "success", "✓"),
        LoopStatus::Blocked => ("blocked", "failed", "✗"),
        LoopStatus::Stopped => ("stopped", "cancelled", "⊘"),
        LoopStatus::Failed => ("failed", "failed", "✗"),
        LoopStatus::Running => ("running", "running", "▶"),
    };
    let current_wait = l.quota_wait_since.map_or(0.0, |t| now.duration_since(t).as_secs_f64().max(0.0));
    LoopView {
        session: l.session_name.clone(),
        status: l.status.as_str(),
        status_word,
        status_class,
        icon,
        active,
        task_dir: ws.shown(std::path::Path::new(&l.task_dir)),
        agent: l.agent.clone(),
        agent_session_id: l.agent_session_id.clone(),
        started: Moment::of(l.started_at),
        iteration: l.iteration,
        max_iterations: l.max_iterations,
        elapsed: secs(l.elapsed_s),
        timeout: secs(l.timeout_s),
        paused: (l.quota_paused_s > 0.0 || l.quota_wait_since.is_some()).then(|| secs(l.quota_paused_s + current_wait)),
        step: l.step.clone(),
        result: l.result.clone(),
        next: l.next.clone(),
        checkpoint: l.checkpoint.clone(),
        last_signal_at: l.last_signal_at.map(Moment::of),
        stall_count: l.stall_count,
        recovery_count_step: l.recovery_count_step,
        recovery_count_total: l.recovery_count_total,
        restart_count: l.restart_count,
        limits: LoopLimits {
            recoveries_per_iteration: settings.recoveries_per_iteration,
            recoveries_total: settings.recoveries_total,
            restarts: settings.restarts,
            restart_window: secs(settings.restart_window_minutes * 60.0),
        },
        quota_wait_since: l.quota_wait_since.map(Moment::of),
        quota_resets_at: l.quota_resets_at.map(Moment::of),
        quota_left: l.quota_resets_at.map(|t| countdown(t.duration_since(now).as_secs_f64())),
        rate_limited: waiting_for_rate,
        checks_to_approve: l.checks_to_approve.clone(),
        stop_reason: l.stop_reason.map(|r| r.as_str()),
        needs_human: l.needs_human.as_deref().map(legible),
        needs_why: l.needs_human.as_deref().and_then(|n| n.lines().next()).map(legible),
        checks: l.checks.clone(),
        screen: screen.as_ref().map(|s| legible(&s.screen)),
        choices: screen
            .as_ref()
            .map(|s| s.choices.iter().map(|c| (c.key.clone(), c.label.clone())).collect())
            .unwrap_or_default(),
        alive: screen.as_ref().is_some_and(|s| s.alive),
        log,
        log_count: entries.len(),
    }
}

/// The agent's screen as the dashboard draws it: the few glyphs agent CLIs draw that common
/// monospace fonts lack (Claude Code's `⎿` and `⏺`; DejaVu Sans Mono has none of them, so a
/// reader saw boxes) drawn with the nearest glyph those fonts have.
fn legible(screen: &str) -> String {
    screen
        .chars()
        .map(|c| match c {
            '⎿' => '└',
            '⏺' => '●',
            '⏵' => '▶',
            '⏸' => '‖',
            '⏹' => '■',
            '⧉' => '□',
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::rollback_line;
    use loopwright_engine::Event;
    use loopwright_engine::event::RollbackStatus;
    use loopwright_spec::StageId;
    use loopwright_spec::pipeline::RollbackStrategy;

    #[test]
    fn glyphs_common_fonts_lack_are_drawn_with_ones_they_have() {
        let screen = "● Bash(cargo test)\n  ⎿  Waiting…\n⏺ Done ⏵⏵ accept edits ⏸ ⏹ ⧉ ❯ ✻";
        assert_eq!(super::legible(screen), "● Bash(cargo test)\n  └  Waiting…\n● Done ▶▶ accept edits ‖ ■ □ ❯ ✻");
    }

    #[test]
    fn a_countdown_is_in_whole_seconds_like_the_pages_clock() {
        let shown: Vec<String> = [0.057, -3.0, 4.6, 61.0, 3725.0].map(super::countdown).to_vec();
        assert_eq!(shown, ["0 s", "0 s", "5 s", "1m 01s", "1h 02m"]);
    }

    #[test]
    fn a_reports_suggested_steps_and_its_error_come_first() {
        let report = "## Task Escalation Required\n\nintro\n\n### Failure Summary\n\nfailed\n\n### Last Error Details\n\n```\n# not a heading\nboom\n```\n\n### Files Modified\n\n- a\n\n### Suggested Actions\n\n1. do this\n\n---\n\n**Your options:** retry\n";
        assert_eq!(
            super::actionable_first(report),
            "## Task Escalation Required\n\nintro\n\n### Suggested Actions\n\n1. do this\n\n### Last Error Details\n\n```\n# not a heading\nboom\n```\n\n### Failure Summary\n\nfailed\n\n### Files Modified\n\n- a\n\n---\n\n**Your options:** retry\n"
        );
        let letter = "# Dead letter\n\n## Task Description\n\nt\n\n## Error Chain\n\n### Attempt 1\n\nx\n\n## Suggested Manual Steps\n\n1. s\n";
        assert_eq!(
            super::actionable_first(letter),
            "# Dead letter\n\n## Suggested Manual Steps\n\n1. s\n\n## Error Chain\n\n### Attempt 1\n\nx\n\n## Task Description\n\nt\n\n"
        );
        assert_eq!(super::actionable_first("no headings\n"), "no headings\n");
    }

    #[test]
    fn a_report_is_rendered_without_the_texts_own_html_links_or_images_and_its_fields_apart() {
        let text = "---\ntask_id: t-1\nattempts: 3\n---\n## Error chain\n\n1. `check` failed: <script>alert(1)</script>\n\n[click](javascript:alert(1)) ![x](http://evil/x.png)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n";
        let r = super::render_markdown(text);
        assert_eq!(r.frontmatter.as_deref(), Some("task_id: t-1\nattempts: 3"));
        assert_eq!(
            r.html,
            "<h2>Error chain</h2>\n<ol>\n<li><code>check</code> failed: &lt;script&gt;alert(1)&lt;/script&gt;</li>\n</ol>\n<p>click x</p>\n<table><thead><tr><th>a</th><th>b</th></tr></thead><tbody>\n<tr><td>1</td><td>2</td></tr>\n</tbody></table>\n"
        );
        // No frontmatter: all of it is the body.
        assert_eq!(super::render_markdown("plain *text*").html, "<p>plain <em>text</em></p>\n");
    }

    #[test]
    fn a_rollback_reads_as_what_was_undone_and_how_it_went() {
        let id = |s: &str| StageId::parse(s).expect("stage id");
        let lines: Vec<Option<String>> = [
            Event::RollbackStarted { trigger: Some(id("deploy")), stages: vec![id("build"), id("plan")] },
            Event::StageRolledBack {
                stage: id("build"),
                strategy: RollbackStrategy::GitRevert,
                status: RollbackStatus::Success,
                detail: "reverted 2 commits".into(),
            },
            Event::StageRolledBack {
                stage: id("plan"),
                strategy: RollbackStrategy::Manual,
                status: RollbackStatus::Pending,
                detail: " ".into(),
            },
            Event::RollbackFinished { overall: RollbackStatus::Partial },
            Event::RunQueued {},
        ]
        .iter()
        .map(rollback_line)
        .collect();
        assert_eq!(
            lines,
            [
                Some("Rolling back build, plan after deploy failed".to_owned()),
                Some("build — its commits reverted, success: reverted 2 commits".to_owned()),
                Some("plan — manual steps, pending".to_owned()),
                Some("Rollback finished: partial".to_owned()),
                None,
            ]
        );
    }
}
