//! `loopwright run`: start a run of a pipeline and drive it until it ends or waits.

use std::collections::BTreeMap;

use loopwright_app::ops::start::StartRequest;
use loopwright_spec::StageId;

use super::Global;
use crate::drive;
use crate::error::CliError;

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pipeline: a name (.loopwright/pipelines/NAME.yml) or a path to a .yml file.
    pub pipeline: String,
    /// What the run should achieve (the task description every stage sees).
    #[arg(long)]
    pub task: Option<String>,
    /// Reuse a task id (artifacts of earlier runs of the task serve --start-from).
    #[arg(long = "task-id", value_name = "ID")]
    pub task_id: Option<String>,
    /// Task metadata for conditions: complexity, task_type, tags (comma list), always_include
    /// (comma list), or a variable the pipeline declares under `vars:`.
    #[arg(long = "var", value_name = "KEY=VALUE")]
    pub vars: Vec<String>,
    /// An initial input: KEY=VALUE, KEY=@FILE (the text of a regular file of at most 4 MiB), or
    /// @FILE (key: the file's stem).
    #[arg(long = "input", value_name = "KEY=VALUE|@FILE")]
    pub inputs: Vec<String>,
    /// Start at this stage; earlier stages' outputs come from earlier runs of the same task.
    #[arg(long = "start-from", value_name = "STAGE")]
    pub start_from: Option<String>,
    /// Do not run this stage (repeatable).
    #[arg(long = "skip", value_name = "STAGE")]
    pub skip: Vec<String>,
    /// Approve every approval gate of this run up front (for CI).
    #[arg(long)]
    pub yes: bool,
    /// Print no progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// Work in a git worktree of its own on branch `loopwright/TASK`, merged back when the run
    /// succeeds (also `worktree = true` under `[defaults]` in config.toml).
    #[arg(long)]
    pub worktree: bool,
    /// Hand the run to workers instead of running it here (`loopwright worker` on any machine
    /// sharing the PostgreSQL store): it is queued, and a worker whose labels hold the
    /// pipeline's `runs_on:` runs it in a clone of the repository.
    #[arg(long, conflicts_with = "worktree")]
    pub submit: bool,
    /// With --submit: the git repository workers clone (default: the pipeline's `repo:`, else
    /// this checkout's `origin`).
    #[arg(long, value_name = "URL", requires = "submit")]
    pub repo: Option<String>,
    /// With --submit: the branch, tag or commit the run starts from (default: the current
    /// branch; workers see what the repository has, so push it first).
    #[arg(long, value_name = "REF", requires = "submit")]
    pub base: Option<String>,
    /// Also write the run's result as a report when this command ends: `junit=FILE` (JUnit
    /// XML for CI's test results) or `markdown=FILE` (why the run stands where it stands);
    /// repeatable. `[report]` in config.toml names them for every run.
    #[arg(long = "report", value_name = "FORMAT=FILE", value_parser = super::report_flag)]
    pub report: Vec<loopwright_app::report::Target>,
}

fn split_kv<'a>(text: &'a str, flag: &str) -> Result<(&'a str, &'a str), CliError> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim(), v)),
        _ => Err(CliError::usage(format!("{flag} `{text}`: expected KEY=VALUE"))),
    }
}

fn parse_inputs(raw: &[String]) -> Result<BTreeMap<String, String>, CliError> {
    let mut inputs = BTreeMap::new();
    for item in raw {
        let (key, value) = match item.strip_prefix('@') {
            Some(file) => {
                let key = std::path::Path::new(file)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (key, format!("@{file}"))
            }
            None => {
                let (k, v) = split_kv(item, "--input")?;
                (k.to_owned(), v.to_owned())
            }
        };
        if StageId::parse(&key).is_none() {
            return Err(CliError::usage(format!("--input `{item}`: the key `{key}` must match ^[a-z][a-z0-9_]*$")));
        }
        let value = match value.strip_prefix('@') {
            Some(file) => {
                crate::input::read_file(file, crate::input::MAX_INPUT_BYTES, &format!("--input {key}=@{file}"))?
            }
            None => value,
        };
        inputs.insert(key, value);
    }
    Ok(inputs)
}

fn parse_vars(raw: &[String]) -> Result<BTreeMap<String, String>, CliError> {
    raw.iter().map(|item| split_kv(item, "--var").map(|(k, v)| (k.to_owned(), v.to_owned()))).collect()
}

/// `loopwright run`.
pub async fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    let global = &global.reporting(&ws, &args.report);
    let inputs = parse_inputs(&args.inputs)?;
    let vars = parse_vars(&args.vars)?;
    let request = StartRequest {
        pipeline: args.pipeline,
        name_only: false,
        task: args.task,
        task_id: args.task_id,
        vars,
        inputs,
        start_from: args.start_from,
        skip: args.skip,
        approve_all: args.yes,
        worktree: args.worktree,
        by: None,
        rerun_of: None,
        forge: None,
        run_id: None,
    };
    if args.submit {
        return submit(global, &ws, request, args.repo, args.base).await;
    }
    drive::start(global, &ws, request, args.quiet).await
}

/// `run --submit`: queued for workers; says where and how to follow it.
async fn submit(
    global: &Global,
    ws: &crate::workspace::Workspace,
    request: StartRequest,
    repo: Option<String>,
    base: Option<String>,
) -> Result<u8, CliError> {
    let store = super::open_store(ws)?;
    let target = loopwright_app::ops::start::Target { repo, base };
    let (run, submission) = loopwright_app::ops::start::submit(ws, &store, request, target).await?;
    if global.json {
        let out = serde_json::json!({
            "run_id": run,
            "status": "queued",
            "repo": submission.repo,
            "base": submission.base,
            "runs_on": submission.labels,
        });
        println!("{out}");
    } else {
        let labels: Vec<String> = submission.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!(
            "submitted run {run}: queued for a worker{} to run from {} of {}",
            if labels.is_empty() { String::new() } else { format!(" labelled {}", labels.join(",")) },
            submission.base,
            submission.repo
        );
        println!("follow it with `loopwright logs {run} --follow`, from any machine that names the same store");
    }
    Ok(0)
}

/// Arguments of `rerun`.
#[derive(Debug, clap::Args)]
pub struct RerunArgs {
    /// The run to run again (`latest` for the most recent).
    pub run: String,
    /// Start at this stage instead of the first; the earlier stages' outputs come from the
    /// earlier run (the same task).
    #[arg(long, value_name = "STAGE")]
    pub from: Option<String>,
    /// Approve every approval gate of the new run up front (for CI); the earlier run's
    /// `--yes` is not carried over.
    #[arg(long)]
    pub yes: bool,
    /// Print no progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// Also write the run's result as a report when this command ends: `junit=FILE` (JUnit
    /// XML for CI's test results) or `markdown=FILE` (why the run stands where it stands);
    /// repeatable. `[report]` in config.toml names them for every run.
    #[arg(long = "report", value_name = "FORMAT=FILE", value_parser = super::report_flag)]
    pub report: Vec<loopwright_app::report::Target>,
}

/// `loopwright rerun`: a new run of the same pipeline (as its file says now), task,
/// variables and inputs, from the first stage or `--from`, journaled with who asked.
pub async fn rerun(global: &Global, args: RerunArgs) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    let global = &global.reporting(&ws, &args.report);
    let store = super::open_existing_store(&ws)?;
    let run = loopwright_app::ops::read::resolve_run(&store, &args.run).await?;
    let state = loopwright_app::ops::read::state(&store, &run).await?;
    let mut request = loopwright_app::ops::start::rerun(&ws, &state, args.from, Some(drive::os_user()), false)?;
    request.approve_all = args.yes;
    drive::start(global, &ws, request, args.quiet).await
}
