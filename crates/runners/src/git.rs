//! Git from the command line: commits of a stage's changes with trailers, and reverts of them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Options given to every git command loopwright runs: no pager, no hooks (a `post-commit`
/// or `post-checkout` hook an agent planted would otherwise run as loopwright), no fsmonitor
/// (`core.fsmonitor` names a program git runs on `status`), no editor.
pub const HARDENED: [&str; 5] = ["--no-pager", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"];

/// Why a git command, or what loopwright does with git, failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GitError {
    /// git could not be started.
    #[error("cannot run git: {0}")]
    Spawn(String),
    /// git ran and failed: the command's arguments and what it printed on stderr.
    #[error("git {command}: {stderr}")]
    Failed {
        /// The arguments, joined by spaces.
        command: String,
        /// git's own words.
        stderr: String,
    },
    /// The repository is in a state loopwright does not change (a deleted branch under a work
    /// tree, a merge that moved HEAD).
    #[error("{0}")]
    Refused(String),
}

impl GitError {
    /// True when git failed because another git process holds one of the repository's locks.
    pub fn locked(&self) -> bool {
        matches!(self, Self::Failed { stderr, .. } if stderr.contains(".lock"))
    }
}

/// Runs git in `root` with a predictable environment; returns stdout, or stderr as the error.
pub fn git(root: &Path, args: &[&str]) -> Result<String, GitError> {
    git_bytes(root, args).map(|out| String::from_utf8_lossy(&out).into_owned())
}

/// Like [`git`], with stdout as bytes (file contents).
pub fn git_bytes(root: &Path, args: &[&str]) -> Result<Vec<u8>, GitError> {
    let out = Command::new("git")
        .args(HARDENED)
        .args(args)
        .current_dir(root)
        .env("LC_ALL", "C")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_EDITOR", "true")
        // Paths are file names, never globs or magic pathspecs.
        .env("GIT_LITERAL_PATHSPECS", "1")
        .output()
        .map_err(|e| GitError::Spawn(e.to_string()))?;
    stdout_of(args, out)
}

/// What git printed on stdout when it succeeded, else its stderr as the error.
fn stdout_of(args: &[&str], out: std::process::Output) -> Result<Vec<u8>, GitError> {
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(GitError::Failed {
            command: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

/// Runs git in `root` like [`git_bytes`], with more environment (`GIT_INDEX_FILE`,
/// `GIT_WORK_TREE`) and `stdin` given to it; returns git's whole output, whatever its status.
pub fn git_with(
    root: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
    stdin: &[u8],
) -> Result<std::process::Output, GitError> {
    use std::io::Write;
    let mut child = Command::new("git")
        .args(HARDENED)
        .args(args)
        .current_dir(root)
        .env("LC_ALL", "C")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_LITERAL_PATHSPECS", "1")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| GitError::Spawn(e.to_string()))?;
    let mut input = child.stdin.take().expect("piped");
    // Written from another thread: git may fill its output before it has read all its input.
    let bytes = stdin.to_vec();
    let writer = std::thread::spawn(move || input.write_all(&bytes));
    let out = child.wait_with_output().map_err(|e| GitError::Spawn(e.to_string()))?;
    let _ = writer.join();
    Ok(out)
}

/// [`git_with`], failing as [`git`] does when git does.
pub fn git_ok(root: &Path, args: &[&str], env: &[(&str, &Path)], stdin: &[u8]) -> Result<Vec<u8>, GitError> {
    stdout_of(args, git_with(root, args, env, stdin)?)
}

/// A three-way merge of files `ours` and `theirs` from `base` (`git merge-file`): the merged
/// text, or `None` when both changed the same lines.
pub fn merge_file(ours: &Path, base: &Path, theirs: &Path) -> Result<Option<Vec<u8>>, GitError> {
    let dir = ours.parent().unwrap_or(Path::new("/"));
    let out = Command::new("git")
        .args(HARDENED)
        .args(["merge-file", "-p", "--"])
        .args([ours, base, theirs])
        .current_dir(dir)
        .env("LC_ALL", "C")
        .output()
        .map_err(|e| GitError::Spawn(e.to_string()))?;
    match out.status.code() {
        Some(0) => Ok(Some(out.stdout)),
        // The number of conflicts (at most 127).
        Some(1..=127) => Ok(None),
        _ => Err(GitError::Failed {
            command: "merge-file".to_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        }),
    }
}

/// True when `root` is the top of a git work tree.
pub fn is_repo(root: &Path) -> bool {
    toplevel(root).is_some_and(|top| root.canonicalize().is_ok_and(|r| r == top))
}

/// The top of the git work tree `dir` is in (each worktree its own), canonical; `None` outside
/// git.
pub fn toplevel(dir: &Path) -> Option<std::path::PathBuf> {
    git(dir, &["rev-parse", "--show-toplevel"]).ok().and_then(|top| Path::new(top.trim()).canonicalize().ok())
}

/// Identity flags for a repository with no user configured (git refuses to commit otherwise).
pub(crate) fn identity(root: &Path) -> Vec<String> {
    let configured = git(root, &["config", "user.email"]).is_ok_and(|e| !e.trim().is_empty());
    if configured {
        Vec::new()
    } else {
        vec!["-c".into(), "user.name=loopwright".into(), "-c".into(), "user.email=loopwright@localhost".into()]
    }
}

/// `git commit` with a message and trailers, as the configured user or as loopwright.
fn commit_with(
    root: &Path,
    message: &str,
    trailers: &[String],
    flags: &[&str],
    paths: &[String],
) -> Result<(), GitError> {
    let id = identity(root);
    let mut args: Vec<&str> = id.iter().map(String::as_str).collect();
    args.extend(["commit", "--quiet", "--no-verify", "-m", message]);
    for t in trailers {
        args.extend(["--trailer", t.as_str()]);
    }
    args.extend(flags);
    args.extend(paths.iter().map(String::as_str));
    git(root, &args).map(drop)
}

/// Refuses a work tree whose `HEAD` is unborn in a repository that has commits: a commit
/// there would start a new history holding only what it adds (a branch deleted under a
/// worktree), and a push of it would replace the run's branch.
fn unborn_head(root: &Path) -> Result<(), GitError> {
    if git(root, &["rev-parse", "--verify", "-q", "HEAD"]).is_ok() {
        return Ok(());
    }
    let any = git(root, &["rev-list", "-n", "1", "--all"]).unwrap_or_default();
    if any.trim().is_empty() {
        return Ok(());
    }
    let branch = git(root, &["symbolic-ref", "-q", "HEAD"]).unwrap_or_default();
    Err(GitError::Refused(format!(
        "HEAD ({}) has no commit although the repository has some: the branch was deleted under the work tree; nothing was committed",
        branch.trim()
    )))
}

/// Commits the changes of `paths` (and only them) with the loopwright trailers; returns the new
/// commit, or `None` when none of them is something git tracks or may track (ignored files and
/// files created then deleted are left out). A work tree whose `HEAD` is unborn in a repository
/// with commits is refused.
pub fn commit(root: &Path, paths: &[String], run: &str, task: &str, stage: &str) -> Result<Option<String>, GitError> {
    if paths.is_empty() {
        return Ok(None);
    }
    unborn_head(root)?;
    let (present, gone): (Vec<&String>, Vec<&String>) = paths.iter().partition(|p| root.join(p).exists());
    let list = |args: &[&str], of: &[&String]| -> Result<Vec<String>, GitError> {
        if of.is_empty() {
            return Ok(Vec::new());
        }
        let mut all: Vec<&str> = args.to_vec();
        all.push("--");
        all.extend(of.iter().map(|s| s.as_str()));
        Ok(git(root, &all)?.split('\0').filter(|s| !s.is_empty()).map(str::to_owned).collect())
    };
    // Tracked files, and untracked ones that are not ignored, can be added; of the deleted
    // ones, only those git tracks have a deletion to commit.
    let mut add = list(&["ls-files", "-z"], &present)?;
    add.extend(list(&["ls-files", "-z", "--others", "--exclude-standard"], &present)?);
    let removed = list(&["ls-files", "-z"], &gone)?;
    if add.is_empty() && removed.is_empty() {
        return Ok(None);
    }
    if !add.is_empty() {
        let mut args = vec!["add", "-A", "--"];
        args.extend(add.iter().map(String::as_str));
        git(root, &args)?;
    }
    if !removed.is_empty() {
        let mut args = vec!["rm", "--cached", "--quiet", "--ignore-unmatch", "--"];
        args.extend(removed.iter().map(String::as_str));
        git(root, &args)?;
    }
    let staged: Vec<String> = add.into_iter().chain(removed).collect();
    // The files may hold what the last commit has (a stage redone after a crash that followed
    // its commit): then there is nothing to commit.
    let mut diff = vec!["diff", "--cached", "--quiet", "--"];
    diff.extend(staged.iter().map(String::as_str));
    if git(root, &diff).is_ok() {
        return Ok(None);
    }
    let trailers =
        [format!("Loopwright-Task: {task}"), format!("Loopwright-Stage: {stage}"), format!("Loopwright-Run: {run}")];
    commit_with(root, &format!("loopwright: stage {stage} of {task}"), &trailers, &["--"], &staged)?;
    Ok(Some(git(root, &["rev-parse", "HEAD"])?.trim().to_owned()))
}

/// The current commit and how many files it changed, when its trailers name this run and
/// stage (a commit loopwright made, then died before journaling).
pub fn head_commit_of(root: &Path, run: &str, stage: &str) -> Option<(String, usize)> {
    let head = log_trailers(root, &["-1"], ["Loopwright-Run", "Loopwright-Stage"]).ok()?.into_iter().next()?;
    let (sha, [r, s]) = head;
    if r != run || s != stage {
        return None;
    }
    let files = git(root, &["show", "--name-only", "--format=", &sha]).ok()?.lines().filter(|l| !l.is_empty()).count();
    Some((sha, files))
}

/// The commits `git log ARGS` lists, newest first, each with the values of two trailers
/// (empty when a commit has none).
fn log_trailers(root: &Path, args: &[&str], keys: [&str; 2]) -> Result<Vec<(String, [String; 2])>, GitError> {
    let format =
        format!("--format=%H%x1f%(trailers:key={},valueonly)%x1f%(trailers:key={},valueonly)", keys[0], keys[1]);
    let mut all = vec!["log", "-z", format.as_str()];
    all.extend(args);
    let log = git(root, &all)?;
    Ok(log
        .split('\0')
        .filter_map(|rec| {
            let mut f = rec.trim_start_matches('\n').split('\x1f');
            let (sha, a, b) = (f.next()?, f.next()?, f.next()?);
            Some((sha.to_owned(), [a.trim().to_owned(), b.trim().to_owned()]))
        })
        .collect())
}

/// Removes the repository's `index.lock` when no live process has it open: a git killed in
/// the middle of a commit (with loopwright, by a crash) leaves it, and every later commit then
/// fails. Returns the lock's path when one was removed.
pub fn clear_stale_index_lock(root: &Path) -> Option<String> {
    clear_stale_lock(&Repo::at(root)?.index_lock)
}

/// A folder at the top of a git work tree, as one `git rev-parse` tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// Where git takes the lock of its index (in the main repository's folder for a linked
    /// worktree).
    pub index_lock: PathBuf,
}

impl Repo {
    /// The repository `root` is the top of; `None` when it is not in git or is a folder below
    /// a work tree's top ([`is_repo`] and where its index lock is, in one process).
    pub fn at(root: &Path) -> Option<Self> {
        let out = git(root, &["rev-parse", "--show-toplevel", "--git-path", "index.lock"]).ok()?;
        let mut lines = out.lines();
        let (top, lock) = (lines.next()?, lines.next()?);
        let top = Path::new(top.trim()).canonicalize().ok()?;
        (root.canonicalize().ok()? == top).then(|| Self { index_lock: root.join(lock.trim()) })
    }
}

/// Removes the index lock at `lock` when it is there and no live process holds it; says
/// which file went.
pub fn clear_stale_lock(lock: &Path) -> Option<String> {
    if !lock.exists() {
        return None;
    }
    let lock = lock.canonicalize().ok()?;
    if held_open(&lock) {
        return None;
    }
    std::fs::remove_file(&lock).ok()?;
    Some(lock.display().to_string())
}

/// True when some process has `path` open (a scan of `/proc/*/fd`, as `fuser` does); true too
/// when `/proc` cannot be read, so nothing is removed on a guess.
fn held_open(path: &Path) -> bool {
    let Some(mut pids) = crate::process::pids() else { return true };
    pids.any(|pid| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .is_ok_and(|fds| fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == path)))
    })
}

/// The commits of a stage of a task, newest first.
pub fn stage_commits(root: &Path, task: &str, stage: &str) -> Result<Vec<String>, GitError> {
    let log = log_trailers(root, &[], ["Loopwright-Task", "Loopwright-Stage"])?;
    Ok(log.into_iter().filter(|(_, [t, s])| t == task && s == stage).map(|(sha, _)| sha).collect())
}

/// Reverts a stage's commits, newest first, in one revert commit; on a conflict the revert is
/// abandoned and the tree left as it was. Returns how many commits were reverted.
pub fn revert_stage(root: &Path, task: &str, stage: &str) -> Result<usize, GitError> {
    let commits = stage_commits(root, task, stage)?;
    if commits.is_empty() {
        return Ok(0);
    }
    // A revert of these commits made before (loopwright died after committing it, before
    // journaling it) is not made again: its trailers say it was.
    let since = format!("{}..HEAD", commits[0]);
    let reverts = log_trailers(root, &[since.as_str()], ["Loopwright-Task", "Loopwright-Reverted-Stage"])?;
    let already = reverts.iter().any(|(_, [t, s])| t == task && s == stage);
    if already {
        return Ok(commits.len());
    }
    let mut args = vec!["revert", "--no-commit"];
    args.extend(commits.iter().map(String::as_str));
    if let Err(e) = git(root, &args) {
        let _ = git(root, &["revert", "--abort"]);
        return Err(e);
    }
    let message = format!(
        "loopwright: revert stage {stage} of {task} ({} commit{})",
        commits.len(),
        if commits.len() == 1 { "" } else { "s" }
    );
    let trailers = [format!("Loopwright-Task: {task}"), format!("Loopwright-Reverted-Stage: {stage}")];
    commit_with(root, &message, &trailers, &["--allow-empty"], &[])?;
    Ok(commits.len())
}

/// Creates a worktree at `path` on a new branch `branch` from the current commit.
pub fn worktree_add(root: &Path, path: &Path, branch: &str) -> Result<(), GitError> {
    let shown = path.display().to_string();
    with_lock_retries(|| git(root, &["worktree", "add", "--quiet", "-b", branch, &shown, "HEAD"]).map(drop))
}

/// Runs a git operation again while another git process holds one of the repository's locks
/// (two runs finishing at once), for up to ~10 s.
pub fn with_lock_retries<T>(mut op: impl FnMut() -> Result<T, GitError>) -> Result<T, GitError> {
    let mut tries = 0;
    loop {
        match op() {
            Err(e) if e.locked() && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// Removes a worktree (its branch stays).
pub fn worktree_remove(root: &Path, path: &Path) -> Result<(), GitError> {
    let shown = path.display().to_string();
    git(root, &["worktree", "remove", "--force", &shown]).map(drop)
}

/// How a branch was merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge {
    /// The current branch moved to it.
    FastForward(String),
    /// A merge commit joins them.
    Commit(String),
    /// Nothing to merge.
    UpToDate,
    /// They conflict in these files; the merge was aborted and nothing changed.
    Conflict(Vec<String>),
}

/// Merges `branch` into the current branch of `root`: fast-forward when possible, else a
/// merge commit; on a conflict the merge is aborted, leaving `root` as it was.
pub fn merge(root: &Path, branch: &str) -> Result<Merge, GitError> {
    let before = git(root, &["rev-parse", "HEAD"])?.trim().to_owned();
    let ahead = git(root, &["rev-list", "--count", &format!("HEAD..{branch}")])?.trim().parse::<u32>().unwrap_or(0);
    if ahead == 0 {
        return Ok(Merge::UpToDate);
    }
    if git(root, &["merge-base", "--is-ancestor", "HEAD", branch]).is_ok() {
        git(root, &["merge", "--ff-only", "--quiet", branch])?;
        return Ok(Merge::FastForward(git(root, &["rev-parse", "HEAD"])?.trim().to_owned()));
    }
    let id = identity(root);
    let mut args: Vec<&str> = id.iter().map(String::as_str).collect();
    let message = format!("Merge {branch} (loopwright)");
    args.extend(["merge", "--no-ff", "--no-edit", "--quiet", "-m", message.as_str(), branch]);
    match git(root, &args) {
        Ok(_) => Ok(Merge::Commit(git(root, &["rev-parse", "HEAD"])?.trim().to_owned())),
        Err(e) => {
            let files: Vec<String> = git(root, &["diff", "--name-only", "--diff-filter=U"])
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect();
            let _ = git(root, &["merge", "--abort"]);
            if files.is_empty() {
                // Not a conflict (a lock held by another git, a dirty work tree): say why.
                return Err(e);
            }
            let after = git(root, &["rev-parse", "HEAD"])?.trim().to_owned();
            if after != before {
                return Err(GitError::Refused(format!(
                    "the aborted merge of {branch} left HEAD at {after} instead of {before}"
                )));
            }
            Ok(Merge::Conflict(files))
        }
    }
}
