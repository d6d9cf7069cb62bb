//! The real Gemini CLI TUI (npm `@google/gemini-cli`, installed by
//! `scripts/install-agent-clis.sh`) supervised by `loopwright auto start`, offline: its Gemini
//! API is a scripted server on 127.0.0.1 (`GOOGLE_GEMINI_BASE_URL`, an API key), streamed as
//! the API streams (`streamGenerateContent?alt=sse`). What it shows: Gemini's folder trust
//! dialog, its shell confirmation and its confirmations of a new file and an edit — all drawn
//! in frames — are read off the real screen and answered; a destructive command is refused
//! and left to a person.

use std::path::Path;

use serde_json::{Value, json};

use crate::real_cli::{Loop, Scripted, a_person_says_no_to_the_removal, installed, module_for};

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
/// side requests) with words.
fn api(turns: Vec<Value>) -> Scripted {
    Scripted::start(move |_, path, body| {
        let contents = body["contents"].as_array().cloned().unwrap_or_default();
        let parts: Vec<&Value> = contents.iter().filter_map(|c| c["parts"].as_array()).flatten().collect();
        let results = parts.iter().filter(|p| p.get("functionResponse").is_some()).count();
        let tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
        let last = contents.last().map(|c| c["parts"].to_string()).unwrap_or_default();
        let part = match turns.get(results) {
            Some(turn) if tools && (results == 0 || last.contains("functionResponse")) => turn.clone(),
            _ => json!({"text": "Noted."}),
        };
        let recorded = format!("turn {results} (tools: {tools}) → {part}");
        Some(if path.contains("countTokens") {
            (recorded, "application/json", json!({"totalTokens": 10}).to_string())
        } else if path.contains("alt=sse") {
            (recorded, "text/event-stream", format!("data: {}\r\n\r\n", answer(part)))
        } else {
            (recorded, "application/json", answer(part).to_string())
        })
    })
}

/// A supervised Gemini CLI session on task module `mod` of a fresh workspace whose folder
/// Gemini has not been told to trust.
struct Session {
    run: Loop,
    api: Scripted,
    _home: tempfile::TempDir,
}

impl Session {
    fn start(gemini: &Path, turns: impl FnOnce(&Path) -> Vec<Value>) -> Self {
        // A model named: Gemini's automatic choice first asks a router model.
        let agent =
            format!("---\nrunner: gemini\ncommand: [\"{}\"]\nmodel: gemini-2.5-pro\n---\nGemini.\n", gemini.display());
        let ws = module_for("gemini", &agent);
        ws.write("notes.txt", "old\n");
        ws.init_git();
        let root = std::fs::canonicalize(ws.path()).expect("root");
        let api = api(turns(&root));
        let home = tempfile::tempdir().expect("home");
        std::fs::create_dir_all(home.path().join(".gemini")).expect("settings folder");
        let settings = json!({"security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"disableAutoUpdate": true}, "privacy": {"usageStatisticsEnabled": false},
            "ui": {"hideTips": true}});
        std::fs::write(home.path().join(".gemini/settings.json"), settings.to_string()).expect("settings");
        let env = [
            ("HOME", home.path().display().to_string()),
            ("GEMINI_API_KEY", "loopwright-offline-test-key".to_owned()),
            ("GOOGLE_GEMINI_BASE_URL", format!("http://127.0.0.1:{}", api.port)),
        ];
        let run = Loop::start(ws, "gemini", &env, &["GOOGLE_API_KEY", "GOOGLE_CLOUD_PROJECT"]);
        Self { run, api, _home: home }
    }

    fn shown(&self) -> String {
        format!("journal: {:#?}\nrequests:\n{}\nscreen:\n{}", self.run.journal(), self.api.shown(), self.run.screen())
    }
}

/// Gemini CLI 0.61 in a folder it does not trust yet: its trust dialog (drawn under the first
/// command's confirmation) and the command are answered; then a new file and an edit; then `rm -rf canary` is refused and the loop waits for
/// a person, whose sentence with Enter is refused and whose "No" is typed — the folder kept.
#[test]
fn the_real_gemini_cli_s_trust_shell_and_edit_confirmations_are_answered_and_a_removal_is_not() {
    let Some(gemini) = installed("gemini", "Gemini CLI") else { return };
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
    let (code, out, err) = session.run.until_it_ends(120);
    let shown = session.shown();
    assert_eq!(code, 3, "{out}\n{err}\n{shown}");
    // The first command's confirmation and the trust dialog share the keys: its Enter either
    // trusts the folder (Gemini restarts and asks for the command again) or runs the command
    // (the dialog stays, under each later confirmation). Either way only confirmations the
    // policy allowed were answered, each kind in order.
    let answered = session.run.answered();
    assert!(answered.iter().all(|(_, k)| k == "\r"), "{shown}");
    let mut kinds: Vec<&str> = answered.iter().map(|(w, _)| w.as_str()).filter(|w| *w != "trust prompt").collect();
    kinds.dedup();
    assert_eq!((kinds, answered.len() <= 5), (vec!["command prompt", "edit prompt"], true), "{shown}");
    let entries = session.run.journal();
    let asked = entries.iter().find(|e| e["kind"] == "needs_human").expect("needs_human");
    assert_eq!(asked["data"]["subject"], json!({"kind": "command", "value": "rm -rf canary"}), "{asked:#}");
    let ws = &session.run.ws;
    assert_eq!(
        (ws.read("sub/two.txt"), ws.read("notes.txt"), ws.read("canary/keep.txt")),
        ("two\n".to_owned(), "new\n".to_owned(), "keep\n".to_owned()),
        "{shown}"
    );
    assert!(ws.path().join("hi.txt").exists(), "{shown}");
    a_person_says_no_to_the_removal(
        &session.run,
        // Gemini CLI leaves "Allow for this session" out of some runs' menus.
        &[
            "1. Allow once · 2. Allow for this session · 3. No, suggest changes (esc)",
            "1. Allow once · 2. No, suggest changes (esc)",
        ],
        "No, suggest changes (esc)",
        "Request cancelled.",
    );
}
