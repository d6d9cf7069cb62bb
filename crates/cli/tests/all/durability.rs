//! Crash safety: kill -9 and SIGINT in the middle of a stage, then `resume`; `cancel` from
//! another process. Counter files prove what ran how often.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::{Ws, processes_with, st, stages, wait_for};

/// Counters and the `slow` switch live outside the workspace (in `out`), so undoing a stage's
/// partial changes does not undo them; `partial.txt` in the workspace is what stage two changes
/// before it can be interrupted.
fn pipeline(token: &str, out: &Path) -> String {
    let o = out.display();
    format!(
        r#"name: slow
description: three stages, the second slow while the slow switch exists
version: 1
stages:
  - id: one
    agent: shell
    mode: agent
    description: first
    run: "echo x >> {o}/one.starts; echo x >> {o}/one.dones"
  - id: two
    agent: shell
    mode: agent
    description: second
    run: "echo x >> {o}/two.starts; echo half-done >> partial.txt; touch {o}/two.running; if [ -f {o}/two.slow ]; then sleep 60; fi; echo x >> {o}/two.dones # {token}"
  - id: three
    agent: shell
    mode: agent
    description: third
    run: "echo x >> {o}/three.starts; echo x >> {o}/three.dones"
"#
    )
}

struct Slow {
    ws: Ws,
    out: tempfile::TempDir,
    token: String,
}

impl Slow {
    fn file(&self, name: &str) -> std::path::PathBuf {
        self.out.path().join(name)
    }
}

fn slow_ws() -> Slow {
    let ws = Ws::empty();
    let out = tempfile::tempdir().expect("tempdir");
    let token = format!(
        "lw-test-{}-{}",
        std::process::id(),
        ws.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    );
    ws.write(".loopwright/pipelines/slow.yml", &pipeline(&token, out.path()));
    std::fs::write(out.path().join("two.slow"), "").expect("write");
    Slow { ws, out, token }
}

fn spawn_run(ws: &Ws) -> Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin!("loopwright"))
        .args(["run", "slow", "--quiet"])
        .current_dir(ws.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn loopwright")
}

fn counts(slow: &Slow) -> Vec<usize> {
    ["one.starts", "one.dones", "two.starts", "two.dones", "three.starts", "three.dones"]
        .iter()
        .map(|f| std::fs::read_to_string(slow.file(f)).map(|t| t.lines().count()).unwrap_or(0))
        .collect()
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill").args([sig, &pid.to_string()]).status().expect("kill").success();
    assert!(ok, "kill {sig} {pid}");
}

fn wait_exit(child: &mut Child) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code().unwrap_or(-1);
        }
        assert!(Instant::now() < deadline, "loopwright did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn all_success() -> Vec<(String, String, u64, Option<String>)> {
    vec![st("one", "success", 1, None), st("two", "success", 1, None), st("three", "success", 1, None)]
}

#[test]
fn kill_9_in_the_middle_of_a_stage_then_resume_finishes_without_repeating_work() {
    let slow = slow_ws();
    let (ws, token) = (&slow.ws, slow.token.as_str());
    let mut child = spawn_run(ws);
    wait_for(&slow.file("two.running"));
    // The stage's shell, now in its `sleep` (a short-lived fork for `touch` may still be seen
    // right after the file appears, so look again once it has settled).
    std::thread::sleep(Duration::from_millis(300));
    let orphans = processes_with(token);
    assert!(!orphans.is_empty(), "the stage runs");
    signal(child.id(), "-KILL");
    wait_exit(&mut child);
    // loopwright is gone; its stage lives on in its own process group until the run resumes.
    let left = processes_with(token);
    assert!(!left.is_empty() && left.iter().all(|p| orphans.contains(p)), "{left:?} of {orphans:?}");
    // Its owner is gone: the run shows interrupted (the journal still says running).
    let (_, status, _) = ws.json(&["status", "latest"]);
    assert_eq!(status["status"], "interrupted");

    std::fs::remove_file(slow.file("two.slow")).expect("rm");
    let (code, result, stderr) = ws.json(&["resume", "latest", "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["status"], "success");
    assert_eq!(stages(&result), all_success());
    assert_eq!(counts(&slow), vec![1, 1, 2, 1, 1, 1], "one ran once; two restarted and finished once; three once");
    assert_eq!(ws.read("partial.txt"), "half-done\n", "the interrupted attempt's change was undone before the rerun");
    assert_eq!(processes_with(token), Vec::<u32>::new(), "the interrupted stage's processes were ended");
    let (_, log, _) = ws.run(&["logs", "latest"]);
    assert!(log.contains("run resumed by process"), "{log}");
}

#[test]
fn sigint_ends_the_stage_records_interrupted_and_resume_continues() {
    let slow = slow_ws();
    let (ws, token) = (&slow.ws, slow.token.as_str());
    let mut child = spawn_run(ws);
    wait_for(&slow.file("two.running"));
    signal(child.id(), "-INT");
    assert_eq!(wait_exit(&mut child), 130);
    assert_eq!(processes_with(token), Vec::<u32>::new(), "the stage's process group was ended");
    let (code, status, _) = ws.json(&["status", "latest"]);
    assert_eq!((code, status["status"].clone()), (130, Value::from("interrupted")));

    std::fs::remove_file(slow.file("two.slow")).expect("rm");
    let (code, result, _) = ws.json(&["resume", "latest", "--quiet"]);
    assert_eq!(code, 0);
    assert_eq!(stages(&result), all_success());
    assert_eq!(counts(&slow), vec![1, 1, 2, 1, 1, 1]);
    assert_eq!(ws.read("partial.txt"), "half-done\n");
    let (_, log, _) = ws.run(&["logs", "latest"]);
    assert!(log.contains("run interrupted by SIGINT during stage two"), "{log}");
    assert!(log.contains("two: attempt 1: partial changes undone (0 restored, 0 recreated, 1 removed)"), "{log}");
}

#[test]
fn cancel_from_another_process_stops_a_running_run() {
    let slow = slow_ws();
    let (ws, token) = (&slow.ws, slow.token.as_str());
    let mut child = spawn_run(ws);
    wait_for(&slow.file("two.running"));
    let (code, _, stderr) = ws.run(&["resume", "latest"]);
    assert_eq!(code, 2, "a live run is not resumed twice");
    assert!(stderr.contains("is being driven by process"), "{stderr}");

    let (code, result, _) = ws.json(&["cancel", "latest", "--by", "alice"]);
    assert_eq!(code, 4);
    assert_eq!(result["status"], "cancelled");
    assert_eq!(stages(&result), vec![st("one", "success", 1, None), st("two", "cancelled", 1, None)]);
    assert_eq!(wait_exit(&mut child), 4);
    assert_eq!(processes_with(token), Vec::<u32>::new());
    assert_eq!(counts(&slow), vec![1, 1, 1, 0, 0, 0]);
    let (code, _, stderr) = ws.run(&["cancel", "latest"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("already ended (cancelled)"), "{stderr}");
}

#[test]
fn cancel_a_waiting_run() {
    let ws = Ws::seed();
    let (code, _, _) = ws.json(&["run", "full-feature", "--task", "x", "--quiet"]);
    assert_eq!(code, 3);
    let (code, result, _) = ws.json(&["cancel", "latest"]);
    assert_eq!(code, 4);
    assert_eq!(result["status"], "cancelled");
    assert_eq!(stages(&result).last(), Some(&st("implement", "cancelled", 0, None)));
}

#[test]
fn kill_9_during_a_closed_loop_check_then_resume_checks_again_without_regenerating() {
    let ws = Ws::empty();
    let out = tempfile::tempdir().expect("tempdir");
    let o = out.path().display();
    let token = format!(
        "lw-loop-{}-{}",
        std::process::id(),
        ws.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    );
    ws.write(
        ".loopwright/agents/dev.md",
        &format!("---\nrunner: command\ncommand: [\"sh\", \"-c\", \"cat > /dev/null; echo x >> {o}/agent.runs; echo done\"]\n---\n"),
    );
    ws.write(
        ".loopwright/pipelines/slow.yml",
        &format!(
            "name: slow\ndescription: d\nversion: 1\nstages:\n  - id: implement\n    description: d\n    agent: dev\n    mode: agent\n    skill: closed-loop-execution\n    checks:\n      - name: slow_check\n        type: test\n        command: \"echo x >> {o}/check.runs; touch {o}/check.running; if [ -f {o}/check.slow ]; then sleep 60; fi # {token}\"\n"
        ),
    );
    std::fs::write(out.path().join("check.slow"), "").expect("write");
    let mut child = spawn_run(&ws);
    wait_for(&out.path().join("check.running"));
    std::thread::sleep(Duration::from_millis(300));
    let orphans = processes_with(&token);
    assert!(!orphans.is_empty(), "the check runs");
    signal(child.id(), "-KILL");
    wait_exit(&mut child);
    assert!(!processes_with(&token).is_empty(), "the check outlives loopwright until the run resumes");
    // The orphan sleeps on; resume ends it and runs the check again, fast this time.
    std::fs::remove_file(out.path().join("check.slow")).expect("rm");
    let (code, result, stderr) = ws.json(&["resume", "latest", "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["status"], "success");
    let lines = |f: &str| std::fs::read_to_string(out.path().join(f)).map(|t| t.lines().count()).unwrap_or(0);
    assert_eq!((lines("agent.runs"), lines("check.runs")), (1, 2), "GENERATE is not repeated; EVALUATE is");
    assert_eq!(processes_with(&token), Vec::<u32>::new());
}
