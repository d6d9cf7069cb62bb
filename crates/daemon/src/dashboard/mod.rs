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

use crate::Shared;
use crate::api::auth::Caller;
use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use loopwright_app::ops::people::Role;
use loopwright_app::ops::{self, read};
use loopwright_engine::{RunStatus, Store};
use serde::Deserialize;
use serde::Serialize;
use std::sync::{Arc, LazyLock};

mod auto;
mod insight;
mod links;
mod live;
mod run;
mod runs;
#[cfg(test)]
mod tests;

use auto::{auto_page, auto_report_page};
use insight::{dead_letter_page, dead_letters_page, stats_page, workers_page};
use links::{link_answer, link_page};
use run::run_page;
use runs::{run_row, runs_page};

/// The embedded files: (path under `/assets/`, content type, bytes).
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.js", "text/javascript; charset=utf-8", include_str!("../../assets/app.js")),
    ("app.css", "text/css; charset=utf-8", include_str!("../../assets/app.css")),
    ("feed-worker.js", "text/javascript; charset=utf-8", include_str!("../../assets/feed-worker.js")),
    ("link.js", "text/javascript; charset=utf-8", include_str!("../../assets/link.js")),
];

static TEMPLATES: LazyLock<minijinja::Environment<'static>> = LazyLock::new(|| {
    let mut env = minijinja::Environment::new();
    for (name, text) in [
        ("base.html", include_str!("../../assets/base.html")),
        ("runs.html", include_str!("../../assets/runs.html")),
        ("headline.html", include_str!("../../assets/headline.html")),
        ("run_row.html", include_str!("../../assets/run_row.html")),
        ("run.html", include_str!("../../assets/run.html")),
        ("dead_letters.html", include_str!("../../assets/dead_letters.html")),
        ("dead_letter.html", include_str!("../../assets/dead_letter.html")),
        ("workers.html", include_str!("../../assets/workers.html")),
        ("stats.html", include_str!("../../assets/stats.html")),
        ("auto.html", include_str!("../../assets/auto.html")),
        ("auto_report.html", include_str!("../../assets/auto_report.html")),
        ("signin.html", include_str!("../../assets/signin.html")),
        ("link.html", include_str!("../../assets/link.html")),
    ] {
        env.add_template(name, text).expect("the embedded templates parse");
    }
    env.add_filter("ticks", |text: &str| minijinja::Value::from_safe_string(ticks(text)));
    env
});

/// `text` as HTML with each span between backticks set as code ("gate at `ship`" shows `ship`
/// in code type, as the terminal's words mark it). Everything is escaped; a backtick with no
/// partner stays as it is.
fn ticks(text: &str) -> String {
    let parts: Vec<&str> = text.split('`').collect();
    let unmatched = parts.len().is_multiple_of(2).then(|| parts.len() - 1);
    let mut out = String::with_capacity(text.len() + 16);
    for (i, part) in parts.iter().enumerate() {
        let escaped = minijinja::HtmlEscape(part).to_string();
        if i % 2 == 0 {
            out.push_str(&escaped);
        } else if Some(i) == unmatched {
            out.push('`');
            out.push_str(&escaped);
        } else {
            out.push_str("<code>");
            out.push_str(&escaped);
            out.push_str("</code>");
        }
    }
    out
}

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
        .route("/dead-letters/{task}", get(dead_letter_page))
        .route("/stats", get(stats_page))
        .route("/workers", get(workers_page))
        .route("/auto", get(auto_page))
        .route("/auto/{session}/report", get(auto_report_page))
        .route("/assets/{file}", get(asset))
        .route("/live", get(live::live))
        .route("/favicon.ico", get(favicon))
}

/// `/?token=…` and the runs list's page number.
#[derive(Debug, Default, Deserialize)]
struct RunsQuery {
    token: Option<String>,
    page: Option<String>,
}

/// A page rendered from its typed view.
fn page(template: &str, context: &impl Serialize) -> Response {
    match TEMPLATES.get_template(template).and_then(|t| t.render(minijinja::value::Serde(context))) {
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
    /// The sign-in page's view.
    #[derive(Serialize)]
    struct SignIn {
        /// The token given was wrong.
        wrong: bool,
        /// How many days a sign-in lasts.
        days: u64,
    }
    let mut response = page("signin.html", &SignIn { wrong, days });
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

/// The tab's icon: a loop, drawn.
const FAVICON: &str = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 16 16\">\
<circle cx=\"8\" cy=\"8\" r=\"5.5\" fill=\"none\" stroke=\"#2b6cb0\" stroke-width=\"2.5\"/>\
<path d=\"M11 1.5l3 3-3.5 1z\" fill=\"#2b6cb0\"/></svg>";

async fn favicon() -> Response {
    ([(header::CONTENT_TYPE, "image/svg+xml"), (header::CACHE_CONTROL, "max-age=86400")], FAVICON).into_response()
}

/// What every page shows in its header: who is signed in and what they may do, how many runs
/// and auto loops wait for a person.
async fn header_context(shared: &Shared, caller: &Caller, current: &'static str) -> HeaderView {
    let waiting = runs_waiting(shared).await;
    let feed = shared.store.feed_last().await.unwrap_or(0);
    let auto_needs = auto_needing_you(shared).await;
    HeaderView {
        waiting_count: waiting + auto_needs.len() as u64,
        auto_needs: auto_needs.len(),
        auto_needs_list: auto_needs,
        current,
        person: caller.person.clone(),
        role: caller.role.as_str(),
        can_answer: caller.role.may_answer(),
        can_admin: caller.role >= Role::Admin,
        waiting_verb: if caller.role.may_answer() { "need you" } else { "waiting" },
        feed,
    }
}

/// Every page's header.
#[derive(Debug, Serialize)]
struct HeaderView {
    /// Runs and auto loops waiting for a person.
    waiting_count: u64,
    /// Of them, auto loops.
    auto_needs: usize,
    /// Those loops.
    auto_needs_list: Vec<NeedsYou>,
    /// The page shown (`runs`, `run`, `auto`, …).
    current: &'static str,
    /// Who is signed in, when known.
    person: Option<String>,
    /// Their role.
    role: &'static str,
    /// Whether they may answer gates and escalations.
    can_answer: bool,
    /// Whether they may administer.
    can_admin: bool,
    /// What the badge says of them: "need you" to whoever may answer, "waiting" to a viewer.
    waiting_verb: &'static str,
    /// The journal's feed position the page was rendered at.
    feed: u64,
}

/// A page: its header, and what it shows.
#[derive(Debug, Serialize)]
struct Page<T: Serialize> {
    /// The header.
    header: HeaderView,
    /// The page's own view.
    #[serde(flatten)]
    body: T,
}

/// What a page shows instead of its content when that cannot be read.
#[derive(Debug, Serialize)]
struct Missing {
    /// Why.
    missing: String,
}

/// An auto loop waiting for a person, in the header.
#[derive(Debug, Serialize)]
struct NeedsYou {
    /// Its session.
    session: String,
    /// Its task module, as the workspace shows it.
    task_dir: String,
    /// The first line of why it waits.
    why: String,
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
async fn auto_needing_you(shared: &Shared) -> Vec<NeedsYou> {
    let store = Arc::clone(&shared.auto_store);
    let loops = tokio::task::spawn_blocking(move || ops::auto::list(&store)).await.ok().and_then(Result::ok);
    loops
        .unwrap_or_default()
        .into_iter()
        .filter(|l| l.status == loopwright_auto::state::LoopStatus::NeedsHuman)
        .map(|l| NeedsYou {
            task_dir: shared.ws.shown(std::path::Path::new(&l.task_dir)),
            why: l.needs_human.as_deref().and_then(|w| w.lines().next()).unwrap_or_default().to_owned(),
            session: l.session_name,
        })
        .collect()
}

fn icon(status: &str) -> &'static str {
    match status {
        "success" | "succeeded" => "✓",
        "failed" => "✗",
        "cancelled" | "rejected" => "⊘",
        "waiting" => "⚑",
        "running" | "looping" => "▶",
        "interrupted" => "⚠",
        "queued" | "pending" | "retry_waiting" => "…",
        "skipped" => "↷",
        "reused" => "↺",
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

/// An escalation's report without its closing list of command lines ("**Your options:**",
/// `loopwright respond …`): a page answers with its own form.
fn without_commands(report: &str) -> &str {
    match report.find("**Your options:**") {
        Some(at) => {
            let head = report[..at].trim_end();
            head.strip_suffix("---").unwrap_or(head).trim_end()
        }
        None => report,
    }
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
