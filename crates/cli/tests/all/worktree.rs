//! `run --worktree`: each run in its own git worktree on branch `loopwright/TASK`, merged back
//! when it succeeds; a conflict waits for a human with the worktree kept.

use std::process::Stdio;

use serde_json::json;

use crate::support::Ws;

fn git(ws: &Ws, args: &[&str]) -> String {
    ws.git(args)
}

fn repo(pipeline: &str) -> Ws {
    let ws = Ws::empty();
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.write("shared.txt", "base\n");
    ws.write(".loopwright/pipelines/w.yml", pipeline);
    ws.init_git();
    ws
}

fn spawn(ws: &Ws, task: &str) -> std::process::Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin!("loopwright"))
        .current_dir(ws.path())
        .env("NO_COLOR", "1")
        .args(["run", "w", "--worktree", "--task-id", task, "--json", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

fn wait(child: std::process::Child) -> (i32, serde_json::Value, String) {
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn two_concurrent_runs_work_apart_and_both_merge_back() {
    // Each run writes its own file in its worktree once both runs are running (markers outside
    // the repository), and checks it sees no file of the other run.
    let meet = tempfile::tempdir().expect("tempdir");
    let m = meet.path().display();
    let ws = repo(&format!(
        "name: w\ndescription: d\nversion: 1\nstages:\n  - id: work\n    description: d\n    agent: shell\n    mode: agent\n    run: touch {m}/$LOOPWRIGHT_TASK_ID; for i in $(seq 100); do [ -e {m}/task-a ] && [ -e {m}/task-b ] && break; sleep 0.1; done; echo \"by $LOOPWRIGHT_TASK_ID\" > \"out-$LOOPWRIGHT_TASK_ID.txt\"; sleep 0.5; ls out-*.txt | grep -qv \"out-$LOOPWRIGHT_TASK_ID.txt\" && exit 1; exit 0\n"
    ));
    let (a, b) = (spawn(&ws, "task-a"), spawn(&ws, "task-b"));
    std::thread::sleep(std::time::Duration::from_millis(500));
    // While they run, the workspace itself is untouched.
    assert!(!ws.path().join("out-task-a.txt").exists() && !ws.path().join("out-task-b.txt").exists());
    let (ca, ra, ea) = wait(a);
    let (cb, rb, eb) = wait(b);
    assert_eq!((ca, cb), (0, 0), "{ea}\n{eb}");
    assert_eq!((&ra["status"], &rb["status"]), (&json!("success"), &json!("success")));
    assert_eq!(ws.read("out-task-a.txt"), "by task-a\n");
    assert_eq!(ws.read("out-task-b.txt"), "by task-b\n");
    // One fast-forward, one merge commit; worktrees removed, branches deleted.
    let (_, logs_a, _) = ws.run(&["logs", ra["run_id"].as_str().expect("id")]);
    let (_, logs_b, _) = ws.run(&["logs", rb["run_id"].as_str().expect("id")]);
    let hows: Vec<bool> = [&logs_a, &logs_b].iter().map(|l| l.contains("(fast_forward")).collect();
    assert!(hows.contains(&true) && hows.contains(&false), "{logs_a}\n{logs_b}");
    assert!(logs_a.contains("merged back") && logs_b.contains("merged back"));
    assert_eq!(git(&ws, &["worktree", "list"]).lines().count(), 1);
    assert_eq!(git(&ws, &["branch", "--list", "loopwright/*"]), "");
    let log = git(&ws, &["log", "--format=%s%n%b", "--all"]);
    assert!(log.contains("Loopwright-Task: task-a") && log.contains("Loopwright-Task: task-b"), "{log}");
    assert_eq!(git(&ws, &["status", "--porcelain"]), "");
}

#[test]
fn a_merge_conflict_waits_with_the_worktree_kept() {
    let ws = repo(
        "name: w\ndescription: d\nversion: 1\nstages:\n  - id: work\n    description: d\n    agent: shell\n    mode: agent\n    run: echo \"$LOOPWRIGHT_TASK_ID\" > shared.txt; sleep 2\n",
    );
    let child = spawn(&ws, "task-two");
    // While the run works in its worktree, someone changes the same line on main.
    std::thread::sleep(std::time::Duration::from_millis(700));
    ws.write("shared.txt", "edited by hand\n");
    git(&ws, &["commit", "--quiet", "-am", "by hand"]);
    let (code, result, stderr) = wait(child);
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(result["status"], "waiting");
    assert_eq!(result["waiting"], json!({"kind": "escalation", "stage": "work"}));
    let kept = ws.path().join(".loopwright/state/worktrees/task-two");
    assert_eq!(std::fs::read_to_string(kept.join("shared.txt")).expect("kept"), "task-two\n");
    assert_eq!(ws.read("shared.txt"), "edited by hand\n", "the aborted merge left the workspace alone");
    assert_eq!(git(&ws, &["status", "--porcelain"]), "");
    let run = result["run_id"].as_str().expect("id").to_owned();
    let (_, status, _) = ws.run(&["status", &run]);
    assert!(
        status.contains(
            "waiting for a human (merge-conflict): loopwright/task-two conflicts with the workspace in shared.txt"
        ),
        "{status}"
    );
    // Leave it unmerged.
    let (code, done, stderr) = ws.json(&["respond", &run, "skip", "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(done["status"], "success");
    assert!(stderr.contains("branch loopwright/task-two was left unmerged"), "{stderr}");
    assert_eq!(
        git(&ws, &["branch", "--list", "--format=%(refname:short)", "loopwright/task-two"]),
        "loopwright/task-two\n"
    );
    assert!(kept.join("shared.txt").exists(), "the worktree is kept for the human");
}

#[test]
fn a_worktree_plan_stage_leaves_the_main_branch_to_others() {
    // A plan-mode stage reads for a while; meanwhile the user commits in the main checkout and
    // another worktree run merges back into main.
    let meet = tempfile::tempdir().expect("tempdir");
    let m = meet.path().display();
    let ws = repo(&format!(
        "name: w\ndescription: d\nversion: 1\nstages:\n  - id: read\n    description: d\n    agent: shell\n    mode: plan\n    run: \"touch {m}/$LOOPWRIGHT_TASK_ID; for i in $(seq 100); do [ -e {m}/go ] && break; sleep 0.1; done; cat shared.txt\"\n  - id: write\n    description: d\n    agent: shell\n    mode: agent\n    run: echo $LOOPWRIGHT_TASK_ID > $LOOPWRIGHT_TASK_ID.txt\n"
    ));
    let reader = spawn(&ws, "reader");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !meet.path().join("reader").exists() {
        assert!(std::time::Instant::now() < deadline, "the plan stage never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A commit in the main checkout during the stage...
    ws.write("notes.txt", "the user's work\n");
    git(&ws, &["add", "notes.txt"]);
    git(&ws, &["-c", "user.name=u", "-c", "user.email=u@example.com", "commit", "-qm", "the user's commit"]);
    let users = git(&ws, &["rev-parse", "HEAD"]);
    // ...and another run that merges back meanwhile.
    std::fs::write(meet.path().join("go-other"), "").expect("marker");
    let other = spawn(&ws, "other");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !meet.path().join("other").exists() {
        assert!(std::time::Instant::now() < deadline, "the other run never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::fs::write(meet.path().join("go"), "").expect("marker");
    let (co, ro, eo) = wait(other);
    let (cr, rr, er) = wait(reader);
    assert_eq!((co, cr), (0, 0), "{eo}\n{er}\n{ro:#}\n{rr:#}");
    assert_eq!((&ro["status"], &rr["status"]), (&json!("success"), &json!("success")));
    // The user's commit stays on main, with both runs' work.
    let log = git(&ws, &["log", "--format=%H", "main"]);
    assert!(log.lines().any(|l| l == users.trim()), "the user's commit left main:\n{log}");
    assert_eq!(ws.read("notes.txt"), "the user's work\n");
    assert_eq!((ws.read("reader.txt"), ws.read("other.txt")), ("reader\n".to_owned(), "other\n".to_owned()));
    assert_eq!(git(&ws, &["status", "--porcelain"]), "");
    let (_, logs, _) = ws.run(&["logs", rr["run_id"].as_str().expect("id")]);
    assert!(!logs.contains("security_violation") && !logs.contains("violation"), "{logs}");
}

#[test]
fn twenty_concurrent_worktree_runs_with_plan_stages_all_succeed() {
    let ws = repo(
        "name: w\ndescription: d\nversion: 1\nstages:\n  - id: look\n    description: d\n    agent: shell\n    mode: plan\n    run: sleep 0.3; git log --oneline -1\n  - id: write\n    description: d\n    agent: shell\n    mode: agent\n    run: echo $LOOPWRIGHT_TASK_ID > $LOOPWRIGHT_TASK_ID.txt\n",
    );
    let children: Vec<_> = (0..20).map(|i| spawn(&ws, &format!("t{i}"))).collect();
    let mut failed = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let (code, result, stderr) = wait(child);
        if code != 0 {
            failed.push(format!("t{i}: exit {code} {}: {stderr}", result["status"]));
        }
    }
    assert_eq!(failed, Vec::<String>::new());
    let files = git(&ws, &["ls-files"]);
    for i in 0..20 {
        assert!(files.contains(&format!("t{i}.txt\n")), "{files}");
    }
    assert_eq!(git(&ws, &["worktree", "list"]).lines().count(), 1);
}

#[test]
fn a_worktree_plan_stage_may_still_not_move_its_own_branch_or_plant_a_hook() {
    let ws = repo(
        "name: w\ndescription: d\nversion: 1\nstages:\n  - id: sneak\n    description: d\n    agent: shell\n    mode: plan\n    run: \"git -c user.name=a -c user.email=a@example.com commit -q --allow-empty -m sneaky && printf '#!/bin/sh\\\\n' > $(git rev-parse --git-common-dir)/hooks/pre-commit\"\n",
    );
    let before = git(&ws, &["rev-parse", "main"]);
    let (code, result, err) = wait(spawn(&ws, "sneak"));
    assert_eq!(code, 1, "{err}\n{result:#}");
    let (_, logs, _) = ws.run(&["logs", result["run_id"].as_str().expect("id")]);
    assert!(logs.contains("security_violation"), "{logs}");
    assert!(logs.contains("hooks/pre-commit") && logs.contains("refs/heads/loopwright/"), "{logs}");
    assert!(!ws.path().join(".git/hooks/pre-commit").exists(), "the planted hook was removed");
    assert_eq!(git(&ws, &["rev-parse", "main"]), before);
    // The run's own branch was put back: no branch holds the sneaky commit.
    let branches = git(&ws, &["for-each-ref", "--format=%(refname)", "refs/heads/"]);
    for branch in branches.lines() {
        let subjects = git(&ws, &["log", "--format=%s", branch]);
        assert!(!subjects.contains("sneaky"), "{branch}: {subjects}");
    }
}
