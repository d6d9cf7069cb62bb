//! The closed loop (seed 000 / seed 001) through the binary, on small real projects with
//! scripted agents (`runner: command`).

use serde_json::json;

use crate::support::Ws;

/// An agent file running `sh .loopwright/agents/NAME.sh`.
fn agent(ws: &Ws, name: &str, script: &str) {
    ws.write(
        &format!(".loopwright/agents/{name}.md"),
        &format!("---\nname: {name}\nrunner: command\ncommand: [\"sh\", \".loopwright/agents/{name}.sh\"]\n---\nYou fix code.\n"),
    );
    ws.write(&format!(".loopwright/agents/{name}.sh"), script);
}

/// A one-stage pipeline whose stage runs the closed loop with `extra` (YAML lines, indented 4).
fn pipeline(ws: &Ws, agent: &str, mode: &str, extra: &str) {
    ws.write(
        ".loopwright/pipelines/loop.yml",
        &format!(
            "name: loop\ndescription: closed loop\nversion: 1\nstages:\n  - id: implement\n    description: Make the checks pass\n    agent: {agent}\n    mode: {mode}\n    skill: closed-loop-execution\n{extra}"
        ),
    );
}

fn closed_loop(result: &serde_json::Value) -> serde_json::Value {
    result["stages_executed"][0]["closed_loop"].clone()
}

#[test]
fn same_error_escalates_and_respond_fix_reaches_the_next_prompt_on_a_rust_project() {
    let ws = Ws::empty();
    ws.write("Cargo.toml", "[package]\nname = \"mini\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n");
    ws.write(
        "src/lib.rs",
        "/// Subtracts, never below zero.\npub fn sub(a: u32, b: u32) -> u32 {\n    a - b\n}\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    fn sub_saturates() {\n        assert_eq!(sub(2, 5), 0);\n    }\n}\n",
    );
    // Until a human says how, the agent only adds a comment: the same failure every time.
    agent(
        &ws,
        "dev",
        r#"prompt=$(cat)
if printf '%s' "$prompt" | grep -q 'User provided fix: use saturating_sub'; then
  sed 's/a - b/a.saturating_sub(b)/' src/lib.rs > src/lib.rs.new && mv src/lib.rs.new src/lib.rs
  echo "applied the user's fix"
else
  echo "// attempt $LOOPWRIGHT_ATTEMPT looked at this" >> src/lib.rs
  echo "tried something"
fi
"#,
    );
    pipeline(
        &ws,
        "dev",
        "agent",
        "    closed_loop:\n      max_retries: 6\n    checks:\n      - name: tests_pass\n        type: test\n        command: cargo test --quiet --offline\n",
    );
    let (code, result, stderr) = ws.json(&["run", "loop", "--task", "make sub saturate", "--task-id", "task-sub"]);
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(result["status"], "waiting");
    assert_eq!(result["waiting"], json!({"kind": "escalation", "stage": "implement"}));
    assert_eq!(
        closed_loop(&result),
        json!({
            "status": "escalated",
            "attempts": 3,
            "failure_pattern": "test-failure",
            "escalation_reason": "Same test-failure pattern with analyze_then_fix strategy failed twice. No alternate strategies available."
        })
    );
    // Attempt 1 used the pattern's strategy, attempt 2 the alternative, attempt 3 had none left.
    assert!(
        stderr.contains("attempt=1 pattern=test-failure strategy=analyze_then_fix result=failed next=fix"),
        "{stderr}"
    );
    assert!(
        stderr.contains("attempt=2 pattern=test-failure strategy=context_expand result=failed next=fix"),
        "{stderr}"
    );
    assert!(stderr.contains("attempt=3 pattern=test-failure strategy=- result=failed next=escalate"), "{stderr}");
    let run = result["run_id"].as_str().expect("run id").to_owned();
    // context_expand put the code around the failing line into attempt 3's prompt.
    let prompt3 = ws.read(&format!(".loopwright/state/runs/{run}/prompts/implement-3.md"));
    assert!(prompt3.contains("<expanded_context strategy=\"context_expand\">"), "{prompt3}");
    assert!(prompt3.contains(">    3 |     a - b"), "{prompt3}");
    assert!(prompt3.contains("This is retry attempt 3 of 6."), "{prompt3}");

    // `status` shows seed 001's escalation message.
    let (code, shown, _) = ws.run(&["status", &run]);
    assert_eq!(code, 3);
    for part in [
        "## Task Escalation Required",
        "**Attempts:** 3 of 6",
        "| Attempt | Timestamp | Failure Type | Pattern | Strategy | Error |",
        "### Last Error Details",
        "- `src/lib.rs (modified)`",
        "**Your options:**",
    ] {
        assert!(shown.contains(part), "missing {part:?} in:\n{shown}");
    }

    // The human's instruction reaches the next prompt as <user_intervention>, and works.
    let (code, result, stderr) = ws.json(&["respond", &run, "fix", "use", "saturating_sub"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        closed_loop(&result),
        json!({"status": "success", "attempts": 4, "failure_pattern": null,
               "escalation_reason": "Same test-failure pattern with analyze_then_fix strategy failed twice. No alternate strategies available."})
    );
    let prompt4 = ws.read(&format!(".loopwright/state/runs/{run}/prompts/implement-4.md"));
    assert!(
        prompt4.contains("<retry_context attempt=\"4\" max_attempts=\"9\">\n  <user_intervention>\n    <instruction priority=\"high\">\n      User provided fix: use saturating_sub\n"),
        "{prompt4}"
    );
    assert!(ws.read("src/lib.rs").contains("a.saturating_sub(b)"));
    let log = ws.read(".loopwright/state/logs/retry.log");
    assert!(log.contains("[task-sub:implement] user_response=\"fix\" by=tester"), "{log}");
    assert!(log.contains("[task-sub:implement] resolved status=success"), "{log}");
}

#[test]
fn an_exhausted_budget_writes_a_dead_letter_and_similar_failures_are_aggregated() {
    let ws = Ws::empty();
    ws.write("stats.py", "def mean(xs):\n    return sum(xs) / len(xs)\n");
    ws.write(
        "tests/test_stats.py",
        "import unittest\n\nfrom stats import mean\n\n\nclass TestMean(unittest.TestCase):\n    def test_empty(self):\n        self.assertEqual(mean([]), 0)\n\n\nif __name__ == '__main__':\n    unittest.main()\n",
    );
    agent(&ws, "dev", "cat > /dev/null\necho \"# attempt $LOOPWRIGHT_ATTEMPT\" >> stats.py\necho done\n");
    pipeline(
        &ws,
        "dev",
        "agent",
        "    closed_loop:\n      max_retries: 2\n    checks:\n      - name: tests_pass\n        type: test\n        command: python3 -m unittest discover -s tests -v\n",
    );
    let (code, result, stderr) =
        ws.json(&["run", "loop", "--task", "mean of nothing is 0", "--task-id", "task-mean-1"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(result["failed_stage"], "implement");
    assert_eq!(
        closed_loop(&result),
        json!({"status": "failed", "attempts": 2, "failure_pattern": "test-failure", "escalation_reason": null})
    );
    assert!(
        stderr.contains("[closed-loop] task=task-mean-1:implement dead_letter reason=retry_budget_exhausted"),
        "{stderr}"
    );
    let letter = ws.read(".loopwright/state/dead-letters/task-mean-1.md");
    for part in [
        "category: dead-letter\ntask_id: task-mean-1\n",
        "original_task: \"mean of nothing is 0\"\ntotal_attempts: 2\nfinal_pattern: test-failure\n",
        "blocked_reason: retry_budget_exhausted\n",
        "similar_failures: 0\nerror_signature: \"test-failure:py:zerodivisionerror_division_zero\"\n",
        "## Error Chain\n\n### Attempt 1 (",
        "- **Pattern:** test-failure (same)\n",
        "## Files Modified\n\n- stats.py (modified)\n",
        "## Suggested Manual Steps\n",
        "## Context for Retry\n",
    ] {
        assert!(letter.contains(part), "missing {part:?} in:\n{letter}");
    }
    // The same failure in another task: the second dead letter says so and suggests.
    ws.write("stats.py", "def mean(xs):\n    return sum(xs) / len(xs)\n");
    let (code, _, _) = ws.json(&["run", "loop", "--task", "mean again", "--task-id", "task-mean-2"]);
    assert_eq!(code, 1);
    let second = ws.read(".loopwright/state/dead-letters/task-mean-2.md");
    assert!(second.contains("similar_failures: 1\n"), "{second}");
    assert!(second.contains("## Smart Suggestions\n\nBased on 1 similar failure:\n"), "{second}");
    assert!(second.contains("### Similar Failures\n\n- task-mean-1: "), "{second}");
    assert!(
        second.contains("2. **Specific area to investigate:** `stats.py` (touched by 2 of the failures)"),
        "{second}"
    );
    let (code, list, _) = ws.json(&["dead-letters", "list"]);
    assert_eq!(code, 0);
    let tasks: Vec<&str> = list.as_array().expect("list").iter().map(|l| l["task_id"].as_str().expect("id")).collect();
    assert_eq!(tasks, vec!["task-mean-2", "task-mean-1"]);
    assert_eq!(list[0]["similar_failures"], 1);
    let (code, shown, _) = ws.run(&["dead-letters", "show", "task-mean-1"]);
    assert_eq!((code, shown), (0, letter));
    // Seed 000's aggregated metrics.
    let (code, stats, _) = ws.json(&["stats"]);
    assert_eq!(code, 0);
    assert_eq!(
        (&stats["dead_letters"], &stats["dead_letter_rate"], &stats["pre_validation_runs"]),
        (&json!(2), &json!(1.0), &json!(4))
    );
    assert_eq!(
        stats["by_pattern"]["test-failure"],
        json!({"occurrences": 4, "success_rate": 0.0, "avg_attempts": 2.0})
    );
    let (_, summary, _) = ws.run(&["stats"]);
    assert!(summary.contains("| Dead letters | 2 (100%) |"), "{summary}");
}

#[test]
fn unclassified_failures_seen_four_times_propose_a_candidate_pattern() {
    let ws = Ws::empty();
    agent(&ws, "dev", "cat > /dev/null\necho ok\n");
    pipeline(
        &ws,
        "dev",
        "agent",
        "    closed_loop:\n      max_retries: 1\n    checks:\n      - name: widget\n        type: custom\n        command: echo 'widget frobnication incomplete for slot 7'; exit 1\n",
    );
    for n in 1..=4 {
        let (code, result, stderr) = ws.json(&["run", "loop", "--task-id", &format!("task-w{n}")]);
        assert_eq!(code, 1, "{stderr}");
        assert_eq!(closed_loop(&result)["failure_pattern"], serde_json::Value::Null);
    }
    let fourth = ws.read(".loopwright/state/dead-letters/task-w4.md");
    assert!(fourth.contains("similar_failures: 3\n"), "{fourth}");
    assert!(fourth.contains("## Pattern Learning Candidate\n\nThis failure matches 3 others"), "{fourth}");
    let candidates: Vec<String> = std::fs::read_dir(ws.path().join(".loopwright/state/dead-letters"))
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("candidate-pattern-"))
        .collect();
    assert_eq!(candidates.len(), 1, "{candidates:?}");
    let candidate = ws.read(&format!(".loopwright/state/dead-letters/{}", candidates[0]));
    assert!(
        candidate.contains("- {regex: 'widget frobnication incomplete for slot \\d+', strength: 0.8}"),
        "{candidate}"
    ); // `stats` counts what a human did with it: waiting, rejected, then accepted by adding
    // its pattern to the project's file.
    let counts = |ws: &Ws| ws.json(&["stats"]).1["candidate_patterns"].clone();
    assert_eq!(counts(&ws), json!({"proposed": 1, "accepted": 0, "rejected": 0}));
    let path = format!(".loopwright/state/dead-letters/{}", candidates[0]);
    ws.write(&path, &candidate.replace("status: proposed", "status: rejected"));
    assert_eq!(counts(&ws), json!({"proposed": 0, "accepted": 0, "rejected": 1}));
    let proposal = candidate.split("```yaml\n").nth(1).and_then(|y| y.split("```").next()).expect("a yaml proposal");
    ws.write(".loopwright/failure-patterns.yml", proposal);
    assert_eq!(counts(&ws), json!({"proposed": 0, "accepted": 1, "rejected": 0}));
    let (_, text, _) = ws.run(&["stats"]);
    assert!(text.contains("Candidate patterns: 1 accepted, 0 rejected, 0 waiting for review"), "{text}");
}

#[test]
fn a_permission_failure_escalates_at_once_and_skip_goes_on() {
    let ws = Ws::empty();
    agent(
        &ws,
        "dev",
        "cat > /dev/null\nmkdir -p scripts\nprintf '#!/bin/sh\\necho checked\\n' > scripts/check.sh\necho wrote the check\n",
    );
    ws.write(
        ".loopwright/pipelines/loop.yml",
        "name: loop\ndescription: d\nversion: 1\nstages:\n  - id: implement\n    description: Write the check script\n    agent: dev\n    mode: agent\n    skill: closed-loop-execution\n    outputs: [notes]\n    checks:\n      - name: script_runs\n        type: command\n        command: ./scripts/check.sh\n  - id: report\n    description: Report\n    agent: shell\n    mode: plan\n    inputs: [notes]\n    run: echo reported\n",
    );
    let (code, result, stderr) = ws.json(&["run", "loop", "--task-id", "task-perm"]);
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(
        closed_loop(&result),
        json!({"status": "escalated", "attempts": 1, "failure_pattern": "permission-error",
               "escalation_reason": "permission-error is not retryable: it needs a human (pattern strategy `escalate`)"})
    );
    let run = result["run_id"].as_str().expect("run id").to_owned();
    // The stage the run waits at reads `waiting`, as on the dashboard.
    let (code, shown, _) = ws.run(&["status", &run]);
    assert_eq!(code, 3);
    let line = shown.lines().find(|l| l.contains(" implement ")).unwrap_or_default().to_owned();
    assert!(line.starts_with("  ⚑ implement                waiting    1 attempt"), "{shown}");
    let (code, result, stderr) = ws.json(&["respond", &run, "skip"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("[SKIPPED] stage `implement`\n  Reason: user escalation after 1 failed attempt(s)\n  Impact: warning: report reads its outputs (notes) and may fail\n"), "{stderr}");
    assert_eq!(result["stages_executed"][0]["status"], "skipped");
    assert_eq!(result["stages_executed"][0]["reason"], "escalation_skip");
    assert_eq!(closed_loop(&result)["status"], "escalated");
}

#[test]
fn a_plan_mode_stage_that_writes_is_restored_and_escalated_and_validation_routes_through_analyze() {
    let ws = Ws::empty();
    ws.write("notes.txt", "original\n");
    agent(&ws, "planner", "cat > /dev/null\necho changed > notes.txt\necho planned\n");
    pipeline(&ws, "planner", "plan", "    checks:\n      - name: ok\n        type: command\n        command: 'true'\n");
    let (code, result, stderr) = ws.json(&["run", "loop", "--task-id", "task-plan"]);
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(ws.read("notes.txt"), "original\n", "the plan-mode write was undone");
    assert!(
        closed_loop(&result)["escalation_reason"]
            .as_str()
            .expect("reason")
            .contains("a security violation is never retried automatically"),
        "{result}"
    );
    // `abort` stops the run and keeps its state.
    let run = result["run_id"].as_str().expect("run id").to_owned();
    let (code, result, stderr) = ws.json(&["respond", &run, "abort"]);
    assert_eq!(code, 4, "{stderr}");
    assert_eq!(
        (&result["status"], &result["stages_executed"][0]["status"]),
        (&json!("cancelled"), &json!("cancelled"))
    );
    assert_eq!(closed_loop(&result)["status"], "escalated");
    assert_eq!(result["rollback_performed"], false);

    // VALIDATE: a changed JSON file that does not parse fails before the checks run, goes
    // through ANALYZE, and the next GENERATE writes a valid one.
    let ws = Ws::empty();
    agent(
        &ws,
        "dev",
        "cat > /dev/null\nif [ \"$LOOPWRIGHT_ATTEMPT\" = 1 ]; then echo '{\"port\": 80,' > config.json; else echo '{\"port\": 80}' > config.json; fi\necho wrote\n",
    );
    pipeline(&ws, "dev", "agent", "    checks:\n      - name: ok\n        type: command\n        command: 'true'\n");
    let (code, result, stderr) = ws.json(&["run", "loop", "--task-id", "task-cfg"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(closed_loop(&result)["attempts"], 2);
    assert!(stderr.contains("validation=failed gates=3 violations=1"), "{stderr}");
    let (_, logs, _) = ws.run(&["logs", "latest"]);
    assert!(
        logs.contains("implement: attempt 1 VALIDATE 3 gate(s): config.json: invalid JSON: EOF while parsing"),
        "{logs}"
    );
    assert!(logs.contains("implement: attempt 1 ANALYZE -> fix"), "{logs}");
    assert!(!logs.contains("attempt 1 EVALUATE"), "checks do not run after a failed validation:\n{logs}");
}

#[test]
fn a_regression_in_a_dependent_file_is_caught_and_fed_back() {
    let ws = Ws::empty();
    ws.write("calc/__init__.py", "");
    ws.write("calc/core.py", "def fmt(x):\n    return f\"{x:.2f}\"\n");
    ws.write("calc/report.py", "from calc.core import fmt\n\n\ndef total(xs):\n    return fmt(sum(xs))\n");
    ws.write(
        "tests/test_core.py",
        "import unittest\n\nfrom calc.core import fmt\n\n\nclass TestFmt(unittest.TestCase):\n    def test_fmt(self):\n        self.assertEqual(fmt(1.25), \"1.25\")\n",
    );
    ws.write(
        "tests/test_report.py",
        "import unittest\n\nfrom calc.report import total\n\n\nclass TestReport(unittest.TestCase):\n    def test_total(self):\n        self.assertEqual(total([1, 2]), \"3.00\")\n",
    );
    ws.write("tests/__init__.py", "");
    // Attempt 1 changes fmt() for its own test and breaks report.total(); after the regression
    // report, attempt 2 keeps the old behaviour as the default.
    agent(
        &ws,
        "dev",
        r#"prompt=$(cat)
if printf '%s' "$prompt" | grep -q 'new test failures'; then
  printf 'def fmt(x, digits=2):\n    return f"{x:.{digits}f}"\n' > calc/core.py
  sed 's/fmt(1.25), "1.2"/fmt(1.25, 1), "1.2"/' tests/test_core.py > t && mv t tests/test_core.py
else
  printf 'def fmt(x):\n    return f"{x:.1f}"\n' > calc/core.py
  sed 's/"1.25"/"1.2"/' tests/test_core.py > t && mv t tests/test_core.py
fi
echo changed fmt
"#,
    );
    pipeline(
        &ws,
        "dev",
        "agent",
        "    checks:\n      - name: core_tests\n        type: test\n        command: python3 -m unittest tests.test_core\n",
    );
    ws.write(
        ".loopwright/verification-gates.yml",
        "version: 1\nregression_detection:\n  enabled_for_complexity: [medium, high]\n  search_depth: 2\n  test_command: python3 -m unittest discover -v\n",
    );
    let (code, result, stderr) = ws.json(&[
        "run",
        "loop",
        "--task",
        "fmt with one decimal",
        "--task-id",
        "task-fmt",
        "--var",
        "complexity=medium",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(closed_loop(&result)["attempts"], 2);
    assert!(stderr.contains("regression_check=enabled complexity=medium"), "{stderr}");
    assert!(stderr.contains("regressions_detected=1"), "{stderr}");
    assert!(stderr.contains("attempt=1 pattern=regression-detected strategy=context_expand result=failed"), "{stderr}");
    assert!(stderr.contains("regression_check=passed"), "{stderr}");
    let run = result["run_id"].as_str().expect("run id").to_owned();
    let prompt = ws.read(&format!(".loopwright/state/runs/{run}/prompts/implement-2.md"));
    assert!(prompt.contains("tests/test_report.py: 1 new failure(s): test_total"), "{prompt}");
    // context_expand read the dependent file that broke.
    assert!(prompt.contains("--- tests/test_report.py ---\n"), "{prompt}");
    assert!(prompt.contains("self.assertEqual(total([1, 2]), \"3.00\")"), "{prompt}");
    let (_, logs, _) = ws.run(&["logs", &run]);
    assert!(
        logs.contains("implement: attempt 1 regression check of 2 dependent(s): tests/test_report.py +1 failure(s)"),
        "{logs}"
    );
    assert!(ws.read("calc/core.py").contains("digits=2"));
    let baseline = ws.read(&format!(".loopwright/state/runs/{run}/baseline-implement.md"));
    assert!(
        baseline.contains("baseline_results:\n  - {file: \"tests/test_core.py\", test_count: 1, pass_count: 1, fail_count: 0}\n  - {file: \"tests/test_report.py\", test_count: 1, pass_count: 1, fail_count: 0}\n"),
        "{baseline}"
    );
    let metrics = ws.read(&format!(".loopwright/state/runs/{run}/metrics.md"));
    assert!(
        metrics
            .contains("  patterns_encountered: [\"regression-detected\"]\n  strategies_used: [\"context_expand\"]\n"),
        "{metrics}"
    );
    assert!(metrics.contains("  regression_checks_run: 2\n  regression_checks_skipped: 0\n  regressions_detected: 1\n  regressions_auto_fixed: 1\n"), "{metrics}");

    // Low complexity skips regression detection: the same breaking change passes.
    let ws2 = Ws::empty();
    for f in [
        "calc/__init__.py",
        "calc/core.py",
        "calc/report.py",
        "tests/test_core.py",
        "tests/test_report.py",
        "tests/__init__.py",
    ] {
        ws2.write(f, "");
    }
    agent(&ws2, "dev", "cat > /dev/null\necho nothing\n");
    pipeline(&ws2, "dev", "agent", "    checks:\n      - name: ok\n        type: command\n        command: 'true'\n");
    let (code, _, stderr) = ws2.json(&["run", "loop", "--var", "complexity=low"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("regression_check=skipped complexity=low"), "{stderr}");
}

#[test]
fn auto_fix_runs_the_projects_formatter_and_dependency_check_reads_the_manifest() {
    // A Rust project whose formatting check fails: auto_fix runs `cargo fmt`, the failed check
    // passes afterwards, and the next attempt succeeds.
    let ws = Ws::empty();
    ws.write("Cargo.toml", "[package]\nname = \"fmtme\"\nversion = \"0.1.0\"\nedition = \"2021\"\n");
    ws.write("src/lib.rs", "pub fn add(a:u32,b:u32)->u32{a+b}\n");
    agent(&ws, "dev", "cat > /dev/null\necho looked\n");
    pipeline(
        &ws,
        "dev",
        "agent",
        "    checks:\n      - name: fmt_clean\n        type: lint\n        command: cargo fmt --check\n",
    );
    let (code, result, stderr) = ws.json(&["run", "loop", "--task-id", "task-fmt"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(closed_loop(&result)["attempts"], 2);
    assert!(stderr.contains("attempt=1 pattern=format-error strategy=auto_fix result=failed"), "{stderr}");
    assert!(stderr.contains("FIX auto_fix: ran `cargo fmt` (exit 0); the failed check passes afterwards"), "{stderr}");
    assert_eq!(ws.read("src/lib.rs"), "pub fn add(a: u32, b: u32) -> u32 {\n    a + b\n}\n");

    // A Python import of a module the project does not declare.
    let ws = Ws::empty();
    ws.write("requirements.txt", "requests>=2\n");
    ws.write("app.py", "import yamlish\n");
    agent(&ws, "dev", "cat > /dev/null\necho looked\n");
    pipeline(
        &ws,
        "dev",
        "agent",
        "    closed_loop:\n      max_retries: 2\n    checks:\n      - name: imports\n        type: build\n        command: python3 app.py\n",
    );
    let (code, result, stderr) = ws.json(&["run", "loop", "--task-id", "task-dep"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(closed_loop(&result)["failure_pattern"], "import-not-found");
    let run = result["run_id"].as_str().expect("run id");
    let prompt = ws.read(&format!(".loopwright/state/runs/{run}/prompts/implement-2.md"));
    assert!(
        prompt.contains("`yamlish` is missing from requirements.txt: add it as a dependency (or fix the import if the name is wrong)"),
        "{prompt}"
    );
}

#[test]
fn a_check_that_exits_127_saying_no_such_file_is_a_missing_command() {
    // The test script runs a program that is not installed through env(1), whose message
    // ("env: 'pytset': No such file or directory") no pattern recognises; the 127 with words of
    // something not found does.
    let ws = Ws::empty();
    agent(&ws, "dev", "cat > /dev/null\necho looked\n");
    ws.write("tools/test.sh", "echo running the suite\nexec env pytset -q\n");
    pipeline(
        &ws,
        "dev",
        "agent",
        "    closed_loop:\n      max_retries: 2\n    checks:\n      - name: tests\n        type: test\n        command: sh tools/test.sh\n",
    );
    let (code, result, stderr) = ws.json(&["run", "loop", "--task-id", "task-127"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(closed_loop(&result)["failure_pattern"], "command-not-found");
    assert!(stderr.contains("attempt=1 pattern=command-not-found strategy=dependency_check result=failed"), "{stderr}");
    let evaluated: Vec<serde_json::Value> = ws
        .journal(result["run_id"].as_str().expect("run id"))
        .into_iter()
        .map(|e| e["event"].clone())
        .filter(|e| e["type"] == "evaluated")
        .collect();
    let failure = &evaluated[0]["failure"];
    assert_eq!(failure["pattern"], "command-not-found");
    assert_eq!(failure["strategy"], "dependency_check");
    assert_eq!(failure["evidence"], json!([{"kind": "exit_code", "value": "127", "strength": 0.95}]));
    assert_eq!(evaluated[0]["checks"][0]["exit_code"], 127);
}

#[test]
fn a_network_failure_waits_with_backoff_and_regenerates() {
    let ws = Ws::empty();
    agent(&ws, "dev", "cat > /dev/null\necho ok\n");
    // The first check cannot connect; the second can.
    pipeline(
        &ws,
        "dev",
        "agent",
        "    checks:\n      - name: fetch\n        type: command\n        command: sh fetch.sh\n",
    );
    ws.write(
        "fetch.sh",
        "if [ -f .tried ]; then echo fetched; else touch .tried; echo 'curl: (7) Failed to connect to 127.0.0.1 port 9 after 0 ms: Connection refused' >&2; exit 7; fi\n",
    );
    ws.write(
        ".loopwright/failure-patterns.yml",
        "strategies:\n  retry_with_backoff:\n    initial_delay_seconds: 0.2\n",
    );
    let (code, result, stderr) = ws.json(&["run", "loop"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(closed_loop(&result)["attempts"], 2);
    assert!(stderr.contains("attempt=1 pattern=network-error strategy=retry_with_backoff result=failed"), "{stderr}");
    assert!(stderr.contains("FIX retry_with_backoff: waiting 0.2s before generating again"), "{stderr}");
}

#[test]
fn on_a_terminal_an_escalation_is_answered_in_place() {
    let ws = Ws::empty();
    agent(
        &ws,
        "dev",
        "cat > /dev/null\nif grep -q 'User provided fix: touch ok' \"$LOOPWRIGHT_PROMPT_FILE\"; then touch ok; fi\necho done\n",
    );
    pipeline(
        &ws,
        "dev",
        "agent",
        "    checks:\n      - name: ok_exists\n        type: command\n        command: sh check.sh\n",
    );
    ws.write("check.sh", "test -f ok || { echo 'cannot open ok: Permission denied'; exit 1; }\n");
    // What is typed on the terminal: an answer it does not understand, then a fix.
    let Some((_, shown)) = ws.on_terminal("run loop --task-id task-tty", "maybe\nfix touch ok\n") else { return };
    assert!(shown.contains("## Task Escalation Required"), "{shown}");
    assert!(shown.contains("Answer `retry`, `skip`, `abort`, or `fix` followed by the instruction."), "{shown}");
    assert!(shown.contains("status: success"), "{shown}");
    assert!(ws.path().join("ok").exists());
    let (_, result, _) = ws.json(&["status", "latest"]);
    assert_eq!(closed_loop(&result)["status"], "success");
}

#[test]
fn a_stage_retry_runs_the_whole_loop_again_before_the_dead_letter() {
    let ws = Ws::empty();
    agent(&ws, "dev", "cat > /dev/null\necho \"pass attempt $LOOPWRIGHT_ATTEMPT\"\n");
    pipeline(
        &ws,
        "dev",
        "agent",
        "    closed_loop:\n      max_retries: 2\n    retry:\n      max_attempts: 2\n      backoff: fixed\n      initial_delay_seconds: 1\n    checks:\n      - name: never\n        type: command\n        command: echo 'gadget calibration drifted'; exit 1\n",
    );
    let (code, result, stderr) = ws.json(&["run", "loop", "--task-id", "task-passes"]);
    assert_eq!(code, 1, "{stderr}");
    // Two passes of two attempts each, then the dead letter.
    assert_eq!(closed_loop(&result)["attempts"], 4);
    assert_eq!(result["stages_executed"][0]["attempts"], 4);
    assert!(stderr.contains("↻ Retry"), "{stderr}");
    let letter = ws.read(".loopwright/state/dead-letters/task-passes.md");
    assert!(letter.contains("total_attempts: 4\n"), "{letter}");
    let run = result["run_id"].as_str().expect("run id");
    let prompt = ws.read(&format!(".loopwright/state/runs/{run}/prompts/implement-4.md"));
    assert!(prompt.contains("This is retry attempt 4 of 4."), "{prompt}");
}

#[test]
fn measured_strategy_success_across_runs_reorders_a_patterns_strategies() {
    // A project pattern whose own strategy never helps here: the widget passes on the third
    // attempt of every run, after the alternative context_expand has run.
    let ws = Ws::empty();
    ws.write(
        ".loopwright/failure-patterns.yml",
        "patterns:\n  - id: widget-drift\n    description: The widget drifted\n    signals: ['/widget drifted by \\d+/']\n    strategy: analyze_then_fix\n    alternatives: [context_expand]\n",
    );
    agent(
        &ws,
        "dev",
        "cat > prompt-$LOOPWRIGHT_ATTEMPT.txt\nif [ \"$LOOPWRIGHT_ATTEMPT\" -ge 3 ]; then echo fixed > widget.txt; fi\necho worked\n",
    );
    pipeline(
        &ws,
        "dev",
        "agent",
        "    closed_loop:\n      max_retries: 4\n    checks:\n      - name: widget\n        type: custom\n        command: grep -q fixed widget.txt 2>/dev/null || { echo 'widget drifted by 3 mm'; exit 1; }\n",
    );
    // The first analysis of each run, and the reason it gave.
    let first_analysis = |result: &serde_json::Value| -> serde_json::Value {
        ws.journal(result["run_id"].as_str().expect("run id"))
            .into_iter()
            .map(|e| e["event"].clone())
            .find(|e| e["type"] == "analyzed")
            .expect("an analysis")["analysis"]
            .clone()
    };
    for n in 1..=10 {
        let _ = std::fs::remove_file(ws.path().join("widget.txt"));
        let (code, result, stderr) = ws.json(&["run", "loop", "--task-id", &format!("task-{n}")]);
        assert_eq!(code, 0, "run {n}: {stderr}");
        assert_eq!(closed_loop(&result)["attempts"], 3, "run {n}");
        let a = first_analysis(&result);
        assert_eq!((a["strategy"].as_str(), a.get("measured")), (Some("analyze_then_fix"), None), "run {n}: {a}");
        assert!(
            stderr.contains("attempt=2 pattern=widget-drift strategy=context_expand result=failed next=fix"),
            "{stderr}"
        );
    }
    // Ten outcomes each: analyze_then_fix never helped, context_expand always did.
    let (code, stats, _) = ws.json(&["stats"]);
    assert_eq!(code, 0);
    assert_eq!(
        stats["strategy_effectiveness"],
        json!([
            {"pattern": "widget-drift", "strategy": "analyze_then_fix", "attempts": 10, "succeeded": 0, "success_rate": 0.0, "verdict": "flagged"},
            {"pattern": "widget-drift", "strategy": "context_expand", "attempts": 10, "succeeded": 10, "success_rate": 1.0, "verdict": "reliable"},
        ])
    );
    let (_, text, _) = ws.run(&["stats"]);
    assert!(text.contains("| widget-drift | analyze_then_fix | 10 | 0 (0%) | flagged: under 0.3 |"), "{text}");
    assert!(text.contains("| widget-drift | context_expand | 10 | 10 (100%) | reliable: over 0.8 |"), "{text}");
    // The eleventh run tries the measured best first, says why, and passes one attempt sooner.
    let _ = std::fs::remove_file(ws.path().join("widget.txt"));
    ws.write(".loopwright/agents/dev.sh", "cat > prompt-$LOOPWRIGHT_ATTEMPT.txt\nif [ \"$LOOPWRIGHT_ATTEMPT\" -ge 2 ]; then echo fixed > widget.txt; fi\necho worked\n");
    let (code, result, stderr) = ws.json(&["run", "loop", "--task-id", "task-11"]);
    assert_eq!(code, 0, "{stderr}");
    let measured = "measured across runs for widget-drift: analyze_then_fix 0/10 (0.00), context_expand 10/10 (1.00); strategies without 10 outcomes count as 0.5";
    let a = first_analysis(&result);
    assert_eq!(a["strategy"], "context_expand");
    assert_eq!(a["measured"], measured);
    assert_eq!(a["reason"], format!("widget-drift (confidence 0.90): strategy context_expand ({measured})"));
    assert!(stderr.contains("attempt=1 pattern=widget-drift strategy=context_expand result=failed"), "{stderr}");
    let prompt = ws.read("prompt-2.txt");
    assert!(prompt.contains(&format!("chosen by measured success ({measured})")), "{prompt}");
}

#[test]
fn an_unreadable_earlier_journal_does_not_stop_the_measure_or_the_run() {
    let ws = Ws::empty();
    agent(
        &ws,
        "dev",
        "cat > /dev/null\nif [ \"$LOOPWRIGHT_ATTEMPT\" -ge 2 ]; then echo fixed > widget.txt; fi\necho worked\n",
    );
    pipeline(
        &ws,
        "dev",
        "agent",
        "    closed_loop:\n      max_retries: 3\n    checks:\n      - name: widget\n        type: custom\n        command: grep -q fixed widget.txt 2>/dev/null || { echo 'widget drifted by 3 mm'; exit 1; }\n",
    );
    let (code, first, stderr) = ws.json(&["run", "loop", "--task-id", "task-a"]);
    assert_eq!(code, 0, "{stderr}");
    // Another process (or a disk) damaged one event of that run.
    let db = rusqlite::Connection::open(ws.path().join(".loopwright/state/state.db")).expect("db");
    let damaged = db
        .execute(
            "UPDATE events SET payload = '{' WHERE run_id = ?1 AND seq = 2",
            [first["run_id"].as_str().expect("run id")],
        )
        .expect("update");
    assert_eq!(damaged, 1);
    drop(db);
    std::fs::remove_file(ws.path().join("widget.txt")).expect("reset");
    let (code, result, stderr) = ws.json(&["run", "loop", "--task-id", "task-b"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(closed_loop(&result)["attempts"], 2);
    assert!(
        stderr.contains("attempt=1 pattern=unclassified strategy=analyze_then_fix result=failed next=fix"),
        "{stderr}"
    );
}

#[test]
fn a_closed_loop_whose_agent_is_not_installed_falls_back_and_the_next_agent_sees_why() {
    let ws = Ws::empty();
    ws.write(
        ".loopwright/agents/missing.md",
        "---\nname: missing\nrunner: command\ncommand: [\"no-such-agent-cli-7f3a\"]\nfallback: [dev]\n---\nYou fix code.\n",
    );
    agent(&ws, "dev", "cat > prompt.txt\nprintf 'done\\n' > out.txt\necho wrote it\n");
    pipeline(
        &ws,
        "missing",
        "agent",
        "    checks:\n      - name: written\n        type: command\n        command: grep -q done out.txt\n",
    );
    let (code, result, stderr) = ws.json(&["run", "loop", "--task", "write it", "--task-id", "task-fb"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(closed_loop(&result)["status"], "success", "{result}");
    assert_eq!(closed_loop(&result)["attempts"], 2, "{result}");
    assert!(
        stderr.contains("⇢ implement: agent `missing` cannot go on after attempt 1 (its program is not installed); agent `dev` takes over\n"),
        "{stderr}"
    );
    assert!(stderr.contains("▶ implement [dev, agent mode]"), "{stderr}");
    let prompt = std::fs::read_to_string(ws.path().join("prompt.txt")).expect("dev's prompt");
    assert!(prompt.contains("    <failure attempt=\"1\" agent=\"missing\">\n"), "{prompt}");
    assert!(
        prompt.contains("    Attempt 1: agent `missing` could not go on (cli_missing: its program is not installed); agent `dev` took over.\n"),
        "{prompt}"
    );
    // The budget of the loop is the new agent's own.
    assert!(prompt.contains("<retry_context attempt=\"2\" max_attempts=\""), "{prompt}");
}
