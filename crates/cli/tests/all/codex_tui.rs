//! The real Codex TUI (npm `@openai/codex`, installed by `scripts/install-agent-clis.sh`)
//! supervised by `loopwright auto start`, offline: its model provider is a scripted Responses
//! API on 127.0.0.1 (a `[model_providers.local]` in a temporary `CODEX_HOME`), streamed as the
//! Responses API streams (`response.created`, `response.output_item.done`,
//! `response.completed`). What it shows: Codex's first-run folder trust dialog, its command
//! approval (the model's reason and the environment above the command) and its edit approval
//! (`Destination:` rows) are read off the real screen and answered; a destructive command is
//! refused and left to a person.

use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Ws, finish};

/// The installed Codex, or `None` (said) when it is not installed.
fn codex() -> Option<PathBuf> {
    let codex = crate::presets::installed_clis().join("node_modules/.bin/codex");
    let version = std::process::Command::new(&codex).arg("--version").output();
    let Some(version) = version.ok().filter(|v| v.status.success()) else {
        eprintln!("skipped: Codex is not installed ({}): its TUI was not driven", codex.display());
        return None;
    };
    eprintln!("driving {}", String::from_utf8_lossy(&version.stdout).trim());
    Some(codex)
}

/// One streamed Responses API answer whose single output is `item`.
fn streamed(n: usize, item: &Value) -> String {
    let id = format!("resp_lw{n}");
    let usage = json!({"input_tokens": 10, "input_tokens_details": null, "output_tokens": 5,
        "output_tokens_details": null, "total_tokens": 15});
    [
        json!({"type": "response.created", "response": {"id": id}}),
        json!({"type": "response.output_item.done", "item": item}),
        json!({"type": "response.completed", "response": {"id": id, "usage": usage}}),
    ]
    .iter()
    .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or_default()))
    .collect()
}

/// A shell command the model asks Codex to run outside its sandbox, which Codex asks about.
fn escalated(n: usize, cmd: &str, why: &str) -> Value {
    let arguments = json!({"cmd": cmd, "sandbox_permissions": "require_escalated", "justification": why});
    json!({"type": "function_call", "name": "exec_command", "arguments": arguments.to_string(),
        "call_id": format!("call_lw{n}"), "id": format!("fc_lw{n}")})
}

/// A patch the model gives through the shell, as Codex's models do; Codex takes it as an edit.
fn patch(n: usize, files: &[(&str, &str)]) -> Value {
    let added: String = files.iter().map(|(path, line)| format!("*** Add File: {path}\n+{line}\n")).collect();
    let cmd = format!("apply_patch <<'EOF'\n*** Begin Patch\n{added}*** End Patch\nEOF\n");
    json!({"type": "function_call", "name": "exec_command", "arguments": json!({"cmd": cmd}).to_string(),
        "call_id": format!("call_lw{n}"), "id": format!("fc_lw{n}")})
}

fn said(n: usize, text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "id": format!("msg_lw{n}"),
        "content": [{"type": "output_text", "text": text}]})
}

/// The scripted Responses API: turn `k` of the model (counted by the tool results Codex sends
/// back) answers with `turns[k]`, then with words; requests without tools (Codex's own side
/// requests) with words. Every request is recorded with what it got.
struct Api {
    port: u16,
    seen: Arc<Mutex<Vec<(usize, String)>>>,
}

impl Api {
    fn start(turns: Vec<fn(usize) -> Value>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for (n, conn) in listener.incoming().enumerate() {
                let Ok(mut conn) = conn else { return };
                let (head, body) = crate::http::read_request(&conn);
                let path = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
                if !path.ends_with("/responses") {
                    let _ = conn.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                    continue;
                }
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let input = body["input"].as_array().cloned().unwrap_or_default();
                let results = input.iter().filter(|i| i["type"] == "function_call_output").count();
                let tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
                let last_result = input.iter().rfind(|i| i["type"] == "function_call_output");
                let answers_a_result = input.last().is_some_and(|i| i["type"] == "function_call_output");
                let item = match turns.get(results) {
                    // The next tool call answers the previous one's result (the first, the task).
                    Some(turn) if tools && (results == 0 || answers_a_result) => turn(n),
                    _ => said(n, "Noted."),
                };
                let shown = format!(
                    "turn {results} (tools: {tools}) → {} {}",
                    item["type"].as_str().unwrap_or_default(),
                    last_result.map(|r| r["output"].to_string()).unwrap_or_default()
                );
                log.lock().expect("lock").push((results, shown));
                let text = streamed(n, &item);
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                    text.len()
                );
                let _ = conn.write_all(reply.as_bytes());
                let _ = conn.flush();
            }
        });
        Self { port, seen }
    }

    fn shown(&self) -> String {
        self.seen.lock().expect("lock").iter().map(|(_, s)| s.clone()).collect::<Vec<_>>().join("\n")
    }
}

/// A supervised Codex session on task module `mod` of a fresh workspace (a git repository),
/// its model the scripted API, its sandbox read-only so that every edit is asked about.
struct Session {
    ws: Ws,
    api: Api,
    supervisor: Option<std::process::Child>,
    _home: tempfile::TempDir,
}

impl Session {
    fn start(codex: &std::path::Path, turns: Vec<fn(usize) -> Value>) -> Self {
        let ws = Ws::empty();
        ws.write(".loopwright/config.toml", "[auto]\nstall_captures = 200\nstop_grace_seconds = 1\n");
        ws.write(
            ".loopwright/agents/codex.md",
            &format!("---\nrunner: codex\ncommand: [\"{}\"]\n---\nCodex.\n", codex.display()),
        );
        let (code, _, err) = ws.run(&["auto", "init", "mod", "--target", "Add a greeting file."]);
        assert_eq!(code, 0, "{err}");
        ws.write("canary/keep.txt", "keep\n");
        ws.init_git();
        let api = Api::start(turns);
        let home = tempfile::tempdir().expect("home");
        let codex_home = home.path().join(".codex");
        std::fs::create_dir_all(&codex_home).expect("codex home");
        // No `[projects]` entry: Codex asks whether to trust the folder, as on a first run. A
        // model name of the family that is given the shell and patch tools.
        let config = format!(
            "model = \"gpt-5.3-codex\"\nmodel_provider = \"local\"\nsandbox_mode = \"read-only\"\n\n\
             [model_providers.local]\nname = \"local\"\nbase_url = \"http://127.0.0.1:{}/v1\"\n\
             env_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n\n[tui]\nscreen_reader_detection_done = true\n",
            api.port
        );
        std::fs::write(codex_home.join("config.toml"), config).expect("config");
        let supervisor = std::process::Command::new(assert_cmd::cargo::cargo_bin!("loopwright"))
            .args(["auto", "start", "mod", "--agent", "codex"])
            .current_dir(ws.path())
            .env("HOME", home.path())
            .env("CODEX_HOME", &codex_home)
            .env("OPENAI_API_KEY", "sk-loopwright-offline-test-key")
            .env("LANG", "C.UTF-8")
            .env_remove("TMUX")
            .env_remove("OPENAI_BASE_URL")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("auto start");
        Self { ws, api, supervisor: Some(supervisor), _home: home }
    }

    fn journal(&self) -> Vec<Value> {
        let (_, out, _) = self.ws.run(&["auto", "log", "mod", "--json"]);
        let log: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
        log["entries"].as_array().cloned().unwrap_or_default()
    }

    fn shown(&self) -> String {
        let screen = crate::claude_tui::holder(&self.ws, json!({"op": "screen"}));
        let screen = screen["screen"].as_str().unwrap_or_default().to_owned();
        format!("journal: {:#?}\nrequests:\n{}\nscreen:\n{screen}", self.journal(), self.api.shown())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(mut child) = self.supervisor.take() {
            let _ = self.ws.run(&["auto", "stop", "mod"]);
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A person at the refused `rm -rf canary` prompt, through `auto send`: a sentence with Enter
/// is refused with the menu's own choices (`choices`), and so is a "yes" that does not name
/// the command; the menu's "No" (choice 3, labelled `no`) is typed alone, journaled as the
/// person's, and the CLI takes it (`taken` shows on its screen). The folder is kept.
pub(crate) fn a_person_says_no_to_the_removal(ws: &Ws, choices: &str, no: &str, taken: &str) {
    let (code, _, err) = ws.run(&["auto", "send", "mod", "no, do not delete it", "--enter"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(choices), "{err}");
    let (code, _, err) = ws.run(&["auto", "send", "mod", "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("approves `rm -rf canary`, which the policy refused"), "{err}");
    let (code, _, err) = ws.run(&["auto", "send", "mod", "3"]);
    assert_eq!(code, 0, "{err}");
    let screen =
        || crate::claude_tui::holder(ws, json!({"op": "screen"}))["screen"].as_str().unwrap_or_default().to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !screen().contains(taken) {
        assert!(Instant::now() < deadline, "the CLI did not take the No:\n{}", screen());
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, log, _) = ws.run(&["auto", "log", "mod", "--json"]);
    let log: Value = serde_json::from_str(&log).expect("the journal");
    let typed: Vec<(String, String)> = log["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["kind"] == "keys" && e["data"]["why"].as_str().is_some_and(|w| w.starts_with("typed by")))
        .map(|e| {
            (
                e["data"]["why"].as_str().unwrap_or_default().to_owned(),
                e["data"]["keys"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(typed, [(format!("typed by tester: choice 3 ({no})"), "3".to_owned())]);
    assert_eq!(ws.read("canary/keep.txt"), "keep\n");
}

/// Codex 0.171 on a first run: its trust dialog, a command it runs outside the sandbox (the
/// model's reason above it) and a patch it could not write in its sandbox (two files) are
/// answered, each once; then `rm -rf canary` is refused and the loop waits for a person,
/// whose sentence with Enter is refused and whose "No" is typed — the folder kept.
#[test]
fn the_real_codex_tui_s_trust_command_and_edit_prompts_are_answered_and_a_removal_is_not() {
    let Some(codex) = codex() else { return };
    let turns: Vec<fn(usize) -> Value> = vec![
        |n| escalated(n, "touch hi.txt", "Create the marker file"),
        |n| patch(n, &[("greeting.txt", "hello"), ("sub/two.txt", "two")]),
        |n| escalated(n, "rm -rf canary", "Remove the old folder"),
    ];
    let mut session = Session::start(&codex, turns);
    let deadline = Instant::now() + Duration::from_secs(90);
    while session.supervisor.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none()) {
        assert!(Instant::now() < deadline, "the loop did not come to a person\n{}", session.shown());
        std::thread::sleep(Duration::from_millis(200));
    }
    let shown = session.shown();
    let (code, out, err) = finish(session.supervisor.take().expect("the supervisor"));
    assert_eq!(code, 3, "{out}\n{err}\n{shown}");

    let entries = session.journal();
    let answered: Vec<(&str, &str)> = entries
        .iter()
        .filter(|e| e["kind"] == "keys" && e["data"]["why"] != "first message")
        .map(|e| (e["data"]["why"].as_str().unwrap_or_default(), e["data"]["keys"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(answered, [("trust prompt", "\r"), ("command prompt", "y"), ("edit prompt", "y")], "{shown}");
    let excerpt = |why: &str| {
        let e = entries.iter().find(|e| e["data"]["why"] == why).expect("an answer");
        e["data"]["excerpt"].as_str().unwrap_or_default().to_owned()
    };
    assert!(excerpt("command prompt").contains("Reason: Create the marker file"), "{shown}");
    assert!(excerpt("edit prompt").contains("Destination: "), "{shown}");
    let asked = entries.iter().find(|e| e["kind"] == "needs_human").expect("needs_human");
    assert_eq!(asked["data"]["subject"], json!({"kind": "command", "value": "rm -rf canary"}), "{asked:#}");
    let ws = &session.ws;
    assert_eq!(
        (ws.read("greeting.txt"), ws.read("sub/two.txt"), ws.read("canary/keep.txt")),
        ("hello\n".to_owned(), "two\n".to_owned(), "keep\n".to_owned())
    );
    assert!(ws.path().join("hi.txt").exists(), "{shown}");
    a_person_says_no_to_the_removal(
        ws,
        "1. Yes, proceed (y) · 2. Yes, and don't ask again for commands that start with `rm -rf canary` (p) · 3. No, and tell Codex what to do differently (esc)",
        "No, and tell Codex what to do differently (esc)",
        "You canceled the request to run rm -rf canary",
    );
}
