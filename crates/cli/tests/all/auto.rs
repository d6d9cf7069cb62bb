//! Auto mode through the binary: a scripted interactive agent (`fake_agent.py`) in a real
//! pseudo-terminal held by `loopwright auto hold`, supervised by `loopwright auto start`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::Ws;

fn fake_agent() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/all/fake_agent.py")
}

/// A workspace with the fake agent, fast `[auto]` settings (a stall after 1 s unchanged, long
/// enough for the Python agent to redraw on a loaded 2-core machine), and a task module `mod` whose
/// target has substance; `runs` is the agent's script per start.
fn setup(runs: Value, extra_config: &str) -> (Ws, PathBuf) {
    let ws = Ws::empty();
    let grace = if extra_config.contains("stop_grace_seconds") { "" } else { "stop_grace_seconds = 3\n" };
    let stall = if extra_config.contains("stall_captures") { "" } else { "stall_captures = 5\n" };
    ws.write(
        ".loopwright/config.toml",
        &format!("[auto]\nheartbeat_seconds = 0.2\n{stall}quota_jitter_seconds = 0.2\n{grace}{extra_config}"),
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

/// Declares `command` as the module's check in its `.index.md`.
fn declare_check(ws: &Ws, command: &str) {
    let index = ws.read("mod/.index.md");
    ws.write("mod/.index.md", &index.replace("status: draft", &format!("status: draft\nchecks:\n- {command}")));
}

fn agent_log(ws: &Ws) -> Vec<Value> {
    std::fs::read_to_string(ws.path().join("agent.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Each prompt the agent showed, with the keys it got (empty: none), in order.
fn answers(ws: &Ws) -> Vec<(String, String)> {
    agent_log(ws)
        .iter()
        .filter(|e| e["kind"] == "answer")
        .map(|e| {
            (e["prompt"].as_str().unwrap_or_default().to_owned(), e["keys"].as_str().unwrap_or_default().to_owned())
        })
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
    declare_check(&ws, "test -f mod/.target.md");
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

/// The four phases, then — told that the check `test -f done.txt` failed — the fix and the
/// report again.
fn done_after_one_failed_check() -> Vec<Value> {
    let mut actions = whole_loop();
    actions.pop();
    actions.extend([
        json!({ "do": "wait_input" }),
        json!({ "do": "write", "path": "done.txt", "text": "ok" }),
        sig("report", "(done)", "(stop)", ""),
        json!({ "do": "loop_end" }),
        json!({ "do": "idle" }),
    ]);
    actions
}

fn check_stop() -> Value {
    json!({ "do": "check_stop" })
}

#[test]
fn max_iterations_writes_auto_stop_and_the_loop_ends_stopped() {
    let mut actions = vec![];
    for _ in 0..6 {
        actions.push(check_stop());
        actions.push(sig("plan", "(generated)", "check", "post-plan"));
        actions.push(check_stop());
        actions.push(sig("check", "NEEDS_REVISION", "plan", ""));
    }
    let (ws, task) = setup(json!([actions]), "");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake", "--max-iterations", "3"]);
    assert_eq!(code, 4, "exit 4 when stopped\n{err}\n{status:#}");
    assert_eq!(status["status"], "stopped");
    assert_eq!(status["stop_reason"], "max_iterations");
    assert_eq!(status["iteration"], 3);
    let k = kinds(&supervision(&ws));
    assert!(k.contains(&"stop_requested".to_owned()) && k.contains(&"stop_honoured".to_owned()), "{k:?}");
    assert!(agent_log(&ws).iter().any(|e| e["kind"] == "saw_stop"));
    assert!(!task.join(".auto-stop").exists() && !task.join(".auto-signal").exists());
}

#[test]
fn each_cli_prompt_is_answered_with_the_key_that_cli_expects() {
    let prompt =
        |name: &str, text: &str, expect: &str| json!({ "do": "prompt", "name": name, "text": text, "expect": expect });
    let mut actions = vec![
        prompt(
            "codex",
            "\n  Would you like to run the following command?\n\n  $ cargo test\n\n› 1. Yes, proceed (y)\n  2. No, and tell Codex what to do differently (esc)\n\n  Press enter to confirm or esc to cancel",
            "y",
        ),
        prompt("aider", "\ncargo test --quiet\nRun shell command? (Y)es/(N)o/(D)on't ask again [Yes]: ", "y\r"),
        prompt(
            "claude",
            " Bash command\n\n   cargo build\n\u{1b}[38;5;246m   Build the project\u{1b}[39m\n\n Do you want to proceed?\n ❯ 1. Yes\n   2. Yes, and always allow access to ws/ from this project\n   3. No\n\n Esc to cancel",
            "1",
        ),
    ];
    actions.extend(whole_loop());
    let (ws, _) = setup(json!([actions]), "");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!(code, 0, "{err}\n{status:#}");
    let answers = answers(&ws);
    let expected: Vec<(String, String)> = [("codex", "y"), ("aider", "y\r"), ("claude", "1")]
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
    assert_eq!(answers, expected);
}

#[test]
fn a_prompt_about_a_destructive_command_is_never_answered_and_waits_for_a_human() {
    let actions = vec![
        sig("plan", "(generated)", "check", "post-plan"),
        json!({ "do": "prompt", "name": "push", "timeout": 4, "expect": "1",
            "text": " Bash command\n\n   git push --force origin main\n\u{1b}[38;5;246m   Publish the branch\u{1b}[39m\n\n Do you want to proceed?\n ❯ 1. Yes\n   2. Yes, and don't ask again\n   3. No\n\n Esc to cancel" }),
        json!({ "do": "idle" }),
    ];
    let (ws, task) = setup(json!([actions]), "");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!(code, 3, "exit 3 when a person is needed\n{err}\n{status:#}");
    assert_eq!(status["status"], "needs_human");
    assert!(status["needs_human"].as_str().unwrap_or_default().contains("destructive"), "{status:#}");
    assert!(status["needs_human"].as_str().unwrap_or_default().contains("git push --force origin main"));
    // Nothing was typed at it: the prompt times out in the agent with no keys.
    std::thread::sleep(std::time::Duration::from_secs(5));
    let answers: Vec<Value> = agent_log(&ws).into_iter().filter(|e| e["kind"] == "answer").collect();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["keys"], "");
    let entries = supervision(&ws);
    assert!(entries.iter().any(|e| e["kind"] == "needs_human"), "{entries:#?}");
    let typed: Vec<&Value> = entries.iter().filter(|e| e["kind"] == "keys").collect();
    assert_eq!(typed.len(), 1, "only the first message was typed: {typed:#?}");
    assert_eq!(typed[0]["data"]["why"], "first message");
    // The agent still runs, held for the person; `auto stop` with no supervisor left ends it.
    let (code, stopped, err) = ws.json(&["auto", "stop", "mod"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(stopped["status"], "stopped");
    assert_eq!(stopped["stop_reason"], "user_stop");
    assert!(!task.join(".auto-stop").exists());
    let tail: Vec<(String, Value)> = supervision(&ws)
        .iter()
        .rev()
        .take(2)
        .rev()
        .map(|e| (e["kind"].as_str().unwrap_or_default().to_owned(), e["data"]["by"].clone()))
        .collect();
    let by = json!("tester (no supervisor alive)");
    assert_eq!(tail, [("stop_requested".to_owned(), by.clone()), ("finished".to_owned(), by)]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !crate::support::processes_with(&ws.path().join("scenario.json").display().to_string()).is_empty() {
        assert!(std::time::Instant::now() < deadline, "the agent outlived its holder");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_prompt_class_the_policy_does_not_answer_needs_a_human() {
    let actions = vec![
        json!({ "do": "prompt", "name": "cmd", "timeout": 2, "expect": "y",
            "text": "  Would you like to run the following command?\n\n  $ make deploy\n\n› 1. Yes, proceed (y)\n  2. No (esc)\n" }),
        json!({ "do": "idle" }),
    ];
    let (ws, _) = setup(json!([actions]), "answer = [\"edit\"]\n");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!(code, 3, "{err}\n{status:#}");
    assert!(
        status["needs_human"].as_str().unwrap_or_default().starts_with("the policy does not answer command prompts"),
        "{status:#}"
    );
    let _ = ws.run(&["auto", "stop", "mod"]);
}

#[test]
fn a_stalled_agent_is_nudged_until_the_limit_then_stopped_as_failed() {
    let actions = vec![sig("plan", "(generated)", "check", "post-plan"), json!({ "do": "hang", "seconds": 60 })];
    let (ws, _) = setup(json!([actions]), "recoveries_per_iteration = 2\nstop_grace_seconds = 1\n");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!(code, 1, "{err}\n{status:#}");
    assert_eq!(status["status"], "failed");
    assert_eq!(status["stop_reason"], "stall_limit");
    // Two nudges in the iteration the agent hangs in (on a loaded machine the agent may also
    // be nudged once before its first signal, in the iteration before).
    assert_eq!(status["recovery_count_step"], 2);
    let entries = supervision(&ws);
    let nudges = entries.iter().filter(|e| e["kind"] == "keys" && e["data"]["why"] == "stalled: nudge").count();
    assert_eq!(Some(nudges as u64), status["recovery_count_total"].as_u64());
    assert!(nudges >= 2);
    let k = kinds(&entries);
    assert_eq!(k.iter().filter(|k| *k == "stall").count(), nudges + 1, "{k:?}");
    assert!(k.contains(&"limit".to_owned()) && k.contains(&"stop_ignored".to_owned()), "{k:?}");
    // The agent got the nudges as typed lines (it hung, reading).
    assert!(agent_log(&ws).iter().any(|e| e["kind"] == "input"
        && e["keys"].as_str().unwrap_or_default().contains("Continue the loopwright auto loop")));
}

#[test]
fn a_busy_child_process_is_work_not_a_stall() {
    let mut actions = vec![json!({ "do": "busy_child", "seconds": 3 })];
    actions.extend(whole_loop());
    let (ws, _) = setup(json!([actions]), "");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!(code, 0, "{err}\n{status:#}");
    let entries = supervision(&ws);
    assert!(
        entries.iter().any(
            |e| e["kind"] == "verdict" && e["data"]["decision"].as_str().unwrap_or_default().starts_with("working")
        ),
        "{entries:#?}"
    );
    assert!(!entries.iter().any(|e| e["kind"] == "stall"), "{entries:#?}");
    assert_eq!(status["recovery_count_total"], 0);
}

#[test]
fn an_agent_that_exits_is_restarted_resuming_its_own_session() {
    let id = "0b6a4c1e-7f3d-4b8a-9c2e-5d1f3a7b9e04";
    let first =
        vec![sig("plan", "(generated)", "check", "post-plan"), json!({ "do": "exit", "code": 0, "banner": id })];
    let second = vec![
        sig("check", "PASS", "exec", ""),
        sig("exec", "(done)", "check", "post-exec"),
        sig("check", "ACCEPT", "merge", ""),
        sig("merge", "success", "report", ""),
        sig("report", "(done)", "(stop)", ""),
        json!({ "do": "loop_end" }),
        json!({ "do": "idle" }),
    ];
    let (ws, _) = setup(json!([first, second]), "");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!(code, 0, "{err}\n{status:#}\n{:#?}\n{:#?}", supervision(&ws), agent_log(&ws));
    assert_eq!(status["restart_count"], 1);
    assert_eq!(status["agent_session_id"], id);
    let starts: Vec<Value> = agent_log(&ws).into_iter().filter(|e| e["kind"] == "started").collect();
    assert_eq!(starts.len(), 2);
    assert_eq!(starts[0]["resume"], "");
    assert_eq!(starts[1]["resume"], id);
    let entries = supervision(&ws);
    let exited = entries.iter().find(|e| e["kind"] == "exited").expect("exited");
    assert_eq!(exited["data"]["session_id"], id);
    assert!(entries.iter().any(|e| e["kind"] == "restart" && e["data"]["resume"] == id));
}

#[test]
fn a_failing_check_sends_the_module_back_and_the_session_is_told_once() {
    let mut actions = whole_loop();
    actions.pop();
    actions.extend([
        json!({ "do": "wait_input" }),
        json!({ "do": "write", "path": "done.txt", "text": "ok" }),
        sig("check", "ACCEPT", "merge", ""),
        sig("merge", "success", "report", ""),
        json!({ "do": "index", "status": "complete" }),
        sig("report", "(done)", "(stop)", ""),
        json!({ "do": "loop_end" }),
        json!({ "do": "idle" }),
    ]);
    let (ws, task) = setup(json!([actions]), "");
    declare_check(&ws, "test -f done.txt");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!(code, 0, "{err}\n{status:#}");
    assert_eq!(status["status"], "complete");
    assert_eq!(status["recovery_count_total"], 1);
    let k = kinds(&supervision(&ws));
    let failed = k.iter().position(|k| k == "verification_failed").expect("a failed verification");
    let verified = k.iter().position(|k| k == "verified").expect("then a verified one");
    assert!(failed < verified, "{k:?}");
    let told: Vec<Value> = agent_log(&ws).into_iter().filter(|e| e["kind"] == "input").collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0]["keys"].as_str().unwrap_or_default().contains("`test -f done.txt` failed"));
    assert!(std::fs::read_to_string(task.join(".summary.md")).unwrap_or_default().contains("## Verification failed"));
}

#[test]
fn a_quota_wait_pauses_the_timeout_and_sends_exactly_one_continue() {
    let mut actions = vec![
        sig("plan", "(generated)", "check", "post-plan"),
        json!({ "do": "quota", "in_seconds": 10,
            "text": "■ You've hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro) or try again in {seconds} seconds." }),
    ];
    actions.extend(whole_loop().into_iter().skip(2));
    let (ws, _) = setup(json!([actions]), "");
    // 7.8 s of timeout: the 10 s quota wait must not count (the loop's own ~3 s, up to ~5.5 s
    // on a loaded CI machine, must).
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake", "--timeout-minutes", "0.13"]);
    assert_eq!(code, 0, "{err}\n{status:#}");
    assert!(status["quota_paused_s"].as_f64().unwrap_or_default() >= 9.5, "{status:#}");
    assert!(status["elapsed_s"].as_f64().unwrap_or(99.0) < 7.8, "{status:#}");
    let answers: Vec<Value> = agent_log(&ws).into_iter().filter(|e| e["kind"] == "quota_answer").collect();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0]["keys"], "continue\r");
    let entries = supervision(&ws);
    let wait = entries.iter().find(|e| e["kind"] == "quota_wait").expect("a quota wait");
    assert_eq!(wait["data"]["pattern"], "codex.limit@2026");
    assert_eq!(wait["data"]["given"], true);
    assert_eq!(
        entries.iter().filter(|e| e["kind"] == "keys" && e["data"]["why"] == "quota reset: one continue").count(),
        1
    );
}

#[test]
fn the_timeout_stops_the_loop_and_an_agent_ignoring_the_stop_is_ended() {
    let actions = vec![json!({ "do": "spin", "seconds": 30 })];
    let (ws, _) = setup(json!([actions]), "stop_grace_seconds = 1\n");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake", "--timeout-minutes", "0.02"]);
    assert_eq!(code, 4, "{err}\n{status:#}");
    assert_eq!(status["status"], "stopped");
    assert_eq!(status["stop_reason"], "timeout");
    let k = kinds(&supervision(&ws));
    assert!(k.contains(&"stop_ignored".to_owned()), "{k:?}");
    assert!(crate::support::processes_with(&ws.path().join("scenario.json").display().to_string()).is_empty());
}

#[test]
fn a_second_loop_on_the_same_module_is_refused() {
    // Busy (not stalled) for as long as the test needs, whatever the machine's load.
    let actions = vec![json!({ "do": "spin", "seconds": 30 })];
    let (ws, _) = setup(json!([actions]), "");
    let first = crate::support::spawn(&ws, &["auto", "start", "mod", "--agent", "fake", "--session", "one"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while ws.run(&["auto", "status", "mod"]).0 != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (code, _, err) = ws.run(&["auto", "start", "mod", "--agent", "fake", "--session", "two"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("already runs an auto loop") && err.contains("session one"), "{err}");
    let (code, _, err) = ws.run(&["auto", "stop", "one"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = crate::support::finish(first);
    assert_eq!(code, 4, "{out}\n{err}");
}

#[test]
fn an_empty_target_is_refused_before_anything_starts() {
    let ws = Ws::empty();
    let (code, _, err) = ws.run(&["auto", "init", "empty"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = ws.run(&["auto", "start", "empty", "--agent", "claude"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("fill .target.md first"), "{err}");
    let (code, _, err) = ws.run(&["auto", "start", "/tmp", "--agent", "claude"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("outside the workspace"), "{err}");
}

#[test]
fn the_agent_cannot_weaken_the_checks_it_is_verified_by() {
    // The agent rewrites `.index.md` with a check that always passes, and a huge garbage
    // signal; the check declared when the loop started still runs, and fails.
    let mut actions = vec![
        json!({ "do": "write", "path": "mod/.index.md", "text": "---\nstatus: executing\nphase: ''\nchecks:\n- 'true'\n---\n\n# Plan\n" }),
        json!({ "do": "write", "path": "mod/.auto-signal", "text": "x".repeat(200_000) }),
    ];
    actions.extend(done_after_one_failed_check());
    let (ws, _) = setup(json!([actions]), "");
    declare_check(&ws, "test -f done.txt");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    // The declared check passes in the end; the one the agent added waits for a person.
    assert_eq!(code, 3, "{err}\n{status:#}");
    assert_eq!(status["status"], "needs_human");
    assert_eq!(status["checks_to_approve"], json!(["true"]));
    let entries = supervision(&ws);
    let failed =
        entries.iter().find(|e| e["kind"] == "verification_failed").expect("the declared check ran and failed");
    assert_eq!(failed["data"]["command"], "test -f done.txt");
    let checks: Vec<&str> =
        status["checks"].as_array().expect("checks").iter().filter_map(|c| c["command"].as_str()).collect();
    assert_eq!(checks, ["test -f done.txt"]);
    let _ = ws.run(&["auto", "stop", "mod"]);
    let invalid = entries.iter().find(|e| e["kind"] == "signal_invalid").expect("the garbage signal");
    assert!(invalid["data"]["text"].as_str().unwrap_or_default().len() <= 64 * 1024);
}

/// Waits (up to 30 s) until the loop of `session` is `status`, through the API.
fn wait_loop(d: &crate::daemon::Daemon, session: &str, status: &str) -> Value {
    wait_loop_for(d, session, status, 30)
}

#[test]
fn the_daemon_supervises_a_loop_started_from_the_cli_and_the_api_answers_as_seed_002_says() {
    // Busy (not stalled) for as long as the test needs; it leaves its loop when told to stop.
    let mut actions = vec![];
    for _ in 0..100 {
        actions.push(json!({ "do": "spin", "seconds": 0.3 }));
        actions.push(check_stop());
    }
    // Told of the loops' ends: a webhook on 127.0.0.1.
    let hook = crate::http::Server::start(
        (0..4).map(|_| crate::http::Reply::Http { status: "200 OK", headers: vec![], chunks: vec![] }).collect(),
    );
    let notify = format!("\n[[notify]]\nurl = \"http://127.0.0.1:{}/hook\"\nevents = [\"auto_finished\"]\n", hook.port);
    let (ws, task) = setup(json!([actions]), &notify);
    let (code, _, err) = ws.run(&["auto", "init", "empty"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = ws.run(&["auto", "init", "other", "--target", "Something else."]);
    assert_eq!(code, 0, "{err}");
    let d = crate::daemon::Daemon::start(&ws, &[]);

    // Through the daemon: `auto start` returns at once with the status object.
    let (code, out, err) = ws.run(&["auto", "start", "mod", "--agent", "fake", "--session", "one"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("started by the daemon") && out.contains("session    one  (running)"), "{out}\n{err}");
    let (_, started) = d.get("/api/sessions/one/task-auto");
    assert_eq!(
        (&started["session_name"], &started["status"], &started["agent"], &started["task_dir"]),
        (&json!("one"), &json!("running"), &json!("fake"), &json!(task.display().to_string()))
    );
    assert_eq!((&started["max_iterations"], &started["timeout_s"]), (&json!(20), &json!(1800.0)));

    // The refusals: the same session or the same directory (409), an empty target (422), a
    // directory outside the workspace (403), no module there (404), an unknown agent (404).
    let post = |session: &str, body: Value| d.post(&format!("/api/sessions/{session}/task-auto"), &body);
    let (code, body) = post("one", json!({ "taskDir": "empty", "agent": "fake" }));
    assert_eq!(code, 409, "{body}");
    let (code, body) = post("two", json!({ "taskDir": "mod", "agent": "fake" }));
    assert_eq!((code, body["error"]["code"].as_str()), (409, Some("conflict")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("session one"), "{body}");
    let (code, body) = post("two", json!({ "taskDir": "empty", "agent": "fake" }));
    assert_eq!(code, 422, "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("fill .target.md first"), "{body}");
    let outside = tempfile::tempdir().expect("tempdir");
    let (code, body) = post("two", json!({ "taskDir": outside.path() }));
    assert_eq!(code, 403, "{body}");
    let (code, body) = post("two", json!({ "taskDir": "../../etc" }));
    assert_eq!(code, 403, "{body}");
    let (code, body) = post("two", json!({ "taskDir": "/nonexistent/module" }));
    assert_eq!(code, 403, "outside as written, whether it exists or not: {body}");
    let (code, body) = post("two", json!({ "taskDir": "nowhere" }));
    assert_eq!(code, 404, "{body}");
    let (code, body) = post("two", json!({ "taskDir": "other", "agent": "nobody" }));
    assert_eq!(code, 404, "{body}");
    let (code, body) = post("bad/name", json!({ "taskDir": "mod" }));
    assert_eq!(code, 404, "a path segment more is no route: {body}");
    let (code, body) = post(".hidden", json!({ "taskDir": "other" }));
    assert_eq!(code, 422, "{body}");
    let (code, body) = post("two", json!({ "taskDir": "other", "maxIterations": 0 }));
    assert_eq!(code, 422, "{body}");
    let (code, body) = post("two", json!({ "taskDir": "mod", "unknown": 1 }));
    assert_eq!(code, 422, "{body}");

    // Reading it: the status object as `auto status --json` prints it; the lookup; the screen.
    let (code, got) = d.get("/api/sessions/one/task-auto");
    assert_eq!(code, 200, "{got}");
    let (_, cli, _) = ws.json(&["auto", "status", "one"]);
    let without_clock = |mut v: Value| {
        v["elapsed_s"] = Value::Null;
        v["stall_count"] = Value::Null;
        v
    };
    assert_eq!(without_clock(got.clone()), without_clock(cli));
    assert_eq!(
        d.get("/api/task-auto/lookup?taskDir=mod"),
        (200, json!({ "session_name": "one", "status": "running" }))
    );
    assert_eq!(d.get("/api/task-auto/lookup?taskDir=empty").0, 404);
    assert_eq!(d.get(&format!("/api/task-auto/lookup?taskDir={}", outside.path().display())).0, 403);
    assert_eq!(d.get("/api/sessions/nobody/task-auto").0, 404);
    let (_, all) = d.get("/api/task-auto");
    assert_eq!(all.as_array().map(|a| a.len()), Some(1), "{all}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (code, screen) = d.get("/api/sessions/one/task-auto/screen");
        assert_eq!(code, 200, "{screen}");
        if screen["alive"] == true && screen["screen"].as_str().unwrap_or_default().contains("Working…") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the screen never showed the agent: {screen}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    // DELETE: `.auto-stop` with user_stop; the agent leaves its loop; the loop ends stopped.
    let (code, body) = d.delete("/api/sessions/one/task-auto");
    assert_eq!(code, 200, "{body}");
    let end = wait_loop(&d, "one", "stopped");
    assert_eq!(end["stop_reason"], "user_stop");
    assert_eq!(d.delete("/api/sessions/one/task-auto").0, 409);
    assert!(agent_log(&ws).iter().any(|e| e["kind"] == "saw_stop"));
    let (code, log) = d.get("/api/sessions/one/task-auto/log");
    assert_eq!(code, 200);
    let stops: Vec<&Value> =
        log.as_array().expect("entries").iter().filter(|e| e["kind"] == "stop_requested").collect();
    assert_eq!(stops.len(), 1, "one stop, journaled once: {stops:#?}");
    assert_eq!((&stops[0]["data"]["reason"], &stops[0]["data"]["by"]), (&json!("user_stop"), &json!("api")));
    let k = kinds(log.as_array().expect("entries"));
    assert_eq!(k.first().map(String::as_str), Some("started"), "{k:?}");
    assert_eq!(k.last().map(String::as_str), Some("finished"), "{k:?}");
    assert!(!task.join(".auto-stop").exists() && !task.join(".auto-signal").exists());
    // The end was notified, once.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let told = loop {
        let bodies: Vec<Value> = hook
            .requests()
            .iter()
            .filter_map(|r| r.split_once("\r\n\n").and_then(|(_, b)| serde_json::from_str(b.trim()).ok()))
            .collect();
        if !bodies.is_empty() || std::time::Instant::now() > deadline {
            break bodies;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let picked: Vec<(Value, Value, Value, bool)> = told
        .iter()
        .map(|b| {
            (
                b["event"].clone(),
                b["session"].clone(),
                b["run_id"].clone(),
                b["headline"].as_str().unwrap_or_default().starts_with("Auto loop one: "),
            )
        })
        .collect();
    assert_eq!(picked, vec![(json!("auto_finished"), json!("one"), Value::Null, true)], "{told:#?}");
    // Ended: the session and the directory are free again.
    let (code, body) = post("one", json!({ "taskDir": "mod", "agent": "fake", "maxIterations": 1 }));
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["max_iterations"], 1);
    let (code, _) = d.delete("/api/sessions/one/task-auto");
    assert_eq!(code, 200);
    wait_loop(&d, "one", "stopped");
}

#[test]
fn a_daemon_killed_mid_loop_is_followed_by_one_that_reattaches_without_typing_anything_twice() {
    // The agent answers a prompt and keeps it on screen, silent for a while (an answered
    // screen the next supervisor must not answer again), then walks its loop to the end.
    let mut actions = vec![
        json!({ "do": "prompt", "name": "edit", "keep": true,
            "text": "● Write(plan.md)\n Create file\n plan.md\n Do you want to create plan.md?\n ❯ 1. Yes\n   2. No\n", "expect": "1" }),
        json!({ "do": "hang", "seconds": 4 }),
    ];
    actions.extend(whole_loop());
    let (ws, _) = setup(json!([actions]), "stall_captures = 40\n");
    let d = crate::daemon::Daemon::start(&ws, &[]);
    let (code, body) = d.post("/api/sessions/s/task-auto", &json!({ "taskDir": "mod", "agent": "fake" }));
    assert_eq!(code, 201, "{body}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !agent_log(&ws).iter().any(|e| e["kind"] == "answer") {
        assert!(std::time::Instant::now() < deadline, "the prompt was never answered: {:#?}", agent_log(&ws));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = crate::daemon::nix_kill(d.pid(), "KILL");
    drop(d);
    let d = crate::daemon::Daemon::start(&ws, &[]);
    let end = wait_loop(&d, "s", "complete");
    assert_eq!((end["iteration"].as_u64(), end["restart_count"].as_u64()), (Some(6), Some(0)));
    // The agent was started once and got exactly one keystroke: the answer.
    let log = agent_log(&ws);
    assert_eq!(log.iter().filter(|e| e["kind"] == "started").count(), 1, "{log:?}");
    let typed: Vec<&Value> = log.iter().filter(|e| e["kind"] == "answer" || e["kind"] == "input").collect();
    assert_eq!(typed.len(), 1, "{typed:#?}");
    assert_eq!(typed[0]["keys"], "1");
    let entries = supervision(&ws);
    let reattached = entries.iter().find(|e| e["kind"] == "reattached").expect("reattached");
    assert_eq!(reattached["data"]["agent_alive"], true);
    let answers = entries.iter().filter(|e| e["kind"] == "keys" && e["data"]["why"] == "edit prompt").count();
    assert_eq!(answers, 1, "{entries:#?}");
    assert_eq!(kinds(&entries).iter().filter(|k| *k == "agent_started").count(), 1);
}

#[test]
fn the_same_prompt_asked_again_on_an_identical_screen_is_answered_each_time() {
    // The agent clears its screen after each answer and asks the very same question again: the
    // screens at the three questions are identical, yet each question is new output.
    let prompt = json!({ "do": "prompt", "name": "edit", "expect": "1",
        "text": "● Write(plan.md)\n Create file\n plan.md\n Do you want to create plan.md?\n ❯ 1. Yes\n   2. No\n" });
    let spin = json!({ "do": "spin", "seconds": 0.3 });
    let mut actions = vec![prompt.clone(), spin.clone(), prompt.clone(), spin, prompt];
    actions.extend(whole_loop());
    let (ws, _) = setup(json!([actions]), "");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!(code, 0, "{err}\n{status:#}");
    let answers: Vec<Value> = agent_log(&ws).into_iter().filter(|e| e["kind"] == "answer").collect();
    assert_eq!(answers.iter().map(|a| a["keys"].as_str().unwrap_or_default()).collect::<Vec<_>>(), ["1", "1", "1"]);
    let typed =
        supervision(&ws).into_iter().filter(|e| e["kind"] == "keys" && e["data"]["why"] == "edit prompt").count();
    assert_eq!(typed, 3);
}

#[test]
fn without_a_file_watcher_the_signals_are_read_at_every_heartbeat() {
    let (ws, _) = setup(json!([whole_loop()]), "");
    let out = ws
        .cmd()
        .env("LOOPWRIGHT_AUTO_NO_WATCH", "1")
        .args(["auto", "start", "mod", "--agent", "fake", "--json"])
        .output()
        .expect("auto start");
    let status: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{}\n{status:#}", String::from_utf8_lossy(&out.stderr));
    assert_eq!((&status["status"], &status["iteration"]), (&json!("complete"), &json!(6)));
    let entries = supervision(&ws);
    let k = kinds(&entries);
    assert_eq!(k.iter().filter(|k| *k == "watch_unavailable").count(), 1, "{k:?}");
    assert_eq!(k.iter().filter(|k| *k == "signal").count(), 6, "{k:?}");
}

#[test]
fn at_the_default_heartbeat_a_prompt_after_a_persons_answer_is_answered_as_it_appears() {
    // The person answers a refused push with "No"; the agent's next prompt (an allowed command)
    // comes at once, redrawn in place as Claude Code does — answered then, not a heartbeat later.
    let push = json!({ "do": "prompt", "name": "push", "redraw": true, "keep": true, "expect": "3", "timeout": 60,
        "text": " Bash command\n\n   git push --force origin main\n\u{1b}[38;5;246m   Publish it\u{1b}[39m\n\n Do you want to proceed?\n ❯ 1. Yes\n   2. Yes, and don't ask again for this command\n   3. No\n\n Esc to cancel · Tab to amend\n" });
    let (ws, _) = setup(json!([[push, claude_bash_prompt("next", "cargo test"), { "do": "idle" }]]), "");
    let config = ws.read(".loopwright/config.toml").replace("heartbeat_seconds = 0.2", "heartbeat_seconds = 60");
    ws.write(".loopwright/config.toml", &config);
    let d = crate::daemon::Daemon::start(&ws, &[]);
    let (code, body) = d.post("/api/sessions/s/task-auto", &json!({ "taskDir": "mod", "agent": "fake" }));
    assert_eq!(code, 201, "{body}");
    wait_loop(&d, "s", "needs_human");
    let (code, body) = d.post("/api/sessions/s/task-auto/keys", &json!({ "text": "3", "by": "alice" }));
    assert_eq!(code, 200, "{body}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(50);
    let at = |kind: &str, name: &str| {
        agent_log(&ws).iter().find(|e| e["kind"] == kind && e["prompt"] == name).and_then(|e| e["at"].as_f64())
    };
    let (asked, answered) = loop {
        if let (Some(a), Some(b)) = (at("asked", "next"), at("answer", "next")) {
            break (a, b);
        }
        assert!(std::time::Instant::now() < deadline, "the next prompt was not answered: {:#?}", agent_log(&ws));
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    // Well under the minute's heartbeat: the look came with the screen.
    assert!(answered - asked < 20.0, "answered {:.1} s after it appeared", answered - asked);
    let (code, body) = d.delete("/api/sessions/s/task-auto");
    assert_eq!(code, 200, "{body}");
}

#[test]
fn two_loops_in_one_working_tree_are_refused_and_a_worktree_of_its_own_is_not() {
    let (ws, _) = setup(json!([[{ "do": "idle" }], [{ "do": "idle" }]]), "");
    let (code, _, err) = ws.run(&["auto", "init", "other", "--target", "Something else."]);
    assert_eq!(code, 0, "{err}");
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.init_git();
    let d = crate::daemon::Daemon::start(&ws, &[]);
    let post = |session: &str, dir: &str| {
        d.post(&format!("/api/sessions/{session}/task-auto"), &json!({ "taskDir": dir, "agent": "fake" }))
    };
    let (code, body) = post("one", "mod");
    assert_eq!(code, 201, "{body}");
    // Another module of the same tree: refused, saying how to run it apart.
    let (code, body) = post("two", "other");
    assert_eq!(code, 409, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("in the same working tree: one loop per tree") && message.contains("git worktree add"),
        "{body}"
    );
    let (code, _, err) = ws.run(&["auto", "start", "other", "--agent", "fake", "--session", "three"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("one loop per tree"), "{err}");
    // The same module in a worktree of its own (inside the workspace): a tree apart, started.
    ws.git(&["worktree", "add", "--quiet", "apart"]);
    let (code, body) = post("four", "apart/other");
    assert_eq!(code, 201, "{body}");
    for session in ["one", "four"] {
        let (code, body) = d.delete(&format!("/api/sessions/{session}/task-auto"));
        assert_eq!(code, 200, "{body}");
    }
}

#[test]
fn a_person_answers_a_refused_prompt_through_the_api_and_the_loop_goes_on() {
    let mut actions = vec![json!({ "do": "prompt", "name": "push", "expect": "3", "timeout": 60,
        "text": " Bash command\n\n   git push --force origin main\n\n Do you want to proceed?\n ❯ 1. Yes\n   2. Yes, and don't ask again\n   3. No\n\n Esc to cancel" })];
    actions.extend(whole_loop());
    let (ws, _) = setup(json!([actions]), "");
    let d = crate::daemon::Daemon::start(&ws, &[]);
    // Someone follows the notices from the start: the loop needing a person reaches them.
    let notices = d.stream("/api/task-auto/notices");
    let (code, body) = d.post("/api/sessions/s/task-auto", &json!({ "taskDir": "mod", "agent": "fake" }));
    assert_eq!(code, 201, "{body}");
    let frames = crate::daemon::read_sse(notices, |f| f.1 == "needs_human");
    let needs: Value = serde_json::from_str(&frames.last().expect("a notice").2).expect("JSON");
    assert_eq!((needs["session_name"].as_str(), needs["kind"].as_str()), (Some("s"), Some("needs_human")));
    assert!(needs["text"].as_str().unwrap_or_default().contains("`git push --force origin main`"), "{needs:#}");
    let waiting = wait_loop(&d, "s", "needs_human");
    assert!(waiting["needs_human"].as_str().unwrap_or_default().contains("git push --force"), "{waiting:#}");
    let (code, body) = d.post("/api/sessions/s/task-auto/keys", &json!({ "text": "", "by": "alice" }));
    assert_eq!(code, 422, "nothing to type: {body}");
    // At the menu a sentence and Enter would take its highlighted choice (yes, push): refused
    // with the choices, through the API and the CLI; so is a yes that does not name the push.
    let choices = "1. Yes · 2. Yes, and don't ask again · 3. No";
    // The menu's own choices, as the CLI labels them: in the API's screen and on the dashboard
    // (buttons instead of a text box).
    let (code, shown) = d.get("/api/sessions/s/task-auto/screen");
    assert_eq!(code, 200, "{shown}");
    assert_eq!(
        shown["choices"],
        json!([{"key": "1", "label": "Yes"}, {"key": "2", "label": "Yes, and don't ask again"}, {"key": "3", "label": "No"}])
    );
    let token = ws.read(".loopwright/state/serve.token");
    let (code, page) = d.page_as("/auto", token.trim());
    assert_eq!(code, 200);
    assert!(page.contains(r#"data-choice="3" data-session="s">3. No</button>"#), "{page}");
    assert!(!page.contains("keys-form"), "no free text at a menu: {page}");
    let (code, body) =
        d.post("/api/sessions/s/task-auto/keys", &json!({ "text": "no, do not push", "enter": true, "by": "alice" }));
    assert_eq!(code, 409, "{body}");
    assert!(body.to_string().contains(choices), "{body}");
    let (code, _, err) = ws.run(&["auto", "send", "s", "no, do not push", "--enter"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(choices), "{err}");
    for confirm in [None, Some("git push origin main")] {
        let (code, body) =
            d.post("/api/sessions/s/task-auto/keys", &json!({ "text": "1", "by": "alice", "confirm": confirm }));
        assert_eq!(code, 409, "{body}");
        assert!(
            body.to_string()
                .contains("choice 1 (Yes) approves `git push --force origin main`, which the policy refused"),
            "{body}"
        );
    }
    assert!(agent_log(&ws).iter().all(|e| e["kind"] != "answer"), "nothing reached the agent");
    let (code, body) = d.post("/api/sessions/s/task-auto/keys", &json!({ "text": "3", "enter": true, "by": "alice" }));
    assert_eq!(code, 200, "{body}");
    let end = wait_loop(&d, "s", "complete");
    assert_eq!(end["iteration"], 6);
    // Its end is a notice too; one read after the first sees only the end.
    let first = frames.last().and_then(|f| f.0).expect("an id");
    let (code, later) = d.get(&format!("/api/task-auto/notices?after={first}"));
    assert_eq!(code, 200, "{later}");
    let later: Vec<(&str, &str)> = later
        .as_array()
        .expect("notices")
        .iter()
        .map(|n| (n["kind"].as_str().unwrap_or_default(), n["text"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(later, [("ended", "loop complete")]);
    let answers: Vec<Value> = agent_log(&ws).into_iter().filter(|e| e["kind"] == "answer").collect();
    assert_eq!(answers.iter().map(|a| a["keys"].clone()).collect::<Vec<_>>(), [json!("3")]);
    let typed =
        supervision(&ws).into_iter().find(|e| e["kind"] == "keys" && e["data"]["keys"] == "3").expect("journaled");
    assert_eq!(typed["data"]["why"], "typed by alice: choice 3 (No)");
    assert!(typed["data"]["excerpt"].as_str().unwrap_or_default().contains("git push --force"), "{typed:#}");
    // Ended: nothing to type to.
    let (code, _, err) = ws.run(&["auto", "send", "s", "y", "--enter"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("already ended"), "{err}");
}

#[test]
fn a_stop_file_is_honoured_with_a_known_reason_only_and_the_session_files_are_private() {
    // The agent writes `.auto-stop` itself, with a reason the SPEC does not know.
    let actions = vec![
        json!({ "do": "write", "path": "mod/.auto-stop", "text": "{\"reason\": \"<b>owned</b>\"}" }),
        json!({ "do": "spin", "seconds": 0.5 }),
        check_stop(),
        json!({ "do": "idle" }),
    ];
    let (ws, _) = setup(json!([actions]), "");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!(code, 4, "{err}\n{status:#}");
    assert_eq!((&status["status"], &status["stop_reason"]), (&json!("stopped"), &json!("user_stop")));
    let mode = std::fs::metadata(ws.path().join(".loopwright/state/auto/mod")).expect("session dir");
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777, 0o700);
}

/// The commands of the policy's table test (`crates/auto/tests/fixtures/policy-commands.json`).
fn policy_commands(which: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../auto/tests/fixtures/policy-commands.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON");
    doc[which].as_array().expect("a list").iter().map(|c| c.as_str().unwrap_or_default().to_owned()).collect()
}

/// Claude Code's Bash permission prompt as its TUI draws it: the description in its grey.
fn claude_bash(command: &str, description: &str) -> String {
    let body: Vec<String> = command.lines().map(|l| format!("   {l}")).collect();
    format!(
        " Bash command\n\n{}\n\u{1b}[38;5;246m   {description}\u{1b}[39m\n\n Do you want to proceed?\n ❯ 1. Yes\n   2. Yes, and don't ask again for this command\n   3. No\n\n Esc to cancel",
        body.join("\n")
    )
}

/// Waits (up to `secs`) until the loop of `session` is `status`, through the API.
fn wait_loop_for(d: &crate::daemon::Daemon, session: &str, status: &str, secs: u64) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let (_, s) = d.get(&format!("/api/sessions/{session}/task-auto"));
        if s["status"] == status {
            return s;
        }
        assert!(std::time::Instant::now() < deadline, "loop {session} never became {status}: {s:#}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn through_a_real_terminal_no_destructive_command_is_answered_and_the_safe_ones_are() {
    // The agent shows Claude Code's Bash prompt for every command of the policy's table, on a
    // terminal of 8 rows: the header and the command scroll off the top, so the policy reads
    // them from the holder's scrollback. A destructive prompt gets no key (the agent gives up
    // after 0.6 s); a safe one gets `1`.
    let (destructive, safe) = (policy_commands("destructive"), policy_commands("safe"));
    let spin = json!({ "do": "spin", "seconds": 0.3 });
    let mut actions = vec![];
    for (i, c) in destructive.iter().enumerate() {
        actions.push(json!({ "do": "prompt", "name": format!("d{i}"), "text": claude_bash(c, "Clean up"), "expect": "1", "timeout": 0.6 }));
        actions.push(spin.clone());
    }
    for (i, c) in safe.iter().enumerate() {
        actions.push(json!({ "do": "prompt", "name": format!("s{i}"), "text": claude_bash(c, "Run it"), "expect": "1", "timeout": 10 }));
        actions.push(spin.clone());
    }
    actions.extend(whole_loop());
    let (ws, _) = setup(json!([actions]), "rows = 8\nstall_captures = 40\n");
    let d = crate::daemon::Daemon::start(&ws, &[]);
    let (code, body) = d.post("/api/sessions/p/task-auto", &json!({ "taskDir": "mod", "agent": "fake" }));
    assert_eq!(code, 201, "{body}");
    wait_loop_for(&d, "p", "complete", 180);
    let answers = answers(&ws);
    let expected: Vec<(String, String)> = (0..destructive.len())
        .map(|i| (format!("d{i}"), String::new()))
        .chain((0..safe.len()).map(|i| (format!("s{i}"), "1".to_owned())))
        .collect();
    assert_eq!(answers, expected);
    // Each refusal showed the person the whole command, read off the scrollback.
    let refused: Vec<Value> = supervision(&ws).into_iter().filter(|e| e["kind"] == "needs_human").collect();
    let shown: Vec<String> =
        refused.iter().filter_map(|e| e["data"]["subject"]["value"].as_str().map(str::to_owned)).collect();
    let expected_shown: Vec<String> = destructive.iter().map(|c| c.trim_end().to_owned()).collect();
    assert_eq!(shown, expected_shown);
}

#[test]
fn a_check_the_agent_adds_runs_only_after_a_person_approves_it() {
    // The agent adds a check that deletes a folder outside the workspace, then says it is done.
    let outside = tempfile::tempdir().expect("tmp");
    let important = outside.path().join("important");
    std::fs::create_dir(&important).expect("mkdir");
    let added = format!("rm -rf {}", important.display());
    let mut actions = vec![json!({ "do": "write", "path": "mod/.index.md",
        "text": format!("---\nstatus: executing\nphase: ''\nchecks:\n- 'true'\n- '{added}'\n---\n\n# Plan\n") })];
    actions.extend(whole_loop());
    let (ws, _) = setup(json!([actions]), "");
    declare_check(&ws, "true");
    let d = crate::daemon::Daemon::start(&ws, &[]);
    let (code, body) = d.post("/api/sessions/c/task-auto", &json!({ "taskDir": "mod", "agent": "fake" }));
    assert_eq!(code, 201, "{body}");
    let waiting = wait_loop_for(&d, "c", "needs_human", 60);
    assert_eq!(waiting["checks_to_approve"], json!([added]));
    assert!(waiting["needs_human"].as_str().unwrap_or_default().contains(&added), "{waiting:#}");
    // It stays waiting, and the added check has not run.
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(important.is_dir(), "an added check ran without a person");
    let (_, still) = d.get("/api/sessions/c/task-auto");
    assert_eq!(still["status"], "needs_human");
    let ran: Vec<Value> = supervision(&ws).into_iter().filter(|e| e["kind"] == "check").collect();
    assert_eq!(ran.iter().map(|e| e["data"]["command"].clone()).collect::<Vec<_>>(), [json!("true")]);
    // An approval of another list than the one waiting (the agent added one meanwhile) approves
    // nothing.
    let (code, stale) = d.post("/api/sessions/c/task-auto/checks", &json!({ "checks": ["true"] }));
    assert_eq!(code, 409, "{stale}");
    let (code, _, err) = ws.run(&["auto", "approve-checks", "mod", "--check", "rm -rf /elsewhere"]);
    assert_eq!(code, 2, "{err}");
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert!(important.is_dir());
    assert!(!supervision(&ws).iter().any(|e| e["kind"] == "checks_approved"));
    // A person approves it (from the CLI, naming what they read): it runs, and the loop completes.
    let (code, _, err) = ws.run(&["auto", "approve-checks", "mod", "--check", &added]);
    assert_eq!(code, 0, "{err}");
    let (code, again) = d.post("/api/sessions/c/task-auto/checks", &json!({}));
    assert!(code == 409 || code == 200, "{again}");
    let end = wait_loop_for(&d, "c", "complete", 60);
    assert_eq!(end["checks_to_approve"], json!([]));
    assert!(!important.exists(), "the approved check ran");
    let approved = supervision(&ws).into_iter().find(|e| e["kind"] == "checks_approved").expect("journaled");
    assert_eq!(approved["data"]["checks"], json!([added]));
}

#[test]
fn the_supervisors_own_writes_follow_no_link_the_agent_planted() {
    // The agent turns `.summary.md` into a link to a file outside the workspace; the declared
    // check fails, so the supervisor writes the failure into the summary.
    let outside = tempfile::tempdir().expect("tmp");
    let bashrc = outside.path().join(".bashrc");
    std::fs::write(&bashrc, "# mine\n").expect("write");
    let mut actions = vec![json!({ "do": "link", "path": "mod/.summary.md", "target": bashrc })];
    actions.extend(done_after_one_failed_check());
    let (ws, task) = setup(json!([actions]), "");
    declare_check(&ws, "test -f done.txt");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!(code, 0, "{err}\n{status:#}");
    assert_eq!(std::fs::read_to_string(&bashrc).expect("read"), "# mine\n");
    let meta = std::fs::symlink_metadata(task.join(".summary.md")).expect("summary");
    assert!(meta.is_file(), "the link was replaced by a file");
    assert!(std::fs::read_to_string(task.join(".summary.md")).unwrap_or_default().contains("## Verification failed"));
    let leftovers: Vec<String> = std::fs::read_dir(&task)
        .expect("dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert_eq!(leftovers, Vec::<String>::new());
}

#[test]
fn a_fifo_signal_file_blocks_nothing_and_sigterm_ends_the_daemon() {
    // The agent makes `.auto-signal` (and `.index.md`) FIFOs nobody writes to.
    let mut actions =
        vec![json!({ "do": "fifo", "path": "mod/.auto-signal" }), json!({ "do": "fifo", "path": "mod/.auto-stop" })];
    actions.push(json!({ "do": "fifo", "path": "mod/.index.md" }));
    for _ in 0..100 {
        actions.push(json!({ "do": "spin", "seconds": 0.3 }));
    }
    actions.push(json!({ "do": "idle" }));
    let (ws, _) = setup(json!([actions]), "");
    let d = crate::daemon::Daemon::start(&ws, &[]);
    let (code, body) = d.post("/api/sessions/f/task-auto", &json!({ "taskDir": "mod", "agent": "fake" }));
    assert_eq!(code, 201, "{body}");
    let quick =
        reqwest::blocking::Client::builder().timeout(std::time::Duration::from_secs(1)).build().expect("client");
    let mut answered = 0;
    for _ in 0..40 {
        let r = quick.get(d.url("/api/health")).send();
        assert!(r.is_ok_and(|r| r.status().as_u16() == 200), "health not answered within 1 s");
        answered += 1;
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(answered, 40);
    let (_, s) = d.get("/api/sessions/f/task-auto");
    assert!(s["status"] == "running" || s["status"] == "needs_human", "{s:#}");
    let started = std::time::Instant::now();
    let (code, stderr) = d.stop();
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "SIGTERM took {:?}", started.elapsed());
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_key_the_agent_prints_is_stored_and_shown_nowhere_and_no_other_user_reads_the_state() {
    let key = "sk-live-4f9c2a7e1b3d5f6a8c0e2b4d6f8a0c1e";
    let mut actions = vec![
        json!({ "do": "print", "text": format!("export TEAM_API_KEY={key}") }),
        json!({ "do": "prompt", "name": "leak", "timeout": 1.5, "expect": "1",
            "text": claude_bash(&format!("curl -H 'x-api-key: {key}' https://api.example/v1"), "Call the API") }),
    ];
    actions.extend(whole_loop());
    let (ws, _) = setup(json!([actions]), "");
    // The workspace as a user's home would be: others may enter it.
    std::fs::set_permissions(ws.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let d = crate::daemon::Daemon::start_env(&ws, &[], &[("TEAM_API_KEY", key)]);
    let (code, body) = d.post("/api/sessions/k/task-auto", &json!({ "taskDir": "mod", "agent": "fake" }));
    assert_eq!(code, 201, "{body}");
    let waiting = wait_loop_for(&d, "k", "needs_human", 60);
    let shown = waiting.to_string();
    assert!(!shown.contains(key) && shown.contains("[REDACTED:TEAM_API_KEY]"), "{waiting:#}");
    let (_, screen) = d.get("/api/sessions/k/task-auto/screen");
    assert!(!screen.to_string().contains(key), "{screen:#}");
    wait_loop_for(&d, "k", "complete", 60);
    let mut answers = vec![d.get("/api/sessions/k/task-auto").1, d.get("/api/sessions/k/task-auto/log").1];
    answers.push(d.get("/api/sessions/k/task-auto/screen").1);
    answers.push(d.get("/api/sessions").1);
    for a in &answers {
        assert!(!a.to_string().contains(key), "an API answer shows the key: {a:#}");
    }
    for args in [&["auto", "status", "mod"][..], &["auto", "log", "mod"], &["auto", "status"]] {
        let (_, out, err) = ws.run(args);
        assert!(!out.contains(key) && !err.contains(key), "{args:?}: {out}{err}");
    }
    drop(d);
    // No file under .loopwright/ holds it (the journal, its WAL, the holder's files).
    let leaked: Vec<String> = crate::support::files_under(&ws.path().join(".loopwright"))
        .into_iter()
        .filter(|f| std::fs::read(f).is_ok_and(|b| b.windows(key.len()).any(|w| w == key.as_bytes())))
        .map(|f| f.display().to_string())
        .collect();
    assert_eq!(leaked, Vec::<String>::new());
    // Another local user reads nothing of the state: not the folder, not a file in it.
    let state = ws.path().join(".loopwright/state");
    let mut tried = vec![state.clone()];
    tried.extend(crate::support::files_under(&state));
    for path in tried {
        let as_nobody = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--", "cat"])
            .arg(&path)
            .output()
            .expect("setpriv");
        assert!(!as_nobody.status.success(), "nobody read {}", path.display());
    }
    // The folder is the owner's only; so are the files that hold the journal, the token, the
    // daemon's address and locks, and what the agent's terminal showed.
    let mode = |p: &Path| {
        std::fs::symlink_metadata(p).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777)
    };
    assert_eq!(mode(&state).ok(), Some(0o700));
    let sensitive: Vec<(String, Option<u32>)> = crate::support::files_under(&state)
        .into_iter()
        .filter(|f| {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            name.starts_with("state.db")
                || matches!(name, "serve.token" | "serve.json")
                || name.ends_with(".lock")
                || (name.ends_with(".json") && f.to_string_lossy().contains("/auto/"))
        })
        .map(|f| (f.display().to_string(), mode(&f).ok()))
        .collect();
    assert!(sensitive.len() >= 6, "{sensitive:?}");
    assert_eq!(
        sensitive.iter().filter(|(_, m)| *m != Some(0o600)).collect::<Vec<_>>(),
        Vec::<&(String, Option<u32>)>::new()
    );
}

#[test]
fn a_burst_of_signal_rewrites_grows_neither_the_journal_nor_the_daemon_without_bound() {
    let mut actions = vec![json!({ "do": "spin", "seconds": 0.5 }), json!({ "do": "burst", "count": 3000 })];
    for _ in 0..10 {
        actions.push(json!({ "do": "spin", "seconds": 0.3 }));
    }
    actions.extend(whole_loop());
    let (ws, _) = setup(json!([actions]), "stall_captures = 40\n");
    let d = crate::daemon::Daemon::start(&ws, &[]);
    // What the journal holds, not how far the write-ahead log reached before a checkpoint
    // (that depends on how busy the machine was): the log is folded in first.
    let db = |ws: &crate::support::Ws| {
        let path = ws.path().join(".loopwright/state/state.db");
        if let Ok(conn) = rusqlite::Connection::open(&path) {
            let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
        ["state.db", "state.db-wal"]
            .iter()
            .map(|f| std::fs::metadata(ws.path().join(".loopwright/state").join(f)).map_or(0, |m| m.len()))
            .sum::<u64>()
    };
    let before = db(&ws);
    let (code, body) = d.post("/api/sessions/b/task-auto", &json!({ "taskDir": "mod", "agent": "fake" }));
    assert_eq!(code, 201, "{body}");
    wait_loop_for(&d, "b", "complete", 120);
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.pid())).expect("status");
    let peak_kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .expect("VmHWM");
    let grown = db(&ws).saturating_sub(before);
    let entries = supervision(&ws);
    let signals = entries.iter().filter(|e| e["kind"] == "signal" || e["kind"] == "signal_invalid").count();
    let unjournaled: u64 = entries.iter().filter_map(|e| e["data"]["unjournaled"].as_u64()).sum();
    eprintln!(
        "3000 signal rewrites: {signals} journaled, {unjournaled} counted only; journal grew {grown} bytes; daemon peak {peak_kb} kB"
    );
    assert!(signals < 300, "{signals} signal entries");
    assert!(grown < 8 << 20, "the journal grew {grown} bytes");
    assert!(peak_kb < 120 * 1024, "the daemon peaked at {peak_kb} kB");
    let longest = entries.iter().map(|e| e["data"].to_string().len()).max().unwrap_or(0);
    assert!(longest < 8 * 1024, "an entry of {longest} bytes");
}

#[test]
fn auto_status_and_auto_log_print_none_of_the_agents_escape_sequences() {
    let actions = vec![
        json!({ "do": "print", "text": "\u{1b}]52;c;cm0gLXJmIH4=\u{7}\u{1b}]0;owned\u{7}" }),
        json!({ "do": "prompt", "name": "push", "timeout": 2, "expect": "1",
            "text": claude_bash("git push --force origin main \u{9b}8mhidden\u{1b}[0m", "Publish \u{1b}]52;c;eA==\u{7}") }),
        json!({ "do": "idle" }),
    ];
    let (ws, _) = setup(json!([actions]), "");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!(code, 3, "{err}\n{status:#}");
    for args in [&["auto", "status", "mod"][..], &["auto", "log", "mod"], &["auto", "status"]] {
        let (_, out, err) = ws.run(args);
        let bad = |t: &str| t.chars().any(|c| c.is_control() && c != '\n' && c != '\t');
        assert!(!bad(&out) && !bad(&err), "{args:?} printed control characters: {out:?}");
    }
    let (_, out, _) = ws.run(&["auto", "status", "mod"]);
    assert!(out.contains("git push --force origin main"), "{out}");
    let _ = ws.run(&["auto", "stop", "mod"]);
}

/// What the fake agent logged of `kind`, in order.
fn agent_events(ws: &crate::support::Ws, kind: &str) -> Vec<Value> {
    agent_log(ws).into_iter().filter(|e| e["kind"] == kind).collect()
}

fn at_of(e: &Value) -> f64 {
    e["at"].as_f64().unwrap_or_default()
}

/// Claude Code's permission prompt for a shell command.
fn claude_bash_prompt(name: &str, command: &str) -> Value {
    json!({ "do": "prompt", "name": name, "redraw": true, "keep": true, "expect": "1",
        "text": format!(" Bash command\n\n   {command}\n\u{1b}[38;5;246m   Run it\u{1b}[39m\n\n Do you want to proceed?\n ❯ 1. Yes\n   2. Yes, and don't ask again for this command\n   3. No\n\n Esc to cancel · Tab to amend\n") })
}

#[test]
fn at_the_default_heartbeat_the_first_message_and_back_to_back_prompts_are_answered_as_they_appear() {
    // Three permission prompts, each replacing the last in one frame (several tool calls in
    // one answer): the same menu rows at the same place each time.
    let mut actions = vec![
        claude_bash_prompt("a", "pytest -q"),
        claude_bash_prompt("b", "cargo test"),
        claude_bash_prompt("c", "cargo build"),
    ];
    actions.extend(whole_loop());
    let (ws, _) = setup(json!([actions]), "");
    let d = crate::daemon::Daemon::start(&ws, &[]);
    let (code, body) =
        d.post("/api/sessions/s/task-auto", &json!({ "taskDir": "mod", "agent": "fake", "heartbeatSeconds": 60 }));
    assert_eq!(code, 201, "{body}");
    wait_loop_for(&d, "s", "complete", 60);
    assert_eq!(answers(&ws), [("a".into(), "1".into()), ("b".into(), "1".into()), ("c".into(), "1".into())]);
    // Each within 2 s of appearing, though the heartbeat is a minute.
    let started = at_of(&agent_events(&ws, "started")[0]);
    let first = at_of(&agent_events(&ws, "first_message")[0]);
    assert!(first - started < 2.0, "the first message came {:.1} s after the start", first - started);
    let asked = agent_events(&ws, "asked");
    let answered = agent_events(&ws, "answer");
    let delays: Vec<f64> = asked.iter().zip(&answered).map(|(q, a)| at_of(a) - at_of(q)).collect();
    assert!(delays.len() == 3 && delays.iter().all(|d| *d < 2.0), "answers came after {delays:?} s");
}

#[test]
fn a_usage_limit_menu_is_answered_and_waited_out_to_the_reset_time_it_shows_with_one_continue() {
    let mut actions = vec![
        sig("plan", "(generated)", "check", "post-plan"),
        json!({ "do": "quota", "next_minute": true,
            "text": "  ⎿  You've hit your limit · resets {time}\n\n What do you want to do?\n\n ❯ 1. Stop and wait for limit to reset\n   2. Add funds to continue with extra usage\n   3. Upgrade your plan\n\n Enter to confirm · Esc to cancel" }),
    ];
    actions.extend(whole_loop().into_iter().skip(2));
    let (ws, _) = setup(json!([actions]), "");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!(code, 0, "{err}\n{status:#}");
    let keys: Vec<(String, f64)> = agent_events(&ws, "quota_key")
        .iter()
        .map(|e| (e["keys"].as_str().unwrap_or_default().to_owned(), at_of(e)))
        .collect();
    let reset = agent_events(&ws, "reset_at")[0]["reset"].as_f64().expect("the reset time");
    // The menu answered at once; the one continue (typed, then Enter) after the reset (the
    // jitter is 0.2 s).
    let typed: String = keys.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!((keys[0].0.as_str(), typed.as_str()), ("1", "1continue\r"), "{keys:?}");
    assert!(keys[0].1 < reset, "{keys:?} reset {reset}");
    let journal: Vec<String> =
        supervision(&ws).iter().map(|e| format!("{} {} {}", e["at"], e["kind"], e["data"])).collect();
    assert!(
        keys[1].1 >= reset && keys[1].1 < reset + 5.0,
        "continue at {} for a reset at {reset}: {journal:#?}",
        keys[1].1
    );
    let entries = supervision(&ws);
    let wait = entries.iter().find(|e| e["kind"] == "quota_wait").expect("a wait");
    assert_eq!(wait["data"]["given"], true, "{wait:#}");
    assert_eq!(
        wait["data"]["resets_at"].as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok()).map(|t| t.as_second()),
        Some(reset as i64)
    );
    assert_eq!(status["quota_paused_s"].as_f64().map(|p| p > 0.0), Some(true), "{status:#}");
}

#[test]
fn a_burst_of_the_providers_rate_limits_is_waited_out_never_nudged_and_the_loop_completes() {
    let retry = |n: u32| json!({ "do": "print", "text": format!("✻ API error · Retrying in 1s · attempt {n}/10") });
    let mut actions = vec![
        sig("plan", "(generated)", "check", "post-plan"),
        retry(1),
        json!({ "do": "hang", "seconds": 1.2 }),
        retry(2),
        json!({ "do": "hang", "seconds": 1.2 }),
        json!({ "do": "print", "text": "  ⎿  API Error: 529 {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}" }),
        json!({ "do": "wait_input", "text": "" }),
    ];
    actions.extend(whole_loop().into_iter().skip(2));
    // A stall would be seen after 1 s of an unchanged screen.
    let (ws, _) = setup(json!([actions]), "stall_captures = 5\n");
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!((code, status["status"].as_str()), (0, Some("complete")), "{err}\n{status:#}");
    let entries = supervision(&ws);
    let waits: Vec<&Value> = entries.iter().filter(|e| e["kind"] == "quota_wait").collect();
    assert!(!waits.is_empty() && waits.iter().all(|w| w["data"]["wait"] == "rate_limit"), "{waits:#?}");
    let typed: Vec<&str> = entries
        .iter()
        .filter(|e| e["kind"] == "keys")
        .filter_map(|e| e["data"]["why"].as_str())
        .filter(|w| *w != "first message")
        .collect();
    assert_eq!(typed, ["quota reset: one continue"]);
    assert!(!kinds(&entries).contains(&"stall".to_owned()));
    let inputs: Vec<Value> = agent_events(&ws, "input").iter().map(|e| e["keys"].clone()).collect();
    assert_eq!(inputs, [json!("continue\r")]);
}

#[test]
fn an_agent_that_cannot_start_is_tried_with_fresh_sessions_and_the_loop_fails_saying_why() {
    let (ws, _) = setup(json!([[]]), "restart_backoff_seconds = 0.1\n");
    ws.write(
        ".loopwright/agents/broken.md",
        "---\nrunner: command\ncommand: [\"sh\", \"-c\", \"echo 'fatal: no API key configured'; exit 3\"]\n---\nAn agent that cannot start.\n",
    );
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "broken"]);
    assert_eq!(code, 1, "{err}\n{status:#}");
    assert_eq!((status["status"].as_str(), status["stop_reason"].as_str()), (Some("failed"), None), "{status:#}");
    let entries = supervision(&ws);
    let started: Vec<&Value> = entries.iter().filter(|e| e["kind"] == "agent_started").collect();
    assert_eq!(started.len(), 3, "{entries:#?}");
    assert!(started.iter().all(|e| e["data"]["resume"].is_null()));
    let failed = entries.iter().find(|e| e["kind"] == "failed").expect("failed");
    let reason = failed["data"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("the agent exited during its startup 3 times in a row (last: code 3)")
            && reason.contains("fatal: no API key configured"),
        "{reason}"
    );
}

#[test]
fn after_a_reboot_the_daemon_restarts_each_running_loop_with_its_recorded_session() {
    // The first start exits with a resume banner (restart 1, resuming it); the second works
    // until the machine "reboots" (daemon, holder and agent killed at once, nothing written);
    // the third — started by the next daemon — walks the loop.
    let runs = json!([
        [{ "do": "spin", "seconds": 0.5 }, { "do": "exit", "code": 1, "banner": "sess-night-1" }],
        [{ "do": "spin", "seconds": 120 }],
        whole_loop(),
    ]);
    let (ws, _) = setup(runs, "restart_backoff_seconds = 0.1\n");
    let d = crate::daemon::Daemon::start(&ws, &[]);
    let (code, body) = d.post("/api/sessions/s/task-auto", &json!({ "taskDir": "mod", "agent": "fake" }));
    assert_eq!(code, 201, "{body}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while agent_events(&ws, "started").len() < 2 {
        assert!(std::time::Instant::now() < deadline, "never restarted: {:#?}", agent_log(&ws));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let pids: Value =
        serde_json::from_str(&ws.read(".loopwright/state/auto/s/holder.json")).expect("the holder's pids");
    let _ = crate::daemon::nix_kill(d.pid(), "KILL");
    for who in ["holder", "agent"] {
        let pid = pids[who].as_u64().expect("pid");
        let _ = crate::daemon::nix_kill(i32::try_from(pid).expect("pid"), "KILL");
    }
    drop(d);
    let d = crate::daemon::Daemon::start(&ws, &[]);
    let end = wait_loop_for(&d, "s", "complete", 60);
    assert_eq!(end["restart_count"], 2, "{end:#}");
    let starts = agent_events(&ws, "started");
    assert_eq!(
        starts.iter().map(|s| s["resume"].as_str().unwrap_or_default()).collect::<Vec<_>>(),
        ["", "sess-night-1", "sess-night-1"]
    );
    let entries = supervision(&ws);
    let restarts: Vec<&Value> = entries.iter().filter(|e| e["kind"] == "restart").collect();
    assert_eq!(restarts.len(), 2, "{restarts:#?}");
    assert!(restarts.iter().all(|r| r["data"]["resume"] == "sess-night-1"));
    // The report tells the night: the steps, the restarts with why, the end.
    let (code, report, err) = ws.json(&["auto", "report", "mod"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(report["status"], "complete");
    assert_eq!(report["iterations"], 6);
    assert_eq!(
        report["steps"]
            .as_array()
            .map(|s| s.iter().map(|x| x["step"].as_str().unwrap_or_default()).collect::<Vec<_>>()),
        Some(vec!["plan", "check", "exec", "check", "merge", "report"])
    );
    let restarts: Vec<&str> =
        report["restarts"].as_array().expect("restarts").iter().filter_map(|r| r["what"].as_str()).collect();
    assert!(restarts.iter().filter(|r| r.starts_with("restart ")).count() == 2, "{restarts:?}");
    assert!(restarts.iter().any(|r| r.starts_with("supervisor took over; the agent is gone")), "{restarts:?}");
    let (code, markdown, err) = ws.run(&["auto", "report", "mod", "--markdown"]);
    assert_eq!(code, 0, "{err}");
    assert!(markdown.starts_with("# Auto loop `s`: complete\n"), "{markdown}");
    assert!(
        markdown.contains("## Restarts\n\n- ") && markdown.contains("resuming its session: the agent exited mid-loop"),
        "{markdown}"
    );
    // The API gives the same report.
    let (code, api) = d.get("/api/sessions/s/task-auto/report");
    assert_eq!(code, 200, "{api}");
    assert_eq!((api["status"].as_str(), api["restarts"].as_u64()), (Some("complete"), Some(2)));
    assert_eq!(api["markdown"].as_str(), Some(markdown.as_str()));
    assert_eq!(api["report"]["steps"], report["steps"]);
}

#[test]
fn under_sandbox_required_a_loop_refuses_to_start_and_under_auto_it_says_once_that_it_runs_unsandboxed() {
    let (ws, _) = setup(json!([whole_loop()]), "");
    let config = ws.read(".loopwright/config.toml");
    let with = |mode: &str| config.replace("sandbox = \"off\"", &format!("sandbox = \"{mode}\""));
    ws.write(".loopwright/config.toml", &with("required"));
    let (code, out, err) = ws.run(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains("sandbox = \"required\" in .loopwright/config.toml: an auto loop's agent runs in a terminal of its own that loopwright does not sandbox"),
        "{err}"
    );
    // Nothing was claimed or started.
    assert!(agent_log(&ws).is_empty());
    let (code, _, err) = ws.run(&["auto", "status", "mod"]);
    assert_eq!((code, err.as_str()), (2, "loopwright: error: no auto loop for mod\n"));

    ws.write(".loopwright/config.toml", &with("auto"));
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!((code, status["status"].clone()), (0, json!("complete")), "{err}");
    assert_eq!(err.matches("runs in a terminal of its own that loopwright does not sandbox").count(), 1, "{err}");
    let said: Vec<Value> = supervision(&ws).into_iter().filter(|e| e["kind"] == "unsandboxed").collect();
    let why: Vec<&Value> = said.iter().map(|e| &e["data"]["why"]).collect();
    assert_eq!(
        why,
        [&json!(
            "an auto loop's agent runs in a terminal of its own that loopwright does not sandbox (sandbox = \"auto\" sandboxes pipeline stages only); it runs with your rights, its commands answered by the allow list"
        )]
    );
}

#[test]
fn a_loop_that_ends_while_no_daemon_runs_is_notified_by_the_next_one_once() {
    let hook = crate::http::Server::start(
        (0..4).map(|_| crate::http::Reply::Http { status: "200 OK", headers: vec![], chunks: vec![] }).collect(),
    );
    let notify = format!("\n[[notify]]\nurl = \"http://127.0.0.1:{}/hook\"\nevents = [\"auto_finished\"]\n", hook.port);
    let (ws, _) = setup(json!([whole_loop()]), &notify);
    // A daemon came and went: the notifier knows where it stopped.
    let (code, _) = crate::daemon::Daemon::start(&ws, &[]).stop();
    assert_eq!(code, 0);
    let (code, status, err) = ws.json(&["auto", "start", "mod", "--agent", "fake"]);
    assert_eq!((code, status["status"].clone()), (0, json!("complete")), "{err}");
    let told = |hook: &crate::http::Server| -> Vec<Value> {
        hook.requests()
            .iter()
            .filter_map(|r| r.split_once("\r\n\r\n\n").or_else(|| r.split_once("\n\n")).map(|(_, b)| b.to_owned()))
            .filter_map(|b| serde_json::from_str::<Value>(b.trim()).ok())
            .collect()
    };
    let d = crate::daemon::Daemon::start(&ws, &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while told(&hook).is_empty() {
        assert!(std::time::Instant::now() < deadline, "the loop's end was never notified");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (code, _) = d.stop();
    assert_eq!(code, 0);
    // Another start sends nothing again.
    let d = crate::daemon::Daemon::start(&ws, &[]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let events: Vec<Value> = told(&hook).iter().map(|b| b["event"].clone()).collect();
    assert_eq!(events, [json!("auto_finished")]);
    drop(d);
}

/// Starts loop `s` on `mod` through the daemon and waits for the hook to hear that it needs a
/// person: the notification.
fn start_and_hear(d: &crate::daemon::Daemon, hook: &crate::http::Server) -> Value {
    let (code, body) = d.post("/api/sessions/s/task-auto", &json!({ "taskDir": "mod", "agent": "fake" }));
    assert_eq!(code, 201, "{body}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(n) = crate::team::bodies(hook).into_iter().find(|b| b["event"] == "auto_needs_human") {
            return n;
        }
        assert!(std::time::Instant::now() < deadline, "no notification: {:?}", hook.requests());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_sign_in_link_to_a_loops_menu_types_only_for_a_signed_in_person_as_them() {
    let push = json!({ "do": "prompt", "name": "push", "redraw": true, "keep": true, "timeout": 60,
        "text": " Bash command\n\n   git push --force origin main\n\n Do you want to proceed?\n ❯ 1. Yes\n   2. No\n\n Esc to cancel\n" });
    let hook = crate::http::Server::start(
        (0..4).map(|_| crate::http::Reply::Http { status: "200 OK", headers: vec![], chunks: vec![] }).collect(),
    );
    let notify = format!(
        "\n[[notify]]\nurl = \"http://127.0.0.1:{}/hook\"\nevents = [\"auto_needs_human\"]\nas = \"dana\"\nlinks = \"sign-in\"\n",
        hook.port
    );
    let (ws, _) = setup(json!([[push, { "do": "idle" }]]), &notify);
    let (code, carol, err) = ws.json(&["serve", "token", "create", "carol", "--role", "approver"]);
    assert_eq!(code, 0, "{err}");
    let carol = carol["token"].as_str().expect("token").to_owned();
    let d = crate::daemon::Daemon::start(&ws, &[]);
    let sent = start_and_hear(&d, &hook);
    let no = sent["actions"][1]["url"].as_str().expect("url").to_owned();
    let http = reqwest::blocking::Client::new();
    // Signed out, the link types nothing and is not spent.
    let tap = http.post(&no).json(&json!({})).send().expect("tap");
    assert_eq!(tap.status().as_u16(), 401);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!agent_log(&ws).iter().any(|e| e["kind"] == "answer"), "typed for nobody");
    // carol signed in: typed once, as carol (not as the target's `as`).
    let cookie = format!("{}={carol}", loopwright_daemon::api::auth::cookie_name(&d.token()));
    let done = http.post(&no).header("Cookie", cookie).json(&json!({})).send().expect("confirm");
    assert_eq!(done.status().as_u16(), 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !agent_log(&ws).iter().any(|e| e["kind"] == "answer") {
        assert!(std::time::Instant::now() < deadline, "nothing typed: {:#?}", agent_log(&ws));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (_, log) = d.get("/api/sessions/s/task-auto/log");
    let typed: Vec<&Value> =
        log.as_array().expect("log").iter().filter(|e| e["kind"] == "keys" && e["data"]["keys"] == "2").collect();
    assert_eq!(
        typed.iter().map(|e| &e["data"]["why"]).collect::<Vec<_>>(),
        [&json!("typed by carol (one-tap link): choice 2 (No)")]
    );
    let (code, body) = d.delete("/api/sessions/s/task-auto");
    assert_eq!(code, 200, "{body}");
}

#[test]
fn a_notification_of_a_refused_prompt_answers_with_the_menus_own_choices_once() {
    // A refused force push at Claude Code's menu; the notification carries a link per choice.
    let push = json!({ "do": "prompt", "name": "push", "redraw": true, "keep": true, "timeout": 60,
        "text": " Bash command\n\n   git push --force origin main\n\u{1b}[38;5;246m   Publish it\u{1b}[39m\n\n Do you want to proceed?\n ❯ 1. Yes\n   2. Yes, and don't ask again for this command\n   3. No\n\n Esc to cancel · Tab to amend\n" });
    let hook = crate::http::Server::start(
        (0..4).map(|_| crate::http::Reply::Http { status: "200 OK", headers: vec![], chunks: vec![] }).collect(),
    );
    let notify = format!(
        "\n[[notify]]\nurl = \"http://127.0.0.1:{}/hook\"\nevents = [\"auto_needs_human\"]\nas = \"dana\"\n",
        hook.port
    );
    let (ws, _) = setup(json!([[push, { "do": "idle" }]]), &notify);
    let d = crate::daemon::Daemon::start(&ws, &[]);
    let sent = start_and_hear(&d, &hook);
    let labels: Vec<&str> =
        sent["actions"].as_array().expect("actions").iter().filter_map(|a| a["label"].as_str()).collect();
    assert_eq!(labels, ["1. Yes", "2. Yes, and don't ask again for this command", "3. No"], "{sent:#}");
    let link = |i: usize| sent["actions"][i]["url"].as_str().expect("url").to_owned();
    let (yes, no) = (link(0), link(2));

    // The "Yes" page names what it would approve; the "No" page asks nothing more.
    let http = reqwest::blocking::Client::new();
    let page = http.get(&yes).send().expect("page");
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().expect("html");
    assert!(
        html.contains("This approves <code>git push --force origin main</code>, which the loop's policy refused")
            && html.contains("Answer 1. Yes as dana"),
        "{html}"
    );
    // "No", tapped: typed alone, once, journaled as typed through a link.
    let done = http.post(&no).json(&json!({})).send().expect("confirm");
    assert_eq!(done.status().as_u16(), 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !agent_log(&ws).iter().any(|e| e["kind"] == "answer") {
        assert!(std::time::Instant::now() < deadline, "nothing typed: {:#?}", agent_log(&ws));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let answers: Vec<Value> =
        agent_log(&ws).into_iter().filter(|e| e["kind"] == "answer").map(|e| e["keys"].clone()).collect();
    assert_eq!(answers, [json!("3")]);
    let (_, log) = d.get("/api/sessions/s/task-auto/log");
    let typed: Vec<&Value> =
        log.as_array().expect("log").iter().filter(|e| e["kind"] == "keys" && e["data"]["keys"] == "3").collect();
    assert_eq!(typed.len(), 1, "{log:#}");
    assert_eq!(typed[0]["data"]["why"], "typed by dana (one-tap link): choice 3 (No)");
    // Used: refused the second time; the "Yes" of the same notification is spent with it.
    assert_eq!(http.post(&no).json(&json!({})).send().expect("again").status().as_u16(), 410);
    assert_eq!(http.post(&yes).json(&json!({})).send().expect("yes").status().as_u16(), 410);
    let (code, body) = d.delete("/api/sessions/s/task-auto");
    assert_eq!(code, 200, "{body}");
}
