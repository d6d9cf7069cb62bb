//! Crash windows (issue: "trust under attack and under races"): kill -9 at the worst moments,
//! held deterministically by a `git` wrapper that does its work and then waits, and a stage
//! leader that clears its environment. After `resume`, nothing is lost, nothing is repeated,
//! and the commits are those of a clean run.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::{Ws, wait_for};

/// A folder with a `git` that runs the real one, then, the first time its arguments include
/// `$LW_PAUSE_ON`, touches `$LW_PAUSED` and sleeps (the moment a test kills loopwright).
fn git_wrapper() -> tempfile::TempDir {
    let real =
        String::from_utf8(std::process::Command::new("sh").args(["-c", "command -v git"]).output().expect("sh").stdout)
            .expect("utf8");
    let dir = tempfile::tempdir().expect("tempdir");
    let script = format!(
        "#!/bin/sh\n{} \"$@\"\ncode=$?\nfor a in \"$@\"; do\n  if [ -n \"$LW_PAUSE_ON\" ] && [ \"$a\" = \"$LW_PAUSE_ON\" ] && [ ! -f \"$LW_PAUSED\" ]; then touch \"$LW_PAUSED\"; sleep 60; fi\ndone\nexit $code\n",
        real.trim()
    );
    let path = dir.path().join("git");
    std::fs::write(&path, script).expect("write");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    dir
}

fn path_with(dir: &Path) -> String {
    format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default())
}

/// Runs `loopwright ARGS` in its own process group, with the wrapper first on PATH; when
/// `pause_on` is given, kills the whole group (loopwright and its git) once the wrapper
/// pauses. Returns the exit code and stderr.
fn run_until(ws: &Ws, wrapper: &Path, args: &[&str], pause_on: Option<&str>) -> (i32, String) {
    let paused: PathBuf = wrapper.join("paused");
    let _ = std::fs::remove_file(&paused);
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin!("loopwright"))
        .args(args)
        .current_dir(ws.path())
        .env("PATH", path_with(wrapper))
        .env("LW_PAUSE_ON", pause_on.unwrap_or(""))
        .env("LW_PAUSED", &paused)
        .env("USER", "tester")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawn");
    if pause_on.is_some() {
        wait_for(&paused);
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL)
            .expect("kill");
    }
    let out = child.wait_with_output().expect("wait");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn git_ws(pipeline: &str) -> Ws {
    let ws = Ws::empty();
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.write("calc.txt", "wrong\n");
    ws.write(".loopwright/pipelines/p.yml", pipeline);
    ws.init_git();
    ws
}

fn subjects(ws: &Ws) -> Vec<String> {
    ws.git(&["log", "--format=%s"]).lines().map(str::to_owned).collect()
}

/// The latest run and its task.
fn latest(ws: &Ws) -> (String, String) {
    let (_, result, _) = ws.json(&["status", "latest"]);
    (result["run_id"].as_str().expect("run").to_owned(), result["task_id"].as_str().expect("task").to_owned())
}

const CLOSED_LOOP: &str = "name: p\ndescription: d\nversion: 1\nstages:\n  - id: fix\n    description: d\n    agent: shell\n    mode: agent\n    skill: closed-loop-execution\n    run: echo right > calc.txt\n    checks:\n      - {name: right, type: test, command: grep -q right calc.txt}\n  - id: after\n    description: d\n    agent: shell\n    mode: agent\n    run: echo done > after.txt\n";

#[test]
fn a_kill_inside_the_closed_loops_commit_loses_and_repeats_nothing() {
    let wrapper = git_wrapper();
    // A clean run's commits, for comparison.
    let clean = git_ws(CLOSED_LOOP);
    let (code, stderr) = run_until(&clean, wrapper.path(), &["run", "p"], None);
    assert_eq!(code, 0, "{stderr}");
    let clean_task = latest(&clean).1;
    let clean_subjects: Vec<String> = subjects(&clean).iter().map(|s| s.replace(&clean_task, "TASK")).collect();

    let ws = git_ws(CLOSED_LOOP);
    let (code, _) = run_until(&ws, wrapper.path(), &["run", "p"], Some("commit"));
    assert_eq!(code, -1, "killed");
    // The commit was made; its success was not journaled yet.
    assert_eq!(subjects(&ws).len(), 2);
    let (run, task) = latest(&ws);
    let (code, stderr) = run_until(&ws, wrapper.path(), &["resume", &run], None);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(subjects(&ws).iter().map(|s| s.replace(&task, "TASK")).collect::<Vec<_>>(), clean_subjects);
    assert_eq!(ws.git(&["status", "--porcelain"]), "", "everything committed");
    let (_, logs, _) = ws.run(&["logs", &run]);
    assert_eq!(logs.matches("fix: committed").count(), 1, "{logs}");
    assert_eq!(ws.read("calc.txt"), "right\n");
}

#[test]
fn a_kill_inside_an_agent_stages_commit_is_redone_without_a_second_commit() {
    let wrapper = git_wrapper();
    let pipeline = "name: p\ndescription: d\nversion: 1\nstages:\n  - id: work\n    description: d\n    agent: shell\n    mode: agent\n    run: echo right > calc.txt\n  - id: after\n    description: d\n    agent: shell\n    mode: agent\n    run: echo done > after.txt\n";
    let ws = git_ws(pipeline);
    let (code, _) = run_until(&ws, wrapper.path(), &["run", "p"], Some("commit"));
    assert_eq!(code, -1);
    let (run, task) = latest(&ws);
    let (code, stderr) = run_until(&ws, wrapper.path(), &["resume", &run], None);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        subjects(&ws),
        vec![
            format!("loopwright: stage after of {task}"),
            format!("loopwright: stage work of {task}"),
            "initial".to_owned()
        ]
    );
    let (_, logs, _) = ws.run(&["logs", &run]);
    assert_eq!(logs.matches("work: committed").count(), 1, "{logs}");
}

#[test]
fn a_kill_inside_a_rollbacks_revert_commit_makes_no_second_revert() {
    let wrapper = git_wrapper();
    let pipeline = "name: p\ndescription: d\nversion: 1\nstages:\n  - id: work\n    description: d\n    agent: shell\n    mode: agent\n    run: echo changed > calc.txt\n    rollback: {strategy: git_revert}\n  - id: check\n    description: d\n    agent: shell\n    mode: plan\n    run: exit 1\n";
    let ws = git_ws(pipeline);
    // The revert's commit is the one made with --allow-empty.
    let (code, _) = run_until(&ws, wrapper.path(), &["run", "p"], Some("--allow-empty"));
    assert_eq!(code, -1);
    let (run, _) = latest(&ws);
    let (code, stderr) = run_until(&ws, wrapper.path(), &["resume", &run], None);
    assert_eq!(code, 1, "the run failed and rolled back: {stderr}");
    let reverts = subjects(&ws).iter().filter(|s| s.starts_with("loopwright: revert stage work")).count();
    assert_eq!(reverts, 1, "{:?}", subjects(&ws));
    assert_eq!(ws.read("calc.txt"), "wrong\n");
    let (_, result, _) = ws.json(&["status", &run]);
    assert_eq!(result["rollback_performed"], true);
}

#[test]
fn a_stale_index_lock_is_removed_with_a_note_and_the_commit_made() {
    let pipeline = "name: p\ndescription: d\nversion: 1\nstages:\n  - id: work\n    description: d\n    agent: shell\n    mode: agent\n    run: echo right > calc.txt\n";
    let ws = git_ws(pipeline);
    ws.write(".git/index.lock", "");
    let (code, result, stderr) = ws.json(&["run", "p"]);
    assert_eq!(code, 0, "{stderr}");
    let run = result["run_id"].as_str().expect("run");
    let (_, logs, _) = ws.run(&["logs", run]);
    let lock = ws
        .path()
        .join(".git/index.lock")
        .canonicalize()
        .unwrap_or_else(|_| ws.path().canonicalize().expect("ws").join(".git/index.lock"));
    assert!(
        logs.contains(&format!("work: removed {}, left by a git process that no longer runs", lock.display())),
        "{logs}"
    );
    assert_eq!(ws.git(&["status", "--porcelain"]), "");
}

#[test]
fn a_stage_leader_that_clears_its_environment_is_ended_on_resume() {
    let out = tempfile::tempdir().expect("tempdir");
    let (pidfile, mark) = (out.path().join("pid"), out.path().join("mark"));
    let ws = Ws::empty();
    ws.write(
        ".loopwright/pipelines/p.yml",
        &format!(
            "name: p\ndescription: d\nversion: 1\nstages:\n  - id: s\n    description: d\n    agent: shell\n    mode: plan\n    run: if [ -f {m} ]; then echo done; else touch {m}; exec env -i sh -c 'echo $$ > {p}; exec sleep 60'; fi\n",
            m = mark.display(),
            p = pidfile.display()
        ),
    );
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin!("loopwright"))
        .args(["run", "p"])
        .current_dir(ws.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    wait_for(&pidfile);
    std::thread::sleep(Duration::from_millis(50));
    let pid: i32 = std::fs::read_to_string(&pidfile).expect("pid").trim().parse().expect("number");
    child.kill().expect("kill -9");
    child.wait().expect("wait");
    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
    };
    assert!(alive(pid), "the orphan outlived loopwright");
    let (run, _) = latest(&ws);
    let (code, _, stderr) = ws.run(&["resume", &run]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!alive(pid), "the orphan with a cleared environment was ended before the stage ran again");
}
