//! Locks between loopwright processes on one machine (`flock`, so a crashed holder releases
//! its lock with its last breath):
//!
//! - **one live run per working tree**: two runs in one workspace would each see the other's
//!   files as their own stage's changes (a false `security_violation`, a restore that deletes
//!   the other's work, the other's files in a commit). A run in its own worktree (`--worktree`)
//!   has a working tree, and so a lock, of its own;
//! - **one git operation on the repository's shared state at a time**: creating and removing
//!   worktrees and merging branches back, which race on `.git/config`, `.git/worktrees/` and
//!   the branch refs when runs start or end together.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use loopwright_engine::RunId;
use nix::fcntl::{Flock, FlockArg};

use crate::error::Error;
use crate::workspace::Workspace;

/// A lock held until dropped (or the process ends).
#[derive(Debug)]
pub struct Held {
    _lock: Flock<File>,
}

fn open(path: &Path) -> Result<File, Error> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::usage(format!("cannot create {}: {e}", dir.display())))?;
    }
    std::os::unix::fs::OpenOptionsExt::mode(
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false),
        0o600,
    )
    .open(path)
    .map_err(|e| Error::usage(format!("cannot open the lock {}: {e}", path.display())))
}

/// Takes the lock file `path` if no live process holds it (`None` when one does).
pub fn try_exclusive(path: &Path) -> Result<Option<Held>, Error> {
    match Flock::lock(open(path)?, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(Held { _lock: lock })),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(Error::usage(format!("cannot lock {}: {e}", path.display()))),
    }
}

/// The lock file of the working tree `root`: the workspace's own, or its worktree's.
fn live_path(ws: &Workspace, root: &Path) -> PathBuf {
    if root == ws.root {
        ws.state_dir().join("live.lock")
    } else {
        let name = root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        ws.state_dir().join("worktrees").join(format!("{name}.live.lock"))
    }
}

/// Takes the working tree `root` for `run`, or says which run holds it.
pub fn live_run(ws: &Workspace, root: &Path, run: &RunId) -> Result<Held, Error> {
    try_live_run(ws, root, run)?.map_err(|holder| busy(root, run, holder))
}

/// The error for `run` finding its working tree `root` held by `holder`.
pub fn busy(root: &Path, run: &RunId, holder: Holder) -> Error {
    let Holder { run: other, pid } = holder;
    if other == run.as_str() {
        return Error::conflict(format!(
            "run {run} is being driven by process {pid} (it was just answered or resumed there); nothing was done here"
        ));
    }
    Error::conflict(format!(
        "another run ({other}, process {pid}) is live in {}; two runs in one working tree would take each other's changes for their own. Wait for it to end, or start this one with `--worktree` to give it a git worktree of its own",
        root.display()
    ))
}

/// Who holds a working tree: the run and the process, as the holder wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The run (`?` when the holder had not written it yet).
    pub run: String,
    /// The process id.
    pub pid: String,
}

/// Takes the working tree `root` for `run`; `Ok(Err(holder))` when another holds it (the
/// daemon keeps such a run queued until the tree is free).
pub fn try_live_run(ws: &Workspace, root: &Path, run: &RunId) -> Result<Result<Held, Holder>, Error> {
    let path = live_path(ws, root);
    let file = open(&path)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => {
            let mut f: &File = &lock;
            // One write of the whole line: a reader never sees half of it.
            let line = format!("{run} {}\n", std::process::id());
            let _ = f.set_len(0).and_then(|()| f.rewind()).and_then(|()| f.write_all(line.as_bytes()));
            Ok(Ok(Held { _lock: lock }))
        }
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            // The holder writes who it is just after it locks; under load that can take a
            // while: wait up to 2 s for its whole line.
            let mut holder = String::new();
            for _ in 0..200 {
                holder.clear();
                let _ = file.rewind().and_then(|()| file.read_to_string(&mut holder));
                if holder.ends_with('\n') {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let mut words = holder.split_whitespace();
            let (other, pid) = (words.next().unwrap_or("?"), words.next().unwrap_or("?"));
            Ok(Err(Holder { run: other.to_owned(), pid: pid.to_owned() }))
        }
        Err((_, e)) => Err(Error::usage(format!("cannot lock {}: {e}", path.display()))),
    }
}

/// Waits for the git lock of the repository at `root` (worktrees and merges take turns).
pub fn git_turn(root: &Path) -> Result<Held, Error> {
    let path = Workspace::state_dir_of(root).join("git.lock");
    let file = open(&path)?;
    Flock::lock(file, FlockArg::LockExclusive)
        .map(|lock| Held { _lock: lock })
        .map_err(|(_, e)| Error::usage(format!("cannot lock {}: {e}", path.display())))
}
