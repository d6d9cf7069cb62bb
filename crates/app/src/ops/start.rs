//! Starting a run: everything checked before anything runs (the pipeline, its variables and
//! inputs, the stages named, the agents' programs), then the `run_started` event assembled.

use std::collections::BTreeMap;
use std::path::PathBuf;

use loopwright_engine::{Owner, RunId, RunStarted, Store, TaskId};
use loopwright_spec::condition::BUILTIN_VARIABLES;
use loopwright_spec::{Pipeline, StageId};

use crate::error::Error;
use crate::workspace::Workspace;

/// What a run is started with.
#[derive(Debug, Clone, Default)]
pub struct StartRequest {
    /// The pipeline: a name, or (from the command line only) a path to a `.yml` file.
    pub pipeline: String,
    /// Accept only a pipeline name, no path (requests from the network).
    pub name_only: bool,
    /// What the run should achieve.
    pub task: Option<String>,
    /// Reuse a task id.
    pub task_id: Option<String>,
    /// Task metadata and declared variables.
    pub vars: BTreeMap<String, String>,
    /// Initial inputs, by key (their text, already read).
    pub inputs: BTreeMap<String, String>,
    /// Start at this stage.
    pub start_from: Option<String>,
    /// Do not run these stages.
    pub skip: Vec<String>,
    /// Approve every gate up front.
    pub approve_all: bool,
    /// Work in a git worktree of its own.
    pub worktree: bool,
    /// Who starts it (a person signed in to the daemon).
    pub by: Option<String>,
    /// The run this one runs again.
    pub rerun_of: Option<RunId>,
    /// The forge issue it comes from (its branch, base and delivering stage are filled in
    /// here); such a run always works in a worktree of its own.
    pub forge: Option<loopwright_engine::forge::ForgeLink>,
    /// Its id, when its trigger fixes it (one run per trigger).
    pub run_id: Option<RunId>,
}

/// A request that runs `earlier` again: the same pipeline (as its file says now), task, task
/// id, variables, inputs, skipped stages and worktree choice; from its first stage, or from
/// `from` with the earlier stages' outputs taken from the journal of the same task. Gates ask
/// again: an earlier `--yes` is not carried over.
///
/// `inside_only` (requests from the network) refuses a run whose pipeline file lies outside
/// the workspace: the daemon reads only the workspace's own pipelines.
pub fn rerun(
    ws: &Workspace,
    earlier: &loopwright_engine::RunState,
    from: Option<String>,
    by: Option<String>,
    inside_only: bool,
) -> Result<StartRequest, Error> {
    let started = earlier
        .started
        .as_ref()
        .ok_or_else(|| Error::conflict(format!("run {} has no start in its journal", earlier.run_id)))?;
    let earlier = &earlier.run_id;
    let path = ws.root.join(&started.pipeline_path);
    let inside = std::path::Path::new(&started.pipeline_path).is_relative()
        && !std::path::Path::new(&started.pipeline_path).components().any(|c| c == std::path::Component::ParentDir);
    if inside_only && !inside {
        return Err(Error::Forbidden(format!(
            "run {earlier} ran the pipeline file {}, outside the workspace: run it again from the command line",
            started.pipeline_path
        )));
    }
    Ok(StartRequest {
        pipeline: path.display().to_string(),
        name_only: false,
        task: Some(started.task.clone()),
        task_id: Some(started.task_id.to_string()),
        vars: started.vars.clone(),
        inputs: started.inputs.clone(),
        start_from: from,
        skip: started.skip.iter().map(ToString::to_string).collect(),
        approve_all: false,
        worktree: started.worktree.is_some(),
        by,
        rerun_of: Some(earlier.clone()),
        forge: None,
        run_id: None,
    })
}

/// A run ready to start: nothing is journaled yet (a worktree, when asked for, exists).
#[derive(Debug)]
pub struct Prepared {
    /// Its id.
    pub run_id: RunId,
    /// Its pipeline, compiled.
    pub pipeline: Pipeline,
    /// The first event of its journal.
    pub started: RunStarted,
    /// The working tree its stages see: the workspace, or the run's worktree.
    pub root: PathBuf,
    /// Things the person should know (earlier outputs missing for `start_from`).
    pub notes: Vec<String>,
}

/// Random bits for ids, without a dependency: std's per-process hasher keys are random.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.write_u32(std::process::id());
    h.finish()
}

/// The initial inputs the pipeline named `name` declares (its own and the built-in ones), for a
/// caller that may give only those: `None` when the pipeline does not compile without more
/// inputs (starting it says why).
pub fn declared_inputs(ws: &Workspace, name: &str) -> Result<Option<Vec<String>>, Error> {
    let path = ws.find_pipeline_named(name)?;
    Ok(ws.load_pipeline(&path, &[]).ok().map(|p| p.initial_inputs))
}

/// Checks a start request and assembles the run: the pipeline found and compiled (with the
/// request's input keys), variables and stage names checked, the agents' programs found, the
/// task id, the earlier outputs `start_from` needs, secrets redacted, the worktree created.
pub async fn prepare(ws: &Workspace, req: StartRequest, owner: Owner) -> Result<Prepared, Error> {
    prepare_for(ws, req, Some(owner)).await
}

/// [`prepare`] for `owner`, or for whichever worker claims it (none: the agents' programs are
/// looked for on the worker, and no worktree is made here).
async fn prepare_for(ws: &Workspace, req: StartRequest, owner: Option<Owner>) -> Result<Prepared, Error> {
    // An unknown pipeline is said first (not found), then what is wrong with the request.
    let path = if req.name_only { ws.find_pipeline_named(&req.pipeline)? } else { ws.find_pipeline(&req.pipeline)? };
    for key in req.inputs.keys() {
        if StageId::parse(key).is_none() {
            return Err(Error::usage(format!("input `{key}`: the key must match ^[a-z][a-z0-9_]*$")));
        }
    }
    let input_keys: Vec<String> = req.inputs.keys().cloned().collect();
    let pipeline = ws.load_pipeline(&path, &input_keys)?;
    check_vars(&req.vars, &pipeline)?;
    let start_from = req.start_from.as_deref().map(|s| stage_arg(&pipeline, s, "start from")).transpose()?;
    let skip = req.skip.iter().map(|s| stage_arg(&pipeline, s, "skip")).collect::<Result<Vec<_>, _>>()?;
    if owner.is_some() {
        check_runners(&pipeline, start_from.as_ref())?;
    }
    // A secret passed in the request is not journaled, nor made part of the task's id.
    let redactor = crate::assemble::redactor(&pipeline);
    let mut inputs = req.inputs;
    let task = req.task.clone().or_else(|| inputs.get("task_description").cloned()).unwrap_or_default();
    let task = redactor.redact(&task).into_owned();
    if !task.is_empty() {
        inputs.entry("task_description".into()).or_insert_with(|| task.clone());
    }
    let task_id = match &req.task_id {
        Some(id) => TaskId::parse(id).ok_or_else(|| {
            Error::usage(format!("--task-id `{id}`: use letters, digits, `-`, `_` and `.` (at most 100)"))
        })?,
        None => TaskId::generate(&task, random_u64()),
    };
    let mut notes = Vec::new();
    let mut prior_outputs = BTreeMap::new();
    if let Some(from) = &start_from {
        let index = pipeline.index_of(from.as_str()).unwrap_or(0);
        let earlier: Vec<&StageId> = pipeline.stages[..index].iter().map(|s| &s.id).collect();
        // Nothing is written before the request is known to be good: no store, no earlier outputs.
        if ws.config.store.url.is_some() || ws.db_path().is_file() {
            let store = crate::assemble::open_existing_store(ws)?;
            prior_outputs =
                store.task_outputs(&task_id).await?.into_iter().filter(|(k, _)| earlier.contains(&k)).collect();
        }
        let missing: Vec<&str> = pipeline.stages[..index]
            .iter()
            .filter(|s| !s.outputs.is_empty() && !prior_outputs.contains_key(&s.id))
            .map(|s| s.id.as_str())
            .collect();
        if !missing.is_empty() {
            notes.push(format!(
                "note: no earlier outputs of {} for task {task_id}{}",
                missing.join(", "),
                if req.task_id.is_none() { " (pass --task-id to reuse a task's artifacts)" } else { "" }
            ));
        }
    }
    let clean = |m: BTreeMap<String, String>| -> BTreeMap<String, String> {
        m.into_iter().map(|(k, v)| (k, redactor.redact(&v).into_owned())).collect()
    };
    let (vars, inputs) = (clean(req.vars), clean(inputs));
    let here = owner.is_some() && (req.worktree || ws.config.defaults.worktree || req.forge.is_some());
    let base = if req.forge.is_some() { Some(current_branch(ws)?) } else { None };
    let worktree = if here { Some(crate::worktree::create(ws, &task_id)?) } else { None };
    let forge = match (req.forge, &worktree) {
        (Some(mut link), Some(wt)) => {
            link.branch = wt.branch.clone();
            link.base = base.unwrap_or_default();
            // CI's failures go back to the last stage that changes the workspace.
            let delivering = pipeline.stages.iter().rev().find(|s| s.mode == loopwright_spec::Mode::Agent);
            link.stage = delivering.or(pipeline.stages.last()).map(|s| s.id.clone()).unwrap_or(link.stage);
            Some(link)
        }
        (Some(_), None) => return Err(Error::usage("a run from GitHub is driven here, in a worktree of its own")),
        (None, _) => None,
    };
    let root = worktree.as_ref().map_or_else(|| ws.root.clone(), |w| PathBuf::from(&w.path));
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
        auto_approve: req.approve_all,
        prior_outputs,
        workspace: root.display().to_string(),
        owner,
        prices: ws.config.prices.clone(),
        worktree,
        budget: pipeline.budget,
        by: req.by,
        rerun_of: req.rerun_of,
        forge,
        trace_id: crate::telemetry::enabled(&ws.config).then(crate::telemetry::new_trace_id),
    };
    let run_id = req.run_id.unwrap_or_else(|| RunId::generate(jiff::Timestamp::now(), random_u64()));
    Ok(Prepared { run_id, pipeline, started, root, notes })
}

/// The branch the workspace has checked out: what a forge run's pull request merges into.
fn current_branch(ws: &Workspace) -> Result<String, Error> {
    loopwright_runners::git::git(&ws.root, &["symbolic-ref", "--short", "-q", "HEAD"])
        .ok()
        .map(|b| b.trim().to_owned())
        .filter(|b| !b.is_empty())
        .ok_or_else(|| {
            Error::usage(format!(
                "{} has no branch checked out: a run from GitHub needs the branch its pull request merges into",
                ws.root.display()
            ))
        })
}

/// Where a submitted run's work is done, as the person asked (`--repo`, `--base`).
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// The repository workers clone (else the pipeline's `repo:`, else the workspace's origin).
    pub repo: Option<String>,
    /// The ref the run starts from (else the workspace's current branch).
    pub base: Option<String>,
}

/// Submits a run to workers (`run --submit`): checked and assembled as [`prepare`] does, then
/// journaled as queued together with where its work is done, in one transaction of the
/// PostgreSQL store the workers share. A worker whose labels hold the pipeline's `runs_on:`
/// claims it.
pub async fn submit(
    ws: &Workspace,
    store: &loopwright_store::Journal,
    req: StartRequest,
    target: Target,
) -> Result<(RunId, loopwright_store::fleet::Submission), Error> {
    use loopwright_engine::Event;
    let Some(pg) = store.postgres() else {
        return Err(Error::usage(
            "--submit hands the run to workers, which share a PostgreSQL store: name it with --store URL, LOOPWRIGHT_STORE or store = \"postgres://…\" in config.toml",
        ));
    };
    let prepared = prepare_for(ws, req, None).await?;
    let git = |args: &[&str]| {
        loopwright_runners::git::git(&ws.root, args).ok().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
    };
    let repo = target
        .repo
        .or_else(|| prepared.pipeline.repo.clone())
        .or_else(|| git(&["remote", "get-url", "origin"]))
        .ok_or_else(|| {
            Error::usage(format!(
                "--submit: no repository for workers to clone: pass --repo URL, set `repo:` in {}, or run from a checkout with an `origin` remote",
                prepared.started.pipeline_path
            ))
        })?;
    if repo.starts_with('-') {
        return Err(Error::usage(format!("--repo `{repo}`: expected a git repository's URL or path")));
    }
    // A repository named by a relative path is the one next to this workspace.
    let repo = if !repo.contains("://") && !repo.contains(':') && std::path::Path::new(&repo).is_relative() {
        ws.root.join(&repo).display().to_string()
    } else {
        repo
    };
    let base = match target.base {
        Some(base) => base,
        None => git(&["symbolic-ref", "--short", "-q", "HEAD"]).or_else(|| git(&["rev-parse", "HEAD"])).ok_or_else(
            || Error::usage("--submit: no branch to start from here: pass --base REF (a branch, tag or commit of the repository)"),
        )?,
    };
    if base.starts_with('-') {
        return Err(Error::usage(format!("--base `{base}`: expected a branch, tag or commit")));
    }
    // Workers run the repository's pipeline file as it is at the base (never a text from the
    // store): the one submitted must be that file.
    if !crate::workspace::repository_file(&prepared.started.pipeline_path) {
        return Err(Error::usage(format!(
            "--submit: the pipeline {} is not a file of this repository; workers run the repository's pipelines",
            prepared.started.pipeline_path
        )));
    }
    if let Some(committed) = git(&["show", &format!("{base}:{}", prepared.started.pipeline_path)])
        && committed.trim_end() != prepared.started.pipeline_source.trim_end()
    {
        return Err(Error::usage(format!(
            "--submit: {} differs from the file at {base}; workers run the file as the repository has it: commit and push it first",
            prepared.started.pipeline_path
        )));
    }
    // Workers read a submitted run's pipeline from the repository's `.loopwright/pipelines/`.
    if !prepared.started.pipeline_path.trim_start_matches("./").starts_with(".loopwright/pipelines/") {
        return Err(Error::usage(format!(
            "--submit: {} is not in .loopwright/pipelines/: workers run only the pipelines kept there",
            prepared.started.pipeline_path
        )));
    }
    let submission = loopwright_store::fleet::Submission { repo, base, labels: prepared.pipeline.runs_on.clone() };
    let at = jiff::Timestamp::now();
    let batch = [(Event::RunStarted(Box::new(prepared.started)), at), (Event::RunQueued {}, at)];
    pg.submit(&prepared.run_id, &batch, &submission).await?;
    Ok((prepared.run_id, submission))
}

/// Journals a prepared run as queued (`run_started` + `run_queued`, in one transaction) for
/// the daemon whose process `prepare` was given as owner: it starts the run when a slot and
/// the working tree are free.
pub async fn enqueue(store: &loopwright_store::Journal, prepared: Prepared) -> Result<RunId, Error> {
    use loopwright_engine::{Event, Store};
    let at = jiff::Timestamp::now();
    let batch = [(Event::RunStarted(Box::new(prepared.started)), at), (Event::RunQueued {}, at)];
    store.append_all(&prepared.run_id, &batch).await?;
    Ok(prepared.run_id)
}

/// Checks the variables of a start request against the built-in ones and those the pipeline
/// declares.
fn check_vars(vars: &BTreeMap<String, String>, pipeline: &Pipeline) -> Result<(), Error> {
    for (key, value) in vars {
        let key = key.as_str();
        let settable =
            BUILTIN_VARIABLES.iter().any(|b| *b == key && *b != "stage_outputs") || pipeline.vars.contains_key(key);
        if !settable {
            let declared: Vec<&str> = pipeline.vars.keys().map(String::as_str).collect();
            return Err(Error::usage(format!(
                "--var {key}: unknown variable `{key}`; known: complexity, task_type, tags, always_include{}{}",
                if declared.is_empty() { "" } else { ", " },
                declared.join(", ")
            )));
        }
        if key == "complexity" && !value.is_empty() && !["low", "medium", "high"].contains(&value.as_str()) {
            return Err(Error::usage(format!("--var complexity={value}: expected low, medium or high")));
        }
    }
    Ok(())
}

fn stage_arg(pipeline: &Pipeline, name: &str, what: &str) -> Result<StageId, Error> {
    let flag = if what == "skip" { "--skip" } else { "--start-from" };
    match pipeline.stage(name) {
        Some(s) => Ok(s.id.clone()),
        None => Err(Error::usage(format!(
            "{flag} {name}: pipeline `{}` has no stage `{name}`; its stages: {}",
            pipeline.name,
            pipeline.stages.iter().map(|s| s.id.as_str()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Refuses, before anything runs, a pipeline whose stages use a coding-agent CLI that is not
/// installed, unless an agent of the stage's `fallback:` can take over.
fn check_runners(pipeline: &Pipeline, start_from: Option<&StageId>) -> Result<(), Error> {
    use loopwright_runners::presets;
    use loopwright_spec::Mode;
    let start = start_from.and_then(|s| pipeline.index_of(s.as_str())).unwrap_or(0);
    let mut problems: Vec<String> = Vec::new();
    // Why an agent cannot be started here, if it cannot.
    let missing = |a: &loopwright_spec::Agent| -> Option<String> {
        let install = presets::install_hint(a.runner)?;
        let argv = presets::invocation(a, Mode::Agent).map(|i| i.argv).unwrap_or_default();
        let program = argv.first().cloned().unwrap_or_default();
        (!loopwright_runners::process::resolve(&program).is_absolute()).then(|| {
            format!(
                "agent `{}` ({}, `runner: {}`), but `{program}` is not on PATH (install it: {install})",
                a.name, a.file, a.runner
            )
        })
    };
    for (s, a) in pipeline.stages[start..].iter().filter_map(|s| pipeline.agent_of(s).map(|a| (s, a))) {
        let Some(why) = missing(a) else { continue };
        let fallbacks = s.fallback.iter().filter_map(|f| pipeline.agents.get(f));
        if fallbacks.clone().any(|f| missing(f).is_none()) {
            continue;
        }
        let mut problem = format!("stage `{}` uses {why}", s.id);
        for f in fallbacks.filter_map(&missing) {
            problem.push_str(&format!("; its fallback {f}"));
        }
        problems.push(problem);
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(Error::usage(problems.join("\n")))
}
