//! What loopwright enforces rather than trusts: plan mode is read-only, secrets stay out of
//! the state files, budgets stop a run.

use serde_json::json;

use crate::support::{Ws, st, stages};

#[test]
fn a_plan_mode_stage_that_changes_files_is_restored_and_fails_without_retry() {
    let ws = Ws::empty();
    ws.write("src/app.txt", "original\n");
    ws.write("notes/keep.txt", "keep\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: review\n    description: Only read\n    agent: shell\n    mode: plan\n    retry: {max_attempts: 3, backoff: fixed, initial_delay_seconds: 1}\n    run: echo changed > src/app.txt; rm notes/keep.txt; echo new > created.txt; echo reviewed\n  - id: next\n    description: d\n    agent: shell\n    mode: plan\n    run: echo never\n",
    );
    let (code, result, stderr) = ws.json(&["run", "p"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stages(&result), vec![st("review", "failed", 1, None)]);
    assert_eq!(result["failed_stage"], "review");
    // Modified restored, deleted recreated, created removed.
    assert_eq!(ws.read("src/app.txt"), "original\n");
    assert_eq!(ws.read("notes/keep.txt"), "keep\n");
    assert!(!ws.path().join("created.txt").exists());
    let (_, status, _) = ws.run(&["status", "latest"]);
    assert!(
        status.contains("plan-mode stage changed files: created.txt (created), notes/keep.txt (deleted), src/app.txt (modified) (plan mode is read-only; the files were restored)"),
        "{status}"
    );
    let (_, logs, _) = ws.run(&["logs", "latest"]);
    assert!(logs.contains("review: attempt 1 failed after"), "{logs}");
    assert!(logs.contains("(security_violation): plan-mode stage changed files"), "{logs}");
    // A plan stage that only reads (and writes tool caches) passes.
    let ws = Ws::empty();
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: review\n    description: Only read\n    agent: shell\n    mode: plan\n    run: mkdir -p .pytest_cache && echo x > .pytest_cache/v; ls\n",
    );
    let (code, result, stderr) = ws.json(&["run", "p"]);
    assert_eq!((code, &result["status"]), (0, &json!("success")), "{stderr}");
}
