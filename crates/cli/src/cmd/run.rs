//! `loopwright run`: start a run of a pipeline and drive it until it ends or waits.

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};

use loopwright_engine::result::PipelineResult;
use loopwright_engine::{Engine, Event, Owner, RunId, RunStarted, RunState, RunStatus, Store, SystemClock, TaskId};
use loopwright_runners::secrets::Redactor;
use loopwright_runners::{FsChanges, ProcessRunner};
use loopwright_spec::condition::BUILTIN_VARIABLES;
use loopwright_spec::{Pipeline, StageId};
use loopwright_store::SqliteStore;

use super::{Global, open_store};
use crate::error::CliError;
use crate::observe::{Observers, Progress, Projector};
use crate::render;
use crate::stop::CliStopper;
use crate::workspace::Workspace;

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

fn parse_vars(raw: &[String], pipeline: &Pipeline) -> Result<BTreeMap<String, String>, CliError> {
    let mut vars = BTreeMap::new();
    for item in raw {
        let (key, value) = split_kv(item, "--var")?;
        let settable =
            BUILTIN_VARIABLES.iter().any(|b| *b == key && *b != "stage_outputs") || pipeline.vars.contains_key(key);
        if !settable {
            let declared: Vec<&str> = pipeline.vars.keys().map(String::as_str).collect();
            return Err(CliError::usage(format!(
                "--var {key}: unknown variable `{key}`; known: complexity, task_type, tags, always_include{}{}",
                if declared.is_empty() { "" } else { ", " },
                declared.join(", ")
            )));
        }
        if key == "complexity" && !value.is_empty() && !["low", "medium", "high"].contains(&value) {
            return Err(CliError::usage(format!("--var complexity={value}: expected low, medium or high")));
        }
        vars.insert(key.to_owned(), value.to_owned());
    }
    Ok(vars)
}

fn stage_arg(pipeline: &Pipeline, name: &str, flag: &str) -> Result<StageId, CliError> {
    match pipeline.stage(name) {
        Some(s) => Ok(s.id.clone()),
        None => Err(CliError::usage(format!(
            "{flag} {name}: pipeline `{}` has no stage `{name}`; its stages: {}",
            pipeline.name,
            pipeline.stages.iter().map(|s| s.id.as_str()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Refuses, before anything runs, a pipeline whose stages use a coding-agent CLI that is not
/// installed.
fn check_runners(pipeline: &Pipeline, start_from: Option<&StageId>) -> Result<(), CliError> {
    use loopwright_runners::presets;
    use loopwright_spec::Mode;
    let start = start_from.and_then(|s| pipeline.index_of(s.as_str())).unwrap_or(0);
    let mut problems: Vec<String> = Vec::new();
    for (s, a) in pipeline.stages[start..].iter().filter_map(|s| pipeline.agent_of(s).map(|a| (s, a))) {
        let Some(install) = presets::install_hint(a.runner) else { continue };
        let argv = presets::invocation(a, Mode::Agent).map(|i| i.argv).unwrap_or_default();
        let program = argv.first().cloned().unwrap_or_default();
        if !loopwright_runners::process::resolve(&program).is_absolute() {
            problems.push(format!(
                "stage `{}` uses agent `{}` ({}, `runner: {}`), but `{program}` is not on PATH (install it: {install})",
                s.id, a.name, a.file, a.runner
            ));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(CliError::usage(problems.join("\n")))
}

/// Random bits for ids, without a dependency: std's per-process hasher keys are random.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.write_u32(std::process::id());
    h.finish()
}

/// `loopwright run`.
pub async fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = Workspace::locate(global.dir.as_deref())?;
    let mut inputs = parse_inputs(&args.inputs)?;
    let path = ws.find_pipeline(&args.pipeline)?;
    let input_keys: Vec<String> = inputs.keys().cloned().collect();
    let pipeline = ws.load_pipeline(&path, &input_keys)?;
    let vars = parse_vars(&args.vars, &pipeline)?;
    let start_from = args.start_from.as_deref().map(|s| stage_arg(&pipeline, s, "--start-from")).transpose()?;
    let skip = args.skip.iter().map(|s| stage_arg(&pipeline, s, "--skip")).collect::<Result<Vec<_>, _>>()?;
    check_runners(&pipeline, start_from.as_ref())?;
    // A secret passed on the command line is not journaled, nor made part of the task's id.
    let redactor = redactor(&pipeline);
    let task = args.task.clone().or_else(|| inputs.get("task_description").cloned()).unwrap_or_default();
    let task = redactor.redact(&task).into_owned();
    if !task.is_empty() {
        inputs.entry("task_description".into()).or_insert_with(|| task.clone());
    }
    let task_id = match &args.task_id {
        Some(id) => TaskId::parse(id).ok_or_else(|| {
            CliError::usage(format!("--task-id `{id}`: use letters, digits, `-`, `_` and `.` (at most 100)"))
        })?,
        None => TaskId::generate(&task, random_u64()),
    };

    let store = open_store(&ws)?;
    let mut prior_outputs = BTreeMap::new();
    if let Some(from) = &start_from {
        let index = pipeline.index_of(from.as_str()).unwrap_or(0);
        let earlier: Vec<&StageId> = pipeline.stages[..index].iter().map(|s| &s.id).collect();
        prior_outputs = store.task_outputs(&task_id).await?.into_iter().filter(|(k, _)| earlier.contains(&k)).collect();
        let missing: Vec<&str> = pipeline.stages[..index]
            .iter()
            .filter(|s| !s.outputs.is_empty() && !prior_outputs.contains_key(&s.id))
            .map(|s| s.id.as_str())
            .collect();
        if !missing.is_empty() && !args.quiet {
            eprintln!(
                "loopwright: note: no earlier outputs of {} for task {task_id}{}",
                missing.join(", "),
                if args.task_id.is_none() { " (pass --task-id to reuse a task's artifacts)" } else { "" }
            );
        }
    }
    let clean = |m: BTreeMap<String, String>| -> BTreeMap<String, String> {
        m.into_iter().map(|(k, v)| (k, redactor.redact(&v).into_owned())).collect()
    };
    let (vars, inputs) = (clean(vars), clean(inputs));
    let worktree =
        if args.worktree || ws.config.defaults.worktree { Some(create_worktree(&ws, &task_id)?) } else { None };
    let root = worktree.as_ref().map_or_else(|| ws.root.clone(), |w| std::path::PathBuf::from(&w.path));
    let started = RunStarted {
        pipeline: pipeline.name.clone(),
        pipeline_path: ws.shown(&path),
        pipeline_source: pipeline.source.text.to_string(),
        task_id,
        task,
        vars,
        inputs,
        start_from,
        skip,
        auto_approve: args.yes,
        prior_outputs,
        workspace: root.display().to_string(),
        owner: Some(this_process()),
        prices: ws.config.prices.clone(),
        worktree,
        budget: pipeline.budget,
    };
    let run_id = RunId::generate(jiff::Timestamp::now(), random_u64());
    let _live = crate::lock::live_run(&ws, &root, &run_id)?;
    let ports = Ports::new(&ws, &root, redactor, &store)?;
    let stopper = CliStopper::new(&store, run_id.clone(), 0).map_err(|e| CliError::Internal(e.into()))?;
    let mut observers = Observers { progress: Progress::new(args.quiet), files: Projector::new(ws.runs_dir()) };
    let mut engine = ports.engine(&pipeline, &store, &stopper, &mut observers);
    let state = engine.start(run_id, started).await?;
    finish(global, &mut engine, state).await
}

/// What the binary runs stages with, besides the store: processes, snapshots and commits, and
/// the workspace's failure patterns.
pub struct Ports {
    runner: ProcessRunner,
    changes: FsChanges,
    patterns: loopwright_engine::patterns::Library,
    settings: loopwright_engine::closed_loop::Settings,
}

impl Ports {
    /// The ports for a workspace whose stages work in `root` (the workspace, or the run's
    /// worktree), keeping the secrets `redactor` knows out of what they record and out of
    /// `store`'s journal.
    pub fn new(
        ws: &Workspace,
        root: &std::path::Path,
        redactor: Redactor,
        store: &SqliteStore,
    ) -> Result<Self, CliError> {
        if !redactor.is_empty() {
            let journal = redactor.clone();
            store.set_scrubber(Box::new(move |text| match journal.redact(text) {
                std::borrow::Cow::Owned(clean) => Some(clean),
                std::borrow::Cow::Borrowed(_) => None,
            }));
        }
        Ok(Self {
            changes: FsChanges::new(root.to_path_buf(), ws.runs_dir()).with_redactor(redactor.clone()),
            runner: ProcessRunner { redactor, ..ProcessRunner::new(ws.runs_dir()) },
            patterns: super::patterns::library(ws)?,
            settings: super::patterns::closed_loop_settings(ws)?,
        })
    }

    /// An engine for a pipeline over these ports.
    pub fn engine<'a>(
        &'a self,
        pipeline: &'a Pipeline,
        store: &'a SqliteStore,
        stopper: &'a CliStopper<'a>,
        observer: &'a mut Observers,
    ) -> CliEngine<'a> {
        Engine {
            pipeline,
            store,
            runner: &self.runner,
            clock: &SystemClock,
            observer,
            stopper,
            changes: &self.changes,
            patterns: &self.patterns,
            settings: &self.settings,
        }
    }
}

/// The secrets of a run: secret-looking environment variables, and the variables the
/// pipeline's agents take their API keys from (`api_key_env`), whatever their names.
pub fn redactor(pipeline: &Pipeline) -> Redactor {
    let keys: Vec<String> = pipeline.agents.values().filter_map(|a| a.api_key_env.clone()).collect();
    Redactor::from_env(&keys)
}

/// Creates the run's worktree: `.loopwright/state/worktrees/TASK` on branch `loopwright/TASK`.
fn create_worktree(ws: &Workspace, task: &TaskId) -> Result<loopwright_engine::event::Worktree, CliError> {
    use loopwright_runners::git;
    if !git::is_repo(&ws.root) {
        return Err(CliError::usage(format!(
            "--worktree needs a git repository, and {} is not the top of one",
            ws.root.display()
        )));
    }
    let branch = format!("loopwright/{task}");
    let path = ws.state_dir().join("worktrees").join(task.as_str());
    std::fs::create_dir_all(ws.state_dir().join("worktrees"))
        .map_err(|e| CliError::usage(format!("cannot create {}: {e}", ws.state_dir().display())))?;
    let _turn = crate::lock::git_turn(&ws.root)?;
    git::worktree_add(&ws.root, &path, &branch).map_err(|e| {
        let hint = if e.contains("already exists") {
            " (a run of this task has it: resume that run, or give this one another --task-id)"
        } else {
            ""
        };
        CliError::usage(format!("cannot create the worktree of task {task} on branch {branch}: {e}{hint}"))
    })?;
    Ok(loopwright_engine::event::Worktree {
        repo: ws.root.display().to_string(),
        path: path.display().to_string(),
        branch,
    })
}

/// After a worktree run succeeded: merge its branch back (fast-forward or a merge commit) and
/// remove the worktree; a conflict waits for `respond` (a `merge-conflict` escalation), the
/// worktree kept.
async fn merge_worktree(engine: &mut CliEngine<'_>, state: &mut RunState) -> Result<(), CliError> {
    use loopwright_runners::git;
    let Some(wt) = state.started.as_ref().and_then(|s| s.worktree.clone()) else { return Ok(()) };
    if state.status != RunStatus::Success || state.worktree_merged {
        return Ok(());
    }
    if state.merge_answer == Some(loopwright_engine::event::Answer::Skip) {
        eprintln!("loopwright: branch {} was left unmerged (worktree {})", wt.branch, wt.path);
        return Ok(());
    }
    let repo = std::path::Path::new(&wt.repo);
    // One git operation on the repository's shared state at a time: runs finishing (or
    // starting) together take turns.
    let _turn = crate::lock::git_turn(repo)?;
    let merged = git::with_lock_retries(|| git::merge(repo, &wt.branch))
        .map_err(|e| CliError::usage(format!("cannot merge {} back: {e}", wt.branch)))?;
    let event = match merged {
        git::Merge::Conflict(files) => Event::WorktreeConflict { branch: wt.branch.clone(), files },
        merged => {
            use loopwright_engine::event::MergeHow;
            let (how, commit) = match merged {
                git::Merge::FastForward(c) => (MergeHow::FastForward, Some(c)),
                git::Merge::Commit(c) => (MergeHow::MergeCommit, Some(c)),
                _ => (MergeHow::UpToDate, None),
            };
            Event::WorktreeMerged { branch: wt.branch.clone(), how, commit }
        }
    };
    let merged = matches!(event, Event::WorktreeMerged { .. });
    engine.record(state, event).await?;
    if merged {
        if let Err(e) = git::worktree_remove(repo, std::path::Path::new(&wt.path)) {
            eprintln!("loopwright: warning: the worktree {} was merged but not removed: {e}", wt.path);
        }
        let _ = git::git(repo, &["branch", "-d", &wt.branch]);
    }
    Ok(())
}

/// This process, as the owner of a run.
pub fn this_process() -> Owner {
    let pid = std::process::id();
    Owner { pid, start_time: loopwright_runners::process::start_time(pid) }
}

/// The engine as the binary assembles it.
pub type CliEngine<'a> = Engine<'a, SqliteStore, ProcessRunner, SystemClock, CliStopper<'a>, FsChanges>;

/// After the engine stops: ask at an approval gate when a person is at the terminal,
/// otherwise report the result and return the exit code.
pub async fn finish(global: &Global, engine: &mut CliEngine<'_>, mut state: RunState) -> Result<u8, CliError> {
    loop {
        while let Some(stage) = state.waiting_for_approval().map(|s| s.id.clone()) {
            let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal() && !global.json;
            if !interactive {
                break;
            }
            let prompt = approval_prompt(engine.pipeline, &stage, &state);
            let answer = tokio::task::spawn_blocking(move || ask_approval(&prompt));
            let granted = tokio::select! {
                answer = answer => answer.unwrap_or(false),
                _ = loopwright_engine::Stopper::stopped(engine.stopper) => {
                    eprintln!("\nloopwright: run {} still waits for approval of `{stage}`", state.run_id);
                    report(global, &state)?;
                    return Ok(130);
                }
            };
            let by = os_user();
            let event = if granted {
                Event::ApprovalGranted { stage, by, comment: None }
            } else {
                // Seed 004's cancellation flow: offer to roll back what earlier stages changed.
                // The stages the state machine would roll back, in pipeline order.
                let undoable: Vec<String> =
                    loopwright_engine::decide::rollback_candidates(engine.pipeline, &state, None)
                        .iter()
                        .rev()
                        .map(ToString::to_string)
                        .collect();
                let rollback = !undoable.is_empty()
                    && ask_yes_no(&format!(
                        "Roll back the completed stage(s) {} as the pipeline says? [y/N] ",
                        undoable.join(", ")
                    ));
                Event::ApprovalRejected { stage, by, comment: None, rollback }
            };
            // Someone may have answered or cancelled from another terminal meanwhile: then
            // this answer is not recorded, and the run is looked at again.
            if !answered(engine, &mut state, event).await? {
                continue;
            }
            state = engine.drive(state).await?;
        }
        // A closed-loop escalation, with a person at the terminal: ask (seed 001's options).
        let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal() && !global.json;
        let Some((stage, message)) = state.waiting_for_escalation().filter(|_| interactive).and_then(|s| {
            let lp = s.closed.as_deref()?;
            let started = state.started.as_ref()?;
            let reason = lp.escalation.as_deref()?;
            let message = loopwright_engine::closed_loop::context::escalation_message(
                state.run_id.as_str(),
                &started.task,
                started.task_id.as_str(),
                s.id.as_str(),
                lp,
                reason,
            );
            Some((s.id.clone(), message))
        }) else {
            break;
        };
        let answer = tokio::task::spawn_blocking(move || ask_escalation(&message));
        let answer = tokio::select! {
            answer = answer => answer.ok().flatten(),
            _ = loopwright_engine::Stopper::stopped(engine.stopper) => None,
        };
        let Some(answer) = answer else {
            eprintln!("\nloopwright: run {} still waits on the escalation of `{stage}`", state.run_id);
            break;
        };
        if answer == loopwright_engine::event::Answer::Skip {
            super::resume::warn_skip(engine.pipeline, &state, &stage);
        }
        if !answered(engine, &mut state, Event::EscalationAnswered { stage, answer, by: os_user() }).await? {
            continue;
        }
        state = engine.drive(state).await?;
    }
    merge_worktree(engine, &mut state).await?;
    // Manual rollback steps: on a terminal, wait for the person to confirm they are done.
    let interactive = std::io::stdin().is_terminal() && std::io::stderr().is_terminal() && !global.json;
    if interactive {
        for (stage, steps) in state.pending_manual_rollbacks() {
            eprintln!("Manual rollback of stage `{stage}`:\n    {}", steps.replace('\n', "\n    "));
            if ask_yes_no("Type `y` once these steps are done (or `n` to leave them pending): ") {
                let detail = format!("{steps} (confirmed by {})", os_user());
                let strategy = loopwright_spec::pipeline::RollbackStrategy::Manual;
                let status = loopwright_engine::event::RollbackStatus::Success;
                engine.record(&mut state, Event::StageRolledBack { stage, strategy, status, detail }).await?;
                let overall = state.rollback_overall();
                engine.record(&mut state, Event::RollbackFinished { overall }).await?;
            }
        }
    }
    report(global, &state)
}

/// Records an answer given at this terminal, unless another process changed the run since it
/// was read (then the state is read again and `false` returned, nothing recorded).
async fn answered(engine: &mut CliEngine<'_>, state: &mut RunState, event: Event) -> Result<bool, CliError> {
    match engine.record_after(state, vec![event]).await {
        Ok(()) => Ok(true),
        Err(loopwright_engine::StoreError::Conflict { .. }) => {
            eprintln!("loopwright: the run changed in another process meanwhile; looking at it again");
            *state = RunState::replay(state.run_id.clone(), &engine.store.events(&state.run_id).await?);
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Asks a yes/no question on the terminal; anything but `y`/`yes` is no.
fn ask_yes_no(question: &str) -> bool {
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).is_ok() && matches!(line.trim().to_lowercase().as_str(), "y" | "yes")
}

/// Prints a run's result (JSON on stdout with `--json`) and returns its exit code.
pub fn report(global: &Global, state: &RunState) -> Result<u8, CliError> {
    let result = PipelineResult::from_state(state);
    if global.json {
        let json = serde_json::to_string_pretty(&result).map_err(|e| CliError::Internal(e.into()))?;
        println!("{json}");
    } else {
        print!("{}", render::result(&result, state));
    }
    Ok(state.status.exit_code())
}

/// The name of the person at the keyboard.
pub fn os_user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map(|u| u.name))
        .unwrap_or_else(|| "unknown".into())
}

/// Seed 004's approval prompt for a stage.
fn approval_prompt(pipeline: &Pipeline, stage: &StageId, state: &RunState) -> String {
    let Some(s) = pipeline.stage(stage.as_str()) else { return String::new() };
    let inputs = loopwright_engine::prompt::resolve_inputs(pipeline, s, state);
    let mut text = format!(
        "---\n## Approval Required: Stage '{}'\n**Description:** {}\n**Agent:** {}\n**Mode:** {}\n### Inputs\n",
        s.id,
        s.description.trim(),
        s.agent.name(),
        s.mode
    );
    for i in &inputs {
        let summary =
            i.text.as_deref().and_then(|t| t.lines().find(|l| !l.trim().is_empty())).unwrap_or("(not available)");
        text.push_str(&format!("- {}: {}\n", i.key, summary.chars().take(100).collect::<String>()));
    }
    if inputs.is_empty() {
        text.push_str("(none)\n");
    }
    text.push_str("### Expected Outputs\n");
    text.push_str(&if s.outputs.is_empty() { "(none)".to_owned() } else { s.outputs.join(", ") });
    text.push_str("\nType `proceed` to continue or `abort` to cancel pipeline.\n---\n");
    text
}

/// Shows an escalation and reads answers until one is understood; `None` at end of input.
fn ask_escalation(message: &str) -> Option<loopwright_engine::event::Answer> {
    use loopwright_engine::event::Answer;
    eprintln!("{message}");
    ask_until(
        "retry | skip | abort | fix <instruction> > ",
        "Answer `retry`, `skip`, `abort`, or `fix` followed by the instruction.",
        |line| {
            let (word, rest) = line.split_once([' ', ':']).unwrap_or((line, ""));
            match (word.to_lowercase().as_str(), rest.trim()) {
                ("retry", _) => Some(Answer::Retry),
                ("skip", _) => Some(Answer::Skip),
                ("abort", _) => Some(Answer::Abort),
                ("fix", text) if !text.is_empty() => Some(Answer::Fix { text: text.to_owned() }),
                _ => None,
            }
        },
    )
}

/// Shows the prompt and reads answers until one is understood.
fn ask_approval(text: &str) -> bool {
    eprint!("{text}");
    ask_until("> ", "Type `proceed` to continue or `abort` to cancel pipeline.", |line| {
        match line.to_lowercase().as_str() {
            "proceed" | "yes" | "continue" => Some(true),
            "abort" | "cancel" | "no" => Some(false),
            _ => None,
        }
    })
    .unwrap_or(false)
}

/// Reads lines from the terminal until `understood` accepts one (saying `help` after each it
/// does not); `None` at the end of input.
fn ask_until<T>(prompt: &str, help: &str, understood: impl Fn(&str) -> Option<T>) -> Option<T> {
    let stdin = std::io::stdin();
    loop {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        match stdin.lock().read_line(&mut line) {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
        match understood(line.trim()) {
            Some(answer) => return Some(answer),
            None => eprintln!("{help}"),
        }
    }
}

/// True when the run is in a state `resume` can continue.
pub fn resumable(status: RunStatus) -> bool {
    matches!(status, RunStatus::Running | RunStatus::Interrupted)
}

/// The status to show for a run: `interrupted` for one recorded as running whose owner is no
/// longer alive (loopwright was killed; `resume` continues it).
pub fn shown_status(state: &RunState) -> RunStatus {
    let owner_gone = state.owner.is_some() && !owner_alive(state);
    if state.status == RunStatus::Running && owner_gone { RunStatus::Interrupted } else { state.status }
}

/// True while the process that owns a run is alive.
pub fn owner_alive(state: &RunState) -> bool {
    state.owner.is_some_and(|o| {
        o.pid != std::process::id() && loopwright_runners::process::same_process_alive(o.pid, o.start_time)
    })
}
