//! `loopwright run`, `status`, `logs`, `approve`/`reject` on real workspaces.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::{Ws, st, stages};

#[test]
fn the_seed_bug_fix_pipeline_runs_end_to_end() {
    let ws = Ws::seed();
    let (code, result, stderr) = ws.json(&[
        "run",
        "bug-fix",
        "--task",
        "Fix login button not responding",
        "--task-id",
        "task-x7y8z9-fix-login",
        "--input",
        "error_context=Button click event not firing on mobile",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["status"], "success");
    assert_eq!(result["pipeline"], "bug-fix");
    assert_eq!(result["task_id"], "task-x7y8z9-fix-login");
    assert_eq!(result["failed_stage"], Value::Null);
    assert_eq!(result["rollback_performed"], false);
    assert_eq!(result["waiting"], Value::Null);
    assert_eq!(
        stages(&result),
        vec![st("diagnose", "success", 1, None), st("fix", "success", 1, None), st("verify", "success", 1, None)]
    );
    let keys: Vec<&str> = result["artifacts"].as_object().expect("artifacts").keys().map(String::as_str).collect();
    assert_eq!(keys, vec!["affected_files", "code_changes", "diagnosis", "verification_results"]);
    // diagnose read both initial inputs.
    assert_eq!(
        result["artifacts"]["diagnosis"],
        "diagnosis by diagnose (plan mode, attempt 1) for: Fix login button not responding\nRead 2 input section(s)."
    );
    // Progress on stderr: a line per stage start and end.
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with('▶') || l.starts_with('✓'))
        .map(|l| l.split("  ").next().unwrap_or(l))
        .collect();
    assert_eq!(
        lines,
        vec![
            "▶ diagnose [tech-lead, plan mode]",
            "✓ diagnose",
            "▶ fix [tech-lead, agent mode]",
            "✓ fix",
            "▶ verify [tech-lead, agent mode]",
            "✓ verify"
        ]
    );
}

fn full_feature(vars: &[&str]) -> Vec<(String, String, u64, Option<String>)> {
    let ws = Ws::seed();
    let mut args = vec!["run", "full-feature", "--task", "Add OAuth2 authentication", "--yes"];
    for v in vars {
        args.extend(["--var", v]);
    }
    let (code, result, stderr) = ws.json(&args);
    assert_eq!(code, 0, "{stderr}");
    stages(&result)
}

#[test]
fn conditions_skip_and_run_stages_according_to_vars() {
    let all = |arch: bool, sec: bool| {
        vec![
            st("plan", "success", 1, None),
            if arch {
                st("architecture_review", "success", 1, None)
            } else {
                st("architecture_review", "skipped", 0, Some("condition_false"))
            },
            if sec {
                st("security_review", "success", 1, None)
            } else {
                st("security_review", "skipped", 0, Some("condition_false"))
            },
            st("implement", "success", 1, None),
            st("observability_review", "success", 1, None),
            st("quality_review", "success", 1, None),
        ]
    };
    assert_eq!(full_feature(&[]), all(false, false));
    assert_eq!(full_feature(&["complexity=high"]), all(true, false));
    assert_eq!(full_feature(&["always_include=sre,ciso"]), all(false, true));
    assert_eq!(
        full_feature(&["complexity=high", "task_type=feature", "always_include=ciso", "tags=auth,web"]),
        all(true, true)
    );
    assert_eq!(full_feature(&["complexity=medium", "always_include="]), all(false, false));
}

const TWO_STAGES: &str = r#"name: flow
description: outputs flow into the next prompt
version: 1
vars:
  depth: 1
stages:
  - id: summarize
    agent: shell
    mode: plan
    description: Summarize
    run: "printf '## summary\nthe build is red\n## risk_count\n3\n'"
    outputs: [summary, risk_count]
  - id: act
    agent: parrot
    mode: agent
    description: Act on the summary
    inputs: [summary]
    outputs: [answer]
    condition: "stage_outputs.summarize.risk_count > depth"
  - id: check
    agent: shell
    mode: agent
    description: Fail
    run: ["echo checking", "echo 'boom: it broke' >&2; exit 1"]
  - id: never
    agent: shell
    mode: agent
    description: Not reached
    run: "touch never-ran"
"#;

fn flow_ws() -> Ws {
    let ws = Ws::empty();
    ws.write(".loopwright/pipelines/flow.yml", TWO_STAGES);
    // An agent that answers with the prompt it was given.
    ws.write(
        ".loopwright/agents/parrot.md",
        "---\nname: parrot\ncommand: [\"sh\", \"-c\", \"echo '## answer'; cat\"]\n---\nYou repeat.\n",
    );
    ws
}

#[test]
fn outputs_flow_into_a_later_stage_prompt_and_a_failing_stage_fails_the_run() {
    let ws = flow_ws();
    let (code, result, stderr) = ws.json(&["run", "flow", "--task", "Keep the build green", "--task-id", "t-flow"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(result["status"], "failed");
    assert_eq!(result["failed_stage"], "check");
    assert_eq!(
        stages(&result),
        vec![st("summarize", "success", 1, None), st("act", "success", 1, None), st("check", "failed", 1, None)]
    );
    let answer = result["artifacts"]["answer"].as_str().expect("answer");
    assert_eq!(
        answer,
        "You repeat.\n\n# Task\nKeep the build green\n\n# Stage `act` (agent mode)\nAct on the summary\n\nYou may change files in the workspace to do this stage's work.\n\n# Inputs\n## summary (from stage `summarize`)\nthe build is red\n\n# Outputs\nEnd your answer with one section per output, each starting with its heading line:"
    );
    assert!(!ws.path().join("never-ran").exists());
    assert!(stderr.contains("✗ check attempt 1 failed after"), "{stderr}");
    assert!(stderr.contains("    │ boom: it broke"), "{stderr}");
    // Files of the run: the task, one artifact per successful stage, metrics, the prompts.
    let run_id = result["run_id"].as_str().expect("run id");
    let mut files: Vec<String> = std::fs::read_dir(ws.path().join(".loopwright/state/runs").join(run_id))
        .expect("run dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        vec![
            "artifact-act.md",
            "artifact-summarize.md",
            "attempts-check.md",
            "metrics.md",
            "outputs",
            "prompts",
            "snapshots",
            "task.md"
        ]
    );
    let artifact = ws.read(&format!(".loopwright/state/runs/{run_id}/artifact-summarize.md"));
    let frontmatter: Vec<&str> = artifact.lines().take(12).collect();
    assert_eq!(
        &frontmatter[..8],
        &[
            "---",
            "entity_name: \"session.current.artifact.t-flow.summarize\"",
            "namespace: session.current",
            "category: artifact",
            "task_id: \"t-flow\"",
            "stage_id: summarize",
            "agent: \"shell\"",
            "status: success",
        ]
    );
    assert!(artifact.ends_with("---\n## risk_count\n3\n\n## summary\nthe build is red\n"), "{artifact}");
    let task = ws.read(&format!(".loopwright/state/runs/{run_id}/task.md"));
    assert!(task.contains("state: failed\n"), "{task}");

    // What the agent was told and what it printed, attempt by attempt.
    let (code, act, _) = ws.run(&["logs", run_id, "--stage", "act"]);
    assert_eq!(code, 0);
    assert!(act.starts_with("=== act, attempt 1\n"), "{act}");
    assert!(act.contains("--- prompt\nYou repeat.\n\n# Task\nKeep the build green\n"), "{act}");
    assert!(act.contains("--- stdout\n## answer\nYou repeat."), "{act}");
    let (_, check, _) = ws.run(&["logs", run_id, "--stage", "check", "--attempt", "1"]);
    assert!(check.contains("check: attempt 1 failed after"), "{check}");
    assert!(check.contains("--- stdout\nchecking\n--- stderr\nboom: it broke"), "{check}");
    let (code, _, stderr) = ws.run(&["logs", run_id, "--stage", "never"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("has no stage `never` that ran; stages: summarize, act, check"), "{stderr}");
    assert!(task.contains("| check | failed | 1 |"), "{task}");
}

#[test]
fn a_condition_on_typed_outputs_and_declared_vars_can_skip() {
    let ws = flow_ws();
    let (code, result, _) = ws.json(&["run", "flow", "--var", "depth=5", "--skip", "check"]);
    assert_eq!(code, 0);
    assert_eq!(
        stages(&result),
        vec![
            st("summarize", "success", 1, None),
            st("act", "skipped", 0, Some("condition_false")),
            st("check", "skipped", 0, Some("skip_list")),
            st("never", "success", 1, None),
        ]
    );
    let (_, stdout, _) = ws.run(&["logs", "latest"]);
    assert!(stdout.contains("act: condition `stage_outputs.summarize.risk_count > depth` with {\"depth\":5,\"stage_outputs\":{\"summarize.risk_count\":3}} -> {\"result\":\"false\"}"), "{stdout}");
}

#[test]
fn status_json_equals_run_json() {
    let ws = flow_ws();
    let (_, run, _) = ws.json(&["run", "flow", "--quiet"]);
    let run_id = run["run_id"].as_str().expect("run id").to_owned();
    let (code, status, _) = ws.json(&["status", &run_id]);
    assert_eq!(code, 1, "status exits with the run's exit code");
    assert_eq!(status, run);
    let (_, latest, _) = ws.json(&["status", "latest"]);
    assert_eq!(latest, run);
}

#[test]
fn status_lists_recent_runs_and_logs_prints_the_journal() {
    let ws = flow_ws();
    let (_, first, _) = ws.json(&["run", "flow", "--quiet"]);
    let (_, second, _) = ws.json(&["run", "flow", "--quiet", "--skip", "check"]);
    let (code, list, _) = ws.json(&["status"]);
    assert_eq!(code, 0);
    let got: Vec<(&str, &str)> = list
        .as_array()
        .expect("list")
        .iter()
        .map(|r| (r["run_id"].as_str().expect("id"), r["status"].as_str().expect("status")))
        .collect();
    assert_eq!(
        got,
        vec![(second["run_id"].as_str().expect("id"), "success"), (first["run_id"].as_str().expect("id"), "failed")]
    );
    let (_, table, _) = ws.run(&["status"]);
    assert!(table.starts_with("RUN                      PIPELINE             STATUS"), "{table}");

    let (code, stdout, _) = ws.run(&["logs", first["run_id"].as_str().expect("id")]);
    assert_eq!(code, 0);
    let kinds: Vec<&str> = stdout
        .lines()
        .map(|l| l.trim_start().splitn(3, "  ").nth(2).unwrap_or("").split(':').next().unwrap_or(""))
        .collect();
    assert_eq!(kinds.first(), Some(&"run started"));
    assert_eq!(kinds.last(), Some(&"run failed"));
    let types: Vec<String> = ws
        .journal(first["run_id"].as_str().expect("id"))
        .iter()
        .map(|e| e["event"]["type"].as_str().expect("type").to_owned())
        .collect();
    // A plan-mode stage is snapshotted too: plan mode is enforced, not trusted.
    assert_eq!(&types[..4], &["run_started", "attempt_started", "snapshot_taken", "process_started"]);
    assert_eq!(types.last().map(String::as_str), Some("run_finished"));
}

#[test]
fn an_approval_gate_waits_then_approve_continues_and_reject_ends_it_rejected() {
    let ws = Ws::seed();
    let (code, result, _) = ws.json(&["run", "full-feature", "--task", "x", "--quiet"]);
    assert_eq!(code, 3);
    assert_eq!(result["status"], "waiting");
    assert_eq!(result["waiting"], json!({"kind": "approval", "stage": "implement"}));
    let run_id = result["run_id"].as_str().expect("id").to_owned();
    let (code, done, _) = ws.json(&["approve", &run_id, "--quiet", "--comment", "ok"]);
    assert_eq!(code, 0);
    assert_eq!(done["status"], "success");
    let (_, log, _) = ws.run(&["logs", &run_id]);
    assert!(log.contains("implement: approved by tester: ok"), "{log}");

    let (_, second, _) = ws.json(&["run", "full-feature", "--task", "y", "--quiet"]);
    let (code, rejected, _) = ws.json(&["reject", second["run_id"].as_str().expect("id"), "--quiet", "--by", "alice"]);
    assert_eq!(code, 4);
    assert_eq!(rejected["status"], "rejected");
    assert_eq!(stages(&rejected).last(), Some(&st("implement", "cancelled", 0, None)));
    assert_eq!(
        rejected["answers"]
            .as_array()
            .expect("answers")
            .iter()
            .map(|a| (&a["by"], &a["answer"], &a["via"]))
            .collect::<Vec<_>>(),
        [(&json!("alice"), &json!("rejected"), &json!("cli"))]
    );
    // The table of runs says it too.
    let (_, listed, _) = ws.json(&["status"]);
    let statuses: Vec<(Value, Value)> =
        listed.as_array().expect("runs").iter().map(|r| (r["run_id"].clone(), r["status"].clone())).collect();
    assert_eq!(statuses, [(second["run_id"].clone(), json!("rejected")), (json!(run_id), json!("success"))]);
    let (code, _, stderr) = ws.run(&["approve", second["run_id"].as_str().expect("id")]);
    assert_eq!(code, 2);
    assert!(stderr.contains("is not waiting for an approval"), "{stderr}");
}

#[test]
fn start_from_reuses_outputs_of_earlier_runs_of_the_task() {
    let ws = flow_ws();
    let (code, _, _) = ws.json(&["run", "flow", "--task-id", "t-reuse", "--skip", "check", "--quiet"]);
    assert_eq!(code, 0);
    // Change what summarize would print: a rerun from `act` must use the stored output.
    let changed = TWO_STAGES.replace("the build is red", "the build is GREEN");
    ws.write(".loopwright/pipelines/flow.yml", &changed);
    let (code, result, stderr) =
        ws.json(&["run", "flow", "--task-id", "t-reuse", "--start-from", "act", "--skip", "check"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stages(&result),
        vec![
            st("act", "success", 1, None),
            st("check", "skipped", 0, Some("skip_list")),
            st("never", "success", 1, None)
        ]
    );
    assert!(
        result["artifacts"]["answer"]
            .as_str()
            .expect("answer")
            .contains("## summary (from stage `summarize`)\nthe build is red")
    );
}

#[test]
fn a_stage_past_its_timeout_fails_with_status_timeout_and_leaves_no_process() {
    let ws = Ws::empty();
    let marker = format!("lw-timeout-marker-{}", std::process::id());
    ws.write(
        ".loopwright/pipelines/slow.yml",
        &format!(
            "name: slow\ndescription: d\nversion: 1\nstages:\n  - id: wait\n    agent: shell\n    mode: agent\n    description: sleeps\n    run: \"sh -c 'sleep 30 # {marker}' & sleep 30; wait\"\n    timeout_minutes: 0.01\n"
        ),
    );
    let started = std::time::Instant::now();
    let (code, result, _) = ws.json(&["run", "slow", "--quiet"]);
    assert!(started.elapsed().as_secs() < 10);
    assert_eq!(code, 1);
    assert_eq!(stages(&result), vec![st("wait", "timeout", 1, None)]);
    assert_eq!(result["failed_stage"], "wait");
    let ps = std::process::Command::new("ps").args(["-eo", "args"]).output().expect("ps");
    let leftovers: Vec<String> =
        String::from_utf8_lossy(&ps.stdout).lines().filter(|l| l.contains(&marker)).map(str::to_owned).collect();
    assert_eq!(leftovers, Vec::<String>::new(), "no process of the timed-out stage is left");
}

#[test]
fn retries_are_counted_and_spaced_as_the_backoff_says() {
    let ws = Ws::empty();
    ws.write(
        ".loopwright/pipelines/flaky.yml",
        r#"name: flaky
description: fails twice, then passes
version: 1
stages:
  - id: fix
    agent: shell
    mode: agent
    description: flaky
    run: "echo x >> tries; n=$(wc -l < tries); if [ $n -lt 3 ]; then echo \"try $n failed\" >&2; exit 1; fi; echo fixed"
    retry:
      max_attempts: 3
      backoff: linear
      initial_delay_seconds: 1
"#,
    );
    let (code, result, stderr) = ws.json(&["run", "flaky"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stages(&result), vec![st("fix", "success", 3, None)]);
    assert!(stderr.contains("↻ Retry 2/3 for stage 'fix' in 1.00s (linear backoff 1s * 1)"), "{stderr}");
    assert!(stderr.contains("↻ Retry 3/3 for stage 'fix' in 2.00s (linear backoff 1s * 2)"), "{stderr}");

    // The journal: attempt starts spaced by the delays (1 s, then 2 s), within tolerance.
    let (_, log, _) = ws.run(&["logs", "latest", "--json"]);
    let starts: Vec<jiff::Timestamp> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("json"))
        .filter(|r| r["event"]["type"] == "attempt_started")
        .map(|r| r["at"].as_str().expect("at").parse().expect("timestamp"))
        .collect();
    assert_eq!(starts.len(), 3);
    let gaps: Vec<f64> = starts.windows(2).map(|w| w[1].duration_since(w[0]).as_secs_f64()).collect();
    // Never shorter than the backoff (1 s, then 2 s: linear growth); the wide slack above it
    // is for a loaded machine, where starting a process can itself take seconds.
    assert!((1.0..11.0).contains(&gaps[0]), "first gap {gaps:?}");
    assert!((2.0..12.0).contains(&gaps[1]), "second gap {gaps:?}");

    // The retry log (seed 004) and `status` explain the retries.
    let run_id = result["run_id"].as_str().expect("id");
    let attempts = ws.read(&format!(".loopwright/state/runs/{run_id}/attempts-fix.md"));
    assert!(attempts.contains("retry_log:\n  stage_id: fix\n  attempts:\n    - attempt: 1\n      status: failed\n      error: execution_error\n      message: \"exited with status 1\"\n"), "{attempts}");
    assert!(attempts.contains("  final_status: success\n"), "{attempts}");
    let (_, status, _) = ws.run(&["status", run_id]);
    assert!(status.contains("      attempt 1 failed (execution_error): exited with status 1 in "), "{status}");
    assert!(status.contains("; retried after 1.00s (linear backoff 1s * 1)\n"), "{status}");
    assert!(status.contains("      attempt 3 success in "), "{status}");

    // Seed 001's retry logs, append-only, one line per fact.
    let task = result["task_id"].as_str().expect("task");
    let log = ws.read(".loopwright/state/logs/retry.log");
    let facts: Vec<&str> = log.lines().map(|l| l.splitn(4, "] ").nth(3).unwrap_or("")).collect();
    assert_eq!(
        facts,
        vec![
            "attempt=1 status=failed type=execution_error",
            "error=\"exited with status 1\"",
            "retrying attempt=2 delay_ms=1000 reason=\"execution_error after exited with status 1; linear backoff 1s * 1\"",
            "attempt=2 status=failed type=execution_error",
            "error=\"exited with status 1\"",
            "retrying attempt=3 delay_ms=2000 reason=\"execution_error after exited with status 1; linear backoff 1s * 2\"",
            "attempt=3 status=success",
            "resolved status=success",
        ]
    );
    assert!(log.lines().all(|l| l.contains(&format!("[RETRY] [{task}:fix] "))), "{log}");
    let events: Vec<String> = ws
        .read(".loopwright/state/logs/retry.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("json line")["event"].as_str().expect("event").to_owned())
        .collect();
    assert_eq!(events, vec!["attempt", "retry_scheduled", "attempt", "retry_scheduled", "attempt", "resolved"]);
}

#[test]
fn stats_summarise_retries_and_failure_patterns() {
    let ws = Ws::empty();
    ws.write(
        ".loopwright/pipelines/flaky.yml",
        r#"name: flaky
description: one retry, then a stage that cannot work
version: 1
stages:
  - id: fetch
    agent: shell
    mode: agent
    description: fails once with a missing module
    run: "if [ ! -f tried ]; then touch tried; echo \"ModuleNotFoundError: No module named 'requests'\" >&2; exit 1; fi; echo ok"
    retry:
      max_attempts: 2
      backoff: fixed
      initial_delay_seconds: 1
  - id: deploy
    agent: shell
    mode: agent
    description: needs a tool that is not installed
    run: "frobnicate-deploy --now"
"#,
    );
    let (code, _, _) = ws.json(&["run", "flaky", "--quiet"]);
    assert_eq!(code, 1);
    // Each failed attempt is journaled with the failure pattern its output matched.
    let (_, log, _) = ws.run(&["logs", "latest"]);
    assert!(log.contains("fetch: attempt 1 failed after"), "{log}");
    assert!(log.contains("(execution_error, pattern import-not-found): exited with status 1"), "{log}");
    assert!(log.contains("(execution_error, pattern command-not-found): exited with status 127"), "{log}");
    let (code, stats, _) = ws.json(&["stats"]);
    assert_eq!(code, 0);
    assert_eq!(
        (
            stats["stages_run"].clone(),
            stats["first_attempt_success"].clone(),
            stats["retried"].clone(),
            stats["retry_success"].clone()
        ),
        (json!(2), json!(0), json!(1), json!(1))
    );
    assert_eq!(
        stats["by_pattern"],
        json!({
            "import-not-found": {"occurrences": 1, "success_rate": 1.0, "avg_attempts": 2.0},
            "command-not-found": {"occurrences": 1, "success_rate": 0.0, "avg_attempts": 1.0},
        })
    );
    let (_, table, _) = ws.run(&["stats"]);
    assert!(table.contains("| Retried | 1 (50%) |"), "{table}");
    assert!(table.contains("| fetch | 2 | success (retry worked) | import-not-found |"), "{table}");
    assert!(table.contains("| command-not-found | 1 | 0% | 1.0 |"), "{table}");
}
