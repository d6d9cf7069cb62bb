//! Human renderings: diagnostics (rustc/miette style) and run results.

use std::fmt;
use std::io::IsTerminal;

use loopwright_engine::result::PipelineResult;
use loopwright_engine::{RunState, StageStatus};
use loopwright_spec::{Diagnostic, Diagnostics};
use miette::{GraphicalReportHandler, GraphicalTheme, LabeledSpan, NamedSource, SourceSpan};

/// True when stderr is a terminal and colour is not disabled (`NO_COLOR`).
pub fn stderr_color() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

#[derive(Debug)]
struct Report<'a> {
    diagnostic: &'a Diagnostic,
    source: Option<NamedSource<String>>,
}

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.diagnostic.context(), self.diagnostic.message)?;
        if self.source.is_none() || self.diagnostic.position.is_none() {
            write!(f, "\n  in {}", self.diagnostic.location())?;
        }
        Ok(())
    }
}

impl std::error::Error for Report<'_> {}

impl miette::Diagnostic for Report<'_> {
    fn help<'b>(&'b self) -> Option<Box<dyn fmt::Display + 'b>> {
        self.diagnostic.help.as_ref().map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.diagnostic.position.and(self.source.as_ref()).map(|s| s as &dyn miette::SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let pos = self.diagnostic.position?;
        self.source.as_ref()?;
        let label = self.diagnostic.label.clone().unwrap_or_else(|| "here".to_owned());
        let span = SourceSpan::new(pos.offset.into(), pos.len);
        Some(Box::new(std::iter::once(LabeledSpan::new_with_span(Some(label), span))))
    }
}

/// Renders every diagnostic with its source snippet, then a count.
pub fn diagnostics(diags: &Diagnostics, color: bool) -> String {
    let theme = if color { GraphicalTheme::unicode() } else { GraphicalTheme::unicode_nocolor() };
    let handler = GraphicalReportHandler::new_themed(theme).with_width(110).with_context_lines(1);
    let mut out = String::new();
    for d in &diags.items {
        let source = diags.source_of(d).map(|s| NamedSource::new(&d.file, s.text.to_string()));
        let report = Report { diagnostic: d, source };
        if handler.render_report(&mut out, &report).is_err() {
            out.push_str(&format!("{d}\n"));
        }
    }
    let files: std::collections::BTreeSet<&str> = diags.items.iter().map(|d| d.file.as_str()).collect();
    let n = diags.items.len();
    out.push_str(&format!(
        "error: {n} problem{} found in {} file{}\n",
        if n == 1 { "" } else { "s" },
        files.len(),
        if files.len() == 1 { "" } else { "s" }
    ));
    out
}

/// Milliseconds as `1.23s` / `45ms`.
pub fn duration(ms: u64) -> String {
    if ms >= 1000 { format!("{:.2}s", ms as f64 / 1000.0) } else { format!("{ms}ms") }
}

/// Where a run whose stages form a graph stands: which stages run at once and what each stage
/// not started yet waits for. Empty for a line of stages.
fn graph(state: &RunState) -> String {
    let Some(graph) = state.started.as_ref().and_then(|s| loopwright_spec::compile::graph_of(&s.pipeline_source))
    else {
        return String::new();
    };
    let status = |id: &str| state.stage(id).map_or(StageStatus::Pending, |s| s.status);
    let mut out = String::new();
    let running: Vec<&str> =
        graph.iter().map(|(id, _)| id.as_str()).filter(|id| status(id) == StageStatus::Running).collect();
    if running.len() > 1 {
        out.push_str(&format!("running at once: {}\n", running.join(", ")));
    }
    for (id, needs) in &graph {
        if status(id) != StageStatus::Pending || state.stage(id).is_some_and(|s| s.attempts > 0) {
            continue;
        }
        let waits: Vec<&str> = needs
            .iter()
            .map(String::as_str)
            .filter(|n| !matches!(status(n), StageStatus::Success | StageStatus::Skipped))
            .collect();
        let what = if waits.is_empty() { "ready".to_owned() } else { format!("waits for {}", waits.join(", ")) };
        out.push_str(&format!("  · {id:<24} {:<10} {what}\n", "pending"));
    }
    out
}

/// A run's result for humans.
pub fn result(result: &PipelineResult, state: &RunState) -> String {
    let mut out = format!(
        "run {}  pipeline {}  task {}\nstatus: {}\n",
        result.run_id,
        result.pipeline,
        result.task_id,
        result.status.as_str()
    );
    if let Some((stage, reason, until)) =
        state.provider_wait.as_ref().filter(|_| state.status == loopwright_engine::RunStatus::Queued)
    {
        out.push_str(&format!(
            "waiting: stage {stage} waits for its provider: {reason}{}\n",
            until.map(|u| format!(" (at the latest until {})", u.strftime("%H:%M:%S UTC"))).unwrap_or_default()
        ));
    }
    if let Some((tries, reason)) = &state.checkout_failed {
        let then = match state.status {
            loopwright_engine::RunStatus::Failed => "the run failed".to_owned(),
            _ => format!("tried again a lease later, at most {} times", loopwright_engine::Event::CHECKOUT_TRIES),
        };
        out.push_str(&format!("checkout: no worker could make its work tree ({tries} tries; {then}): {reason}\n"));
    }
    // The stage the run waits at reads `waiting`, as the dashboard says it (its own status may
    // still be `running`: a closed loop or a review escalated it mid-stage).
    let waiting_at = result
        .waiting
        .as_ref()
        .filter(|_| result.status == loopwright_engine::RunStatus::Waiting)
        .map(|w| w.stage.as_str());
    for s in &state.stages {
        let waits = waiting_at == Some(s.id.as_str());
        let mark = match s.status {
            _ if waits => "⚑",
            StageStatus::Success => "✓",
            StageStatus::Skipped => "-",
            StageStatus::Failed | StageStatus::Timeout => "✗",
            StageStatus::Cancelled => "■",
            StageStatus::RolledBack => "↶",
            _ => "…",
        };
        let attempts = if s.attempts == 1 { "1 attempt".to_owned() } else { format!("{} attempts", s.attempts) };
        let mut note = String::new();
        if let Some(reason) = s.skip_reason {
            note = reason.as_str().to_owned();
            if let Some((cond, values)) = &s.condition_detail {
                note = format!("{note}: `{cond}` with {values}");
            }
        } else if let Some(e) = s.last_error.as_ref().filter(|_| s.status != StageStatus::Success) {
            note = e.message.clone();
        }
        if let Some(lp) = s.closed.as_deref() {
            let pattern =
                lp.last_pattern().filter(|_| !lp.succeeded).map(|p| format!(", last pattern {p}")).unwrap_or_default();
            let loop_note = format!("closed loop {}{pattern}", lp.status());
            note = if note.is_empty() { loop_note } else { format!("{loop_note}: {note}") };
        }
        out.push_str(&format!(
            "  {mark} {:<24} {:<10} {:<11} {:>8}  {note}\n",
            s.id.as_str(),
            if waits { "waiting" } else { s.status.as_str() },
            attempts,
            duration(s.duration_ms)
        ));
        if let Some(a) = s.approval.as_ref() {
            let when = a.at.to_zoned(jiff::tz::TimeZone::system()).strftime("%Y-%m-%d %H:%M:%S");
            let comment = a.comment.as_ref().map(|c| format!(": {c}")).unwrap_or_default();
            out.push_str(&format!(
                "      {} by {} at {when}{comment}\n",
                if a.granted { "approved" } else { "rejected" },
                a.by
            ));
        }
        let failed = matches!(s.status, StageStatus::Failed | StageStatus::Timeout);
        if s.attempt_log.len() > 1 || (failed && !s.attempt_log.is_empty()) {
            for a in &s.attempt_log {
                let what = match (&a.error, &a.message) {
                    (Some(kind), Some(message)) => format!("failed ({kind}): {message}"),
                    _ => a.status.as_str().to_owned(),
                };
                let then = match (&a.retry_delay_ms, &a.retry_reason) {
                    (Some(d), Some(r)) => {
                        format!("; retried after {} ({})", duration(*d), r.rsplit("; ").next().unwrap_or(""))
                    }
                    _ => String::new(),
                };
                out.push_str(&format!("      attempt {} {what} in {}{then}\n", a.attempt, duration(a.duration_ms)));
            }
        }
    }
    out.push_str(&graph(state));
    if let Some(f) = &result.failed_stage {
        out.push_str(&format!("failed stage: {f}\n"));
    }
    let spend = state.spend();
    if spend.invocations > 0 || spend.active_ms > 0 {
        let budget = state.started.as_ref().map(|s| s.budget).unwrap_or_default();
        let of = |limit: Option<String>| limit.map(|l| format!(" of {l}")).unwrap_or_default();
        // Cost is shown when a model has a price (config.toml [prices]) or a cost budget is set.
        let cost = if spend.cost_usd > 0.0 || budget.cost_usd.is_some() {
            format!(", ${:.4}{}", spend.cost_usd, of(budget.cost_usd.map(|c| format!("${c:.2}"))))
        } else {
            String::new()
        };
        out.push_str(&format!(
            "spend: {} tokens{}{}{cost}, {} agent invocation{}{}, {} active{}\n",
            spend.tokens,
            if spend.estimated { " (counted by loopwright)" } else { "" },
            of(budget.tokens.map(|t| t.to_string())),
            spend.invocations,
            if spend.invocations == 1 { "" } else { "s" },
            of(budget.invocations.map(|i| i.to_string())),
            duration(spend.active_ms),
            of(budget.wall_ms.map(duration)),
        ));
    }
    if let Some(r) = &state.rollback {
        out.push_str(&format!(
            "rollback{}: {}\n",
            r.trigger.as_ref().map(|t| format!(" (after {t} failed)")).unwrap_or_default(),
            r.overall.map_or("in progress", |o| o.as_str())
        ));
        for id in &r.stages {
            if let Some((strategy, status, detail)) = state.stage(id.as_str()).and_then(|s| s.rollback.as_ref()) {
                let how = serde_json::to_string(strategy).unwrap_or_default();
                out.push_str(&format!("  {id}: {} {} — {detail}\n", how.trim_matches('"'), status.as_str()));
            }
        }
    }
    if let Some(w) = &result.waiting {
        let looped = state.stage(&w.stage).and_then(|s| s.closed.as_deref()).filter(|l| l.escalation.is_some());
        if let (Some(lp), Some(started)) = (looped, state.started.as_ref()) {
            out.push('\n');
            out.push_str(&loopwright_engine::closed_loop::context::escalation_message(
                &result.run_id,
                &started.task,
                started.task_id.as_str(),
                &w.stage,
                lp,
                lp.escalation.as_deref().unwrap_or_default(),
            ));
        } else if let Some(files) = &state.merge_conflict {
            let branch = state.started.as_ref().and_then(|s| s.worktree.as_ref()).map_or("?", |w| w.branch.as_str());
            out.push_str(&format!(
                "waiting for a human (merge-conflict): {branch} conflicts with the workspace in {}; the worktree is kept.\nResolve it (e.g. `git merge {branch}` in the workspace), then `loopwright respond {} retry`, or `loopwright respond {} skip` to leave it unmerged\n",
                files.join(", "),
                result.run_id,
                result.run_id
            ));
        } else if let Some((pull, head)) = waiting_pull(result, w.kind) {
            if w.kind == loopwright_engine::result::WaitKind::Ci {
                out.push_str(&format!(
                    "waiting for CI on pull request {pull} (head {head}); a red round goes back to `{}`\n",
                    w.stage
                ));
            } else {
                out.push_str(&format!(
                    "waiting for a person to approve pull request {pull} at its tested head {head}; loopwright merges it then\n"
                ));
            }
        } else if w.kind == loopwright_engine::result::WaitKind::Escalation {
            out.push_str(&format!(
                "waiting for a human: review `{}` still has blocking feedback; answer with `loopwright respond {} retry|fix TEXT|skip|abort`\n",
                w.stage, result.run_id
            ));
        } else {
            out.push_str(&format!(
                "waiting for {} of stage `{}`: `loopwright approve {}` or `loopwright reject {}`\n",
                w.kind.as_str(),
                w.stage,
                result.run_id,
                result.run_id
            ));
        }
    }
    if !result.artifacts.is_empty() {
        out.push_str(&format!("artifacts: {}\n", result.artifacts.keys().cloned().collect::<Vec<_>>().join(", ")));
    }
    out
}

/// For a run waiting on its pull request (its CI, or an approval to merge it): the pull
/// request (`#N URL`) and its head's first 12 characters, `?` where not known yet.
fn waiting_pull(result: &PipelineResult, kind: loopwright_engine::result::WaitKind) -> Option<(String, String)> {
    use loopwright_engine::result::WaitKind;
    if !matches!(kind, WaitKind::Ci | WaitKind::Review) {
        return None;
    }
    let pull = result.forge.as_ref().and_then(|f| f.pull_request.as_ref());
    Some((
        pull.map_or_else(|| "?".to_owned(), |p| format!("#{} {}", p.number, p.url)),
        pull.map_or("?", |p| p.head.get(..12).unwrap_or(&p.head)).to_owned(),
    ))
}
