//! A run being driven here: its working tree taken (one live run per tree), its ports
//! assembled. The CLI drives one in the foreground, the daemon one per run on a thread of its
//! own; both through [`Session::engine`].

use std::path::{Path, PathBuf};

use loopwright_engine::{RunId, RunState};
use loopwright_spec::Pipeline;
use loopwright_store::Journal;

use crate::assemble::Ports;
use crate::error::Error;
use crate::lock::{Held, Holder};
use crate::workspace::Workspace;

/// A run's working tree, held, and its ports.
pub struct Session {
    ports: Ports,
    /// The working tree its stages see.
    pub root: PathBuf,
    _live: Held,
}

impl Session {
    /// Takes the working tree of an existing run (from its journal) after checking that this
    /// is the workspace it was started in.
    pub fn resume(ws: &Workspace, store: &Journal, pipeline: &Pipeline, state: &RunState) -> Result<Self, Error> {
        let root = Self::root_of(ws, state);
        Self::try_resume(ws, store, pipeline, state)?.map_err(|holder| crate::lock::busy(&root, &state.run_id, holder))
    }

    /// Like [`Session::resume`], but a working tree another live run holds is `Ok(Err(holder))`
    /// rather than an error (the daemon keeps such a run in line).
    pub fn try_resume(
        ws: &Workspace,
        store: &Journal,
        pipeline: &Pipeline,
        state: &RunState,
    ) -> Result<Result<Self, Holder>, Error> {
        same_workspace(ws, state)?;
        let root = Self::root_of(ws, state);
        // A run started from a forge is sandboxed as `[github] sandbox` says (`required` unless
        // it says otherwise): what an issue asks for is not what a person at the terminal asks.
        // One commanded on a fork's pull request is sandboxed, whatever it says.
        let forge_ws;
        let ws = match (state.forge_link(), &ws.config.github) {
            (Some(link), Some(github)) => {
                let mut config = ws.config.clone();
                config.sandbox =
                    if link.from_fork { loopwright_spec::sandbox::SandboxMode::Required } else { github.sandbox };
                forge_ws = crate::workspace::Workspace { root: ws.root.clone(), config };
                &forge_ws
            }
            (Some(_), None) => {
                return Err(Error::usage(format!(
                    "run {} came from GitHub, and this workspace's config.toml has no [github] section to run it with",
                    state.run_id
                )));
            }
            _ => ws,
        };
        match crate::lock::try_live_run(ws, &root, &state.run_id)? {
            Ok(live) => Self::with(ws, store, pipeline, root, live).map(Ok),
            Err(holder) => Ok(Err(holder)),
        }
    }

    /// Takes the working tree `root` for a new run.
    pub fn start(
        ws: &Workspace,
        store: &Journal,
        pipeline: &Pipeline,
        root: &Path,
        run: &RunId,
    ) -> Result<Self, Error> {
        let live = crate::lock::live_run(ws, root, run)?;
        Self::with(ws, store, pipeline, root.to_path_buf(), live)
    }

    /// Takes the working tree of a run a worker claimed — the workspace `ws`, a worktree of
    /// the worker's clone, wherever the run was submitted from — every commit pushed as
    /// `publish` says before it is journaled, every process it starts marked with `lease`.
    pub fn for_worker(
        ws: &Workspace,
        store: &Journal,
        pipeline: &Pipeline,
        run: &RunId,
        publish: loopwright_runners::Publish,
        lease: String,
        slots: loopwright_engine::ports::Slots,
    ) -> Result<Self, Error> {
        let live = crate::lock::live_run(ws, &ws.root, run)?;
        let ports = Ports::new(ws, &ws.root, pipeline, crate::assemble::redactor(pipeline), store)?
            .for_worker(publish, lease, slots);
        Ok(Self { ports, root: ws.root.clone(), _live: live })
    }

    fn with(ws: &Workspace, store: &Journal, pipeline: &Pipeline, root: PathBuf, live: Held) -> Result<Self, Error> {
        let ports = Ports::new(ws, &root, pipeline, crate::assemble::redactor(pipeline), store)?;
        Ok(Self { ports, root, _live: live })
    }

    /// Links to the run in what it delivers to a forge point at this dashboard.
    pub fn with_dashboard(self, url: Option<String>) -> Self {
        Self { ports: self.ports.with_dashboard(url), ..self }
    }

    /// The working tree a run's stages see: its worktree, or the workspace.
    fn root_of(ws: &Workspace, state: &RunState) -> PathBuf {
        state.started.as_ref().map_or_else(|| ws.root.clone(), |s| PathBuf::from(&s.workspace))
    }
}

/// The session's ports: `session.engine(pipeline, store, stopper, observer)` drives the run.
impl std::ops::Deref for Session {
    type Target = Ports;

    fn deref(&self) -> &Ports {
        &self.ports
    }
}

/// Refuses to continue a run from a workspace other than the one it was started in (a copy,
/// or the same files moved): its snapshots, commits and processes belong to that one, and
/// resuming here would restore and commit files in the other.
pub fn same_workspace(ws: &Workspace, state: &RunState) -> Result<(), Error> {
    let Some(started) = state.started.as_ref() else { return Ok(()) };
    let recorded = started.worktree.as_ref().map_or(started.workspace.as_str(), |w| w.repo.as_str());
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    if canonical(Path::new(recorded)) == canonical(&ws.root) {
        return Ok(());
    }
    let run = &state.run_id;
    Err(Error::usage(format!(
        "run {run} was started in {recorded}, but this workspace is {}: a run belongs to the workspace it was started in (its snapshots, commits and processes are there). Continue it there (`loopwright -C {recorded} {run_cmd}`), or move this workspace back to {recorded}; a copy's journal keeps the run's history, but new work in the copy starts a new run",
        ws.root.display(),
        run_cmd = format_args!("resume {run}"),
    )))
}
