//! Auto mode through the binary: a scripted interactive agent (`fake_agent.py`) in a real
//! pseudo-terminal held by `loopwright auto hold`, supervised by `loopwright auto start`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::Ws;

fn fake_agent() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/all/fake_agent.py")
}

/// A workspace with the fake agent, fast `[auto]` settings, and a task module `mod` whose
/// target has substance; `runs` is the agent's script per start.
fn setup(runs: Value, extra_config: &str) -> (Ws, PathBuf) {
    let ws = Ws::empty();
    ws.write(
        ".loopwright/config.toml",
        &format!(
            "[auto]\nheartbeat_seconds = 0.2\nstall_captures = 3\nstop_grace_seconds = 3\nquota_jitter_seconds = 0.2\n{extra_config}"
        ),
    );
    let (code, _, err) = ws.run(&["auto", "init", "mod", "--target", "Add a greeting file."]);
    assert_eq!(code, 0, "{err}");
    let task = std::fs::canonicalize(ws.path().join("mod")).expect("mod");
    let log = ws.path().join("agent.log");
    let scenario = json!({ "task_dir": task, "log": log, "runs": runs });
    ws.write("scenario.json", &scenario.to_string());
    ws.write(
        ".loopwright/agents/fake.md",
        &format!(
            "---\nrunner: command\ncommand: [\"python3\", \"{}\", \"{}\"]\n---\nA scripted agent.\n",
            fake_agent().display(),
            ws.path().join("scenario.json").display()
        ),
    );
    (ws, task)
}

fn agent_log(ws: &Ws) -> Vec<Value> {
    std::fs::read_to_string(ws.path().join("agent.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn supervision(ws: &Ws) -> Vec<Value> {
    let (code, log, err) = ws.json(&["auto", "log", "mod"]);
    assert_eq!(code, 0, "{err}");
    log["entries"].as_array().cloned().unwrap_or_default()
}

fn kinds(entries: &[Value]) -> Vec<String> {
    entries.iter().map(|e| e["kind"].as_str().unwrap_or_default().to_owned()).collect()
}

fn sig(step: &str, result: &str, next: &str, checkpoint: &str) -> Value {
    json!({ "do": "signal", "step": step, "result": result, "next": next, "checkpoint": checkpoint })
}

/// The four phases, as an agent following the protocol walks them.
fn whole_loop() -> Vec<Value> {
    vec![
        json!({ "do": "spin", "seconds": 0.3 }),
        sig("plan", "(generated)", "check", "post-plan"),
        sig("check", "PASS", "exec", ""),
        json!({ "do": "spin", "seconds": 0.3 }),
        sig("exec", "(done)", "check", "post-exec"),
        sig("check", "ACCEPT", "merge", ""),
        sig("merge", "success", "report", ""),
        json!({ "do": "index", "status": "complete" }),
        sig("report", "(done)", "(stop)", ""),
        json!({ "do": "loop_end" }),
        json!({ "do": "idle" }),
    ]
}

#[test]
fn a_loop_runs_through_all_four_phases_is_verified_and_completes() {
    let mut actions = vec![json!({ "do": "prompt", "name": "edit",
        "text": "● Write(plan.md)\n Create file\n plan.md\n Do you want to create plan.md?\n ❯ 1. Yes\n   2. Yes, allow all edits during this session (shift+tab)\n   3. No\n\n Esc to cancel · Tab to amend\n",
        "expect": "1" })];
    actions.extend(whole_loop());
    let (ws, task) = setup(json!([actions]), "");
    // The module's own check, run by the supervisor when the loop says it is done.
    let index = ws.read("mod/.index.md");
    ws.write("mod/.index.md", &index.replace("status: draft", "status: draft\nchecks:\n- test -f mod/.target.md"));
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!(code, 0, "exit 0 when complete\n{err}\n{status:#}");
    assert_eq!(status["status"], "complete");
    assert_eq!(status["iteration"], 6);
    assert_eq!(status["step"], "report");
    assert_eq!(status["next"], "(stop)");
    assert_eq!(status["checks"][0]["command"], "test -f mod/.target.md");
    assert_eq!(status["checks"][0]["passed"], true);
    assert_eq!(status["stop_reason"], Value::Null);
    // The protocol was typed as the first message, the cursor query answered, the edit prompt
    // answered with `1` exactly once.
    let log = agent_log(&ws);
    let first = log.iter().find(|e| e["kind"] == "first_message").expect("first message");
    assert_eq!(first["via"], "typed");
    assert_eq!(first["has_protocol"], true);
    assert!(log.iter().any(|e| e["kind"] == "cursor_reply" && e["ok"] == true), "{log:#?}");
    let answers: Vec<&Value> = log.iter().filter(|e| e["kind"] == "answer").collect();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0]["keys"], "1");
    // Every signal journaled, the keystroke with the screen it answered, the checks, the end.
    let entries = supervision(&ws);
    let k = kinds(&entries);
    assert_eq!(k.iter().filter(|k| *k == "signal").count(), 6, "{k:?}");
    let keys = entries.iter().find(|e| e["kind"] == "keys" && e["data"]["why"] == "edit prompt").expect("keys");
    assert_eq!(keys["data"]["keys"], "1");
    assert!(keys["data"]["excerpt"].as_str().unwrap_or_default().contains("Do you want to create plan.md?"));
    assert!(k.contains(&"verified".to_owned()), "{k:?}");
    assert_eq!(k.last().map(String::as_str), Some("finished"));
    // Cleanup: no transient files left; the status reads the same afterwards.
    assert!(!task.join(".auto-signal").exists() && !task.join(".auto-stop").exists());
    let (_, again, _) = ws.json(&["auto", "status", "mod"]);
    assert_eq!(again["status"], "complete");
}
