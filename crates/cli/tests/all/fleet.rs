//! Workers on PostgreSQL through the binary (SPEC §13): runs submitted from a checkout are run
//! by `loopwright worker` processes in clones of a bare repository on disk, each stage's commit
//! pushed to `loopwright/RUN`; a worker killed (`kill -9`) or frozen (`SIGSTOP`) past its lease
//! is taken over by another, which continues from the journal — no finished stage runs again,
//! the stage in flight runs again from its start — and the old holder's late writes are
//! refused. Counter files outside the workspaces record every start of every stage. Needs the
//! throwaway server of `scripts/with-postgres.sh` (skipped without one, unless
//! `LOOPWRIGHT_REQUIRE_PG` is set).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::postgres::fresh_database;
use crate::support::Ws;

/// A PostgreSQL database, a bare repository as the remote, a checkout of it to submit from,
/// and a folder for counters and the workers' caches.
struct Fleet {
    url: String,
    dir: tempfile::TempDir,
    checkout: Ws,
}

impl Fleet {
    fn new(name: &str, pipeline: &str) -> Option<Self> {
        Self::with_files(name, pipeline, &[])
    }

    /// [`Fleet::new`] with more files in the repository.
    fn with_files(name: &str, pipeline: &str, files: &[(&str, &str)]) -> Option<Self> {
        let url = fresh_database(name)?;
        let dir = tempfile::tempdir().expect("tempdir");
        let remote = dir.path().join("remote.git");
        git(dir.path(), &["init", "--quiet", "--bare", "-b", "main", &remote.display().to_string()]);
        std::fs::create_dir_all(dir.path().join("counters")).expect("counters");
        let checkout = Ws::empty();
        let text = pipeline.replace("COUNTERS", &dir.path().join("counters").display().to_string());
        checkout.write(".loopwright/pipelines/p.yml", &text);
        checkout.write(".loopwright/.gitignore", "state/\n");
        checkout.write("README", "the project\n");
        for (path, text) in files {
            checkout.write(path, text);
        }
        checkout.init_git();
        checkout.git(&["remote", "add", "origin", &remote.display().to_string()]);
        checkout.git(&["push", "--quiet", "origin", "main"]);
        Some(Self { url, dir, checkout })
    }

    fn remote(&self) -> PathBuf {
        self.dir.path().join("remote.git")
    }

    /// Submits a run of `p`; its id.
    fn submit(&self, task: &str) -> String {
        let (code, out, err) = self.checkout.json(&["run", "p", "--task", task, "--submit", "--store", &self.url]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out["status"], "queued", "{out}");
        out["run_id"].as_str().expect("run id").to_owned()
    }

    /// Starts worker number `n` (its own cache) with a lease of `lease` seconds.
    fn worker(&self, n: usize, lease: u64) -> std::process::Child {
        self.worker_env(n, lease, &[])
    }

    /// [`Fleet::worker`] with more environment variables (its stages see them).
    fn worker_env(&self, n: usize, lease: u64, env: &[(&str, &str)]) -> std::process::Child {
        self.worker_with(n, &self.url, &["--lease", &lease.to_string()], env)
    }

    /// Worker number `n` on the store at `url` with more arguments and environment variables.
    fn worker_with(&self, n: usize, url: &str, args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
        let log = std::fs::File::create(self.dir.path().join(format!("worker-{n}.log"))).expect("log");
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin!("loopwright"));
        cmd.args(["worker", "--store", url, "--repo"])
            .arg(self.remote())
            .args(args)
            .arg("--cache")
            .arg(self.dir.path().join(format!("cache-{n}")))
            .env("GIT_AUTHOR_NAME", "worker")
            .env("GIT_AUTHOR_EMAIL", "worker@example.com")
            .env("GIT_COMMITTER_NAME", "worker")
            .env("GIT_COMMITTER_EMAIL", "worker@example.com")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log);
        cmd.spawn().expect("worker")
    }

    fn log(&self, n: usize) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("worker-{n}.log"))).unwrap_or_default()
    }

    fn counter(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("counters").join(name))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `status RUN --json` (its exit code says the run's status, as `run`'s would).
    fn status(&self, run: &str) -> Value {
        self.checkout.json(&["status", run, "--store", &self.url]).1
    }

    /// The statuses of `runs`, from one read of the runs list.
    fn statuses(&self, runs: &[String]) -> Vec<String> {
        let limit = (runs.len() + 50).to_string();
        let (_, list, _) = self.checkout.json(&["status", "--limit", &limit, "--store", &self.url]);
        let by_id: std::collections::HashMap<&str, &str> = list
            .as_array()
            .map(|l| l.iter().filter_map(|r| Some((r["run_id"].as_str()?, r["status"].as_str()?))).collect())
            .unwrap_or_default();
        runs.iter().map(|r| by_id.get(r.as_str()).copied().unwrap_or_default().to_owned()).collect()
    }

    /// Waits (up to `secs`) until every run has ended; their statuses.
    fn wait_ended(&self, runs: &[String], secs: u64) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let statuses = self.statuses(runs);
            if statuses.iter().all(|s| ["success", "failed", "cancelled"].contains(&s.as_str())) {
                return statuses;
            }
            assert!(Instant::now() < deadline, "runs not ended after {secs} s: {statuses:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The journal of `run`: (kind, stage) per event.
    fn kinds(&self, run: &str) -> Vec<(String, String)> {
        let mut cmd = self.checkout.cmd();
        let out = cmd.args(["logs", run, "--json", "--store", &self.url]).output().expect("logs");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).expect("json");
                let e = &v["event"];
                (e["type"].as_str().unwrap_or_default().to_owned(), e["stage"].as_str().unwrap_or_default().to_owned())
            })
            .collect()
    }

    /// The subjects of the commits on the run's branch, newest first, and the files there.
    fn branch(&self, run: &str) -> (Vec<String>, Vec<String>) {
        let branch = format!("loopwright/{run}");
        let subjects = git(&self.remote(), &["log", "--format=%s", &branch]);
        let files = git(&self.remote(), &["ls-tree", "-r", "--name-only", &branch]);
        (subjects.lines().map(str::to_owned).collect(), files.lines().map(str::to_owned).collect())
    }

    fn file(&self, run: &str, path: &str) -> String {
        git(&self.remote(), &["show", &format!("loopwright/{run}:{path}")])
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git").args(args).current_dir(dir).output().expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn signal(child: &std::process::Child, signal: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    nix::sys::signal::kill(pid, signal).expect("signal");
}

/// A worker ended (SIGKILL) when the test leaves it, by a failed assertion too: a worker left
/// behind would go on using the machine after its store is gone.
struct Reaped(Option<std::process::Child>);

impl Reaped {
    /// SIGTERM, then its exit code once it has stopped.
    fn stop(mut self) -> Option<i32> {
        let child = self.0.take().expect("a worker");
        signal(&child, nix::sys::signal::Signal::SIGTERM);
        child.wait_with_output().expect("worker").status.code()
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits (up to 30 s) until `file` has `lines` lines.
fn wait_lines(fleet: &Fleet, file: &str, lines: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while fleet.counter(file).len() < lines {
        assert!(Instant::now() < deadline, "{file} never reached {lines} line(s): {:?}", fleet.counter(file));
        std::thread::sleep(Duration::from_millis(20));
    }
}

const TWO_STAGES: &str = r#"name: p
description: d
version: 1
stages:
  - id: a
    description: d
    agent: shell
    mode: agent
    run: "echo $LOOPWRIGHT_RUN_ID >> COUNTERS/a; echo one > a.txt"
  - id: b
    description: d
    agent: shell
    mode: agent
    run: "echo $LOOPWRIGHT_RUN_ID >> COUNTERS/b; sleep ${B_SLEEP:-0}; echo two > b.txt; echo $LOOPWRIGHT_RUN_ID >> COUNTERS/b.end"
"#;

#[test]
fn submitted_runs_are_run_by_a_worker_in_order_and_each_stage_commit_is_on_the_runs_branch() {
    let Some(fleet) = Fleet::new("submit", TWO_STAGES) else { return };
    let runs: Vec<String> = ["first", "second", "third"].iter().map(|t| fleet.submit(t)).collect();
    // Queued until a worker comes; the submitter's checkout is left as it was.
    assert_eq!(fleet.status(&runs[0])["status"], "queued");
    let followed = crate::support::spawn(&fleet.checkout, &["logs", &runs[0], "--follow", "--store", &fleet.url]);
    let worker = fleet.worker(1, 5);
    assert_eq!(fleet.wait_ended(&runs, 60), ["success", "success", "success"]);
    // Followed from the checkout (any machine naming the store), to the end.
    let (code, followed, err) = crate::support::finish(followed);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> =
        followed.lines().map(|l| l.split_once("  ").map_or(l, |(_, rest)| rest.trim_start())).collect();
    assert!(lines.iter().any(|l| l.contains("run taken by worker")), "{followed}");
    assert!(followed.trim_end().ends_with("run success"), "{followed}");
    // One worker with one slot: in the order they were submitted.
    assert_eq!(fleet.counter("a"), runs);
    assert_eq!(fleet.counter("b"), runs);
    for run in &runs {
        let (subjects, files) = fleet.branch(run);
        let task = fleet.status(run)["task_id"].as_str().expect("task").to_owned();
        assert_eq!(
            subjects,
            [format!("loopwright: stage b of {task}"), format!("loopwright: stage a of {task}"), "initial".to_owned()],
            "run {run}"
        );
        assert_eq!(
            files,
            [
                ".loopwright/.gitignore",
                ".loopwright/config.toml",
                ".loopwright/pipelines/p.yml",
                "README",
                "a.txt",
                "b.txt"
            ]
        );
        assert_eq!((fleet.file(run, "a.txt"), fleet.file(run, "b.txt")), ("one\n".to_owned(), "two\n".to_owned()));
        let kinds = fleet.kinds(run);
        assert!(kinds.iter().any(|(k, _)| k == "run_resumed"), "{kinds:?}");
    }
    assert!(!fleet.checkout.path().join("a.txt").exists(), "the submitter's checkout is not worked in");
    assert_eq!(git(fleet.checkout.path(), &["log", "--format=%s"]).trim(), "initial");
    // SIGTERM: the worker stops, its leases given back, and says so.
    signal(&worker, nix::sys::signal::Signal::SIGTERM);
    let status = worker.wait_with_output().expect("worker").status;
    assert_eq!(status.code(), Some(0), "{}", fleet.log(1));
    let log = fleet.log(1);
    assert!(log.contains(&format!("claimed run {} (lease epoch 1)", runs[0])), "{log}");
    assert!(log.contains("stopping; the runs driven here are interrupted and given back"), "{log}");
}

#[test]
fn a_worker_killed_mid_stage_is_taken_over_after_its_lease_and_no_finished_stage_runs_again() {
    let Some(fleet) = Fleet::new("killed", TWO_STAGES) else { return };
    let run = fleet.submit("killed");
    let slow = [("B_SLEEP", "30")];
    let mut first = fleet.worker_env(1, 2, &slow);
    // Stage a finished (journaled, pushed); stage b in flight.
    wait_lines(&fleet, "b", 1);
    first.kill().expect("kill -9");
    first.wait().expect("reaped");
    let killed_at = Instant::now();
    let second = fleet.worker_env(2, 2, &slow);
    // The second worker takes the run only once the lease ran out, then runs b again from its
    // start — and not a.
    wait_lines(&fleet, "b", 2);
    assert!(killed_at.elapsed() >= Duration::from_millis(900), "taken over before the lease could expire");
    assert_eq!(fleet.counter("a"), std::slice::from_ref(&run));
    // SIGTERM: the second worker interrupts b, ends its processes and gives the run back.
    signal(&second, nix::sys::signal::Signal::SIGTERM);
    let out = second.wait_with_output().expect("second");
    assert_eq!(out.status.code(), Some(0), "{}", fleet.log(2));
    assert_eq!(fleet.status(&run)["status"], "interrupted");
    // A third worker claims it at once and finishes it (its b does not sleep).
    let third = fleet.worker(3, 2);
    assert_eq!(fleet.wait_ended(std::slice::from_ref(&run), 60), ["success"]);
    signal(&third, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(third.wait_with_output().expect("third").status.code(), Some(0));
    assert_eq!(fleet.counter("a"), std::slice::from_ref(&run), "a finished stage never runs again");
    assert_eq!(fleet.counter("b").len(), 3, "b ran on each worker, from its start");
    assert_eq!(
        fleet.counter("b.end"),
        std::slice::from_ref(&run),
        "only the last worker's b finished: the others' were ended"
    );
    let kinds = fleet.kinds(&run);
    let succeeded: Vec<&str> =
        kinds.iter().filter(|(k, _)| k == "attempt_succeeded").map(|(_, s)| s.as_str()).collect();
    assert_eq!(succeeded, ["a", "b"]);
    let task = fleet.status(&run)["task_id"].as_str().expect("task").to_owned();
    assert_eq!(
        fleet.branch(&run).0,
        [format!("loopwright: stage b of {task}"), format!("loopwright: stage a of {task}"), "initial".to_owned()]
    );
    assert!(fleet.log(3).contains(&format!("claimed run {run} (lease epoch 3)")), "{}", fleet.log(3));
}

#[test]
fn a_worker_frozen_past_its_lease_is_refused_when_it_wakes_and_its_processes_end() {
    let Some(fleet) = Fleet::new("frozen", TWO_STAGES) else { return };
    let run = fleet.submit("frozen");
    let first = fleet.worker_env(1, 2, &[("B_SLEEP", "6")]);
    wait_lines(&fleet, "b", 1);
    signal(&first, nix::sys::signal::Signal::SIGSTOP);
    // Past its lease, another worker (another machine, for all the store knows) takes over.
    std::thread::sleep(Duration::from_millis(2500));
    let second = fleet.worker(2, 2);
    assert_eq!(fleet.wait_ended(std::slice::from_ref(&run), 60), ["success"]);
    // The frozen worker wakes: what it would still write is refused, its process of b is ended
    // (it never reaches its end), and it goes on as a worker without the run.
    signal(&first, nix::sys::signal::Signal::SIGCONT);
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(fleet.counter("b.end"), std::slice::from_ref(&run), "the frozen worker's b never finished");
    assert_eq!(fleet.counter("a"), std::slice::from_ref(&run));
    // Its next write was refused by the fence — or, frozen in the middle of one, the server
    // ended that transaction (idle too long) and nothing of it stayed.
    let log = fleet.log(1);
    let refused = ["no longer this worker's", "idle-in-transaction timeout", "connection closed"];
    assert!(log.contains(&format!("run {run}: ")) && refused.iter().any(|r| log.contains(r)), "{log}");
    let kinds = fleet.kinds(&run);
    let ended: Vec<&str> = kinds
        .iter()
        .filter(|(k, _)| {
            ["attempt_succeeded", "attempt_failed", "run_interrupted", "run_finished"].contains(&k.as_str())
        })
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(ended, ["attempt_succeeded", "attempt_succeeded", "run_finished"], "nothing of the frozen worker's");
    let task = fleet.status(&run)["task_id"].as_str().expect("task").to_owned();
    assert_eq!(
        fleet.branch(&run).0,
        [format!("loopwright: stage b of {task}"), format!("loopwright: stage a of {task}"), "initial".to_owned()],
        "its commit was never pushed"
    );
    for worker in [first, second] {
        signal(&worker, nix::sys::signal::Signal::SIGTERM);
        assert_eq!(worker.wait_with_output().expect("worker").status.code(), Some(0));
    }
}

#[test]
fn a_run_waiting_at_a_gate_gives_its_lease_back_and_any_worker_continues_it_once_approved_from_anywhere() {
    let gated = TWO_STAGES.replace(
        "    run: \"echo $LOOPWRIGHT_RUN_ID >> COUNTERS/b;",
        "    requires_approval: true\n    run: \"echo $LOOPWRIGHT_RUN_ID >> COUNTERS/b;",
    );
    let Some(fleet) = Fleet::new("gate", &gated) else { return };
    let run = fleet.submit("gated");
    let first = fleet.worker(1, 2);
    let deadline = Instant::now() + Duration::from_secs(30);
    while fleet.status(&run)["status"] != "waiting" {
        assert!(Instant::now() < deadline, "never waited: {}", fleet.status(&run));
        std::thread::sleep(Duration::from_millis(100));
    }
    signal(&first, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(first.wait_with_output().expect("first").status.code(), Some(0));
    // Approved from a checkout that is no worker at all: recorded, queued for workers, and
    // nothing runs here.
    let (code, out, err) = fleet.checkout.json(&["approve", &run, "--by", "carol", "--store", &fleet.url]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out["status"], "queued", "{out}");
    assert!(err.contains("is run by workers; the next free one continues it"), "{err}");
    assert!(!fleet.checkout.path().join("b.txt").exists());
    // `resume` does not take it either.
    let (_, _, err) = fleet.checkout.run(&["resume", &run, "--store", &fleet.url]);
    assert!(err.contains("was submitted to workers"), "{err}");
    assert_eq!(fleet.status(&run)["status"], "queued");
    let second = fleet.worker(2, 2);
    assert_eq!(fleet.wait_ended(std::slice::from_ref(&run), 60), ["success"]);
    assert_eq!(fleet.counter("a"), std::slice::from_ref(&run), "a ran once, on the first worker");
    assert_eq!(fleet.counter("b.end"), std::slice::from_ref(&run));
    assert!(fleet.log(2).contains(&format!("claimed run {run} (lease epoch 2)")), "{}", fleet.log(2));
    assert_eq!(fleet.file(&run, "b.txt"), "two\n");
    signal(&second, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(second.wait_with_output().expect("second").status.code(), Some(0));
}

const THREE_STAGES: &str = r#"name: p
description: d
version: 1
stages:
  - id: a
    description: d
    agent: shell
    mode: agent
    run: "echo $LOOPWRIGHT_RUN_ID $(date +%s%N) >> COUNTERS/a; sleep 0.2; echo a > a.txt"
  - id: b
    description: d
    agent: shell
    mode: agent
    run: "echo $LOOPWRIGHT_RUN_ID $(date +%s%N) >> COUNTERS/b; sleep 0.3; echo b > b.txt"
  - id: c
    description: d
    agent: shell
    mode: agent
    run: "echo $LOOPWRIGHT_RUN_ID $(date +%s%N) >> COUNTERS/c; sleep 0.2; echo c > c.txt"
"#;

/// Asserts that each of `stages` of each of `runs` succeeded once and never started (by the
/// counter files: `RUN NANOSECONDS` per start) after that success was journaled, on any worker.
fn no_stage_after_its_success(fleet: &Fleet, runs: &[String], stages: &[&str]) {
    let starts: Vec<(&str, Vec<String>)> = stages.iter().map(|s| (*s, fleet.counter(s))).collect();
    for run in runs {
        let mut cmd = fleet.checkout.cmd();
        let out = cmd.args(["logs", run, "--json", "--store", &fleet.url]).output().expect("logs");
        let events: Vec<Value> =
            String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        for (stage, lines) in &starts {
            let succeeded: Vec<i128> = events
                .iter()
                .filter(|v| v["event"]["type"] == "attempt_succeeded" && v["event"]["stage"] == *stage)
                .map(|v| v["at"].as_str().expect("at").parse::<jiff::Timestamp>().expect("time").as_nanosecond())
                .collect();
            assert_eq!(succeeded.len(), 1, "run {run} stage {stage}: one success journaled");
            let mine: Vec<i128> = lines
                .iter()
                .filter_map(|l| l.split_once(' ').filter(|(r, _)| r == run).and_then(|(_, t)| t.parse().ok()))
                .collect();
            assert!(!mine.is_empty(), "run {run} stage {stage} never started");
            assert!(
                mine.iter().all(|t| *t <= succeeded[0]),
                "run {run} stage {stage} started after its success was journaled: {mine:?} vs {}",
                succeeded[0]
            );
        }
    }
}

/// Asserts that each run's branch is a clean run's: one commit per stage of `stages` (in order)
/// over the base, and the base's files with each stage's own.
fn whole_history(fleet: &Fleet, runs: &[String], stages: &[&str]) {
    for run in runs {
        let task = fleet.status(run)["task_id"].as_str().expect("task").to_owned();
        let (subjects, files) = fleet.branch(run);
        let clean: Vec<String> =
            stages.iter().rev().map(|s| format!("loopwright: stage {s} of {task}")).chain(["initial".into()]).collect();
        assert_eq!(subjects, clean, "run {run}");
        let mut want: Vec<String> =
            [".loopwright/.gitignore", ".loopwright/config.toml", ".loopwright/pipelines/p.yml", "README"]
                .iter()
                .map(|f| (*f).to_owned())
                .collect();
        want.extend(stages.iter().map(|s| format!("{s}.txt")));
        assert_eq!(files, want, "run {run}");
    }
}

const FOUR_STAGES: &str = r#"name: p
description: d
version: 1
stages:
  - id: a
    description: d
    agent: shell
    mode: agent
    run: "echo $LOOPWRIGHT_RUN_ID $(date +%s%N) >> COUNTERS/a; sleep 0.3; echo a > a.txt"
  - id: b
    description: d
    agent: shell
    mode: agent
    run: "echo $LOOPWRIGHT_RUN_ID $(date +%s%N) >> COUNTERS/b; sleep 0.3; echo b > b.txt"
  - id: c
    description: d
    agent: shell
    mode: plan
    run: "echo $LOOPWRIGHT_RUN_ID $(date +%s%N) >> COUNTERS/c; sleep 0.2; cat a.txt b.txt"
  - id: d
    description: d
    agent: shell
    mode: agent
    run: "echo $LOOPWRIGHT_RUN_ID $(date +%s%N) >> COUNTERS/d; sleep 0.3; echo d > d.txt"
  - id: e
    description: d
    agent: shell
    mode: agent
    run: "echo $LOOPWRIGHT_RUN_ID $(date +%s%N) >> COUNTERS/e; sleep 0.2; echo e > e.txt"
"#;

#[test]
fn runs_side_by_side_on_a_two_slot_worker_keep_their_whole_history() {
    let Some(fleet) = Fleet::new("two_slots", FOUR_STAGES) else { return };
    let runs: Vec<String> = ["one", "two", "three"].iter().map(|t| fleet.submit(t)).collect();
    let worker = fleet.worker_with(1, &fleet.url, &["--lease", "5", "--slots", "2"], &[]);
    assert_eq!(fleet.wait_ended(&runs, 120), ["success", "success", "success"], "{}", fleet.log(1));
    // Two ran at once (the second claim fetched while the first run's worktree was checked out).
    whole_history(&fleet, &runs, &["a", "b", "d", "e"]);
    no_stage_after_its_success(&fleet, &runs, &["a", "b", "c", "d", "e"]);
    signal(&worker, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(worker.wait_with_output().expect("worker").status.code(), Some(0));
}

#[test]
fn two_workers_of_two_slots_with_a_kill_keep_every_runs_history() {
    let Some(fleet) = Fleet::new("two_by_two", FOUR_STAGES) else { return };
    let runs: Vec<String> = (0..8).map(|i| fleet.submit(&format!("run {i}"))).collect();
    let args = ["--lease", "2", "--slots", "2"];
    let mut workers: Vec<std::process::Child> = (0..2).map(|n| fleet.worker_with(n, &fleet.url, &args, &[])).collect();
    // Killed once mid-run, while it holds two runs, and started again.
    let deadline = Instant::now() + Duration::from_secs(60);
    while fleet.counter("b").is_empty() {
        assert!(Instant::now() < deadline, "no run reached stage b");
        std::thread::sleep(Duration::from_millis(50));
    }
    workers[0].kill().expect("kill -9");
    workers[0].wait().expect("reaped");
    workers[0] = fleet.worker_with(0, &fleet.url, &args, &[]);
    let statuses = fleet.wait_ended(&runs, 300);
    for mut worker in workers {
        signal(&worker, nix::sys::signal::Signal::SIGTERM);
        let _ = worker.wait();
    }
    assert_eq!(statuses, vec!["success"; runs.len()], "{}\n{}", fleet.log(0), fleet.log(1));
    whole_history(&fleet, &runs, &["a", "b", "d", "e"]);
    no_stage_after_its_success(&fleet, &runs, &["a", "b", "c", "d", "e"]);
}

/// Journals a run straight into the store, as whoever can write it could: `honest`'s start
/// with `pipeline_source` in its place, submitted for `repo` at `base`.
fn forge(fleet: &Fleet, honest: &str, id: &str, pipeline_source: &str, repo: &str, base: &str) -> String {
    let mut cmd = fleet.checkout.cmd();
    let out = cmd.args(["logs", honest, "--json", "--store", &fleet.url]).output().expect("logs");
    let first: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().expect("a line")).expect("json");
    let mut started = first["event"].clone();
    started["pipeline_source"] = Value::String(pipeline_source.to_owned());
    let event: loopwright_engine::Event = serde_json::from_value(started).expect("an event");
    let forged = loopwright_engine::RunId::new(id);
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(async {
        let store = loopwright_store::pg::PgStore::connect(&fleet.url, 1).await.expect("store");
        let at = jiff::Timestamp::now();
        let submission = loopwright_store::fleet::Submission {
            repo: repo.to_owned(),
            base: base.to_owned(),
            labels: Default::default(),
        };
        store
            .submit(&forged, &[(event, at), (loopwright_engine::Event::RunQueued {}, at)], &submission)
            .await
            .expect("submit");
    });
    forged.to_string()
}

#[test]
fn a_store_writer_can_neither_have_an_unlisted_repository_cloned_nor_a_run_branchs_pipeline_run() {
    let Some(fleet) = Fleet::new("store_writer", TWO_STAGES) else { return };
    let honest = fleet.submit("honest");
    let worker = fleet.worker(1, 5);
    assert_eq!(fleet.wait_ended(std::slice::from_ref(&honest), 60), ["success"]);
    let planted = fleet.dir.path().join("planted");
    let evil = format!(
        "name: p\ndescription: d\nversion: 1\nstages:\n  - {{id: a, description: d, agent: shell, mode: plan, run: 'touch {}'}}\n",
        planted.display()
    );
    // A repository of the writer's, holding that pipeline: not one the worker may run.
    let other = fleet.dir.path().join("other.git");
    git(fleet.dir.path(), &["init", "--quiet", "--bare", "-b", "main", &other.display().to_string()]);
    let theirs = Ws::empty();
    theirs.write(".loopwright/pipelines/p.yml", &evil);
    theirs.init_git();
    theirs.git(&["push", "--quiet", &other.display().to_string(), "main"]);
    let unlisted = forge(&fleet, &honest, "20261128-000000-a0a0a0", &evil, &other.display().to_string(), "main");
    // The pipeline as an agent could have written it on a run branch of the real repository.
    let branch = format!("loopwright/{honest}");
    let scratch = tempfile::tempdir().expect("tempdir");
    let work = scratch.path().join("work");
    git(scratch.path(), &["clone", "--quiet", "-b", &branch, &fleet.remote().display().to_string(), "work"]);
    std::fs::write(work.join(".loopwright/pipelines/p.yml"), &evil).expect("write");
    git(
        &work,
        &[
            "-c",
            "user.name=agent",
            "-c",
            "user.email=agent@example.com",
            "commit",
            "--quiet",
            "-am",
            "an agent's pipeline",
        ],
    );
    git(&work, &["push", "--quiet", "origin", &format!("HEAD:{branch}")]);
    let on_branch =
        forge(&fleet, &honest, "20261128-000000-b0b0b0", &evil, &fleet.remote().display().to_string(), &branch);
    let commit = git(&work, &["rev-parse", "HEAD"]).trim().to_owned();
    let by_commit =
        forge(&fleet, &honest, "20261128-000000-c0c0c0", &evil, &fleet.remote().display().to_string(), &commit);
    let refused = fleet.wait_ended(&[on_branch.clone(), by_commit.clone()], 60);
    assert_eq!(refused, ["cancelled", "cancelled"]);
    for (run, why) in [
        (&on_branch, format!("the run's base `{branch}` is one of loopwright's run branches, not the repository's")),
        (&by_commit, format!("the run's base `{commit}` is on no branch or tag of")),
    ] {
        let mut cmd = fleet.checkout.cmd();
        let out = cmd.args(["logs", run, "--store", &fleet.url]).output().expect("logs");
        let log = String::from_utf8_lossy(&out.stdout);
        assert!(log.contains(&why), "{log}\n{}", fleet.log(1));
    }
    // The unlisted repository's run is left queued for a worker that may run it: never cloned.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(fleet.statuses(std::slice::from_ref(&unlisted)), ["queued"]);
    let clones: Vec<String> = std::fs::read_dir(fleet.dir.path().join("cache-1/repos"))
        .expect("repos")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    assert!(clones.iter().all(|c| c.starts_with("remote-")), "{clones:?}");
    assert!(!planted.exists(), "the store writer's command ran");
    signal(&worker, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(worker.wait_with_output().expect("worker").status.code(), Some(0));
}

/// A small random number generator (xorshift), seeded by the clock and said in the output.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Chaos across machines: 3 workers (2 slots each, 2 s leases) run short pipelines while one
/// of them, chosen at random, is killed (`kill -9`) every 0.5–2 s and started again. Every run
/// ends in success; no stage starts after its success was journaled; each run's branch holds a
/// clean run's commits and files. CI runs `LW_FLEET_RUNS` runs (default 12) with kills until
/// they end or `LW_FLEET_KILLS` (default 40) were made; more: `LW_FLEET_RUNS=100
/// LW_FLEET_KILLS=500 scripts/with-postgres.sh cargo test fleet_chaos -- --nocapture`.
#[test]
fn fleet_chaos_three_workers_killed_at_random_lose_nothing_and_repeat_no_finished_stage() {
    let Some(fleet) = Fleet::new("chaos", THREE_STAGES) else { return };
    let number = |var: &str, default: usize| std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let (runs_wanted, kills_wanted) = (number("LW_FLEET_RUNS", 12), number("LW_FLEET_KILLS", 40));
    let seed = jiff::Timestamp::now().as_nanosecond().unsigned_abs() as u64 | 1;
    let mut dice = Dice(seed);
    eprintln!("fleet chaos: {runs_wanted} runs, up to {kills_wanted} kills, seed {seed}");
    let runs: Vec<String> = (0..runs_wanted).map(|i| fleet.submit(&format!("chaos {i}"))).collect();
    let env = [("LOOPWRIGHT_TEST_FLEET", "1")];
    let mut workers: Vec<std::process::Child> = (0..3).map(|n| fleet.worker_env(n, 2, &env)).collect();
    let started = Instant::now();
    let mut kills = 0;
    let ended =
        |fleet: &Fleet| fleet.statuses(&runs).iter().all(|s| ["success", "failed", "cancelled"].contains(&s.as_str()));
    while kills < kills_wanted && !ended(&fleet) {
        assert!(started.elapsed() < Duration::from_secs(3600), "chaos ran out of time after {kills} kills");
        std::thread::sleep(Duration::from_millis(500 + dice.roll(1500)));
        let n = usize::try_from(dice.roll(3)).expect("small");
        workers[n].kill().expect("kill -9");
        workers[n].wait().expect("reaped");
        kills += 1;
        workers[n] = fleet.worker_env(n, 2, &env);
    }
    // What is left after the last kill: at least a second per run still queued.
    let statuses = fleet.wait_ended(&runs, 300 + runs.len() as u64);
    eprintln!("fleet chaos: {kills} kills, {} runs, in {:.1} s", runs.len(), started.elapsed().as_secs_f64());
    for mut worker in workers {
        signal(&worker, nix::sys::signal::Signal::SIGTERM);
        let _ = worker.wait();
    }
    assert_eq!(statuses, vec!["success"; runs.len()]);
    // No stage started after its success was journaled (on any worker).
    no_stage_after_its_success(&fleet, &runs, &["a", "b", "c"]);
    // Each branch is a clean run's: three stage commits over the base, the files each wrote.
    whole_history(&fleet, &runs, &["a", "b", "c"]);
    // Nothing of any run is left running.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        crate::support::processes_with(&fleet.dir.path().join("counters").display().to_string()),
        Vec::<u32>::new()
    );
}

#[test]
fn the_api_and_the_dashboard_show_the_workers_their_labels_slots_and_the_runs_they_hold() {
    let Some(fleet) = Fleet::new("dashboard", TWO_STAGES) else { return };
    let run = fleet.submit("watched");
    let cmd_worker = fleet.worker_with(
        1,
        &fleet.url,
        &["--labels", "gpu=a100, os=linux", "--slots", "2", "--lease", "5"],
        &[("B_SLEEP", "30")],
    );
    wait_lines(&fleet, "b", 1);
    let daemon = crate::daemon::Daemon::start(&fleet.checkout, &["--store", &fleet.url]);
    let (code, workers) = daemon.get("/api/workers");
    assert_eq!(code, 200, "{workers}");
    let worker = &workers[0];
    let id = worker["id"].as_str().expect("id").to_owned();
    assert_eq!(workers.as_array().map(Vec::len), Some(1), "{workers}");
    assert_eq!(
        (worker["labels"].clone(), worker["slots"].clone(), worker["lease_seconds"].clone(), worker["state"].clone()),
        (
            serde_json::json!({"gpu": "a100", "os": "linux"}),
            serde_json::json!(2),
            serde_json::json!(5),
            serde_json::json!("alive")
        )
    );
    assert_eq!(worker["leases"][0]["run_id"], run.as_str());
    assert_eq!(worker["leases"][0]["epoch"], 1);
    assert!(id.ends_with(&format!("-{}", cmd_worker.id())), "{id}");
    // The page of workers and the run's page say who runs what.
    let token = fleet.checkout.read(".loopwright/state/serve.token");
    let (code, page) = daemon.page_as("/workers", &token);
    assert_eq!(code, 200);
    assert!(page.contains(&format!("id=\"worker-{id}\"")) && page.contains("● alive"), "{page}");
    assert!(page.contains(&format!("<a href=\"/runs/{run}\">{run}</a> (epoch 1")), "{page}");
    assert!(page.contains("<code>gpu=a100</code>") && page.contains(">1 / 2<"), "{page}");
    let (_, run_page) = daemon.page_as(&format!("/runs/{run}"), &token);
    assert!(
        run_page.contains(&format!("on worker <a id=\"run-worker\" href=\"/workers#worker-{id}\">{id}</a>")),
        "{run_page}"
    );
    // Stopped, it is shown so, holding nothing.
    signal(&cmd_worker, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(cmd_worker.wait_with_output().expect("worker").status.code(), Some(0));
    let (_, workers) = daemon.get("/api/workers");
    assert_eq!(
        (workers[0]["state"].clone(), workers[0]["leases"].clone()),
        (serde_json::json!("stopped"), serde_json::json!([]))
    );
}

/// A TCP forwarder to PostgreSQL that can cut every connection through it and refuse new ones
/// (a worker cut off from the database), then let them through again.
struct Cable {
    port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Cable {
    fn to(url: &str) -> Self {
        use std::sync::atomic::Ordering;
        let target = url.split('@').nth(1).and_then(|r| r.split('/').next()).expect("host:port").to_owned();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (cut_seen, kept) = (std::sync::Arc::clone(&cut), std::sync::Arc::clone(&open));
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if cut_seen.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(&target) else { continue };
                let pipe = |mut from: std::net::TcpStream, mut to: std::net::TcpStream| {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                };
                let mut all = kept.lock().expect("lock");
                all.push(client.try_clone().expect("clone"));
                all.push(server.try_clone().expect("clone"));
                pipe(client.try_clone().expect("clone"), server.try_clone().expect("clone"));
                pipe(server, client);
            }
        });
        Self { port, cut, open }
    }

    /// `url` through this cable.
    fn url(&self, url: &str) -> String {
        let (head, rest) = url.split_once('@').expect("user@");
        let db = rest.split_once('/').map(|(_, db)| db).expect("/db");
        format!("{head}@127.0.0.1:{}/{db}", self.port)
    }

    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for stream in self.open.lock().expect("lock").drain(..) {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    fn mend(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn a_worker_cut_off_from_the_database_ends_its_stage_when_its_lease_runs_out_and_another_continues() {
    let Some(fleet) = Fleet::new("cutoff", TWO_STAGES) else { return };
    let run = fleet.submit("cut off");
    let cable = Cable::to(&fleet.url);
    let through = cable.url(&fleet.url);
    let first = fleet.worker_with(1, &through, &["--lease", "2"], &[("B_SLEEP", "31")]);
    wait_lines(&fleet, "b", 1);
    assert_eq!(crate::support::processes_with("sleep\u{0}31").len(), 1);
    cable.cut();
    // Unable to renew, the worker stops driving the run once its lease has run out, and ends
    // the stage's processes itself (no other worker is there yet to do it).
    let deadline = Instant::now() + Duration::from_secs(20);
    while !crate::support::processes_with("sleep\u{0}31").is_empty() {
        assert!(Instant::now() < deadline, "the cut-off worker's stage still runs:\n{}", fleet.log(1));
        std::thread::sleep(Duration::from_millis(100));
    }
    let second = fleet.worker(2, 2);
    assert_eq!(fleet.wait_ended(std::slice::from_ref(&run), 60), ["success"]);
    // Back on the network, the first worker's late writes cannot land: the run is another's.
    cable.mend();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(fleet.status(&run)["status"], "success");
    assert_eq!(fleet.counter("a"), std::slice::from_ref(&run));
    assert_eq!(fleet.counter("b.end"), std::slice::from_ref(&run), "only the second worker's b finished");
    let log = fleet.log(1);
    assert!(log.contains("cannot renew its leases"), "{log}");
    for worker in [first, second] {
        signal(&worker, nix::sys::signal::Signal::SIGTERM);
        assert_eq!(worker.wait_with_output().expect("worker").status.code(), Some(0));
    }
}

#[test]
fn a_pipeline_written_into_the_store_that_is_not_the_repositorys_is_refused_by_workers_and_never_run() {
    let Some(fleet) = Fleet::new("forged", TWO_STAGES) else { return };
    // Someone who can write to the store (not to the repository) journals a run whose pipeline
    // text runs a command of theirs, under the name of the repository's pipeline.
    let honest = fleet.submit("honest");
    let mut cmd = fleet.checkout.cmd();
    let out = cmd.args(["logs", &honest, "--json", "--store", &fleet.url]).output().expect("logs");
    let first: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().expect("a line")).expect("json");
    let planted = fleet.dir.path().join("planted");
    let mut started = first["event"].clone();
    started["pipeline_source"] = Value::String(format!(
        "name: p\ndescription: d\nversion: 1\nstages:\n  - {{id: a, description: d, agent: shell, mode: plan, run: 'touch {}'}}\n",
        planted.display()
    ));
    let event: loopwright_engine::Event = serde_json::from_value(started).expect("an event");
    let forged = loopwright_engine::RunId::new("20261125-000000-f0f0f0");
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(async {
        let store = loopwright_store::pg::PgStore::connect(&fleet.url, 1).await.expect("store");
        let at = jiff::Timestamp::now();
        let submission = loopwright_store::fleet::Submission {
            repo: fleet.remote().display().to_string(),
            base: "main".into(),
            labels: Default::default(),
        };
        store
            .submit(&forged, &[(event, at), (loopwright_engine::Event::RunQueued {}, at)], &submission)
            .await
            .expect("submit");
    });
    let worker = fleet.worker(1, 5);
    let statuses = fleet.wait_ended(&[honest.clone(), forged.to_string()], 60);
    assert_eq!(statuses, ["success", "cancelled"]);
    assert!(!planted.exists(), "the forged pipeline's command ran");
    let status = fleet.status(forged.as_str());
    let kinds = fleet.kinds(forged.as_str());
    assert!(!kinds.iter().any(|(k, _)| k == "attempt_started"), "{kinds:?}");
    let log = {
        let mut cmd = fleet.checkout.cmd();
        let out = cmd.args(["logs", forged.as_str(), "--store", &fleet.url]).output().expect("logs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        log.contains(
            "refused to run it: its pipeline differs from .loopwright/pipelines/p.yml in the repository at its base"
        ),
        "{log}\n{status}"
    );
    signal(&worker, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(worker.wait_with_output().expect("worker").status.code(), Some(0));
    // Submitting a pipeline the repository does not have as it is, is refused at once.
    fleet.checkout.write(".loopwright/pipelines/p.yml", &TWO_STAGES.replace("echo one", "echo uno"));
    let (code, _, err) = fleet.checkout.run(&["run", "p", "--submit", "--store", &fleet.url]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(".loopwright/pipelines/p.yml differs from the file at main"), "{err}");
}

#[test]
fn post_api_runs_with_submit_queues_the_run_for_workers_and_says_what_is_wrong() {
    let Some(fleet) = Fleet::new("api_submit", TWO_STAGES) else { return };
    let daemon = crate::daemon::Daemon::start(&fleet.checkout, &["--store", &fleet.url]);
    let (code, accepted) =
        daemon.post("/api/runs", &serde_json::json!({"pipeline": "p", "task": "by api", "submit": true}));
    assert_eq!(code, 202, "{accepted}");
    let run = accepted["run_id"].as_str().expect("id").to_owned();
    assert_eq!(accepted["status"], "queued");
    // Nobody here runs it: it waits for a worker, which then does.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(fleet.status(&run)["status"], "queued");
    let worker = fleet.worker(1, 5);
    assert_eq!(fleet.wait_ended(std::slice::from_ref(&run), 60), ["success"]);
    assert_eq!(fleet.file(&run, "a.txt"), "one\n");
    signal(&worker, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(worker.wait_with_output().expect("worker").status.code(), Some(0));
    for (body, said) in [
        (
            serde_json::json!({"pipeline": "p", "submit": true, "worktree": true}),
            "`worktree` does not go with `submit`",
        ),
        (serde_json::json!({"pipeline": "p", "base": "main"}), "`repo` and `base` go with `submit` only"),
        (serde_json::json!({"pipeline": "p", "submit": true, "base": "--upload-pack=x"}), "--base `--upload-pack=x`"),
    ] {
        let (code, error) = daemon.post("/api/runs", &body);
        assert_eq!(code, 422, "{body} {error}");
        assert!(error.to_string().contains(said), "{body}: {error}");
    }
}

#[test]
fn a_workers_sandbox_floor_beats_a_repository_and_a_stage_that_turn_the_sandbox_off() {
    let scratch = tempfile::tempdir().expect("tempdir");
    if let Err(why) = loopwright_runners::sandbox::probe(scratch.path()).usable() {
        eprintln!("skipped: no sandbox here ({why})");
        return;
    }
    let pipeline = "name: p\ndescription: d\nversion: 1\nstages:\n  - {id: a, description: d, agent: shell, mode: agent, sandbox: 'off', run: 'echo $HOME > home.txt'}\n";
    let Some(fleet) = Fleet::new("floor", pipeline) else { return };
    fleet.checkout.write(".loopwright/config.toml", "# This repository's stages run as you.\nsandbox = \"off\"\n");
    fleet.checkout.git(&["add", "-A"]);
    fleet.checkout.git(&["commit", "--quiet", "-m", "no sandbox, says the repository"]);
    fleet.checkout.git(&["push", "--quiet", "origin", "main"]);
    let run = fleet.submit("floor");
    let worker = fleet.worker_with(1, &fleet.url, &["--lease", "5", "--sandbox", "required"], &[]);
    assert_eq!(fleet.wait_ended(std::slice::from_ref(&run), 60), ["success"], "{}", fleet.log(1));
    let home = fleet.file(&run, "home.txt");
    assert!(home.contains("/homes/a-1"), "the stage ran unsandboxed: HOME={home}");
    signal(&worker, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(worker.wait_with_output().expect("worker").status.code(), Some(0));
}

#[test]
fn a_run_whose_base_was_never_pushed_fails_after_a_few_tries_and_starves_no_other_run() {
    let Some(fleet) = Fleet::new("unpushed", TWO_STAGES) else { return };
    fleet.checkout.git(&["branch", "feature"]);
    let (code, out, err) =
        fleet.checkout.json(&["run", "p", "--task", "lost", "--submit", "--base", "feature", "--store", &fleet.url]);
    assert_eq!(code, 0, "{err}");
    let lost = out["run_id"].as_str().expect("run id").to_owned();
    let fine = fleet.submit("fine");
    let worker = fleet.worker(1, 1);
    let started = Instant::now();
    assert_eq!(fleet.wait_ended(&[lost.clone(), fine.clone()], 60), ["failed", "success"], "{}", fleet.log(1));
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    let tries: Vec<(String, String)> = fleet.kinds(&lost).into_iter().filter(|(k, _)| k == "checkout_failed").collect();
    assert_eq!(tries.len(), 5, "{tries:?}");
    let (_, status, _) = fleet.checkout.run(&["status", &lost, "--store", &fleet.url]);
    assert!(status.contains("the run's base `feature` is not in"), "{status}");
    signal(&worker, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(worker.wait_with_output().expect("worker").status.code(), Some(0));
}

#[test]
fn a_worker_given_a_relative_cache_runs_its_runs_once_each() {
    let Some(fleet) = Fleet::new("relative", TWO_STAGES) else { return };
    let runs: Vec<String> = ["one", "two"].iter().map(|t| fleet.submit(t)).collect();
    let log = std::fs::File::create(fleet.dir.path().join("worker-1.log")).expect("log");
    let mut worker = std::process::Command::new(assert_cmd::cargo::cargo_bin!("loopwright"))
        .args(["worker", "--store", &fleet.url, "--lease", "5", "--cache", "cache-here", "--repo"])
        .arg(fleet.remote())
        .current_dir(fleet.dir.path())
        .env("GIT_AUTHOR_NAME", "worker")
        .env("GIT_AUTHOR_EMAIL", "worker@example.com")
        .env("GIT_COMMITTER_NAME", "worker")
        .env("GIT_COMMITTER_EMAIL", "worker@example.com")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .expect("worker");
    let ended = fleet.wait_ended(&runs, 60);
    signal(&worker, nix::sys::signal::Signal::SIGTERM);
    let _ = worker.wait();
    let log = fleet.log(1);
    assert_eq!(ended, ["success", "success"], "{log}");
    // Each claimed once, and its clone where the relative path said, from where it started.
    assert_eq!(log.matches("claimed run").count(), 2, "{log}");
    assert!(log.contains(&format!("cache {}", fleet.dir.path().join("cache-here").display())), "{log}");
    assert!(fleet.dir.path().join("cache-here/repos").is_dir());
    assert_eq!((fleet.counter("a"), fleet.counter("b")), (runs.clone(), runs));
}

#[test]
fn idle_workers_look_for_work_only_when_there_is_some_they_could_take() {
    let mut pipeline = String::from("name: p\ndescription: d\nversion: 1\nstages:\n");
    for i in 0..20 {
        pipeline.push_str(&format!("  - {{id: s{i}, description: d, agent: shell, mode: agent, run: 'true'}}\n"));
    }
    let Some(fleet) = Fleet::new("idle", &pipeline) else { return };
    let workers: Vec<std::process::Child> = (1..=4).map(|n| fleet.worker(n, 60)).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(1..=4).all(|n| fleet.log(n).contains("slot(s)")) {
        assert!(Instant::now() < deadline, "the workers did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Each has looked once, found nothing and waits.
    std::thread::sleep(Duration::from_millis(500));
    // Each fetched the repository as it started, before any run was submitted: no claim of
    // theirs makes a clone.
    let main = git(&fleet.remote(), &["rev-parse", "main"]);
    for n in 1..=4 {
        let repos = fleet.dir.path().join(format!("cache-{n}/repos"));
        let fetched = || {
            let clone = std::fs::read_dir(&repos).ok()?.flatten().next()?.path();
            let out = std::process::Command::new("git")
                .args(["rev-parse", "refs/remotes/origin/main"])
                .current_dir(clone)
                .output()
                .ok()?;
            Some(String::from_utf8_lossy(&out.stdout).into_owned())
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while fetched().as_deref() != Some(main.as_str()) {
            assert!(
                Instant::now() < deadline,
                "worker {n} did not fetch the repository as it started: {}",
                fleet.log(n)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let run = fleet.submit("twenty stages");
    assert_eq!(fleet.wait_ended(std::slice::from_ref(&run), 60), ["success"]);
    // The lease given back is told to the idle workers too.
    std::thread::sleep(Duration::from_millis(500));
    for worker in &workers {
        signal(worker, nix::sys::signal::Signal::SIGTERM);
    }
    for worker in workers {
        assert_eq!(worker.wait_with_output().expect("worker").status.code(), Some(0));
    }
    let counts: Vec<(u64, u64)> = (1..=4)
        .map(|n| {
            let log = fleet.log(n);
            let said = log.split("it looked for work ").nth(1).unwrap_or_else(|| panic!("{log}"));
            let number =
                |text: &str| text.split(' ').next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{log}"));
            (number(said), number(said.split("and claimed ").nth(1).unwrap_or_else(|| panic!("{log}"))))
        })
        .collect();
    assert_eq!(counts.iter().filter(|(_, claimed)| *claimed == 1).count(), 1, "one drove the run: {counts:?}");
    // Its stages committed nothing, so nothing was pushed: the run's branch is made by its
    // first commit, not at the claim.
    assert_eq!(git(&fleet.remote(), &["branch", "--list", &format!("loopwright/{run}")]), "");
    // An idle worker looked when it started, when the run was submitted and when its lease was
    // given back: not once per journal commit of the run it did not drive.
    for (looked, _) in counts.iter().filter(|(_, claimed)| *claimed == 0) {
        assert!(*looked <= 3, "{counts:?}");
    }
}

const DIAMOND: &str = r#"name: p
description: d
version: 1
stages:
  - id: a
    description: d
    agent: shell
    mode: agent
    run: "echo $LOOPWRIGHT_RUN_ID >> COUNTERS/a; echo one > a.txt"
  - id: b
    description: d
    agent: shell
    mode: agent
    needs: [a]
    run: "echo $LOOPWRIGHT_RUN_ID >> COUNTERS/b; echo two > b.txt"
  - id: c
    description: d
    agent: shell
    mode: agent
    needs: [a]
    run: "echo $LOOPWRIGHT_RUN_ID >> COUNTERS/c; sleep ${C_SLEEP:-0}; echo three > c.txt"
  - id: d
    description: d
    agent: shell
    mode: agent
    needs: [b, c]
    run: "echo $LOOPWRIGHT_RUN_ID >> COUNTERS/d; echo four > d.txt"
"#;

#[test]
fn a_graph_on_a_worker_killed_mid_branch_is_taken_over_and_no_finished_stage_runs_again() {
    let Some(fleet) = Fleet::new("graph", DIAMOND) else { return };
    let run = fleet.submit("graph");
    let slow = [("C_SLEEP", "30")];
    let mut first = fleet.worker_env(1, 2, &slow);
    wait_lines(&fleet, "c", 1);
    wait_lines(&fleet, "b", 1);
    // b's end is journaled right after its process ends.
    std::thread::sleep(Duration::from_millis(500));
    first.kill().expect("kill -9");
    first.wait().expect("reaped");
    let second = fleet.worker(2, 2);
    assert_eq!(fleet.wait_ended(std::slice::from_ref(&run), 60), ["success"]);
    signal(&second, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(second.wait_with_output().expect("second").status.code(), Some(0));
    let once = std::slice::from_ref(&run);
    assert_eq!(
        (fleet.counter("a"), fleet.counter("b"), fleet.counter("d")),
        (once.to_vec(), once.to_vec(), once.to_vec())
    );
    assert_eq!(fleet.counter("c").len(), 2, "c ran again from its start on the second worker");
    let kinds = fleet.kinds(&run);
    let mut succeeded: Vec<&str> =
        kinds.iter().filter(|(k, _)| k == "attempt_succeeded").map(|(_, s)| s.as_str()).collect();
    succeeded.sort_unstable();
    assert_eq!(succeeded, ["a", "b", "c", "d"]);
    let (_, files) = fleet.branch(&run);
    for file in ["a.txt", "b.txt", "c.txt", "d.txt"] {
        assert!(files.iter().any(|f| f == file), "{file} on the run's branch: {files:?}");
    }
}

const PAIR: &str = r#"name: p
description: d
version: 1
stages:
  - id: a
    description: d
    agent: shell
    mode: agent
    run: "echo one > a.txt"
  - id: b
    description: d
    agent: shell
    mode: agent
    needs: [a]
    run: "sleep 1; echo two > b.txt"
  - id: c
    description: d
    agent: shell
    mode: agent
    needs: [a]
    run: "sleep 1; echo three > c.txt"
"#;

/// True when stages `b` and `c` of `run` ran at the same time (by their journal's order).
fn overlapped(fleet: &Fleet, run: &str) -> bool {
    let kinds = fleet.kinds(run);
    let at = |kind: &str, stage: &str| {
        kinds.iter().position(|(k, s)| k == kind && s == stage).unwrap_or_else(|| panic!("{kind} {stage}: {kinds:?}"))
    };
    let starts = at("attempt_started", "b").max(at("attempt_started", "c"));
    let ends = at("attempt_succeeded", "b").min(at("attempt_succeeded", "c"));
    starts < ends
}

#[test]
fn a_worker_runs_a_graphs_stages_at_once_only_within_its_slots() {
    let Some(fleet) = Fleet::new("slots", PAIR) else { return };
    // Two runs on a worker with two slots: each run holds one, none is left for a second
    // stage at once.
    let (first, second) = (fleet.submit("one"), fleet.submit("two"));
    let worker = Reaped(Some(fleet.worker_with(1, &fleet.url, &["--slots", "2", "--sandbox", "auto"], &[])));
    let both = [first.clone(), second.clone()];
    assert_eq!(fleet.wait_ended(&both, 60), ["success", "success"], "{}", fleet.log(1));
    assert!(!overlapped(&fleet, &first) && !overlapped(&fleet, &second), "{:?}", fleet.kinds(&first));
    // One run alone: its second slot lets b and c run at once, where their attempts can be
    // kept apart (each in a sandbox layer of its own).
    let third = fleet.submit("three");
    assert_eq!(fleet.wait_ended(std::slice::from_ref(&third), 60), ["success"], "{}", fleet.log(1));
    let layered = loopwright_runners::sandbox::probe(fleet.dir.path()).usable().is_ok();
    assert_eq!(overlapped(&fleet, &third), layered, "{:?}", fleet.kinds(&third));
    assert_eq!(worker.stop(), Some(0));
    // Slots given back wake the worker; its own look that found nothing does not.
    let log = fleet.log(1);
    let looked: u64 = log
        .split("looked for work ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{log}"));
    assert!(looked <= 20, "the worker looked for work {looked} times for 3 runs: {log}");
    let (_, files) = fleet.branch(&third);
    for file in ["a.txt", "b.txt", "c.txt"] {
        assert!(files.iter().any(|f| f == file), "{file} on the run's branch: {files:?}");
    }
}

const CANDIDATES: &str = r#"name: p
description: d
version: 1
stages:
  - id: pick
    description: Write the answer
    agent: fast
    mode: agent
    candidates: {count: 2, agents: [fast, slow]}
    checks:
      - name: answer
        type: test
        command: grep -qx 42 answer.txt
"#;

#[test]
fn a_worker_killed_mid_candidates_is_taken_over_on_another_machine_and_one_winner_lands() {
    if let Err(why) = loopwright_runners::sandbox::probe(std::env::temp_dir().as_path()).usable() {
        eprintln!("skipped: no sandbox here ({why})");
        return;
    }
    let agent = |name: &str| {
        format!("---\nname: {name}\nrunner: command\ncommand: [\"sh\", \"{name}.sh\"]\n---\nYou answer.\n")
    };
    let (fast, slow) = (agent("fast"), agent("slow"));
    let files = [
        // A file, a link, an executable and a deletion: each must survive the other machine.
        (
            "fast.sh",
            "cat > /dev/null; echo 42 > answer.txt; ln -s answer.txt link; printf '#!/bin/sh\\n' > run.sh; chmod +x run.sh; rm old.txt; echo fast\n",
        ),
        (
            "slow.sh",
            "cat > /dev/null; sleep 6; echo 42 > answer.txt; for n in 1 2 3 4; do echo more > more$n.txt; done; echo slow\n",
        ),
        ("old.txt", "to be deleted\n"),
        (".loopwright/agents/fast.md", fast.as_str()),
        (".loopwright/agents/slow.md", slow.as_str()),
    ];
    let Some(fleet) = Fleet::with_files("candidates", CANDIDATES, &files) else { return };
    let run = fleet.submit("best");
    let sandboxed = ["--lease", "2", "--sandbox", "required"];
    // Each worker keeps its layers in a folder of its own, as on two machines.
    let layers = |n: usize| fleet.dir.path().join(format!("layers-{n}")).display().to_string();
    let (one, two) = (layers(1), layers(2));
    let mut first =
        Reaped(Some(fleet.worker_with(1, &fleet.url, &sandboxed, &[("LOOPWRIGHT_SANDBOX_DIR", one.as_str())])));
    // Killed once the fast candidate's end is journaled, the slow one still running.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !fleet.kinds(&run).iter().any(|(k, _)| k == "candidate_ended") {
        assert!(Instant::now() < deadline, "no candidate ended: {}", fleet.log(1));
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut killed = first.0.take().expect("the first worker");
    killed.kill().expect("kill -9");
    killed.wait().expect("reaped");
    let second =
        Reaped(Some(fleet.worker_with(2, &fleet.url, &sandboxed, &[("LOOPWRIGHT_SANDBOX_DIR", two.as_str())])));
    assert_eq!(fleet.wait_ended(std::slice::from_ref(&run), 60), ["success"], "{}", fleet.log(2));
    assert_eq!(second.stop(), Some(0));
    let mut cmd = fleet.checkout.cmd();
    let out = cmd.args(["logs", &run, "--json", "--store", &fleet.url]).output().expect("logs");
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("json")["event"].clone())
        .collect();
    let count =
        |kind: &str, candidate: u64| events.iter().filter(|e| e["type"] == kind && e["candidate"] == candidate).count();
    // The fast candidate ended on the first machine, its layer kept as a commit on the fleet's
    // repository: the second machine makes the layer again from it and runs only the one that
    // was in flight.
    assert_eq!(
        (
            count("candidate_started", 0),
            count("candidate_ended", 0),
            count("candidate_started", 1),
            count("candidate_ended", 1)
        ),
        (1, 1, 2, 1),
        "{events:?}"
    );
    let kept = events.iter().find(|e| e["type"] == "candidate_ended" && e["candidate"] == 0).expect("ended");
    assert!(kept["result"]["kept"].as_str().is_some_and(|k| k.len() == 40), "{kept}");
    let chosen: Vec<&Value> = events.iter().filter(|e| e["type"] == "candidate_chosen").collect();
    assert_eq!(chosen.len(), 1);
    assert_eq!(chosen[0]["winner"], 0, "the smaller change wins: {}", chosen[0]);
    // The winner's change landed whole: the file, the link, the executable, the deletion.
    let tree = git(&fleet.remote(), &["ls-tree", "-r", &format!("loopwright/{run}")]);
    let tree: Vec<(&str, &str)> = tree
        .lines()
        .filter_map(|l| {
            let (meta, path) = l.split_once('\t')?;
            Some((meta.split(' ').next()?, path))
        })
        .filter(|(_, path)| !path.starts_with(".loopwright/") && !["fast.sh", "slow.sh"].contains(path))
        .collect();
    assert_eq!(tree, [("100644", "README"), ("100644", "answer.txt"), ("120000", "link"), ("100755", "run.sh")]);
    // The kept layers go with the run's end.
    let refs = git(&fleet.remote(), &["for-each-ref", "refs/loopwright/"]);
    assert_eq!(refs, "", "kept layers left on the repository");
}
