//! `loopwright resume`, `approve` and `reject`: continue a run from its journal.

use std::path::Path;

use loopwright_engine::{Engine, Event, RunId, RunState, Store, SystemClock};
use loopwright_runners::ProcessRunner;
use loopwright_spec::Pipeline;
use loopwright_store::SqliteStore;

use super::run::{finish, os_user, report, resumable};
use super::{Global, open_existing_store};
use crate::error::CliError;
use crate::observe::{Observers, Progress, Projector};
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
    let runner = ProcessRunner::new(ws.runs_dir());
    let mut observers = Observers { progress: Progress::new(quiet), files: Projector::new(ws.runs_dir()) };
    let mut engine = Engine { pipeline, store, runner: &runner, clock: &SystemClock, observer: &mut observers };
    let mut state = state;
    if let Some(event) = answer {
        engine.record(&mut state, event).await?;
    }
    let state = engine.drive(state).await?;
    finish(global, &mut engine, state).await
}

/// `loopwright resume RUN`.
pub async fn resume(global: &Global, args: ResumeArgs) -> Result<u8, CliError> {
    let ws = Workspace::locate(global.dir.as_deref())?;
    let store = open_existing_store(&ws)?;
    let run = resolve_run(&store, &args.run).await?;
    let (pipeline, state) = load_run(&ws, &store, &run).await?;
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
    let ws = Workspace::locate(global.dir.as_deref())?;
    let store = open_existing_store(&ws)?;
    let run = resolve_run(&store, &args.run).await?;
    let (pipeline, state) = load_run(&ws, &store, &run).await?;
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
        Event::ApprovalRejected { stage, by, comment: args.comment }
    };
    continue_run(global, &ws, &store, &pipeline, state, Some(event), args.quiet).await
}
