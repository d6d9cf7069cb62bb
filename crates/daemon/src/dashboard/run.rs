//! A run's page (`/runs/{run}`): its stages and attempts, what it waits for, and why.

use crate::Shared;
use crate::api::auth::Caller;
use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use loopwright_app::ops::{self, output, read};
use loopwright_engine::event::Event;
use loopwright_engine::result::WaitKind;
use loopwright_engine::state::StageStatus;
use loopwright_engine::{RunId, RunState, RunStatus};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::{
    HeaderView, Missing, Moment, Page, Rendered, duration, header_context, icon, page, render_markdown, signin, when,
    without_commands,
};

pub(super) async fn run_page(
    State(shared): State<Arc<Shared>>,
    Path(run): Path<String>,
    caller: Option<Extension<Caller>>,
) -> Response {
    let Some(Extension(caller)) = caller else { return signin(&shared, StatusCode::UNAUTHORIZED, false) };
    let header_ctx = header_context(&shared, &caller, "run").await;
    let not_found = |header: HeaderView, missing: String| {
        let mut r = page("run.html", &Page { header, body: Missing { missing } });
        *r.status_mut() = StatusCode::NOT_FOUND;
        r
    };
    let Some(run) = RunId::parse(&run) else { return not_found(header_ctx, format!("There is no run `{run}`.")) };
    // One read of the journal for the whole page, however many stages the run has.
    let (pipeline, state, events) = match read::load_run_events(&shared.ws, &shared.store, &run).await {
        Ok(loaded) => loaded,
        Err(e) => return not_found(header_ctx, e.message()),
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
    let context = run_context(&shared, &pipeline, &state, shown, &events, &attempts, caller.role.may_answer());
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
    page("run.html", &Page { header: header_ctx, body: RunPage { run: context, notified } })
}

/// A run's page.
#[derive(Debug, Serialize)]
struct RunPage {
    run: RunView,
    /// The notifications sent about it.
    notified: Vec<NotifiedView>,
}

/// A run, as its page shows it.
#[derive(Debug, Serialize)]
pub(super) struct RunView {
    /// A run not over: its clock counts from its first event.
    clock_from: Option<String>,
    id: String,
    /// The journal's sequence number the page shows it at (its script follows on from it).
    seq: u64,
    pipeline: Option<String>,
    task_id: Option<String>,
    task: Option<String>,
    status: &'static str,
    icon: &'static str,
    started: Option<String>,
    duration: String,
    #[serde(rename = "final")]
    ended: bool,
    /// The failed stage a rerun would start from.
    retry_from: Option<String>,
    cancellable: bool,
    resumable: bool,
    /// Every stage of the pipeline, in its order.
    stages: Vec<StageView>,
    /// When its stages form a graph: its columns, each the stages whose longest chain of
    /// needs is as long.
    graph: Vec<Vec<GraphNode>>,
    /// What it waits for, when it waits for a person.
    waiting: Option<WaitingView>,
    /// Who ended it, in words.
    ended_by: Option<String>,
    /// The worker that drives it now, or drove it last.
    worker: Option<String>,
    headline: Option<ops::why::Headline>,
    answers: Vec<AnswerView>,
    artifacts: BTreeMap<String, String>,
    failed_stage: Option<String>,
    /// Its rollback, in words.
    rollback: Vec<String>,
    dead_letters: Vec<LetterView>,
    in_flight: Option<InFlightView>,
    /// Where a run from GitHub came from, its pull request and each CI round.
    forge: Option<loopwright_engine::result::ForgeResult>,
}

/// A stage of a run's page.
#[derive(Debug, Serialize)]
struct StageView {
    id: String,
    status: &'static str,
    icon: &'static str,
    attempts_count: u32,
    duration: String,
    /// Its bar's width, in percent of the longest stage's.
    width: f64,
    /// One mark per attempt.
    marks: Vec<u32>,
    attempts: Vec<AttemptView>,
    /// What it spent, against its budget.
    spend: Option<String>,
    in_flight: bool,
    /// The outputs it declared.
    outputs: Vec<String>,
    headline: Option<ops::why::Headline>,
    /// A stage at work: its clock counts from this moment (its earlier attempts' time added).
    clock_from: Option<String>,
    /// A stage not run because an earlier run's result was taken ("taken from run …").
    taken_from: Option<String>,
}

/// A stage in the drawing of a graph.
#[derive(Debug, Serialize)]
struct GraphNode {
    id: String,
    status: &'static str,
    icon: &'static str,
    duration: String,
    /// What it needs.
    needs: Vec<String>,
}

/// The columns of a pipeline's graph (empty for a line): each stage in the column after the
/// deepest of the stages it needs, with its state and duration as the stages list shows them.
fn graph_columns(pipeline: &loopwright_spec::Pipeline, stages: &[StageView]) -> Vec<Vec<GraphNode>> {
    if !pipeline.is_graph() {
        return Vec::new();
    }
    let mut depth: Vec<usize> = vec![0; pipeline.stages.len()];
    // Needs form no cycle (validation): as many passes as stages settle every depth.
    for _ in 0..pipeline.stages.len() {
        for (i, stage) in pipeline.stages.iter().enumerate() {
            let deepest = stage.needs.iter().filter_map(|n| pipeline.index_of(n.as_str())).map(|j| depth[j] + 1).max();
            depth[i] = deepest.unwrap_or(0);
        }
    }
    let mut columns: Vec<Vec<GraphNode>> = Vec::new();
    for (i, stage) in pipeline.stages.iter().enumerate() {
        let Some(view) = stages.iter().find(|s| s.id == stage.id.as_str()) else { continue };
        if columns.len() <= depth[i] {
            columns.resize_with(depth[i] + 1, Vec::new);
        }
        columns[depth[i]].push(GraphNode {
            id: view.id.clone(),
            status: view.status,
            icon: view.icon,
            duration: view.duration.clone(),
            needs: stage.needs.iter().map(ToString::to_string).collect(),
        });
    }
    columns
}

/// What a waiting run waits for.
#[derive(Debug, Serialize)]
struct WaitingView {
    kind: WaitKind,
    stage: String,
    /// An escalation's report.
    report: Option<Rendered>,
    /// What skipping the stage would leave without its outputs.
    skip_impact: Option<String>,
    /// A gate's: what the run changed so far.
    diff: Option<String>,
    /// Whom it waits for, as a reader who cannot answer is told ("an approver (alice, carol)").
    answerers_text: String,
}

/// A dead letter of the run.
#[derive(Debug, Serialize)]
struct LetterView {
    task_id: Option<String>,
    text: Rendered,
}

/// The attempt running now.
#[derive(Debug, Serialize)]
struct InFlightView {
    stage: String,
    attempt: u32,
}

/// An attempt of a stage.
#[derive(Debug, Serialize)]
struct AttemptView {
    number: u32,
    status: String,
    icon: &'static str,
    started: Option<String>,
    duration: Option<String>,
    prompt: Option<String>,
    /// What it printed (not while it runs: the live box shows that).
    output: Option<String>,
    stderr: Option<String>,
    live: bool,
    /// Its error, in words.
    error: Option<String>,
    /// The error's output, when neither stream shows it.
    error_output: Option<String>,
    retry_context: Option<String>,
    /// Its tokens and cost.
    usage: Option<String>,
    /// What the closed loop did, phase by phase.
    phases: Vec<ops::why::Phase>,
    /// The agent that made it, when the stage had fallen back from its own.
    agent: Option<String>,
    /// After it, who took the stage over and why, in words.
    fell_back: Option<String>,
    /// Best of N: its candidates, side by side.
    candidates: Vec<CandidateView>,
    /// Best of N: why the winner won, or why none did.
    chosen: Option<String>,
}

/// A candidate as its attempt shows it.
#[derive(Debug, Serialize)]
struct CandidateView {
    number: u32,
    agent: String,
    /// `won`, `passed`, `failed` or `running`.
    outcome: &'static str,
    checks: String,
    files: String,
    tokens: String,
    error: Option<String>,
}

/// Everything the run page shows.
fn run_context(
    shared: &Shared,
    pipeline: &loopwright_spec::Pipeline,
    state: &RunState,
    status: RunStatus,
    events: &[loopwright_engine::EventRecord],
    attempts: &BTreeMap<String, Vec<read::Attempt>>,
    may_answer: bool,
) -> RunView {
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
            // A run that started from a later stage took this one's outputs from an earlier run.
            let taken = started.and_then(|s| {
                let from = pipeline.index_of(s.start_from.as_ref()?.as_str())?;
                (pipeline.index_of(stage.id.as_str())? < from).then(|| match &s.rerun_of {
                    Some(earlier) => format!("taken from run {earlier}"),
                    None => "taken from an earlier run".to_owned(),
                })
            });
            stages.push(StageView {
                id: stage.id.to_string(),
                status: if taken.is_some() { "reused" } else { "pending" },
                icon: icon(if taken.is_some() { "reused" } else { "pending" }),
                clock_from: None,
                taken_from: taken,
                attempts_count: 0,
                duration: duration(0),
                width: 0.0,
                marks: Vec::new(),
                attempts: Vec::new(),
                spend: None,
                in_flight: false,
                outputs: Vec::new(),
                headline: None,
            });
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
        let attempts: Vec<AttemptView> = attempts
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
        let at_work = matches!(st.status, StageStatus::Running | StageStatus::Looping) && !status.is_final();
        let clock_from = in_attempt_since(&st.id)
            .filter(|_| at_work)
            .and_then(|at| at.checked_sub(jiff::SignedDuration::from_millis(st.duration_ms as i64)).ok())
            .map(|at| at.to_string());
        stages.push(StageView {
            clock_from,
            taken_from: None,
            id: st.id.to_string(),
            status: status_word,
            icon: icon(status_word),
            attempts_count: st.attempts,
            duration: duration(ms as i64),
            width: (ms as f64 / longest as f64 * 100.0).clamp(1.0, 100.0).round(),
            marks: (1..=st.attempts).collect(),
            attempts,
            spend: spend_line,
            in_flight: in_flight.as_ref().is_some_and(|f| f.stage == st.id.as_str()),
            outputs: st.outputs.keys().cloned().collect(),
            headline: ops::why::stage_headline(st, pipeline),
        });
    }
    let waiting = result.waiting.as_ref().filter(|_| status == RunStatus::Waiting).map(|w| {
        let report = (w.kind == WaitKind::Escalation)
            .then(|| read::escalation_report(state).map(|(_, m)| render_markdown(without_commands(&m))))
            .flatten();
        let diff = (w.kind == WaitKind::Approval).then(|| read::run_diff(state, 400)).flatten();
        let impact = loopwright_spec::StageId::parse(&w.stage)
            .filter(|_| w.kind == WaitKind::Escalation)
            .map(|s| ops::answer::skip_impact(pipeline, state, &s));
        WaitingView {
            kind: w.kind,
            stage: w.stage.clone(),
            report,
            skip_impact: impact,
            diff,
            answerers_text: answerers_text(&shared.people.answerers()),
        }
    });
    let rollback: Vec<String> = events.iter().filter_map(|r| rollback_line(&r.event)).collect();
    let letters: Vec<LetterView> = ops::dead_letters::list(&shared.ws)
        .into_iter()
        .filter(|row| row.run_id == state.run_id.as_str())
        .filter_map(|row| ops::dead_letters::show(&shared.ws, &row.task_id).ok())
        .map(|l| LetterView { text: render_markdown(&l.text), task_id: l.task_id })
        .collect();
    let answers = read::answers(events);
    let resumable = matches!(ops::resume::check(state), Ok(ops::resume::Resumable::Yes))
        && matches!(status, RunStatus::Interrupted);
    let headline = ops::why::run_headline(state, status, pipeline).map(|h| for_reader(h, waiting.as_ref(), may_answer));
    RunView {
        id: state.run_id.to_string(),
        seq: state.last_seq,
        pipeline: started.map(|s| s.pipeline.clone()),
        task_id: started.map(|s| s.task_id.to_string()),
        task: started.map(|s| s.task.clone()),
        status: status.as_str(),
        icon: icon(status.as_str()),
        started: first.map(when),
        duration: duration(elapsed),
        clock_from: first.filter(|_| !status.is_final()).map(|at| at.to_string()),
        ended: status.is_final(),
        retry_from: state.stages.iter().find(|s| s.status == StageStatus::Failed).map(|s| s.id.to_string()),
        cancellable: !status.is_final(),
        resumable,
        graph: graph_columns(pipeline, &stages),
        stages,
        waiting,
        ended_by: ended_by(status, &answers),
        worker: state.owner.as_ref().and_then(|o| o.worker.clone()),
        headline,
        answers: answers.into_iter().map(AnswerView::of).collect(),
        artifacts: result.artifacts,
        failed_stage: result.failed_stage,
        rollback,
        dead_letters: letters,
        in_flight: in_flight.map(|f| InFlightView { stage: f.stage, attempt: f.attempt }),
        forge: result.forge,
    }
}

pub(super) fn stage_word(status: StageStatus) -> &'static str {
    // Finer than the result JSON's word while a stage is between attempts.
    match status {
        StageStatus::RetryWaiting => "retry_waiting",
        StageStatus::Looping => "looping",
        other => other.as_str(),
    }
}

/// How an attempt ended, in words (a closed-loop attempt ends in one of its phases).
pub(super) fn attempt_word(status: &str) -> String {
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
pub(super) fn error_words(e: &loopwright_engine::StageError) -> String {
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

fn attempt_context(a: &read::Attempt, live: bool) -> AttemptView {
    let usage = a.usage.as_ref().map(|u| {
        let cost = u.cost_usd.map(|c| format!(", ${c:.4}")).unwrap_or_default();
        let estimated = if u.estimated { " (estimated)" } else { "" };
        format!("{} tokens{cost}{estimated}", u.input_tokens + u.output_tokens)
    });
    // What the closed loop did and decided, phase by phase, in sentences.
    let phases: Vec<ops::why::Phase> = a.phases.iter().filter_map(ops::why::phase).collect();
    AttemptView {
        number: a.number,
        status: attempt_word(&a.status),
        icon: icon(&a.status),
        started: a.started_at.map(when),
        duration: a.duration_ms.map(|d| duration(d as i64)),
        prompt: a.prompt.clone(),
        output: if live { None } else { a.output.clone() },
        stderr: if live { None } else { a.stderr.clone() },
        live,
        error: a.error.as_ref().map(error_words),
        // The error's output is the tail of the attempt's stderr or stdout: shown apart only
        // when neither is there to show it (one attempt, one output).
        error_output: a
            .error
            .as_ref()
            .map(|e| e.output_tail.clone())
            .filter(|t| !t.trim().is_empty())
            .filter(|t| ![&a.output, &a.stderr].iter().any(|o| o.as_deref().is_some_and(|o| o.contains(t.trim())))),
        retry_context: a.retry_context.clone(),
        usage,
        phases,
        agent: a.agent.clone(),
        candidates: a
            .candidates
            .iter()
            .map(|c| {
                let r = c.result.as_ref();
                CandidateView {
                    number: c.candidate + 1,
                    agent: c.agent.clone(),
                    outcome: match r {
                        None => "running",
                        Some(_) if c.won => "won",
                        Some(r) if r.passed => "passed",
                        Some(_) => "failed",
                    },
                    checks: r.map_or_else(String::new, |r| {
                        format!("{} of {}", r.checks.iter().filter(|(_, ok)| *ok).count(), r.checks.len())
                    }),
                    files: r.map_or_else(String::new, |r| r.files.len().to_string()),
                    tokens: r.map_or_else(String::new, |r| {
                        let cost = r.cost_usd.map(|c| format!(", ${c:.4}")).unwrap_or_default();
                        format!("{}{cost}", r.tokens)
                    }),
                    error: r.and_then(|r| r.error.clone()),
                }
            })
            .collect(),
        chosen: a.chosen.clone(),
        fell_back: a.fell_back.as_ref().map(|f| {
            format!("Agent {} could not go on ({}); agent {} took the stage over.", f.from, f.reason.describe(), f.to)
        }),
    }
}

/// A rollback's step in words: what was undone, how, and how it went.
pub(super) fn rollback_line(event: &Event) -> Option<String> {
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

/// Why a cancelled or rejected run ended, when a person ended it: a rejected gate (and the
/// comment) or a cancel, with who — so the header does not just say "cancelled".
pub(super) fn ended_by(status: RunStatus, answers: &[read::PersonAnswer]) -> Option<String> {
    if !matches!(status, RunStatus::Cancelled | RunStatus::Rejected) {
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
pub(super) struct NotifiedView {
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
            NotificationStatus::Held => "kept for the next digest".to_owned(),
            NotificationStatus::Digested => "sent in a digest".to_owned(),
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
pub(super) struct AnswerView {
    at: Moment,
    by: String,
    verb: &'static str,
    stage: Option<String>,
    detail: Option<String>,
    comment: Option<String>,
    /// Where the answer came from (`dashboard`, `cli`, `api`, `link`, `forge`).
    via: Option<&'static str>,
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
            via: a.via.map(loopwright_engine::event::Via::as_str),
        }
    }
}

/// Whom a gate or an escalation waits for, in words.
fn answerers_text(names: &[String]) -> String {
    if names.is_empty() { "an approver".to_owned() } else { format!("an approver ({})", names.join(", ")) }
}

/// The run's headline as this reader is told it: one who cannot answer is told whom the run
/// waits for ("Stage ship waits for an approver (alice, carol)"), never that it waits for them.
fn for_reader(mut h: ops::why::Headline, waiting: Option<&WaitingView>, may_answer: bool) -> ops::why::Headline {
    if let Some(w) = waiting.filter(|w| !may_answer && matches!(w.kind, WaitKind::Approval | WaitKind::Escalation)) {
        h.title = format!("Stage {} waits for {}", w.stage, w.answerers_text);
        h.next = "You may read this run; answering needs the approver role.".to_owned();
    }
    h
}
