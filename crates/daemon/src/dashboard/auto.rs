//! The auto loops (`/auto`) and an ended loop's report (`/auto/{session}/report`).

use crate::Shared;
use crate::api::auth::Caller;
use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use loopwright_app::ops::{self};
use serde::Serialize;
use std::sync::Arc;

use super::{Moment, Page, countdown, duration, header_context, page, signin};

/// The auto loops' page: each loop's status object in words, its live screen and journal,
/// the stop button; the start dialog with the defaults of `[auto]`.
pub(super) async fn auto_page(State(shared): State<Arc<Shared>>, caller: Option<Extension<Caller>>) -> Response {
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
    let body = AutoPage {
        loops,
        modules,
        agents: names,
        default_agent: shared.ws.config.defaults.runner.clone(),
        // `30`, not `30.0`: what a person would type.
        defaults: StartDefaults {
            max_iterations: defaults.max_iterations,
            timeout_minutes: format!("{}", defaults.timeout_minutes),
        },
    };
    page("auto.html", &Page { header: header_ctx, body })
}

/// The auto loops' page.
#[derive(Debug, Serialize)]
struct AutoPage {
    /// Each loop, those that need a person first.
    loops: Vec<LoopView>,
    /// The task modules a loop can be started on.
    modules: Vec<String>,
    /// The agents a loop can be started with.
    agents: Vec<String>,
    /// The one chosen unless a person picks another.
    default_agent: String,
    /// The start dialog's defaults, from `[auto]`.
    defaults: StartDefaults,
}

/// The start dialog's defaults.
#[derive(Debug, Serialize)]
struct StartDefaults {
    max_iterations: u32,
    /// As a person would type it.
    timeout_minutes: String,
}

/// An ended loop's report page.
#[derive(Debug, Serialize)]
struct ReportPage {
    report: ReportView,
}

/// One loop as the auto page shows it.
#[derive(Debug, Serialize)]
pub(super) struct LoopView {
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

#[derive(Debug, Serialize)]
pub(super) struct LoopLimits {
    recoveries_per_iteration: u32,
    recoveries_total: u32,
    restarts: u32,
    /// The window the restart budget counts in, in words.
    restart_window: String,
}

/// One supervision journal entry, in words.
#[derive(Debug, Serialize)]
pub(super) struct LogLine {
    at: Moment,
    kind: String,
    said: String,
}

/// A loop's summary page.
#[derive(Debug, Serialize)]
pub(super) struct ReportView {
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
pub(super) async fn auto_report_page(
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
    page("auto_report.html", &Page { header: header_ctx, body: ReportPage { report: view } })
}

pub(super) fn auto_view(
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
pub(super) fn legible(screen: &str) -> String {
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
