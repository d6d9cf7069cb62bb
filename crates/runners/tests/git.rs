//! Commits and reverts of a stage's changes on a real git repository.

use std::path::Path;
use std::process::Command;

use loopwright_runners::git::{Repo, clear_stale_index_lock, commit, head_commit_of, revert_stage, stage_commits};
use pretty_assertions::assert_eq;

fn sh(root: &Path, args: &[&str]) -> String {
    let out = Command::new("git").args(args).current_dir(root).output().expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    sh(root, &["init", "--quiet", "-b", "main"]);
    sh(root, &["config", "user.name", "T"]);
    sh(root, &["config", "user.email", "t@example.com"]);
    std::fs::write(root.join(".gitignore"), "build/\n").expect("write");
    std::fs::write(root.join("tracked.txt"), "one\n").expect("write");
    std::fs::write(root.join("doomed.txt"), "bye\n").expect("write");
    sh(root, &["add", "-A"]);
    sh(root, &["commit", "--quiet", "-m", "initial"]);
    dir
}

#[test]
fn only_real_changes_are_committed_and_reverted() {
    let dir = repo();
    let root = dir.path();
    // The stage: modifies a tracked file, deletes one, creates a file with a glob-like name,
    // writes into an ignored folder, and creates then deletes a temporary file.
    std::fs::write(root.join("tracked.txt"), "two\n").expect("write");
    std::fs::remove_file(root.join("doomed.txt")).expect("rm");
    std::fs::write(root.join("new[1].txt"), "new\n").expect("write");
    std::fs::create_dir_all(root.join("build")).expect("mkdir");
    std::fs::write(root.join("build/out.o"), "obj").expect("write");
    let paths: Vec<String> = ["tracked.txt", "doomed.txt", "new[1].txt", "build/out.o", "scratch.tmp"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let sha = commit(root, &paths, "run-1", "task-1", "implement").expect("commit").expect("a commit");
    assert_eq!(head_commit_of(root, "run-1", "implement"), Some((sha.clone(), 3)));
    assert_eq!(head_commit_of(root, "run-2", "implement"), None);
    assert_eq!(head_commit_of(root, "run-1", "verify"), None);
    assert_eq!(stage_commits(root, "task-1", "implement").expect("log"), vec![sha.clone()]);
    let files = sh(root, &["show", "--name-status", "--format=", &sha]);
    assert_eq!(files, "D\tdoomed.txt\nA\tnew[1].txt\nM\ttracked.txt\n");
    let trailers = sh(root, &["log", "-1", "--format=%(trailers)", &sha]);
    assert_eq!(trailers, "Loopwright-Task: task-1\nLoopwright-Stage: implement\nLoopwright-Run: run-1\n\n");

    assert_eq!(revert_stage(root, "task-1", "implement").expect("revert"), 1);
    // Asked again (a crash after the revert's commit, before its journal entry), nothing new
    // is committed.
    let head = sh(root, &["rev-parse", "HEAD"]);
    assert_eq!(revert_stage(root, "task-1", "implement").expect("revert"), 1);
    assert_eq!(sh(root, &["rev-parse", "HEAD"]), head);
    assert_eq!(std::fs::read_to_string(root.join("tracked.txt")).expect("read"), "one\n");
    assert_eq!(std::fs::read_to_string(root.join("doomed.txt")).expect("read"), "bye\n");
    assert!(!root.join("new[1].txt").exists());
    // Nothing to commit: no commit.
    assert_eq!(commit(root, &["scratch.tmp".to_owned()], "run-1", "task-1", "verify").expect("commit"), None);
}

#[test]
fn a_stale_index_lock_is_removed_and_a_held_one_is_not() {
    let dir = repo();
    let root = dir.path();
    let lock = root.join(".git/index.lock");
    std::fs::write(&lock, "").expect("lock");
    let held = std::fs::File::open(&lock).expect("hold it");
    assert_eq!(clear_stale_index_lock(root), None, "a lock a live process has open stays");
    drop(held);
    let shown = lock.canonicalize().expect("path").display().to_string();
    assert_eq!(clear_stale_index_lock(root), Some(shown));
    assert!(!lock.exists());
    assert_eq!(clear_stale_index_lock(root), None);
}

#[test]
fn a_repository_is_known_by_its_top_and_its_index_lock_by_where_git_keeps_it() {
    let dir = repo();
    let root = dir.path();
    assert_eq!(Repo::at(root), Some(Repo { index_lock: root.join(".git/index.lock") }));
    // A folder below the top is not a workspace's repository; a folder outside git neither.
    std::fs::create_dir_all(root.join("sub")).expect("mkdir");
    assert_eq!(Repo::at(&root.join("sub")), None);
    let outside = tempfile::tempdir().expect("tempdir");
    assert_eq!(Repo::at(outside.path()), None);
    // A linked worktree (a worker's run) locks its index in the main repository's folder.
    let linked = outside.path().join("linked");
    sh(root, &["worktree", "add", "--quiet", "-b", "work/one", &linked.display().to_string()]);
    let repo = Repo::at(&linked).expect("a linked worktree is a repository's top");
    assert_eq!(repo.index_lock.canonicalize().ok(), None, "no lock yet");
    let real = |p: &Path| p.canonicalize().expect("canonical");
    assert_eq!(real(repo.index_lock.parent().expect("folder")), real(&root.join(".git/worktrees/linked")));
    assert_eq!(repo.index_lock.file_name(), Some(std::ffi::OsStr::new("index.lock")));
}
