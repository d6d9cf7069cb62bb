//! Rollback on real workspaces: agent-mode commits with trailers and git_revert on a real git
//! repository, file_restore byte for byte, memory_cleanup, manual, and reject --rollback.

use pretty_assertions::assert_eq;

use crate::support::{Ws, st, stages};

fn git(ws: &Ws, args: &[&str]) -> String {
    ws.git(args)
}

fn git_ws() -> Ws {
    let ws = Ws::empty();
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.write("app.txt", "version 1\n");
    ws.init_git();
    ws
}

const REVERTED: &str = r#"name: revert
description: implement, then fail verification
version: 1
stages:
  - id: implement
    agent: shell
    mode: agent
    description: change the app
    run: "echo 'version 2' > app.txt; echo new > added.txt"
    rollback:
      strategy: git_revert
      description: revert the implementation commits
  - id: verify
    agent: shell
    mode: agent
    description: fails
    run: "echo 'tests failed' >&2; exit 1"
"#;

#[test]
fn agent_mode_changes_are_committed_with_trailers_and_git_revert_undoes_them() {
    let ws = git_ws();
    ws.write(".loopwright/pipelines/revert.yml", REVERTED);
    let (code, result, stderr) = ws.json(&["run", "revert", "--task-id", "task-r1"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(result["rollback_performed"], true);
    assert_eq!(result["failed_stage"], "verify");
    assert_eq!(stages(&result), vec![st("implement", "rolled_back", 1, None), st("verify", "failed", 1, None)]);

    // The stage's commit carries the trailers, and a revert commit follows it.
    let log = git(
        &ws,
        &[
            "log",
            "--format=%s|%(trailers:key=Loopwright-Task,valueonly,separator=)|%(trailers:key=Loopwright-Stage,valueonly,separator=)",
        ],
    );
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        vec![
            "loopwright: revert stage implement of task-r1 (1 commit)|task-r1|",
            "loopwright: stage implement of task-r1|task-r1|implement",
            "initial||",
        ]
    );
    assert_eq!(ws.read("app.txt"), "version 1\n");
    assert!(!ws.path().join("added.txt").exists());
    assert_eq!(git(&ws, &["status", "--porcelain", "--", "app.txt", "added.txt"]), "");
    let (_, status, _) = ws.run(&["status", "latest"]);
    assert!(
        status
            .contains("rollback (after verify failed): success\n  implement: git_revert success — reverted 1 commit\n"),
        "{status}"
    );
}

const RESTORED: &str = r#"name: restore
description: edit files, then fail
version: 1
stages:
  - id: edit
    agent: shell
    mode: agent
    description: modify, delete and create files
    run: "printf 'changed' > keep.bin; rm gone.txt; mkdir -p new/dir; echo x > new/dir/created.txt; echo 'version 9' > app.txt"
    rollback:
      strategy: file_restore
  - id: notes
    agent: shell
    mode: plan
    description: write notes
    run: "echo noted"
    outputs: [notes]
    rollback:
      strategy: memory_cleanup
  - id: announce
    agent: shell
    mode: plan
    description: tell people
    run: "echo announced"
    rollback:
      strategy: manual
      description: "Post a correction in #releases"
  - id: verify
    agent: shell
    mode: agent
    description: fails
    run: "exit 3"
"#;

#[test]
fn file_restore_memory_cleanup_and_manual_roll_back_in_reverse_order() {
    let ws = git_ws();
    ws.write(".loopwright/pipelines/restore.yml", RESTORED);
    let original: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    std::fs::write(ws.path().join("keep.bin"), &original).expect("write");
    ws.write("gone.txt", "do not lose me\n");
    let (code, result, stderr) = ws.json(&["run", "restore", "--task-id", "task-f1"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(result["rollback_performed"], true);
    assert_eq!(
        stages(&result),
        vec![
            st("edit", "rolled_back", 1, None),
            st("notes", "rolled_back", 1, None),
            st("announce", "success", 1, None),
            st("verify", "failed", 1, None),
        ]
    );
    // Byte for byte: the modified file restored, the deleted one recreated, the created ones gone.
    assert_eq!(std::fs::read(ws.path().join("keep.bin")).expect("read"), original);
    assert_eq!(ws.read("gone.txt"), "do not lose me\n");
    assert!(!ws.path().join("new").exists(), "created folders are removed");
    // A tracked file with no change when the stage began comes back from git, not from a copy.
    assert_eq!(ws.read("app.txt"), "version 1\n");
    // memory_cleanup: the artifact is gone from the run folder and from the store.
    let run_id = result["run_id"].as_str().expect("id");
    assert!(!ws.path().join(format!(".loopwright/state/runs/{run_id}/artifact-notes.md")).exists());
    assert_eq!(result["artifacts"].get("notes"), None);
    assert!(stderr.contains("⟲ rolling back announce, notes, edit"), "{stderr}");
    assert!(
        stderr.contains("  announce: manual rollback steps (pending):\n    Post a correction in #releases"),
        "{stderr}"
    );
    let (_, log, _) = ws.run(&["logs", run_id]);
    assert!(
        log.contains("edit: rollback \"file_restore\" success: restored 2 file(s), recreated 1, removed 1"),
        "{log}"
    );
    assert!(log.contains("rollback finished: partial"), "{log}");
    assert!(!log.contains("could not be committed"), "{log}");
    // A later run of the task cannot reuse the cleaned-up output.
    let (_, rerun, rerun_err) = ws.json(&["run", "restore", "--task-id", "task-f1", "--start-from", "verify"]);
    assert_eq!(rerun["status"], "failed");
    assert!(rerun_err.contains("no earlier outputs of notes for task task-f1"), "{rerun_err}");
}

#[test]
fn reject_with_rollback_undoes_completed_stages() {
    let ws = git_ws();
    ws.write(
        ".loopwright/pipelines/gate.yml",
        r#"name: gate
description: implement, then a gated deploy
version: 1
stages:
  - id: implement
    agent: shell
    mode: agent
    description: change the app
    run: "echo 'version 2' > app.txt"
    rollback:
      strategy: git_revert
  - id: deploy
    agent: shell
    mode: agent
    description: deploy
    run: "echo deployed"
    requires_approval: true
"#,
    );
    let (code, waiting, _) = ws.json(&["run", "gate", "--quiet"]);
    assert_eq!(code, 3);
    assert_eq!(ws.read("app.txt"), "version 2\n");
    let (code, result, _) = ws.json(&["reject", waiting["run_id"].as_str().expect("id"), "--rollback", "--quiet"]);
    assert_eq!(code, 4);
    assert_eq!(result["status"], "rejected");
    assert_eq!(result["rollback_performed"], true);
    assert_eq!(stages(&result), vec![st("implement", "rolled_back", 1, None), st("deploy", "cancelled", 0, None)]);
    assert_eq!(ws.read("app.txt"), "version 1\n");
}

fn on_terminal(ws: &Ws, args: &str, input: &str) -> Option<(i32, String)> {
    ws.on_terminal(args, input)
}

#[test]
fn on_a_terminal_the_gate_asks_then_abort_offers_rollback_and_manual_steps_wait_for_confirmation() {
    let ws = git_ws();
    ws.write(
        ".loopwright/pipelines/gate.yml",
        r#"name: gate
description: implement, announce, then a gated deploy
version: 1
stages:
  - id: implement
    agent: shell
    mode: agent
    description: change the app
    run: "echo 'version 2' > app.txt"
    rollback:
      strategy: git_revert
  - id: announce
    agent: shell
    mode: plan
    description: announce
    run: "echo announced"
    rollback:
      strategy: manual
      description: "Delete the announcement"
  - id: deploy
    agent: shell
    mode: agent
    description: deploy
    run: "echo deployed"
    requires_approval: true
"#,
    );
    let Some((code, screen)) = on_terminal(&ws, "run gate", "maybe\nabort\ny\ny\n") else { return };
    assert_eq!(code, 4, "{screen}");
    assert!(
        screen.contains(
            "## Approval Required: Stage 'deploy'\n**Description:** deploy\n**Agent:** shell\n**Mode:** agent\n"
        ),
        "{screen}"
    );
    // `maybe` is not understood: the question is asked again.
    assert_eq!(screen.matches("Type `proceed` to continue or `abort` to cancel pipeline.").count(), 2, "{screen}");
    assert!(
        screen.contains("Roll back the completed stage(s) implement, announce as the pipeline says? [y/N] "),
        "{screen}"
    );
    assert!(screen.contains("deploy rejected by tester: run rejected"), "{screen}");
    assert!(screen.contains("Manual rollback of stage `announce`:\n    Delete the announcement\n"), "{screen}");
    assert!(screen.contains("rollback: success\n  announce: manual success — Delete the announcement (confirmed by tester)\n  implement: git_revert success — reverted 1 commit\n"), "{screen}");
    assert_eq!(ws.read("app.txt"), "version 1\n");
}
