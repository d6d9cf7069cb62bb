//! Chaos: random kill -9 of loopwright and `resume`, over a pipeline with a plan stage, an
//! agent stage with a `git_revert` rollback, a closed-loop stage and a failing check that
//! triggers the rollback. Counter files outside the workspace record every start of every
//! stage. After the last resume: no stage ran again after its end was journaled, nothing was
//! lost (the result equals a clean run's), no process of the run is left, and the commits are
//! a clean run's.
//!
//! CI runs a bounded number of kills; `LW_CHAOS_KILLS=200 cargo test chaos` runs more.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Ws, processes_with, spawn, stages};

fn pipeline(out: &Path, token: &str) -> String {
    let o = out.display();
    format!(
        r#"name: chaos
description: d
version: 1
stages:
  - id: plan
    description: d
    agent: shell
    mode: plan
    run: "echo x >> {o}/plan.starts; sleep 0.05; cat calc.txt # {token}"
  - id: build
    description: d
    agent: shell
    mode: agent
    run: "echo x >> {o}/build.starts; echo built > build.txt; sleep 0.05 # {token}"
    rollback: {{strategy: git_revert}}
  - id: fix
    description: d
    agent: shell
    mode: agent
    skill: closed-loop-execution
    run: "echo x >> {o}/fix.starts; echo right > calc.txt; sleep 0.05 # {token}"
    checks:
      - {{name: right, type: test, command: "grep -q right calc.txt"}}
  - id: verify
    description: d
    agent: shell
    mode: plan
    run: "echo x >> {o}/verify.starts; sleep 0.05; exit 1 # {token}"
"#
    )
}

fn chaos_ws(token: &str) -> (Ws, tempfile::TempDir) {
    let out = tempfile::tempdir().expect("tempdir");
    let ws = Ws::empty();
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.write("calc.txt", "wrong\n");
    ws.write(".loopwright/pipelines/chaos.yml", &pipeline(out.path(), token));
    ws.init_git();
    (ws, out)
}

/// A small deterministic generator (xorshift), seeded from the clock; the seed is printed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The journal as (kind, stage) pairs.
fn journal(ws: &Ws, run: &str) -> Vec<(String, String)> {
    ws.journal(run)
        .iter()
        .map(|e| {
            let event = &e["event"];
            (
                event["type"].as_str().unwrap_or_default().to_owned(),
                event["stage"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn subjects(ws: &Ws, task: &str) -> Vec<String> {
    ws.git(&["log", "--format=%s"]).lines().map(|s| s.replace(task, "TASK")).collect()
}

fn starts(out: &Path, stage: &str) -> usize {
    std::fs::read_to_string(out.join(format!("{stage}.starts"))).map_or(0, |t| t.lines().count())
}

#[test]
fn random_kills_and_resumes_lose_and_repeat_nothing() {
    let kills_wanted: usize = std::env::var("LW_CHAOS_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1;
    eprintln!("chaos seed {seed}");
    let mut rng = Rng(seed);

    // The clean run.
    let clean_token = format!("lw-chaos-clean-{}", std::process::id());
    let (clean, _clean_out) = chaos_ws(&clean_token);
    let (code, clean_result, stderr) = clean.json(&["run", "chaos"]);
    assert_eq!(code, 1, "the clean run fails at verify and rolls back: {stderr}");
    let clean_subjects = subjects(&clean, clean_result["task_id"].as_str().expect("task"));

    let mut kills = 0;
    let mut runs = 0;
    while kills < kills_wanted {
        runs += 1;
        let token = format!("lw-chaos-{}-{runs}", std::process::id());
        let (ws, out) = chaos_ws(&token);
        let mut child = spawn(&ws, &["run", "chaos"]);
        let mut run_id: Option<String> = None;
        let deadline = Instant::now() + Duration::from_secs(120);
        let code = loop {
            assert!(Instant::now() < deadline, "seed {seed}: the run never ended");
            std::thread::sleep(Duration::from_millis(rng.below(250)));
            match child.try_wait().expect("wait") {
                Some(status) => break status.code().unwrap_or(-1),
                // Enough kills: this one is let finish (on a loaded machine a resume can take
                // longer than any pause between kills, and would never end).
                None if kills >= kills_wanted => continue,
                None => {
                    let _ = child.kill();
                    let _ = child.wait();
                    kills += 1;
                }
            }
            // The run exists once its first event is journaled; before that, start over.
            if run_id.is_none() {
                let (_, stdout, _) = ws.run(&["status", "latest", "--json"]);
                run_id = serde_json::from_str::<Value>(&stdout)
                    .ok()
                    .and_then(|status| status["run_id"].as_str().map(str::to_owned));
            }
            child = match &run_id {
                Some(run) => spawn(&ws, &["resume", run]),
                None => spawn(&ws, &["run", "chaos"]),
            };
        };
        let run = run_id.clone().unwrap_or_else(|| {
            let (_, status, _) = ws.json(&["status", "latest"]);
            status["run_id"].as_str().expect("run").to_owned()
        });
        // A resume of a run that ended reports it; the run itself failed at verify.
        let (_, result, _) = ws.json(&["status", &run]);
        assert!(code == 1 || result["status"] == "failed", "seed {seed}: exit {code}, {result}");
        assert_eq!(stages(&result), stages(&clean_result), "seed {seed}: nothing lost");
        assert_eq!(result["rollback_performed"], true, "seed {seed}");
        let task = result["task_id"].as_str().expect("task");
        assert_eq!(subjects(&ws, task), clean_subjects, "seed {seed}: the commits are a clean run's");
        assert_eq!(processes_with(&token), Vec::<u32>::new(), "seed {seed}: no orphan");
        // Nothing ran again after its end was journaled, and every start was journaled.
        let events = journal(&ws, &run);
        for stage in ["plan", "build", "fix", "verify"] {
            let ends = events.iter().position(|(k, s)| s == stage && (k == "attempt_succeeded" || k == "stage_failed"));
            if let Some(end) = ends {
                assert!(
                    !events[end..].iter().any(|(k, s)| s == stage && k == "attempt_started"),
                    "seed {seed}: {stage} started again after it ended: {events:?}"
                );
            }
            let journaled = events.iter().filter(|(k, s)| s == stage && k == "attempt_started").count();
            assert!(starts(out.path(), stage) <= journaled, "seed {seed}: {stage} ran without a journaled start");
        }
    }
    eprintln!("chaos: {kills} kills over {runs} runs, seed {seed}");
}
