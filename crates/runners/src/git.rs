//! Git from the command line: commits of a stage's changes with trailers, and reverts of them.

use std::path::Path;
use std::process::Command;

/// Runs git in `root` with a predictable environment; returns stdout, or stderr as the error.
pub fn git(root: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .arg("--no-pager")
        .args(args)
        .current_dir(root)
        .env("LC_ALL", "C")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_EDITOR", "true")
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("git {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// True when `root` is the top of a git work tree.
pub fn is_repo(root: &Path) -> bool {
    git(root, &["rev-parse", "--show-toplevel"])
        .ok()
        .and_then(|top| Path::new(top.trim()).canonicalize().ok())
        .is_some_and(|top| root.canonicalize().is_ok_and(|r| r == top))
}

/// Identity flags for a repository with no user configured (git refuses to commit otherwise).
fn identity(root: &Path) -> Vec<String> {
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
) -> Result<(), String> {
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

/// Commits `paths` (and only them) with the loopwright trailers; returns the new commit.
pub fn commit(root: &Path, paths: &[String], task: &str, stage: &str) -> Result<Option<String>, String> {
    if paths.is_empty() {
        return Ok(None);
    }
    let mut add = vec!["add", "-A", "--"];
    add.extend(paths.iter().map(String::as_str));
    git(root, &add)?;
    let trailers = [format!("Loopwright-Task: {task}"), format!("Loopwright-Stage: {stage}")];
    commit_with(root, &format!("loopwright: stage {stage} of {task}"), &trailers, &["--"], paths)?;
    Ok(Some(git(root, &["rev-parse", "HEAD"])?.trim().to_owned()))
}

/// The commits of a stage of a task, newest first.
pub fn stage_commits(root: &Path, task: &str, stage: &str) -> Result<Vec<String>, String> {
    let log = git(
        root,
        &[
            "log",
            "-z",
            "--format=%H%x1f%(trailers:key=Loopwright-Task,valueonly)%x1f%(trailers:key=Loopwright-Stage,valueonly)",
        ],
    )?;
    Ok(log
        .split('\0')
        .filter_map(|rec| {
            let mut f = rec.trim_start_matches('\n').split('\x1f');
            let (sha, t, s) = (f.next()?, f.next()?, f.next()?);
            (t.trim() == task && s.trim() == stage).then(|| sha.to_owned())
        })
        .collect())
}

/// Reverts a stage's commits, newest first, in one revert commit; on a conflict the revert is
/// abandoned and the tree left as it was. Returns how many commits were reverted.
pub fn revert_stage(root: &Path, task: &str, stage: &str) -> Result<usize, String> {
    let commits = stage_commits(root, task, stage)?;
    if commits.is_empty() {
        return Ok(0);
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
