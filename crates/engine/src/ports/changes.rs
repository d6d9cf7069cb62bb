//! The workspace's files as stages change them: four ports, one value.

use loopwright_journal::closed_loop::FileChanges;
use loopwright_spec::StageId;

use crate::ids::{RunId, TaskId};

/// The workspace as the closed loop reads it: its files, the programs on PATH, its root.
pub trait Workspace {
    /// A workspace file's text (path relative to the workspace), if it is one.
    fn read(&self, _path: &str) -> Option<String> {
        None
    }
    /// The workspace's files (relative paths, sorted), without `.git` and loopwright's state.
    fn files(&self) -> Vec<String> {
        Vec::new()
    }
    /// True when a workspace path leads outside the workspace (a symlink out of it).
    fn escapes(&self, _path: &str) -> bool {
        false
    }
    /// True when a program is on PATH.
    fn has_program(&self, _name: &str) -> bool {
        false
    }
    /// The working tree these changes are tracked in, when it is fixed here (a worker works
    /// in its own worktree, wherever the run was started): stages run there.
    fn root(&self) -> Option<&std::path::Path> {
        None
    }
}

/// Snapshots of the workspace before attempts: what an attempt changed, and its undoing.
pub trait Snapshots {
    /// False when changes are not tracked at all (no snapshots are attempted).
    fn enabled(&self) -> bool {
        true
    }
    /// Records the workspace under `name`, as much of it as `watch` says; returns the name the
    /// snapshot has (the previous snapshot's when nothing changed since) and how many files it
    /// holds.
    fn snapshot(&self, run: &RunId, name: &str, watch: Watch) -> Result<(String, usize), SnapshotError>;
    /// Puts the files back as snapshot `name` found them.
    fn restore(&self, run: &RunId, name: &str) -> Result<crate::event::RestoreCounts, SnapshotError>;
    /// The files that differ now from snapshot `name`.
    fn changed(&self, _run: &RunId, _name: &str) -> Result<FileChanges, SnapshotError> {
        Ok(FileChanges::default())
    }
}

/// The sandbox's layers: an agent-mode attempt writes into a layer of its own, which is
/// copied into the workspace when the attempt is kept and dropped when it is not.
pub trait Layers {
    /// True when stages run in sandboxes that keep the workspace apart (SPEC §12): plan mode
    /// mounted read-only (nothing to snapshot), agent-mode attempts writing into layers.
    fn confined(&self) -> bool {
        false
    }
    /// Makes an empty layer `name` for an attempt of `run` (an old one of that name is
    /// dropped first); says how it is mounted.
    fn make_layer(&self, _run: &RunId, _name: &str) -> Result<String, LayerError> {
        Err(LayerError::NotHere)
    }
    /// Discards layer `name` (undoing a copy into the workspace that a crash cut short);
    /// returns how many files and folders it held.
    fn drop_layer(&self, _run: &RunId, _name: &str) -> Result<usize, LayerError> {
        Ok(0)
    }
    /// The files layer `name` changes.
    fn layer_changed(&self, _run: &RunId, _name: &str) -> Result<FileChanges, LayerError> {
        Ok(FileChanges::default())
    }
    /// True when layer `name` of `run` is on this machine (layers are kept where they were
    /// made: after a takeover by another machine, none of the run's is here).
    fn layer_here(&self, _run: &RunId, _name: &str) -> bool {
        false
    }
    /// True when this machine holds the run's layers folder: from its first layer here to the
    /// run's end.
    fn run_layers_here(&self, _run: &RunId) -> bool {
        false
    }
    /// Keeps layer `name` of `run` where another machine can make it again (a worker's run: a
    /// commit pushed to the fleet's repository), so that a takeover need not run its attempt
    /// again; returns what [`Layers::bring_layer`] needs, `None` where layers are not kept so.
    fn keep_layer(&self, _run: &RunId, _name: &str) -> Result<Option<String>, LayerError> {
        Ok(None)
    }
    /// Makes layer `name` of `run` here from `kept`, which [`Layers::keep_layer`] returned on
    /// the machine that made it.
    fn bring_layer(&self, _run: &RunId, _name: &str, _kept: &str) -> Result<(), LayerError> {
        Err(LayerError::NotHere)
    }
    /// The commit the workspace is at now, when it is a repository: what a layer made now
    /// starts from, for [`Layers::merge_into_layer`].
    fn layer_base(&self) -> Option<String> {
        None
    }
    /// Merges into layer `name`'s file at `path` what the workspace's file there gained since
    /// commit `base` (another stage's changes, applied while this layer's attempt ran), keeping
    /// the layer's own changes, line by line. `Ok(true)`: merged cleanly; `Ok(false)`: both
    /// changed the same lines (or it is not a text file on both sides).
    fn merge_into_layer(&self, _run: &RunId, _name: &str, _path: &str, _base: &str) -> Result<bool, LayerError> {
        Ok(false)
    }
    /// What layer `name` changes as a unified diff against the workspace, cut at about
    /// `max_bytes` (for a judge to read): text files line by line, others named.
    fn layer_diff(&self, _run: &RunId, _name: &str, _max_bytes: usize) -> Result<String, LayerError> {
        Ok(String::new())
    }
    /// Copies layer `name` into the workspace (through the path guard), commits what it
    /// changed like [`Commits::commit`], and removes the layer.
    fn commit_layer(
        &self,
        _run: &RunId,
        _name: &str,
        _task: &TaskId,
        _stage: &StageId,
    ) -> Result<Option<(String, usize)>, LayerError> {
        Err(LayerError::NotHere)
    }
    /// The run has ended: what was kept for its attempts (layers, homes) can go.
    fn ended(&self, _run: &RunId) {}
}

/// Commits of what agent-mode stages changed (pushed to the run's branch on a fleet), and
/// their reverts.
pub trait Commits {
    /// Commits what changed since snapshot `name` (git workspaces) with the trailers
    /// `Loopwright-Task` and `Loopwright-Stage`; returns the commit and its file count.
    fn commit(
        &self,
        run: &RunId,
        name: &str,
        task: &TaskId,
        stage: &StageId,
    ) -> Result<Option<(String, usize)>, CommitError>;
    /// Reverts the commits of a stage of a task, newest first; returns how many. Commits a
    /// revert made before (a crash after its commit, before its journal entry) are not
    /// reverted again: the count is the same and nothing new is committed.
    fn revert(&self, task: &TaskId, stage: &StageId) -> Result<usize, CommitError>;
    /// The repository's commit of a stage of this run that a crash left unjournaled: the
    /// current commit, when its trailers name the run and the stage, and how many files it
    /// changed.
    fn committed(&self, _run: &RunId, _stage: &StageId) -> Option<(String, usize)> {
        None
    }
    /// Repairs what a crash left in the repository (a stale `index.lock` no live process
    /// holds) before a commit or a revert; says what was done.
    fn repair(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The workspace's files as stages change them: read, snapshotted before attempts, written
/// through layers, committed, and undone. The engine holds one value that is all four ports.
pub trait Changes: Workspace + Snapshots + Layers + Commits {}

impl<T: Workspace + Snapshots + Layers + Commits + ?Sized> Changes for T {}

/// Why a snapshot could not be taken, read, compared or put back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// Changes are not tracked in this workspace.
    #[error("snapshots are off")]
    Off,
    /// The workspace could not be recorded (a full disk, an unreadable file).
    #[error("cannot snapshot the workspace: {0}")]
    Take(String),
    /// Snapshot `name` could not be read.
    #[error("cannot read snapshot {name}: {reason}")]
    Read {
        /// The snapshot.
        name: String,
        /// What failed.
        reason: String,
    },
    /// The workspace could not be compared with a snapshot.
    #[error("{0}")]
    Compare(String),
    /// Snapshot `name` could not be put back.
    #[error("cannot restore snapshot {name}: {reason}")]
    Restore {
        /// The snapshot.
        name: String,
        /// What failed.
        reason: String,
    },
}

/// Why a sandbox layer could not be made, read, copied back or removed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayerError {
    /// Stages do not run in layers here.
    #[error("layers are not made here")]
    NotHere,
    /// The layer's folder could not be made.
    #[error("cannot make {dir}: {reason}")]
    Make {
        /// The layer's folder.
        dir: String,
        /// What failed.
        reason: String,
    },
    /// What the layer changes could not be read.
    #[error("cannot read {dir}: {reason}")]
    Read {
        /// The layer's folder.
        dir: String,
        /// What failed.
        reason: String,
    },
    /// The layer could not be removed.
    #[error("cannot remove {dir}: {reason}")]
    Remove {
        /// The layer's folder.
        dir: String,
        /// What failed.
        reason: String,
    },
    /// The layer could not be copied into the workspace (a link planted in the way, a layer
    /// past its size limit).
    #[error("cannot copy {dir} into the workspace: {reason}")]
    Copy {
        /// The layer's folder.
        dir: String,
        /// What failed.
        reason: String,
    },
    /// The copied files could not be committed.
    #[error(transparent)]
    Commit(#[from] CommitError),
}

/// Why a stage's changes could not be committed, pushed or reverted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommitError {
    /// The workspace is not a git repository.
    #[error("the workspace is not a git repository, so there are no commits to revert")]
    NotRepository,
    /// What changed could not be found: its snapshot is unreadable.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// git refused or failed (its own words), or the repository is in a state loopwright does
    /// not commit in.
    #[error("{0}")]
    Git(String),
    /// The commit was made but not pushed to the run's branch (a lease lost, a history that
    /// would be rewritten, the repository unreachable): it is not reported as made.
    #[error("{0}")]
    NotPushed(String),
}

/// How much of the workspace a snapshot watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// The workspace's files: what an agent-mode stage changes is committed, or undone.
    Files,
    /// Everything a plan-mode (read-only) stage must leave alone: the files, and git's and
    /// loopwright's own (config, hooks, refs, the index; pipelines, agents), and the build and
    /// dependency folders by fingerprint. A plan-mode stage that cannot be watched so does not
    /// run.
    ReadOnly,
}

/// No snapshots and no commits (tests, and workspaces where changes are not tracked).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoChanges;

impl Workspace for NoChanges {}

impl Layers for NoChanges {}

impl Snapshots for NoChanges {
    fn enabled(&self) -> bool {
        false
    }
    fn snapshot(&self, _: &RunId, _: &str, _: Watch) -> Result<(String, usize), SnapshotError> {
        Err(SnapshotError::Off)
    }
    fn restore(&self, _: &RunId, _: &str) -> Result<crate::event::RestoreCounts, SnapshotError> {
        Err(SnapshotError::Off)
    }
}

impl Commits for NoChanges {
    fn commit(&self, _: &RunId, _: &str, _: &TaskId, _: &StageId) -> Result<Option<(String, usize)>, CommitError> {
        Ok(None)
    }
    fn revert(&self, _: &TaskId, _: &StageId) -> Result<usize, CommitError> {
        Ok(0)
    }
}
