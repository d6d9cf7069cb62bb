//! `loopwright logs RUN`: the run's journal, event by event.

use std::time::Duration;

use loopwright_engine::{Event, EventRecord, RunState, Store};

use super::resume::resolve_run;
use super::{Global, open_existing_store};
use crate::error::CliError;
use crate::render::duration;
use crate::workspace::Workspace;

/// Arguments of `logs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run (`latest` for the most recent).
    pub run: String,
    /// Keep printing new events until the run ends or waits.
    #[arg(long, short)]
    pub follow: bool,
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
        Event::ApprovalGranted { stage, by, comment } => {
            format!("{stage}: approved by {by}{}", comment.as_ref().map(|c| format!(": {c}")).unwrap_or_default())
        }
        Event::ApprovalRejected { stage, by, comment, rollback } => format!(
            "{stage}: rejected by {by}{}{}",
            comment.as_ref().map(|c| format!(": {c}")).unwrap_or_default(),
            if *rollback { " (roll back completed stages)" } else { "" }
        ),
        Event::AttemptStarted { stage, attempt } => format!("{stage}: attempt {attempt} started"),
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
                "{stage}: attempt {attempt} failed after {} ({}): {}",
                duration(*duration_ms),
                error.kind.as_str(),
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
        Event::EscalationAnswered { stage, answer, by } => {
            format!("{stage}: escalation answered by {by}: {}", serde_json::to_string(answer).unwrap_or_default())
        }
        Event::RunInterrupted { stage, signal } => format!(
            "run interrupted by {signal}{}; `loopwright resume` continues it",
            stage.as_ref().map(|s| format!(" during stage {s}")).unwrap_or_default()
        ),
        Event::RunResumed { owner } => format!("run resumed by process {}", owner.pid),
        Event::CancelRequested { by, .. } => format!("cancel requested by {by}"),
        Event::SnapshotTaken { stage, attempt, snapshot, files } => {
            format!("{stage}: attempt {attempt}: snapshot {snapshot} of {files} file(s)")
        }
        Event::SnapshotFailed { stage, attempt, reason } => format!("{stage}: attempt {attempt}: {reason}"),
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
    };
    format!("{:>4}  {at}  {what}", r.seq)
}

/// `loopwright logs`.
pub async fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = Workspace::locate(global.dir.as_deref())?;
    let store = open_existing_store(&ws)?;
    let run = resolve_run(&store, &args.run).await?;
    let mut printed = 0u64;
    loop {
        let events = store.events(&run).await?;
        let since = printed;
        for r in events.iter().filter(|r| r.seq > since) {
            if global.json {
                println!("{}", serde_json::to_string(r).map_err(|e| CliError::Internal(e.into()))?);
            } else {
                println!("{}", line(r));
            }
            printed = r.seq;
        }
        let state = RunState::replay(run.clone(), &events);
        let live = state.status == loopwright_engine::RunStatus::Running && super::run::owner_alive(&state);
        if !args.follow || !live {
            return Ok(0);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
