//! `loopwright resume`, `approve` and `reject`: continue a run from its journal.

use loopwright_app::ops::answer::{self, approval, escalation, owner_acts, parse_answer, record_for_owner};
use loopwright_app::ops::cancel::Cancelled;
use loopwright_app::ops::read::{load_run, resolve_run};
use loopwright_app::ops::resume::Resumable;
use loopwright_app::ownership::this_process;
use loopwright_app::session::Session;
use loopwright_engine::event::Via;
use loopwright_engine::{Event, RunId, RunState, RunStatus, Store};
use loopwright_spec::Pipeline;
use loopwright_store::Journal;

use super::{Global, open_existing_store};
use crate::drive::{finish, os_user, report};
use crate::error::CliError;
use crate::observe::Observers;
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
    /// Also write the run's result as a report when this command ends: `junit=FILE` (JUnit
    /// XML for CI's test results) or `markdown=FILE` (why the run stands where it stands);
    /// repeatable. `[report]` in config.toml names them for every run.
    #[arg(long = "report", value_name = "FORMAT=FILE", value_parser = super::report_flag)]
    pub report: Vec<loopwright_app::report::Target>,
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

/// A run opened from the command line.
struct Opened {
    ws: Workspace,
    store: Journal,
    run: RunId,
    pipeline: Pipeline,
    state: RunState,
}

/// Finds the workspace and the run (`latest` or an id), and reads its journal.
async fn open_run(global: &Global, run: &str) -> Result<Opened, CliError> {
    let ws = global.workspace()?;
    let store = open_existing_store(&ws)?;
    let run = resolve_run(&store, run).await?;
    let (pipeline, state) = load_run(&ws, &store, &run).await?;
    Ok(Opened { ws, store, run, pipeline, state })
}

/// Continues a run here in the foreground: takes its working tree, claims it with the answer
/// (one compare-and-append), drives it, and asks at the next gate when a person is at the
/// terminal.
async fn continue_run(
    global: &Global,
    ws: &Workspace,
    store: &Journal,
    pipeline: &Pipeline,
    mut state: RunState,
    answer: Option<Event>,
    quiet: bool,
) -> Result<u8, CliError> {
    let session = Session::resume(ws, store, pipeline, &state)?;
    let stopper =
        CliStopper::new(store, state.run_id.clone(), state.last_seq).map_err(|e| CliError::Internal(e.into()))?;
    let mut observers = Observers::new(ws, quiet);
    let mut engine = session.engine(pipeline, store, &stopper, &mut observers);
    answer::claim(&mut engine, &mut state, answer, this_process(false)).await?;
    let state = engine.drive(state).await?;
    finish(global, &mut engine, state).await
}

/// Gives an answer: to the run's live owner when a daemon drives it (it acts on the journal),
/// else here, in the foreground.
async fn give(opened: Opened, global: &Global, event: Event, quiet: bool) -> Result<u8, CliError> {
    let Opened { ws, store, run, pipeline, mut state } = opened;
    if answer::submitted(&store, &run).await? {
        answer::queue_for_workers(&store, &mut state, event).await?;
        if state.status == RunStatus::Queued {
            eprintln!("loopwright: run {run} is run by workers; the next free one continues it");
        }
        report(global, &state, Some(&pipeline))?;
        return Ok(0);
    }
    if owner_acts(&state) {
        record_for_owner(&store, &mut state, event).await?;
        let pid = state.owner.as_ref().map_or(0, |o| o.pid);
        eprintln!("loopwright: run {run} is driven by the daemon (process {pid}); it continues there");
        // The answer was taken: that is what this command reports (the run itself goes on).
        report(global, &state, Some(&pipeline))?;
        return Ok(0);
    }
    continue_run(global, &ws, &store, &pipeline, state, Some(event), quiet).await
}

/// `loopwright resume RUN`.
pub async fn resume(global: &Global, args: ResumeArgs) -> Result<u8, CliError> {
    let Opened { ws, store, run, pipeline, state } = open_run(global, &args.run).await?;
    let global = &global.reporting(&ws, &args.report);
    if answer::submitted(&store, &run).await? {
        eprintln!(
            "loopwright: run {run} was submitted to workers: a worker continues it once no live lease holds it (`loopwright status {run}`)"
        );
        return report(global, &state, Some(&pipeline));
    }
    match loopwright_app::ops::resume::check(&state)? {
        Resumable::Yes => continue_run(global, &ws, &store, &pipeline, state, None, args.quiet).await,
        Resumable::WaitsForApproval(stage) => {
            eprintln!(
                "loopwright: run {run} waits for approval of stage `{stage}`: `loopwright approve {run}` or `loopwright reject {run}`"
            );
            report(global, &state, Some(&pipeline))
        }
        Resumable::Waits | Resumable::Ended(_) => {
            eprintln!("loopwright: run {run} already ended ({}); nothing to resume", state.status.as_str());
            report(global, &state, Some(&pipeline))
        }
    }
}

/// `loopwright approve RUN` / `loopwright reject RUN`.
pub async fn answer(global: &Global, args: AnswerArgs, granted: bool) -> Result<u8, CliError> {
    let opened = open_run(global, &args.run).await?;
    let who = crate::drive::cli_answerer(args.by);
    let policy =
        answer::GatePolicy { pipeline: &opened.pipeline, prevent_self: opened.ws.config.serve.prevent_self_approval };
    let event = approval(policy, &opened.state, granted, &who, args.comment, args.rollback)?;
    give(opened, global, event, args.quiet).await
}

/// `loopwright cancel RUN`: a run driven by a live process is asked to stop through the
/// journal (its owner ends the stage in flight and records the cancellation); any other run
/// (waiting, interrupted, or left running by a crash) is cancelled here.
pub async fn cancel(global: &Global, args: CancelArgs) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    let store = open_existing_store(&ws)?;
    let run = resolve_run(&store, &args.run).await?;
    let by = args.by.unwrap_or_else(os_user);
    match loopwright_app::ops::cancel::cancel(&ws, &store, &run, by, args.rollback, |_| false).await? {
        Cancelled::Done(state) => report(global, &state, None),
        Cancelled::Requested(_) => {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                let state = RunState::replay(run.clone(), &store.events(&run).await?);
                // Its owner ends it: at work, or queued by it for a provider's or a cap's wait.
                let at_work = state.status == RunStatus::Running
                    || (state.status == RunStatus::Queued && state.provider_wait.is_some());
                if !at_work {
                    return report(global, &state, None);
                }
                if std::time::Instant::now() > deadline {
                    return Err(CliError::Internal(anyhow::anyhow!(
                        "run {run} did not stop within 60 s of the cancel request"
                    )));
                }
            }
        }
        Cancelled::RollBack(event) => {
            let (pipeline, mut state) = load_run(&ws, &store, &run).await?;
            if answer::submitted(&store, &run).await? {
                // A worker rolls it back, in its clone of the run's repository.
                answer::queue_for_workers(&store, &mut state, event).await?;
                return report(global, &state, Some(&pipeline));
            }
            continue_run(global, &ws, &store, &pipeline, state, Some(event), true).await
        }
    }
}

/// `loopwright respond RUN retry|skip|abort|fix TEXT`.
pub async fn respond(global: &Global, args: RespondArgs) -> Result<u8, CliError> {
    let text = args.text.join(" ");
    let answer = parse_answer(&args.answer, Some(&text)).map_err(|_| {
        CliError::usage("`respond RUN fix` needs the instruction: `loopwright respond RUN fix \"use the v2 API\"`")
    })?;
    let opened = open_run(global, &args.run).await?;
    let by = args.by.unwrap_or_else(os_user);
    let skip = answer == loopwright_engine::event::Answer::Skip;
    let (stage, event) = escalation(&opened.state, answer, by, Via::Cli)?;
    if skip {
        eprint!("{}", answer::skip_impact(&opened.pipeline, &opened.state, &stage));
    }
    give(opened, global, event, args.quiet).await
}
