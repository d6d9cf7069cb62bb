//! Commits and reverts of a stage's changes on a real git repository.

use std::path::Path;
use std::process::Command;

use loopwright_runners::git::{commit, revert_stage, stage_commits};
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
    let sha = commit(root, &paths, "task-1", "implement").expect("commit").expect("a commit");
    assert_eq!(stage_commits(root, "task-1", "implement").expect("log"), vec![sha.clone()]);
    let files = sh(root, &["show", "--name-status", "--format=", &sha]);
    assert_eq!(files, "D\tdoomed.txt\nA\tnew[1].txt\nM\ttracked.txt\n");
    let trailers = sh(root, &["log", "-1", "--format=%(trailers)", &sha]);
    assert_eq!(trailers, "Loopwright-Task: task-1\nLoopwright-Stage: implement\n\n");

    assert_eq!(revert_stage(root, "task-1", "implement").expect("revert"), 1);
    assert_eq!(std::fs::read_to_string(root.join("tracked.txt")).expect("read"), "one\n");
    assert_eq!(std::fs::read_to_string(root.join("doomed.txt")).expect("read"), "bye\n");
    assert!(!root.join("new[1].txt").exists());
    // Nothing to commit: no commit.
    assert_eq!(commit(root, &["scratch.tmp".to_owned()], "task-1", "verify").expect("commit"), None);
}
