//! `loopwright resume`, `approve` and `reject`: continue a run from its journal.

use std::path::Path;

use loopwright_engine::{Event, EventRecord, RunId, RunState, RunStatus, Runner, Store, StoreError};
use loopwright_runners::ProcessRunner;
use loopwright_spec::Pipeline;
use loopwright_store::SqliteStore;

use super::run::{finish, os_user, owner_alive, report, resumable, this_process};
use super::{Global, open_existing_store};
use crate::error::CliError;
use crate::observe::{Observers, Progress, Projector};
use crate::stop::CliStopper;
use crate::workspace::Workspace;

/// Arguments of `resume`.
#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    /// The run (`latest` for the most recent).
    pub run: String,
    /// Print no progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Arguments of `approve` and `reject`.
#[derive(Debug, clap::Args)]
pub struct AnswerArgs {
    /// The run (`latest` for the most recent).
    pub run: String,
    /// Who answers (default: the OS user).
    #[arg(long)]
    pub by: Option<String>,
    /// A note kept with the answer.
    #[arg(long)]
    pub comment: Option<String>,
    /// With `reject`: roll back the completed stages that declare a `rollback`.
    #[arg(long)]
    pub rollback: bool,
    /// Print no progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Arguments of `cancel`.
#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// The run (`latest` for the most recent).
    pub run: String,
    /// Who cancels (default: the OS user).
    #[arg(long)]
    pub by: Option<String>,
    /// Roll back the completed stages that declare a `rollback`.
    #[arg(long)]
    pub rollback: bool,
}

/// Arguments of `respond`.
#[derive(Debug, clap::Args)]
pub struct RespondArgs {
    /// The run (`latest` for the most recent).
    pub run: String,
    /// retry, skip, abort, or fix followed by the instruction.
    #[arg(value_parser = ["retry", "skip", "abort", "fix"])]
    pub answer: String,
    /// The instruction, for `fix`.
    pub text: Vec<String>,
    /// Who answers (default: the OS user).
    #[arg(long)]
    pub by: Option<String>,
    /// Print no progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Resolves `latest` or checks a run id.
pub async fn resolve_run(store: &SqliteStore, run: &str) -> Result<RunId, CliError> {
    if run == "latest" {
        return store
            .runs(1)
            .await?
            .into_iter()
            .next()
            .map(|r| r.run_id)
            .ok_or_else(|| CliError::usage("no runs yet in this workspace"));
    }
    Ok(RunId::new(run))
}

/// A run opened from the command line.
struct Opened {
    ws: Workspace,
    store: SqliteStore,
    run: RunId,
    pipeline: Pipeline,
    state: RunState,
}

/// Finds the workspace and the run (`latest` or an id), and reads its journal.
async fn open_run(global: &Global, run: &str) -> Result<Opened, CliError> {
    let ws = Workspace::locate(global.dir.as_deref())?;
    let store = open_existing_store(&ws)?;
    let run = resolve_run(&store, run).await?;
    let (pipeline, state) = load_run(&ws, &store, &run).await?;
    Ok(Opened { ws, store, run, pipeline, state })
}

/// A run's state from its journal, and its pipeline as it was when the run started.
pub async fn load_run(ws: &Workspace, store: &SqliteStore, run: &RunId) -> Result<(Pipeline, RunState), CliError> {
    let events = store.events(run).await?;
    let state = RunState::replay(run.clone(), &events);
    let started =
        state.started.as_ref().ok_or_else(|| CliError::Internal(anyhow::anyhow!("run {run} has no start event")))?;
    let inputs: Vec<String> = started.inputs.keys().cloned().collect();
    let pipeline = ws.compile_text(Path::new(&started.pipeline_path), started.pipeline_source.clone(), &inputs)?;
    Ok((pipeline, state))
}

async fn continue_run(
    global: &Global,
    ws: &Workspace,
    store: &SqliteStore,
    pipeline: &Pipeline,
    state: RunState,
    answer: Option<Event>,
    quiet: bool,
) -> Result<u8, CliError> {
    let root = state.started.as_ref().map_or_else(|| ws.root.clone(), |s| std::path::PathBuf::from(&s.workspace));
    same_workspace(ws, &state)?;
    let _live = crate::lock::live_run(ws, &root, &state.run_id)?;
    let ports = super::run::Ports::new(ws, &root, super::run::redactor(pipeline), store)?;
    let stopper =
        CliStopper::new(store, state.run_id.clone(), state.last_seq).map_err(|e| CliError::Internal(e.into()))?;
    let mut observers = Observers { progress: Progress::new(quiet), files: Projector::new(ws.runs_dir()) };
    let mut engine = ports.engine(pipeline, store, &stopper, &mut observers);
    let mut state = state;
    // The answer and the claim of the run are one compare-and-append on the journal as it was
    // read: of two processes answering (or resuming) at once, one goes on and the other is told.
    let read = state.last_seq;
    let mut claim: Vec<Event> = answer.into_iter().collect();
    let mut after = state.clone();
    for event in &claim {
        after.apply(&EventRecord { seq: after.last_seq + 1, at: jiff::Timestamp::now(), event: event.clone() });
    }
    if resumable(after.status) {
        claim.push(Event::RunResumed { owner: this_process() });
    }
    if !claim.is_empty()
        && let Err(e) = engine.record_after(&mut state, claim).await
    {
        return Err(moved_on(store, &state.run_id, read, e).await);
    }
    let state = engine.drive(state).await?;
    finish(global, &mut engine, state).await
}

/// Refuses to continue a run from a workspace other than the one it was started in (a copy,
/// or the same files moved): its snapshots, commits and processes belong to that one, and
/// resuming here would restore and commit files in the other.
fn same_workspace(ws: &Workspace, state: &RunState) -> Result<(), CliError> {
    let Some(started) = state.started.as_ref() else { return Ok(()) };
    let recorded = started.worktree.as_ref().map_or(started.workspace.as_str(), |w| w.repo.as_str());
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    if canonical(Path::new(recorded)) == canonical(&ws.root) {
        return Ok(());
    }
    let run = &state.run_id;
    Err(CliError::usage(format!(
        "run {run} was started in {recorded}, but this workspace is {}: a run belongs to the workspace it was started in (its snapshots, commits and processes are there). Continue it there (`loopwright -C {recorded} {run_cmd}`), or move this workspace back to {recorded}; a copy's journal keeps the run's history, but new work in the copy starts a new run",
        ws.root.display(),
        run_cmd = format_args!("resume {run}"),
    )))
}

/// The error for a change refused because another process changed the run first: what that
/// process did, and who it was.
pub async fn moved_on(store: &SqliteStore, run: &RunId, read: u64, error: StoreError) -> CliError {
    if !matches!(error, StoreError::Conflict { .. }) {
        return error.into();
    }
    let since = store.events_since(run, read).await.unwrap_or_default();
    let done = since.iter().find_map(|r| {
        let what = match &r.event {
            Event::ApprovalGranted { stage, by, .. } => {
                format!("the approval of stage `{stage}` was already granted by {by}")
            }
            Event::ApprovalRejected { stage, by, .. } => {
                format!("the approval of stage `{stage}` was already rejected by {by}")
            }
            Event::EscalationAnswered { stage, answer, by } => {
                let answer = serde_json::to_value(answer)
                    .ok()
                    .and_then(|v| v["answer"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                format!("the escalation of stage `{stage}` was already answered (`{answer}`) by {by}")
            }
            Event::RunResumed { owner } => format!("it was already taken up by process {}", owner.pid),
            Event::CancelRequested { by, .. } | Event::RunCancelled { by, .. } => {
                format!("it was already cancelled by {by}")
            }
            _ => return None,
        };
        Some(format!("{what} at {}", r.at))
    });
    let done =
        done.or_else(|| since.first().map(|r| format!("its journal moved on (event {}: {})", r.seq, r.event.kind())));
    CliError::usage(format!(
        "run {run}: {}; nothing was done here (see `loopwright status {run}`)",
        done.unwrap_or_else(|| "its journal moved on".to_owned())
    ))
}

/// `loopwright resume RUN`.
pub async fn resume(global: &Global, args: ResumeArgs) -> Result<u8, CliError> {
    let Opened { ws, store, run, pipeline, state } = open_run(global, &args.run).await?;
    if state.status == RunStatus::Running && owner_alive(&state) {
        let pid = state.owner.map_or(0, |o| o.pid);
        return Err(CliError::usage(format!(
            "run {run} is being driven by process {pid}; wait for it, or stop it with `loopwright cancel {run}`"
        )));
    }
    if !resumable(state.status) {
        if let Some(stage) = state.waiting_for_approval() {
            eprintln!(
                "loopwright: run {run} waits for approval of stage `{}`: `loopwright approve {run}` or `loopwright reject {run}`",
                stage.id
            );
        } else {
            eprintln!("loopwright: run {run} already ended ({}); nothing to resume", state.status.as_str());
        }
        return report(global, &state);
    }
    continue_run(global, &ws, &store, &pipeline, state, None, args.quiet).await
}

/// `loopwright approve RUN` / `loopwright reject RUN`.
pub async fn answer(global: &Global, args: AnswerArgs, granted: bool) -> Result<u8, CliError> {
    let Opened { ws, store, run, pipeline, state } = open_run(global, &args.run).await?;
    let Some(stage) = state.waiting_for_approval().map(|s| s.id.clone()) else {
        return Err(CliError::usage(format!(
            "run {run} is not waiting for an approval (its status is {})",
            state.status.as_str()
        )));
    };
    let by = args.by.unwrap_or_else(os_user);
    let event = if granted {
        Event::ApprovalGranted { stage, by, comment: args.comment }
    } else {
        Event::ApprovalRejected { stage, by, comment: args.comment, rollback: args.rollback }
    };
    continue_run(global, &ws, &store, &pipeline, state, Some(event), args.quiet).await
}

/// `loopwright cancel RUN`: a run driven by a live process is asked to stop through the
/// journal (its owner ends the stage in flight and records the cancellation); any other run
/// (waiting, interrupted, or left running by a crash) is cancelled here.
pub async fn cancel(global: &Global, args: CancelArgs) -> Result<u8, CliError> {
    let Opened { ws, store, run, state, .. } = open_run(global, &args.run).await?;
    let mut state = state;
    if state.status.is_final() {
        return Err(CliError::usage(format!("run {run} already ended ({})", state.status.as_str())));
    }
    let by = args.by.unwrap_or_else(os_user);
    if state.status == RunStatus::Running && owner_alive(&state) {
        let request = Event::CancelRequested { by: by.clone(), rollback: args.rollback };
        if let Err(e) = store.append_after(&run, state.last_seq, &[(request, jiff::Timestamp::now())]).await {
            // The owner recorded something meanwhile (it is running): decide again on the new
            // journal.
            if !matches!(e, StoreError::Conflict { .. }) {
                return Err(e.into());
            }
            return Box::pin(cancel(
                global,
                CancelArgs { run: run.to_string(), by: Some(by), rollback: args.rollback },
            ))
            .await;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            state = RunState::replay(run.clone(), &store.events(&run).await?);
            if state.status != RunStatus::Running {
                break;
            }
            if std::time::Instant::now() > deadline {
                return Err(CliError::Internal(anyhow::anyhow!(
                    "run {run} did not stop within 60 s of the cancel request"
                )));
            }
        }
    } else {
        // A crashed owner left the stage's processes: end the journaled groups and any strays.
        if let Some(in_flight) = state.in_flight() {
            let runner = ProcessRunner::new(ws.runs_dir());
            if !in_flight.process_groups.is_empty() {
                runner.end_leftovers(&in_flight.process_groups);
            }
            runner.end_strays(&run, &in_flight.id);
        }
        let stage = state.in_flight().or(state.waiting_for_approval()).map(|s| s.id.clone());
        let event = Event::RunCancelled { stage, by, rollback: args.rollback };
        if args.rollback {
            let (pipeline, state) = load_run(&ws, &store, &run).await?;
            return continue_run(global, &ws, &store, &pipeline, state, Some(event), true).await;
        }
        match store.append_after(&run, state.last_seq, &[(event, jiff::Timestamp::now())]).await {
            Ok(records) => records.iter().for_each(|r| state.apply(r)),
            Err(e) => return Err(moved_on(&store, &run, state.last_seq, e).await),
        }
    }
    report(global, &state)
}

/// `loopwright respond RUN retry|skip|abort|fix TEXT`.
pub async fn respond(global: &Global, args: RespondArgs) -> Result<u8, CliError> {
    use loopwright_engine::event::Answer;
    let answer = match args.answer.as_str() {
        "retry" => Answer::Retry,
        "skip" => Answer::Skip,
        "abort" => Answer::Abort,
        _ => {
            let text = args.text.join(" ");
            if text.trim().is_empty() {
                return Err(CliError::usage(
                    "`respond RUN fix` needs the instruction: `loopwright respond RUN fix \"use the v2 API\"`",
                ));
            }
            Answer::Fix { text }
        }
    };
    let Opened { ws, store, run, pipeline, state } = open_run(global, &args.run).await?;
    let Some(stage) = state.waiting_for_escalation().map(|s| s.id.clone()) else {
        return Err(CliError::usage(format!(
            "run {run} is not waiting on an escalation (its status is {})",
            state.status.as_str()
        )));
    };
    if answer == Answer::Skip {
        warn_skip(&pipeline, &state, &stage);
    }
    let by = args.by.unwrap_or_else(os_user);
    continue_run(
        global,
        &ws,
        &store,
        &pipeline,
        state,
        Some(Event::EscalationAnswered { stage, answer, by }),
        args.quiet,
    )
    .await
}

/// Seed 001 "Skip Handling": says which later stages read what the skipped stage produced.
pub fn warn_skip(
    pipeline: &loopwright_spec::Pipeline,
    state: &loopwright_engine::RunState,
    stage: &loopwright_spec::StageId,
) {
    // Seed 001 "Skip Handling": say which later stages read what the skipped one produced.
    let produced: Vec<String> = pipeline.stage(stage.as_str()).map(|s| s.outputs.clone()).unwrap_or_default();
    let dependents: Vec<String> = pipeline
        .stages
        .iter()
        .skip_while(|s| &s.id != stage)
        .skip(1)
        .filter(|s| s.inputs.iter().any(|i| produced.contains(i)))
        .map(|s| s.id.to_string())
        .collect();
    let attempts = state.stage(stage.as_str()).map_or(0, |s| s.attempts);
    eprintln!("[SKIPPED] stage `{stage}`\n  Reason: user escalation after {attempts} failed attempt(s)");
    if dependents.is_empty() {
        eprintln!("  Impact: no later stage reads its outputs");
    } else {
        eprintln!(
            "  Impact: warning: {} read{} its outputs ({}) and may fail",
            dependents.join(", "),
            if dependents.len() == 1 { "s" } else { "" },
            produced.join(", ")
        );
    }
}
