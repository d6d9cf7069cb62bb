//! `loopwright logs RUN`: the run's journal, event by event.

use crate::terminal::safe;
use std::time::Duration;

use loopwright_engine::{Event, EventRecord, RunState, Store};

use super::{Global, open_existing_store};
use crate::error::CliError;
use crate::render::duration;
use crate::workspace::Workspace;
use loopwright_app::ops::output;
use loopwright_app::ops::read::resolve_run;

/// Arguments of `logs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run (`latest` for the most recent).
    pub run: String,
    /// Keep printing new events until the run ends or waits, with what the stage in flight
    /// prints as it comes (`STAGE#N | line` for stdout, `!` for stderr; not with --json, which
    /// prints the journal only).
    #[arg(long, short)]
    pub follow: bool,
    /// Show one stage: what its agent was told and what it printed, attempt by attempt.
    #[arg(long, value_name = "STAGE")]
    pub stage: Option<String>,
    /// With --stage: only this attempt.
    #[arg(long, value_name = "N", requires = "stage")]
    pub attempt: Option<u32>,
}

/// `logs RUN --stage S [--attempt N]`: the stage's events, prompt and output per attempt.
fn stage_logs(
    ws: &Workspace,
    events: &[EventRecord],
    run: &loopwright_engine::RunId,
    stage: &str,
    only: Option<u32>,
) -> Result<u8, CliError> {
    let state = RunState::replay(run.clone(), events);
    let Some(st) = state.stage(stage) else {
        let touched: Vec<String> = state.stages.iter().map(|s| s.id.to_string()).collect();
        return Err(CliError::usage(format!(
            "run {run} has no stage `{stage}` that ran; stages: {}",
            if touched.is_empty() { "none".to_owned() } else { touched.join(", ") }
        )));
    };
    let dir = ws.runs_dir().join(run.as_str());
    let mut shown = false;
    for attempt in (1..=st.attempts).filter(|a| only.is_none_or(|o| o == *a)) {
        shown = true;
        println!("=== {stage}, attempt {attempt}");
        for r in events.iter().filter(|r| r.event.stage().is_some_and(|s| s.as_str() == stage)) {
            let belongs = match &r.event {
                Event::AttemptStarted { attempt: a, .. }
                | Event::ProcessStarted { attempt: a, .. }
                | Event::AttemptSucceeded { attempt: a, .. }
                | Event::AttemptFailed { attempt: a, .. }
                | Event::SnapshotTaken { attempt: a, .. }
                | Event::SnapshotFailed { attempt: a, .. }
                | Event::LayerMade { attempt: a, .. }
                | Event::LayerDropped { attempt: a, .. }
                | Event::NetworkRefused { attempt: a, .. }
                | Event::SnapshotRestored { attempt: a, .. } => *a == attempt,
                Event::RetryScheduled { attempt: a, .. } => *a == attempt + 1,
                _ => false,
            };
            if belongs {
                println!("{}", safe(&line(r)));
            }
        }
        let read = |name: String| std::fs::read_to_string(dir.join(name)).ok();
        match read(format!("prompts/{stage}-{attempt}.md")) {
            Some(prompt) => println!("--- prompt\n{}", safe(prompt.trim_end())),
            None => println!("--- prompt\n(a shell stage: its prompt file is rewritten for each stage and not kept)"),
        }
        let (out, err) = loopwright_runners::live::output_files(&dir, stage, attempt);
        for (label, path) in [("stdout", out), ("stderr", err)] {
            if let Ok(text) = std::fs::read_to_string(path) {
                println!("--- {label}\n{}", safe(text.trim_end()));
            }
        }
    }
    if !shown {
        return Err(CliError::usage(format!("stage `{stage}` of run {run} has no attempt {}", only.unwrap_or(0))));
    }
    Ok(0)
}

/// One event as a line for humans.
pub fn line(r: &EventRecord) -> String {
    let at = r.at.to_zoned(jiff::tz::TimeZone::UTC).strftime("%H:%M:%S%.3f").to_string();
    let what = match &r.event {
        Event::RunStarted(s) => format!(
            "run started: pipeline `{}` ({}), task {}{}{}",
            s.pipeline,
            s.pipeline_path,
            s.task_id,
            s.start_from.as_ref().map(|f| format!(", from stage {f}")).unwrap_or_default(),
            if s.skip.is_empty() {
                String::new()
            } else {
                format!(", skipping {}", s.skip.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))
            }
        ),
        Event::ConditionEvaluated { stage, condition, values, outcome } => {
            format!(
                "{stage}: condition `{condition}` with {values} -> {}",
                serde_json::to_string(outcome).unwrap_or_default()
            )
        }
        Event::StageSkipped { stage, reason } => format!("{stage}: skipped ({})", reason.as_str()),
        Event::ApprovalRequested { stage } => format!("{stage}: waits for approval"),
        Event::ApprovalGranted { stage, by, comment, .. } => {
            format!("{stage}: approved by {by}{}", comment.as_ref().map(|c| format!(": {c}")).unwrap_or_default())
        }
        Event::ApprovalRejected { stage, by, comment, rollback, .. } => format!(
            "{stage}: rejected by {by}{}{}",
            comment.as_ref().map(|c| format!(": {c}")).unwrap_or_default(),
            if *rollback { " (roll back completed stages)" } else { "" }
        ),
        Event::AttemptStarted { stage, attempt } => format!("{stage}: attempt {attempt} started"),
        Event::CandidateStarted { stage, attempt, candidate, agent, layer } => {
            format!("{stage}: attempt {attempt}, candidate {} started (agent `{agent}`, layer {layer})", candidate + 1)
        }
        Event::CandidateEnded { stage, attempt, candidate, result } => format!(
            "{stage}: attempt {attempt}, candidate {} {}: {} of {} checks passed, {} files, {} tokens{}",
            candidate + 1,
            if result.passed { "passed" } else { "failed" },
            result.checks.iter().filter(|(_, ok)| *ok).count(),
            result.checks.len(),
            result.files.len(),
            result.tokens,
            result.error.as_ref().map(|e| format!(" ({e})")).unwrap_or_default()
        ),
        Event::CandidateChosen { stage, attempt, why, .. } => format!("{stage}: attempt {attempt}: {why}"),
        Event::AgentFellBack { stage, attempt, from, to, reason } => format!(
            "{stage}: agent `{from}` cannot go on after attempt {attempt} ({reason}: {}); agent `{to}` takes over",
            reason.describe()
        ),
        Event::ProcessStarted { stage, pgid, command, .. } => format!("{stage}: process group {pgid}: {command}"),
        Event::AttemptSucceeded { stage, attempt, duration_ms, outputs } => format!(
            "{stage}: attempt {attempt} succeeded in {}{}",
            duration(*duration_ms),
            if outputs.is_empty() {
                String::new()
            } else {
                format!(", outputs {}", outputs.keys().cloned().collect::<Vec<_>>().join(", "))
            }
        ),
        Event::AttemptFailed { stage, attempt, duration_ms, error } => {
            format!(
                "{stage}: attempt {attempt} failed after {} ({}{}): {}",
                duration(*duration_ms),
                error.kind.as_str(),
                error.pattern.as_ref().map(|p| format!(", pattern {p}")).unwrap_or_default(),
                error.message
            )
        }
        Event::RetryScheduled { stage, attempt, delay_ms, reason } => {
            format!("{stage}: attempt {attempt} in {} ({reason})", duration(*delay_ms))
        }
        Event::StageFailed { stage, error } => format!("{stage}: failed ({}): {}", error.kind.as_str(), error.message),
        Event::FeedbackChecked { stage, items, blocking, iteration, action } => match action {
            loopwright_engine::event::FeedbackAction::Continue => {
                format!("{stage}: feedback=none ({items} items, none blocking), continuing")
            }
            loopwright_engine::event::FeedbackAction::ReImplement { target, .. } => {
                format!(
                    "feedback_loop source={stage} target={target} iteration={iteration} ({blocking} blocking of {items})"
                )
            }
            loopwright_engine::event::FeedbackAction::Escalate => {
                format!(
                    "feedback_loop escalated source={stage} iterations={iteration} ({blocking} blocking items left)"
                )
            }
            loopwright_engine::event::FeedbackAction::Accepted => format!("feedback_loop accepted source={stage}"),
        },
        Event::EscalationAnswered { stage, answer, by, .. } => {
            format!("{stage}: escalation answered by {by}: {}", serde_json::to_string(answer).unwrap_or_default())
        }
        Event::RunInterrupted { stage, signal } => format!(
            "run interrupted by {signal}{}; `loopwright resume` continues it",
            stage.as_ref().map(|s| format!(" during stage {s}")).unwrap_or_default()
        ),
        Event::RunResumed { owner, .. } => match &owner.worker {
            Some(worker) => format!("run taken by worker {worker}"),
            None => {
                format!("run resumed by {} {}", if owner.daemon { "the daemon, process" } else { "process" }, owner.pid)
            }
        },
        Event::RunQueued {} => "run queued (waits for a free slot)".to_owned(),
        Event::LimitWaiting { stage, attempt, reason, until } => format!(
            "{stage}: attempt {attempt} waits for the provider: {reason}{}",
            until.map(|u| format!(" (until {u})")).unwrap_or_default()
        ),
        Event::LimitTaken { stage, attempt } => format!("{stage}: attempt {attempt}: the provider allows it"),
        Event::CommitsKept { stage, attempt, commits } => format!(
            "{stage}: attempt {attempt}: commits made meanwhile outside the stage, kept: {}",
            commits.join("; ")
        ),
        Event::CheckoutFailed { worker, reason, tries } => format!(
            "worker {worker} could not make the run's work tree (try {tries} of {}): {reason}",
            Event::CHECKOUT_TRIES
        ),
        Event::CancelRequested { by, .. } => format!("cancel requested by {by}"),
        Event::SnapshotTaken { stage, attempt, snapshot, files } => {
            format!("{stage}: attempt {attempt}: snapshot {snapshot} of {files} file(s)")
        }
        Event::SnapshotFailed { stage, attempt, reason } => format!("{stage}: attempt {attempt}: {reason}"),
        Event::LayerMade { stage, attempt, layer, how } => {
            format!("{stage}: attempt {attempt}: writes into layer {layer} ({how})")
        }
        Event::LayerDropped { stage, attempt, files, reason } => {
            format!("{stage}: attempt {attempt}: layer dropped with {files} file(s) it wrote ({reason})")
        }
        Event::NetworkRefused { stage, attempt, target, why } => {
            format!("{stage}: attempt {attempt}: network: {target} refused ({why})")
        }
        Event::SandboxUnavailable { reason } => format!("stages run without a sandbox: {reason}"),
        Event::RepositoryRepaired { stage, detail } => format!("{stage}: {detail}"),
        Event::SnapshotRestored { stage, attempt, report } => format!(
            "{stage}: attempt {attempt}: partial changes undone ({} restored, {} recreated, {} removed)",
            report.restored, report.recreated, report.removed
        ),
        Event::ChangesCommitted { stage, commit, files } => format!("{stage}: committed {files} file(s) as {commit}"),
        Event::RollbackStarted { trigger, stages } => format!(
            "rollback started{}: {}",
            trigger.as_ref().map(|t| format!(" after {t} failed")).unwrap_or_default(),
            stages.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        ),
        Event::StageRolledBack { stage, strategy, status, detail } => {
            format!(
                "{stage}: rollback {} {}: {detail}",
                serde_json::to_string(strategy).unwrap_or_default(),
                status.as_str()
            )
        }
        Event::RollbackFinished { overall } => format!("rollback finished: {}", overall.as_str()),
        Event::RunCancelled { stage, by, .. } => {
            format!("run cancelled by {by}{}", stage.as_ref().map(|s| format!(" at stage {s}")).unwrap_or_default())
        }
        Event::RunFinished { status } => format!("run {}", status.as_str()),
        Event::Generated { stage, attempt, duration_ms, files, failure, .. } => format!(
            "{stage}: attempt {attempt} GENERATE+EXECUTE in {}: {}{}",
            duration(*duration_ms),
            if files.is_empty() { "no file changed".to_owned() } else { files.described().join(", ") },
            failure.as_ref().map(|f| format!("; failed: {}", f.summary)).unwrap_or_default()
        ),
        Event::Validated { stage, attempt, gates, violations, .. } => format!(
            "{stage}: attempt {attempt} VALIDATE {} gate(s): {}",
            gates.len(),
            if violations.is_empty() {
                "passed".to_owned()
            } else {
                violations.iter().map(|v| v.message.clone()).collect::<Vec<_>>().join("; ")
            }
        ),
        Event::Evaluated { stage, attempt, checks, failure } => format!(
            "{stage}: attempt {attempt} EVALUATE {}{}",
            checks
                .iter()
                .map(|c| format!("{} {}", c.name, if c.passed { "passed" } else { "failed" }))
                .collect::<Vec<_>>()
                .join(", "),
            failure.as_ref().map(|f| format!("; {}", f.classification())).unwrap_or_default()
        ),
        Event::RegressionGate { stage, reason, baseline, .. } => format!(
            "{stage}: regression detection {} ({reason}){}",
            if baseline.is_some() { "on" } else { "off" },
            baseline
                .as_ref()
                .map(|b| format!(", baseline of {} file(s) from `{}`", b.results.len(), b.command))
                .unwrap_or_default()
        ),
        Event::RegressionChecked { stage, attempt, dependents, regressions, .. } => format!(
            "{stage}: attempt {attempt} regression check of {} dependent(s): {}",
            dependents.len(),
            if regressions.is_empty() {
                "passed".to_owned()
            } else {
                regressions
                    .iter()
                    .map(|r| format!("{} +{} failure(s)", r.file, r.new_failures))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
        Event::Analyzed { stage, attempt, analysis } => {
            format!("{stage}: attempt {attempt} ANALYZE -> {}: {}", analysis.next.as_str(), analysis.reason)
        }
        Event::FixApplied { stage, attempt, fix } => format!("{stage}: attempt {attempt} FIX {}", fix.applied),
        Event::LoopEscalated { stage, attempt, reason } => {
            format!("{stage}: attempt {attempt} ESCALATE (waits for `respond`): {reason}")
        }
        Event::WorktreeMerged { branch, how, commit } => format!(
            "worktree branch {branch} merged back ({}{})",
            how.as_str(),
            commit.as_ref().map(|c| format!(", now at {}", c.get(..12).unwrap_or(c))).unwrap_or_default()
        ),
        Event::WorktreeConflict { branch, files } => {
            format!(
                "worktree branch {branch} conflicts with the workspace in {}: waits for `respond`",
                files.join(", ")
            )
        }
        Event::Delivered(_)
        | Event::DeliveryFailed { .. }
        | Event::CiReported { .. }
        | Event::ReviewReceived { .. }
        | Event::CiAwaited { .. }
        | Event::CiRetried { .. }
        | Event::CiEscalated { .. }
        | Event::ApprovalReceived { .. }
        | Event::ReviewAwaited { .. }
        | Event::HeadMoved { .. }
        | Event::Merged { .. }
        | Event::MergeFailed { .. }
        | Event::FailureReported { .. } => loopwright_app::forge::describe(&r.event).unwrap_or_default(),
        Event::UsageRecorded { stage, attempt, usage } => format!(
            "{stage}: attempt {attempt} used {} tokens in, {} out{}{}{}",
            usage.input_tokens,
            usage.output_tokens,
            if usage.estimated { " (counted by loopwright)" } else { "" },
            usage.cost_usd.map(|c| format!(", ${c:.4}")).unwrap_or_default(),
            if usage.quota_wait_ms > 0 {
                format!(", waited {} for the API's rate limit", duration(usage.quota_wait_ms))
            } else {
                String::new()
            }
        ),
        Event::DeadLettered { stage, attempt, reason, detail } => {
            format!("{stage}: attempt {attempt} DEAD LETTER ({reason}): {detail}")
        }
    };
    format!("{:>4}  {at}  {what}", r.seq)
}

/// `loopwright logs`.
pub async fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    let store = open_existing_store(&ws)?;
    let run = resolve_run(&store, &args.run).await?;
    if let Some(stage) = &args.stage {
        let events = store.events(&run).await?;
        return stage_logs(&ws, &events, &run, stage, args.attempt);
    }
    // Follows the journal as the daemon's streams do: read what is new, then wait for SQLite's
    // `data_version` to say another connection committed (checked every 20 ms; no re-reading).
    // Meanwhile the output of the stage in flight is tailed from its files as the runner
    // writes them (text only: `--json` prints the journal and nothing else).
    let mut follow = output::Follow::new(ws.runs_dir().join(run.as_str()));
    // On PostgreSQL a commit by any machine is heard by LISTEN (the feed stays the truth).
    let heard = match (args.follow, store.postgres()) {
        (true, Some(pg)) => pg.watch_feed().await.ok(),
        _ => None,
    };
    let mut printed = 0u64;
    let mut state = RunState::replay(run.clone(), &[]);
    loop {
        let version = store.data_version().await?;
        let events = store.events_since(&run, printed).await?;
        for r in &events {
            if global.json {
                println!("{}", serde_json::to_string(r)?);
            } else {
                println!("{}", safe(&line(r)));
            }
            printed = r.seq;
            state.apply(r);
        }
        if printed == 0 {
            return Err(CliError::no_run(&run));
        }
        let live = matches!(state.status, loopwright_engine::RunStatus::Running | loopwright_engine::RunStatus::Queued)
            && (loopwright_app::ownership::owner_alive(&state) || state.status == loopwright_engine::RunStatus::Queued);
        if !args.follow || !live {
            return Ok(0);
        }
        if !global.json {
            follow.track(&state);
        }
        while store.data_version().await? == version {
            for chunk in follow.read() {
                print!("{}", safe(&output_lines(&chunk)));
            }
            match &heard {
                Some(watch) => {
                    watch.changed(Duration::from_millis(500)).await;
                }
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }
}

/// A chunk of a stage's live output as `logs --follow` prints it: each line under the
/// event lines, marked with the stage, attempt and stream.
fn output_lines(chunk: &output::Chunk) -> String {
    let mark = if chunk.stream == "stderr" { "!" } else { "|" };
    let mut out = String::new();
    for line in chunk.text.lines() {
        out.push_str(&format!("      {}#{} {mark} {line}\n", chunk.stage, chunk.attempt));
    }
    out
}
