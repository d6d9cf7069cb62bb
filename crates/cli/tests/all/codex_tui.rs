//! The real Codex TUI (npm `@openai/codex`, installed by `scripts/install-agent-clis.sh`)
//! supervised by `loopwright auto start`, offline: its model provider is a scripted Responses
//! API on 127.0.0.1 (a `[model_providers.local]` in a temporary `CODEX_HOME`), streamed as the
//! Responses API streams (`response.created`, `response.output_item.done`,
//! `response.completed`). What it shows: Codex's first-run folder trust dialog, its command
//! approval (the model's reason and the environment above the command) and its edit approval
//! (`Destination:` rows) are read off the real screen and answered; a destructive command is
//! refused and left to a person.

use serde_json::{Value, json};

use crate::real_cli::{Loop, Scripted, a_person_says_no_to_the_removal, installed, module_for};

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
/// requests) with words.
fn api(turns: Vec<fn(usize) -> Value>) -> Scripted {
    Scripted::start(move |n, path, body| {
        if !path.ends_with("/responses") {
            return None;
        }
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
        let recorded = format!(
            "turn {results} (tools: {tools}) → {} {}",
            item["type"].as_str().unwrap_or_default(),
            last_result.map(|r| r["output"].to_string()).unwrap_or_default()
        );
        Some((recorded, "text/event-stream", streamed(n, &item)))
    })
}

/// A supervised Codex session on task module `mod` of a fresh workspace (a git repository),
/// its model the scripted API, its sandbox read-only so that every edit is asked about.
struct Session {
    run: Loop,
    api: Scripted,
    _home: tempfile::TempDir,
}

impl Session {
    fn start(codex: &std::path::Path, turns: Vec<fn(usize) -> Value>) -> Self {
        let agent = format!("---\nrunner: codex\ncommand: [\"{}\"]\n---\nCodex.\n", codex.display());
        let ws = module_for("codex", &agent);
        ws.init_git();
        let api = api(turns);
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
        let env = [
            ("HOME", home.path().display().to_string()),
            ("CODEX_HOME", codex_home.display().to_string()),
            ("OPENAI_API_KEY", "sk-loopwright-offline-test-key".to_owned()),
        ];
        Self { run: Loop::start(ws, "codex", &env, &["OPENAI_BASE_URL"]), api, _home: home }
    }

    fn shown(&self) -> String {
        format!("journal: {:#?}\nrequests:\n{}\nscreen:\n{}", self.run.journal(), self.api.shown(), self.run.screen())
    }
}

/// Codex 0.171 on a first run: its trust dialog, a command it runs outside the sandbox (the
/// model's reason above it) and a patch it could not write in its sandbox (two files) are
/// answered, each once; then `rm -rf canary` is refused and the loop waits for a person,
/// whose sentence with Enter is refused and whose "No" is typed — the folder kept.
#[test]
fn the_real_codex_tui_s_trust_command_and_edit_prompts_are_answered_and_a_removal_is_not() {
    let Some(codex) = installed("codex", "Codex") else { return };
    let turns: Vec<fn(usize) -> Value> = vec![
        |n| escalated(n, "touch hi.txt", "Create the marker file"),
        |n| patch(n, &[("greeting.txt", "hello"), ("sub/two.txt", "two")]),
        |n| escalated(n, "rm -rf canary", "Remove the old folder"),
    ];
    let mut session = Session::start(&codex, turns);
    let (code, out, err) = session.run.until_it_ends(90);
    let shown = session.shown();
    assert_eq!(code, 3, "{out}\n{err}\n{shown}");
    let answered = session.run.answered();
    let answered: Vec<(&str, &str)> = answered.iter().map(|(w, k)| (w.as_str(), k.as_str())).collect();
    assert_eq!(answered, [("trust prompt", "\r"), ("command prompt", "y"), ("edit prompt", "y")], "{shown}");
    let entries = session.run.journal();
    let excerpt = |why: &str| {
        let e = entries.iter().find(|e| e["data"]["why"] == why).expect("an answer");
        e["data"]["excerpt"].as_str().unwrap_or_default().to_owned()
    };
    assert!(excerpt("command prompt").contains("Reason: Create the marker file"), "{shown}");
    assert!(excerpt("edit prompt").contains("Destination: "), "{shown}");
    let asked = entries.iter().find(|e| e["kind"] == "needs_human").expect("needs_human");
    assert_eq!(asked["data"]["subject"], json!({"kind": "command", "value": "rm -rf canary"}), "{asked:#}");
    let ws = &session.run.ws;
    assert_eq!(
        (ws.read("greeting.txt"), ws.read("sub/two.txt"), ws.read("canary/keep.txt")),
        ("hello\n".to_owned(), "two\n".to_owned(), "keep\n".to_owned())
    );
    assert!(ws.path().join("hi.txt").exists(), "{shown}");
    a_person_says_no_to_the_removal(
        &session.run,
        &[
            "1. Yes, proceed (y) · 2. Yes, and don't ask again for commands that start with `rm -rf canary` (p) · 3. No, and tell Codex what to do differently (esc)",
        ],
        "No, and tell Codex what to do differently (esc)",
        "You canceled the request to run rm -rf canary",
    );
}
