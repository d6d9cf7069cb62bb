//! `loopwright init`, `demo`, `agents`, `schema`.

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support::{Ws, examples, st, stages};

#[test]
fn init_scaffolds_a_workspace_that_validates_and_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = Ws { dir };
    ws.write(".gitignore", "target/");
    let (code, _, stderr) = ws.run(&["init"]);
    assert_eq!(code, 0, "{stderr}");
    for file in [
        ".loopwright/config.toml",
        ".loopwright/failure-patterns.yml",
        ".loopwright/pipelines/example.yml",
        ".loopwright/agents/cto.md",
        ".loopwright/agents/echo-agent.sh",
    ] {
        assert!(ws.path().join(file).is_file(), "{file} missing");
    }
    assert_eq!(ws.read(".gitignore"), "target/\n# loopwright's journal and run files\n.loopwright/state/\n");
    let (code, stdout, _) = ws.run(&["validate"]);
    assert_eq!((code, stdout.as_str()), (0, "✓ .loopwright/pipelines/example.yml: pipeline `example`, 4 stages\n"));
    let (code, result, stderr) =
        ws.json(&["run", "example", "--task", "Add a health endpoint", "--var", "complexity=high"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stages(&result),
        vec![
            st("plan", "success", 1, None),
            st("review", "success", 1, None),
            st("implement", "success", 1, None),
            st("verify", "success", 1, None)
        ]
    );

    // A second init keeps what is there, and does not add the ignore line twice.
    ws.write(".loopwright/pipelines/example.yml", "# mine\n");
    let (code, _, stderr) = ws.run(&["init", "--example", "bug-fix"]);
    assert_eq!(code, 0, "init checks the example it adds, not the files it keeps: {stderr}");
    assert!(stderr.contains("  kept     .loopwright/config.toml (exists)\n"), "{stderr}");
    assert_eq!(ws.read(".loopwright/pipelines/example.yml"), "# mine\n");
    assert!(ws.path().join(".loopwright/pipelines/bug-fix.yml").is_file());
    assert_eq!(ws.read(".gitignore").matches(".loopwright/state/").count(), 1);
}

#[test]
fn the_demo_fixes_the_bundled_project() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("demo");
    let mut cmd = assert_cmd::cargo::cargo_bin_cmd!("loopwright");
    let out = cmd.args(["demo", "--dir", target.to_str().expect("utf-8"), "--json"]).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        stages(&result),
        vec![
            st("diagnose", "success", 1, None),
            st("security_review", "skipped", 0, Some("condition_false")),
            st("fix", "success", 2, None),
            st("verify", "success", 1, None),
        ]
    );
    // The loop: the first attempt broke sub(), the test said so, the second used the feedback.
    assert_eq!(
        result["stages_executed"][2]["closed_loop"],
        serde_json::json!({"status": "success", "attempts": 2, "failure_pattern": null, "escalation_reason": null})
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("attempt=1 pattern=test-failure strategy=analyze_then_fix result=failed"), "{stderr}");
    assert!(stderr.contains("    │ FAIL sub 7 4: got 11, expected 3\n"), "{stderr}");
    let run = result["run_id"].as_str().expect("run id");
    let prompt = std::fs::read_to_string(target.join(format!(".loopwright/state/runs/{run}/prompts/fix-2.md")))
        .expect("second prompt");
    let context = prompt.find("<retry_context attempt=\"2\" max_attempts=\"3\">").expect("retry context");
    assert!(context < prompt.find("# Task").expect("task"), "the retry context comes before the task");
    assert!(prompt.contains("FAIL sub 7 4: got 11, expected 3"), "{prompt}");
    assert_eq!(result["artifacts"]["verification_results"], "ok   add 2 3\nok   sub 7 4\nok   mul 4 5");
    assert_eq!(result["artifacts"]["affected_files"], "src/calc.sh");
    let calc = std::fs::read_to_string(target.join("src/calc.sh")).expect("calc");
    assert!(calc.contains("add() {\n  echo $(( $1 + $2 ))\n}\n\nsub() {\n  echo $(( $1 - $2 ))"), "{calc}");
    // The bundled original still has the bug.
    let original = std::fs::read_to_string(examples().join("demo/src/calc.sh")).expect("original");
    assert!(original.contains("echo $(( $1 - $2 ))"));
}

#[test]
fn agents_lists_and_shows_argv() {
    let ws = Ws::seed();
    let (code, shown, _) = ws.json(&["agents", "show", "cto", "--mode", "plan"]);
    assert_eq!(code, 0);
    assert_eq!(
        shown,
        json!({"name": "cto", "runner": "command", "mode": "plan", "argv": ["sh", ".loopwright/agents/echo-agent.sh"]})
    );
    let (code, _, stderr) = ws.run(&["agents", "show", "ciso", "--mode", "agent"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("may not run in agent mode"), "{stderr}");
    let (code, stdout, _) = ws.run(&["agents"]);
    assert_eq!(code, 0);
    assert_eq!(stdout.lines().count(), 7, "{stdout}");
}

#[test]
fn schema_prints_the_committed_schema() {
    let ws = Ws::empty();
    let (code, stdout, _) = ws.run(&["schema"]);
    assert_eq!(code, 0);
    let committed = std::fs::read_to_string(examples().join("../schema/pipeline.schema.json")).expect("schema");
    assert_eq!(stdout, committed);
    let schema: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    assert_eq!(schema["required"], json!(["name", "description", "version", "stages"]));
}

#[test]
fn patterns_test_reads_a_github_actions_job_log_as_github_writes_it() {
    let ws = Ws::empty();
    let log = examples().join("../tests/fixtures/actions/cargo-test.log");
    let log = log.to_str().expect("utf-8");
    let (code, stdout, _) = ws.run(&["patterns", "test", "--ci-log", log]);
    assert_eq!(code, 0);
    assert_eq!(
        stdout,
        "failed step: cargo test --locked, exit code 101\n\
         test-failure (confidence 1.00, strategy analyze_then_fix, classified by pattern)\n\
         \x20 signal             1.00  /test result: FAILED/\n\
         \x20 signal             0.99  /^test .+ \\.\\.\\. FAILED$/\n\
         \x20 signal             0.84  /assertion `left == right` failed|assertion failed/\n\
         \x20 command            0.40  cargo test\n"
    );
    let (code, got) = {
        let (code, got, _) = ws.json(&["patterns", "test", "--ci-log", log]);
        (code, got)
    };
    assert_eq!(code, 0);
    assert_eq!(
        (&got["step"], &got["command"], &got["exit_code"], &got["matched_pattern"]),
        (&json!("cargo test --locked"), &json!("cargo test --locked"), &json!(101), &json!("test-failure"))
    );
    // What the caller says of the command wins over what the log says.
    let (_, got, _) = ws.json(&["patterns", "test", "--ci-log", log, "--exit-code", "2"]);
    assert_eq!(got["exit_code"], 2);
    let (code, _, stderr) = ws.run(&["patterns", "test", log, "--ci-log", log]);
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

#[test]
fn patterns_test_classifies_real_output_and_project_patterns_merge() {
    let ws = Ws::empty();
    let corpus = examples().join("../corpus");
    let file = corpus.join("undefined-name/python-nameerror.txt");
    let (code, out, _) = ws.json(&["patterns", "test", file.to_str().expect("utf-8")]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        json!({"matched_pattern": "undefined-name", "confidence": 0.95, "strategy": "context_expand",
               "signals": ["/NameError: name '.+' is not defined/"],
               "evidence": [{"kind": "signal", "value": "/NameError: name '.+' is not defined/", "strength": 0.95}],
               "classified_by": "pattern"})
    );
    // What is known of the command counts: a shell's 137 with no timeout is the OOM killer.
    let mut cmd = ws.cmd();
    let out = cmd
        .args(["patterns", "test", "-", "--command", "cargo test", "--exit-code", "137", "--check-type", "test"])
        .write_stdin("running 3 tests\n")
        .output()
        .expect("run");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "out-of-memory (confidence 0.60, strategy analyze_then_fix, classified by pattern)\n  exit_signal        0.60  SIGKILL\n"
    );
    // No pattern is sure of a lint check's bare count (the check's type, 0.4): the statistical
    // classifier proposes; turned off, the output is unclassified.
    let lint = |ws: &Ws| {
        let out = ws
            .cmd()
            .args([
                "patterns",
                "test",
                "-",
                "--json",
                "--command",
                "npm run check",
                "--exit-code",
                "1",
                "--check-type",
                "lint",
            ])
            .write_stdin("src/app.js\n  3 problems found in 1 file\n")
            .output()
            .expect("run");
        let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        (got["matched_pattern"].clone(), got["classified_by"].clone(), got["evidence"][1].clone())
    };
    assert_eq!(
        lint(&ws),
        (
            json!("lint-error"),
            json!("statistical"),
            json!({"kind": "unsure_pattern", "value": "lint-error", "strength": 0.4})
        )
    );
    ws.write(".loopwright/config.toml", "[classify]\nstatistical = false\n");
    assert_eq!(lint(&ws), (serde_json::Value::Null, json!("none"), serde_json::Value::Null));
    std::fs::write(ws.path().join(".loopwright/config.toml"), "[classify]\nstatistical = 3\n").expect("config");
    let (code, _, stderr) = ws.run(&["patterns", "list"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("config.toml:2"), "{stderr}");
    std::fs::remove_file(ws.path().join(".loopwright/config.toml")).expect("rm");
    let (code, _, stderr) = ws.run(&["patterns", "test", "/dev/null", "--exit-code", "1", "--signal", "KILL"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
    ws.write(
        ".loopwright/failure-patterns.yml",
        "patterns:\n  - id: flaky-staging\n    description: the staging API is slow\n    signals: ['/staging\\.example\\.com.*timed out/']\n    strategy: retry_with_backoff\n  - id: disk-full\n    strategy: analyze_then_fix\n",
    );
    let mut cmd = ws.cmd();
    let out = cmd
        .args(["patterns", "test", "-", "--json"])
        .write_stdin("GET https://staging.example.com/items timed out after 30s\n")
        .output()
        .expect("run");
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(got["matched_pattern"], "flaky-staging");
    let (_, list, _) = ws.json(&["patterns", "list"]);
    let ids: Vec<&str> = list.as_array().expect("list").iter().map(|p| p["id"].as_str().expect("id")).collect();
    assert_eq!(ids.len(), 22);
    assert_eq!(ids[0], "flaky-staging");
    let disk = list.as_array().expect("list").iter().find(|p| p["id"] == "disk-full").expect("disk-full");
    assert_eq!(disk["strategy"], "analyze_then_fix");
    ws.write(".loopwright/failure-patterns.yml", "patterns:\n  - id: x\n    signalz: []\n");
    let (code, _, stderr) = ws.run(&["patterns", "list"]);
    assert_eq!(code, 2);
    assert!(stderr.contains(".loopwright/failure-patterns.yml:3:5"), "{stderr}");
    ws.write(".loopwright/failure-patterns.yml", "patterns:\n  - id: x\n    exit_codes: [75, SIGNOPE]\n");
    let (code, _, stderr) = ws.run(&["patterns", "list"]);
    assert_eq!(code, 2);
    assert!(stderr.contains(".loopwright/failure-patterns.yml:3:22"), "{stderr}");
    assert!(
        stderr.contains("field `patterns[0].exit_codes`: pattern `x`: exit_codes: `SIGNOPE` is not an exit code"),
        "{stderr}"
    );
}
