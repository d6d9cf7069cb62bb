//! A run in a git worktree of its own (`--worktree`): created at the start on branch
//! `loopwright/TASK`, merged back when the run succeeds.

use loopwright_engine::event::Worktree;
use loopwright_engine::{Event, RunState, RunStatus, Stopper, TaskId};

use crate::assemble::RunEngine;
use crate::error::Error;
use crate::workspace::Workspace;

/// Creates the run's worktree: `.loopwright/state/worktrees/TASK` on branch `loopwright/TASK`.
pub fn create(ws: &Workspace, task: &TaskId) -> Result<Worktree, Error> {
    use loopwright_runners::git;
    if !git::is_repo(&ws.root) {
        return Err(Error::usage(format!(
            "--worktree needs a git repository, and {} is not the top of one",
            ws.root.display()
        )));
    }
    let branch = format!("loopwright/{task}");
    let path = ws.state_dir().join("worktrees").join(task.as_str());
    std::fs::create_dir_all(ws.state_dir().join("worktrees"))
        .map_err(|e| Error::usage(format!("cannot create {}: {e}", ws.state_dir().display())))?;
    let _turn = crate::lock::git_turn(&ws.root)?;
    git::worktree_add(&ws.root, &path, &branch).map_err(|e| {
        if e.to_string().contains("already exists") {
            Error::conflict(format!(
                "cannot create the worktree of task {task} on branch {branch}: {e} (a run of this task has it: resume that run, or give this one another task id)"
            ))
        } else {
            Error::usage(format!("cannot create the worktree of task {task} on branch {branch}: {e}"))
        }
    })?;
    Ok(Worktree { repo: ws.root.display().to_string(), path: path.display().to_string(), branch })
}

/// After a worktree run succeeded: merges its branch back (fast-forward or a merge commit) and
/// removes the worktree; a conflict waits for `respond` (a `merge-conflict` escalation), the
/// worktree kept. Returns notes for the person (a branch left unmerged, a worktree not removed).
pub async fn merge_back<X: Stopper>(engine: &mut RunEngine<'_, X>, state: &mut RunState) -> Result<Vec<String>, Error> {
    use loopwright_runners::git;
    let Some(wt) = state.started.as_ref().and_then(|s| s.worktree.clone()) else { return Ok(Vec::new()) };
    // A run from a forge went back as a pull request: that is its merge.
    if state.started.as_ref().is_some_and(|s| s.forge.is_some()) {
        return Ok(Vec::new());
    }
    if state.status != RunStatus::Success || state.worktree_merged {
        return Ok(Vec::new());
    }
    if state.merge_answer == Some(loopwright_engine::event::Answer::Skip) {
        return Ok(vec![format!("branch {} was left unmerged (worktree {})", wt.branch, wt.path)]);
    }
    let repo = std::path::Path::new(&wt.repo);
    // One git operation on the repository's shared state at a time: runs finishing (or
    // starting) together take turns.
    let _turn = crate::lock::git_turn(repo)?;
    let merged = git::with_lock_retries(|| git::merge(repo, &wt.branch))
        .map_err(|e| Error::usage(format!("cannot merge {} back: {e}", wt.branch)))?;
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
    let mut notes = Vec::new();
    if merged {
        if let Err(e) = git::worktree_remove(repo, std::path::Path::new(&wt.path)) {
            notes.push(format!("warning: the worktree {} was merged but not removed: {e}", wt.path));
        }
        let _ = git::git(repo, &["branch", "-d", &wt.branch]);
    }
    Ok(notes)
}
