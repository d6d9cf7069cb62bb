//! The real Gemini CLI TUI (npm `@google/gemini-cli`, installed by
//! `scripts/install-agent-clis.sh`) supervised by `loopwright auto start`, offline: its Gemini
//! API is a scripted server on 127.0.0.1 (`GOOGLE_GEMINI_BASE_URL`, an API key), streamed as
//! the API streams (`streamGenerateContent?alt=sse`). What it shows: Gemini's folder trust
//! dialog, its shell confirmation and its confirmations of a new file and an edit — all drawn
//! in frames — are read off the real screen and answered; a destructive command is refused
//! and left to a person.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Ws, finish};

/// The installed Gemini CLI, or `None` (said) when it is not installed.
fn gemini() -> Option<PathBuf> {
    let gemini = crate::presets::installed_clis().join("node_modules/.bin/gemini");
    let version = std::process::Command::new(&gemini).arg("--version").output();
    let Some(version) = version.ok().filter(|v| v.status.success()) else {
        eprintln!("skipped: Gemini CLI is not installed ({}): its TUI was not driven", gemini.display());
        return None;
    };
    eprintln!("driving Gemini CLI {}", String::from_utf8_lossy(&version.stdout).trim());
    Some(gemini)
}

/// A model's answer holding `part` (a text or a function call).
fn answer(part: Value) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": "gemini-2.5-pro"})
}

fn call(name: &str, args: Value) -> Value {
    json!({"functionCall": {"name": name, "args": args}})
}

/// The scripted Gemini API: turn `k` of the model (counted by the function responses Gemini
/// sends back) answers with `turns[k]`, then with words; requests without tools (Gemini's own
/// side requests) with words. Every request is recorded.
struct Api {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Api {
    fn start(turns: Vec<Value>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let (head, body) = crate::http::read_request(&conn);
                let path = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let contents = body["contents"].as_array().cloned().unwrap_or_default();
                let parts: Vec<&Value> = contents.iter().filter_map(|c| c["parts"].as_array()).flatten().collect();
                let results = parts.iter().filter(|p| p.get("functionResponse").is_some()).count();
                let tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
                let last = contents.last().map(|c| c["parts"].to_string()).unwrap_or_default();
                let answers_a_result = last.contains("functionResponse");
                let part = match turns.get(results) {
                    Some(turn) if tools && (results == 0 || answers_a_result) => turn.clone(),
                    _ => json!({"text": "Noted."}),
                };
                log.lock().expect("lock").push(format!("{path} turn {results} (tools: {tools}) → {part}"));
                let (kind, text) = if path.contains("countTokens") {
                    ("application/json", json!({"totalTokens": 10}).to_string())
                } else if path.contains("alt=sse") {
                    ("text/event-stream", format!("data: {}\r\n\r\n", answer(part)))
                } else {
                    ("application/json", answer(part).to_string())
                };
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                    text.len()
                );
                let _ = conn.write_all(reply.as_bytes());
                let _ = conn.flush();
            }
        });
        Self { port, seen }
    }
}

/// A supervised Gemini CLI session on task module `mod` of a fresh workspace whose folder
/// Gemini has not been told to trust.
struct Session {
    ws: Ws,
    api: Api,
    supervisor: Option<std::process::Child>,
    _home: tempfile::TempDir,
}

impl Session {
    fn start(gemini: &Path, turns: impl FnOnce(&Path) -> Vec<Value>) -> Self {
        let ws = Ws::empty();
        ws.write(".loopwright/config.toml", "[auto]\nstall_captures = 200\nstop_grace_seconds = 1\n");
        // A model named: Gemini's automatic choice first asks a router model.
        ws.write(
            ".loopwright/agents/gemini.md",
            &format!("---\nrunner: gemini\ncommand: [\"{}\"]\nmodel: gemini-2.5-pro\n---\nGemini.\n", gemini.display()),
        );
        let (code, _, err) = ws.run(&["auto", "init", "mod", "--target", "Add a greeting file."]);
        assert_eq!(code, 0, "{err}");
        ws.write("canary/keep.txt", "keep\n");
        ws.write("notes.txt", "old\n");
        ws.init_git();
        let root = std::fs::canonicalize(ws.path()).expect("root");
        let api = Api::start(turns(&root));
        let home = tempfile::tempdir().expect("home");
        std::fs::create_dir_all(home.path().join(".gemini")).expect("settings folder");
        let settings = json!({"security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"disableAutoUpdate": true}, "privacy": {"usageStatisticsEnabled": false},
            "ui": {"hideTips": true}});
        std::fs::write(home.path().join(".gemini/settings.json"), settings.to_string()).expect("settings");
        let supervisor = std::process::Command::new(assert_cmd::cargo::cargo_bin!("loopwright"))
            .args(["auto", "start", "mod", "--agent", "gemini"])
            .current_dir(ws.path())
            .env("HOME", home.path())
            .env("GEMINI_API_KEY", "loopwright-offline-test-key")
            .env("GOOGLE_GEMINI_BASE_URL", format!("http://127.0.0.1:{}", api.port))
            .env("LANG", "C.UTF-8")
            .env_remove("TMUX")
            .env_remove("GOOGLE_API_KEY")
            .env_remove("GOOGLE_CLOUD_PROJECT")
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
        let requests = self.api.seen.lock().expect("lock").join("\n");
        format!("journal: {:#?}\nrequests:\n{requests}\nscreen:\n{screen}", self.journal())
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

/// Gemini CLI 0.61 in a folder it does not trust yet: its trust dialog (drawn under the first
/// command's confirmation) is answered and Gemini restarts itself; then a command, a new file
/// and an edit are answered, each once; then `rm -rf canary` is refused and the loop waits for
/// a person, whose sentence with Enter is refused and whose "No" is typed — the folder kept.
#[test]
fn the_real_gemini_cli_s_trust_shell_and_edit_confirmations_are_answered_and_a_removal_is_not() {
    let Some(gemini) = gemini() else { return };
    let mut session = Session::start(&gemini, |root| {
        vec![
            call("run_shell_command", json!({"command": "touch hi.txt", "description": "Create the marker file"})),
            call("write_file", json!({"file_path": root.join("sub/two.txt"), "content": "two\n"})),
            call(
                "replace",
                json!({"file_path": root.join("notes.txt"), "old_string": "old", "new_string": "new", "instruction": "Update the note"}),
            ),
            call("run_shell_command", json!({"command": "rm -rf canary", "description": "Remove the old folder"})),
        ]
    });
    let deadline = Instant::now() + Duration::from_secs(120);
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
    assert_eq!(
        answered,
        [("trust prompt", "\r"), ("command prompt", "\r"), ("edit prompt", "\r"), ("edit prompt", "\r")],
        "{shown}"
    );
    let asked = entries.iter().find(|e| e["kind"] == "needs_human").expect("needs_human");
    assert_eq!(asked["data"]["subject"], json!({"kind": "command", "value": "rm -rf canary"}), "{asked:#}");
    let ws = &session.ws;
    assert_eq!(
        (ws.read("sub/two.txt"), ws.read("notes.txt"), ws.read("canary/keep.txt")),
        ("two\n".to_owned(), "new\n".to_owned(), "keep\n".to_owned()),
        "{shown}"
    );
    assert!(ws.path().join("hi.txt").exists(), "{shown}");
    crate::codex_tui::a_person_says_no_to_the_removal(
        ws,
        "1. Allow once · 2. Allow for this session · 3. No, suggest changes (esc)",
        "No, suggest changes (esc)",
        "Request cancelled.",
    );
}
