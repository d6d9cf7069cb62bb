//! The `loopwright` binary: durable, self-correcting pipelines for AI coding agents.
//!
//! One module per subcommand under `cmd/`; this file parses the command line and turns the
//! outcome into the documented exit codes (SPEC §1) in one place.

mod cmd;
mod drive;
mod error;
mod examples;
mod input;
mod observe;
mod render;
mod stop;
mod terminal;
mod workspace {
    //! The workspace, from the application layer.
    pub use loopwright_app::workspace::*;
}

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::CliError;

/// Durable, self-correcting pipelines for AI coding agents.
///
/// Describe a piece of work as a pipeline of stages (plan → review → implement → verify) in
/// `.loopwright/pipelines/NAME.yml`; loopwright runs each stage with its agent, journals every
/// step in `.loopwright/state/state.db`, and reports a result you can script against.
///
/// Exit codes: 0 success · 1 the run failed · 2 usage or validation error (nothing was run) ·
/// 3 the run waits for a human · 4 cancelled or rejected · 130 interrupted (resumable).
#[derive(Debug, Parser)]
#[command(name = "loopwright", version, propagate_version = true, max_term_width = 100)]
struct Cli {
    /// Workspace root (default: the nearest ancestor holding .loopwright/, else the current directory).
    #[arg(short = 'C', global = true, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Print the result as JSON on stdout.
    #[arg(long, global = true)]
    json: bool,
    /// Keep the journal in this PostgreSQL database (postgres://user@host/db), shared by every
    /// machine that names it, instead of the workspace's SQLite file (also LOOPWRIGHT_STORE, or
    /// `store = "…"` in config.toml).
    #[arg(long, global = true, value_name = "URL")]
    store: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Scaffold .loopwright/ with a config, an example pipeline and its agents.
    Init(cmd::init::Args),
    /// Check pipelines (all when none are named) and agent files; report every problem.
    Validate(cmd::validate::Args),
    /// Run a pipeline in the foreground until it ends or waits for a human.
    Run(cmd::run::Args),
    /// Run a run again: the same pipeline, task, variables and inputs, from its first stage or
    /// from --from STAGE (the earlier stages' outputs taken from the earlier run).
    Rerun(cmd::run::RerunArgs),
    /// Continue an interrupted or waiting run from where its journal says it stands.
    Resume(cmd::resume::ResumeArgs),
    /// Approve the approval gate a run waits at, then continue the run.
    Approve(cmd::resume::AnswerArgs),
    /// Reject the approval gate a run waits at: the run ends as rejected.
    Reject(cmd::resume::AnswerArgs),
    /// Stop a running or waiting run (from any terminal): the run is cancelled.
    Cancel(cmd::resume::CancelArgs),
    /// Answer an escalation: retry, fix TEXT (retry with an instruction), skip (accept and go
    /// on) or abort.
    Respond(cmd::resume::RespondArgs),
    /// Show one run, or a table of recent runs.
    Status(cmd::status::Args),
    /// Print a run's event log.
    Logs(cmd::logs::Args),
    /// List the agents found, or show how one would be run.
    Agents(cmd::agents::Args),
    /// Classify an error output against the failure-pattern library, or list the library.
    Patterns(cmd::patterns::Args),
    /// The tasks the closed loop gave up on: list them, or show one.
    #[command(name = "dead-letters")]
    DeadLetters(cmd::dead_letters::Args),
    /// Retry summary and failure metrics over recent runs: attempts by failure pattern, how well
    /// each fix strategy worked.
    Stats(cmd::stats::Args),
    /// What agents used against each [[spend]] cap of config.toml this day, week or month,
    /// counted over every process and machine sharing the store.
    Spend,
    /// Free what finished runs no longer need, as [retention] in config.toml says: their
    /// snapshots (after 14 days by default), the whole run — files and journal — (after
    /// `runs_days`), and copies no snapshot names. Runs that are queued, running, waiting or
    /// interrupted are never touched.
    Gc(cmd::gc::Args),
    /// Serve the workspace: REST API, live events, the dashboard and notifications, until
    /// SIGINT/SIGTERM. Runs it drives are then interrupted (resumable) and taken up again by
    /// the next `serve`.
    Serve(cmd::serve::Args),
    /// Auto mode: one long-lived agent session runs a task module's whole loop, supervised
    /// (init, start, stop, status, log, protocol).
    Auto(cmd::auto::Args),
    /// What this machine offers: the sandbox's pieces (bubblewrap, user namespaces, an overlay
    /// in a user namespace) and the coding-agent CLIs found, with how to install those missing.
    Doctor(cmd::doctor::Args),
    /// Run the runs submitted to a PostgreSQL store (`run --submit`), on this machine, until
    /// SIGINT/SIGTERM: claim those whose labels this worker has, drive each in a clone of its
    /// repository under a lease, push each stage's commit to the run's branch.
    Worker(cmd::worker::Args),
    /// Work from GitHub issues (`github poll`: look once for labels, commands and CI results).
    Github(cmd::github::Args),
    /// The journal: copy this workspace's runs to PostgreSQL (`store copy --to URL`).
    Store(cmd::store::Args),
    /// Print the JSON Schema of pipeline files.
    Schema,
    /// (internal) The first program of a sandbox without network: forwards a loopback port to
    /// the allow-list proxy and runs the stage's program.
    #[command(name = "sandbox-exec", hide = true)]
    SandboxExec(cmd::sandbox_exec::Args),
    /// Run the bundled example end to end in a temporary workspace.
    Demo(cmd::demo::Args),
    /// Measure engine overhead, throughput against a shell loop, peak memory and the pattern
    /// matcher (figures in docs/benchmarks.md).
    Bench(cmd::bench::Args),
}

/// Ends the process quietly when its output is a pipe whose reader has gone (`loopwright logs
/// RUN --json | head -1`), with 141 as a shell reports a process ended by SIGPIPE. Rust ignores
/// SIGPIPE, so `println!` panics on `EPIPE` instead; restoring the signal's default needs
/// `unsafe`, which this crate forbids, so the panic is caught here instead.
fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to std") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    quiet_on_broken_pipe();
    let cli = Cli::parse();
    let global = cmd::Global { dir: cli.dir, json: cli.json, store: cli.store, reports: Vec::new() };
    let cli = match cli.command {
        Command::Serve(args) => return exit(cmd::serve::run(&global, args)),
        Command::Worker(args) => return exit(cmd::worker::run(&global, args)),
        Command::Github(args) => return exit(cmd::github::run(&global, args)),
        Command::Auto(args) => return exit(cmd::auto::run(&global, args)),
        Command::Demo(args) if args.serve => return exit(cmd::demo::serve(&global, args)),
        command => Cli { dir: global.dir.clone(), json: global.json, store: global.store.clone(), command },
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("loopwright: error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Init(args) => cmd::init::run(&global, args),
            Command::Validate(args) => cmd::validate::run(&global, args),
            Command::Run(args) => cmd::run::run(&global, args).await,
            Command::Rerun(args) => cmd::run::rerun(&global, args).await,
            Command::Resume(args) => cmd::resume::resume(&global, args).await,
            Command::Approve(args) => cmd::resume::answer(&global, args, true).await,
            Command::Reject(args) => cmd::resume::answer(&global, args, false).await,
            Command::Cancel(args) => cmd::resume::cancel(&global, args).await,
            Command::Respond(args) => cmd::resume::respond(&global, args).await,
            Command::Status(args) => cmd::status::run(&global, args).await,
            Command::Logs(args) => cmd::logs::run(&global, args).await,
            Command::Agents(args) => cmd::agents::run(&global, args),
            Command::Patterns(args) => cmd::patterns::run(&global, args),
            Command::DeadLetters(args) => cmd::dead_letters::run(&global, args),
            Command::Stats(args) => cmd::stats::run(&global, args).await,
            Command::Spend => cmd::spend::run(&global).await,
            Command::Gc(args) => cmd::gc::run(&global, args).await,
            Command::Doctor(args) => cmd::doctor::run(&global, args),
            Command::Store(args) => cmd::store::run(&global, args).await,
            Command::SandboxExec(args) => cmd::sandbox_exec::run(&global, args).await,
            Command::Schema => {
                print!("{}", loopwright_spec::schema::pipeline_schema_json());
                Ok(0)
            }
            Command::Demo(args) => cmd::demo::run(&global, args).await,
            Command::Serve(_) | Command::Auto(_) | Command::Worker(_) | Command::Github(_) => {
                unreachable!("`serve`, `auto`, `worker` and `github` run on a runtime of their own, started above")
            }
            Command::Bench(args) => cmd::bench::run(&global, args).await,
        }
    });
    exit(outcome)
}

/// The process's exit: the command's code, or its error reported on stderr (SPEC §1).
fn exit(outcome: Result<u8, CliError>) -> ExitCode {
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            match &err {
                CliError::Invalid(diags) => eprint!("{}", render::diagnostics(diags, render::stderr_color())),
                other => eprintln!("loopwright: error: {other}"),
            }
            ExitCode::from(error::exit_code(&err))
        }
    }
}
