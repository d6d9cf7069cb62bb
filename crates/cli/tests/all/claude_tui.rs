//! The real Claude Code TUI (npm `@anthropic-ai/claude-code`, installed by
//! `scripts/install-agent-clis.sh`) supervised by `loopwright auto start`, offline: its Messages
//! API is a scripted server on 127.0.0.1 (`ANTHROPIC_BASE_URL`), its HOME a seeded temporary
//! directory (no onboarding, the key approved, the workspace trusted: see
//! `../shared/research/claude-tui-offline.md`). What it shows: the CLI starts in loopwright's
//! pseudo-terminal with the protocol as its first message and `--session-id`; its permission
//! prompt for a `Write` is read off the real screen and answered with `1`; the `.auto-signal`
//! it writes is journaled; after `/exit` its exit banner names the session, and the supervisor
//! restarts it with `claude --resume ID`, the conversation carried over.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Ws, finish};

/// Anthropic's streamed answer: `event:` + `data:` lines, as the SDK reads them.
pub(crate) fn stream(blocks: &[Value], stop_reason: &str) -> String {
    // Each answer its own message id: Claude Code takes a repeated id for the same message and
    // asks again.
    static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = format!("msg_lw{}", IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let mut out = String::new();
    let mut event = |name: &str, data: Value| out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    event(
        "message_start",
        json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant",
            "model": "claude-test", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    );
    for (i, block) in blocks.iter().enumerate() {
        match block["type"].as_str() {
            Some("tool_use") => {
                let start = json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}});
                event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i, "content_block": start}),
                );
                let delta = json!({"type": "input_json_delta", "partial_json": block["input"].to_string()});
                event("content_block_delta", json!({"type": "content_block_delta", "index": i, "delta": delta}));
            }
            _ => {
                let start = json!({"type": "text", "text": ""});
                event(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": i, "content_block": start}),
                );
                let delta = json!({"type": "text_delta", "text": block["text"]});
                event("content_block_delta", json!({"type": "content_block_delta", "index": i, "delta": delta}));
            }
        }
        event("content_block_stop", json!({"type": "content_block_stop", "index": i}));
    }
    event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 20}}),
    );
    event("message_stop", json!({"type": "message_stop"}));
    out
}

/// Claude Code's side request for a session title (it carries no tools): answered with one.
fn side_request(body: &Value) -> Option<(&'static str, String)> {
    let title = json!({"type": "text", "text": "{\"title\": \"Auto loop\"}"});
    body["tools"].as_array().is_none_or(Vec::is_empty).then(|| ("side", stream(&[title], "end_turn")))
}

/// What the scripted model says, by what it is asked: the first turn (the protocol) writes
/// `.auto-signal`; after the tool's result it is done; a resumed session says so (its last user
/// message is the supervisor's resume message, merged with the earlier tool result).
fn answer(body: &Value, signal_path: &Path) -> (&'static str, String) {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().map(Value::to_string).unwrap_or_default();
    if let Some(side) = side_request(body) {
        return side;
    }
    if last.contains("You were restarted") {
        return ("resumed", stream(&[json!({"type": "text", "text": "Resumed where the loop was."})], "end_turn"));
    }
    if last.contains("tool_result") {
        return (
            "after_tool",
            stream(&[json!({"type": "text", "text": "Planned: the signal is written."})], "end_turn"),
        );
    }
    if !messages.iter().any(|m| m["role"] == "assistant") {
        let signal = json!({"step": "plan", "result": "(generated)", "next": "check", "checkpoint": "post-plan",
            "iteration": 1, "timestamp": "2026-01-01T00:00:00Z"});
        let write = json!({"type": "tool_use", "id": "toolu_lw1", "name": "Write",
            "input": {"file_path": signal_path.display().to_string(), "content": signal.to_string()}});
        // Two shell commands in the same answer: their permission prompts come back to back.
        let bash = |id: &str, command: &str| json!({"type": "tool_use", "id": id, "name": "Bash", "input": {"command": command, "description": "Note progress"}});
        return (
            "first",
            stream(
                &[
                    json!({"type": "text", "text": "Noting progress, then writing the plan signal."}),
                    bash("toolu_lw2", "echo one > one.txt"),
                    bash("toolu_lw3", "echo two > two.txt"),
                    write,
                ],
                "tool_use",
            ),
        );
    }
    ("other_turn", stream(&[json!({"type": "text", "text": "Noted."})], "end_turn"))
}

/// Anthropic's answer when it refuses for the rate limit: 429, `retry-after`, a JSON error.
fn rate_limited() -> String {
    let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#;
    format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The scripted Messages API: every request recorded with the kind of answer it got.
struct Api {
    port: u16,
    seen: Arc<Mutex<Vec<(String, String, Value)>>>,
}

/// What the scripted model answers a request with: the kind recorded and the streamed body.
type Script = Box<dyn Fn(&Value) -> (&'static str, String) + Send>;

impl Api {
    fn start(script: Script) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let (head, body) = crate::http::read_request(&conn);
                if head.is_empty() {
                    continue;
                }
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let path = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
                let (kind, reply) = if path.starts_with("/v1/messages") && !path.contains("count_tokens") {
                    let (kind, text) = script(&body);
                    // A whole response (an error) as the script wrote it, else a stream.
                    let reply = if text.starts_with("HTTP/1.1 ") {
                        text
                    } else {
                        format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{text}")
                    };
                    (kind.to_owned(), reply)
                } else {
                    let text = r#"{"type":"error","error":{"type":"not_found_error","message":"not here"}}"#;
                    (
                        "other".to_owned(),
                        format!(
                            "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                            text.len()
                        ),
                    )
                };
                log.lock().expect("lock").push((path, kind, body));
                let _ = conn.write_all(reply.as_bytes());
                let _ = conn.flush();
            }
        });
        Self { port, seen }
    }

    fn kinds(&self) -> Vec<String> {
        self.seen.lock().expect("lock").iter().map(|(_, k, _)| k.clone()).collect()
    }

    fn shown(&self) -> String {
        let seen = self.seen.lock().expect("lock");
        let lines: Vec<String> = seen
            .iter()
            .map(|(path, kind, body)| {
                let roles: Vec<String> = body["messages"]
                    .as_array()
                    .map(|m| m.iter().map(|m| m["role"].as_str().unwrap_or("?").to_owned()).collect())
                    .unwrap_or_default();
                format!("{path} → {kind} (messages {roles:?}, tools {})", body["tools"].as_array().map_or(0, Vec::len))
            })
            .collect();
        lines.join("\n")
    }

    fn body_of(&self, kind: &str) -> Option<Value> {
        self.seen.lock().expect("lock").iter().find(|(_, k, _)| k == kind).map(|(_, _, b)| b.clone())
    }
}

/// One request to the holder of the session (its Unix socket, line-JSON).
pub(crate) fn holder(ws: &Ws, request: Value) -> Value {
    let sock = ws.path().join(".loopwright/state/auto/mod/holder.sock");
    let Ok(mut stream) = std::os::unix::net::UnixStream::connect(&sock) else { return Value::Null };
    let _ = stream.write_all(format!("{request}\n").as_bytes());
    let mut line = String::new();
    let _ = BufReader::new(stream).read_line(&mut line);
    serde_json::from_str(&line).unwrap_or(Value::Null)
}

fn wait_until(what: &str, seconds: u64, mut check: impl FnMut() -> bool, shown: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}\n{}", shown());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The installed Claude Code, or `None` (said) when it is not installed.
fn claude_code() -> Option<PathBuf> {
    crate::real_cli::installed("claude", "Claude Code")
}

/// How a [`Session`] starts.
struct Options<'a> {
    /// Through `loopwright serve` (else a foreground `auto start`).
    served: bool,
    /// `[auto]` settings.
    auto: &'a str,
    /// More environment for Claude Code.
    env: &'a [(&'a str, &'a str)],
    /// The module's `.index.md` before the loop starts (its checks are declared then).
    index: Option<&'a str>,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Self { served: true, auto: "stall_captures = 200\n", env: &[], index: None }
    }
}

/// A supervised Claude Code session on task module `mod` of a fresh workspace, its model the
/// scripted API `script` makes (given the module's folder).
struct Session {
    ws: Ws,
    api: Api,
    /// `auto start`, until [`Session::finish`] takes it.
    supervisor: std::cell::RefCell<Option<std::process::Child>>,
    /// The daemon supervising the loop, when it was started through one.
    daemon: Option<crate::daemon::Daemon>,
    /// The environment Claude Code is given (through the daemon's, when served).
    env: Vec<(String, String)>,
    /// Where onboarding is done, the key approved and the workspace trusted.
    _home: tempfile::TempDir,
}

impl Session {
    /// Supervised by a foreground `auto start`.
    fn start(claude: &Path, script: impl FnOnce(&Path) -> Script) -> Self {
        Self::begin(claude, script, Options { served: false, ..Options::default() })
    }

    /// Supervised by `loopwright serve`, the loop started through its API (session `mod`).
    fn served(claude: &Path, script: impl FnOnce(&Path) -> Script) -> Self {
        Self::begin(claude, script, Options::default())
    }

    /// [`Session::served`] with `[auto]` settings `auto` and more environment for Claude Code.
    fn served_with(claude: &Path, auto: &str, env: &[(&str, &str)], script: impl FnOnce(&Path) -> Script) -> Self {
        Self::begin(claude, script, Options { auto, env, ..Options::default() })
    }

    fn begin(claude: &Path, script: impl FnOnce(&Path) -> Script, options: Options) -> Self {
        let Options { served, auto, env: more_env, index } = options;
        let ws = Ws::empty();
        ws.write(
            ".loopwright/config.toml",
            // The default heartbeat (a minute): prompts are answered as they appear, not at a look.
            &format!("[auto]\n{auto}stop_grace_seconds = 1\nrestart_backoff_seconds = 0.5\n"),
        );
        ws.write(
            ".loopwright/agents/claude.md",
            &format!("---\nrunner: claude\ncommand: [\"{}\"]\n---\nClaude Code.\n", claude.display()),
        );
        let (code, _, err) = ws.run(&["auto", "init", "mod", "--target", "Add a greeting file."]);
        assert_eq!(code, 0, "{err}");
        if let Some(index) = index {
            ws.write("mod/.index.md", index);
        }
        ws.init_git();
        let root = std::fs::canonicalize(ws.path()).expect("root");
        let api = Api::start(script(&root.join("mod")));

        let home = tempfile::tempdir().expect("home");
        let key = "sk-ant-loopwright-offline-test-key";
        let seed = json!({"hasCompletedOnboarding": true, "numStartups": 1,
            "customApiKeyResponses": {"approved": [&key[key.len() - 20..]], "rejected": []},
            "projects": {root.display().to_string(): {"hasTrustDialogAccepted": true, "allowedTools": []}}});
        std::fs::write(home.path().join(".claude.json"), seed.to_string()).expect("seed");
        let base_url = format!("http://127.0.0.1:{}", api.port);
        let home_dir = home.path().display().to_string();
        let mut env = vec![
            ("HOME", home_dir.as_str()),
            ("ANTHROPIC_BASE_URL", base_url.as_str()),
            ("ANTHROPIC_API_KEY", key),
            ("DISABLE_TELEMETRY", "1"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("CLAUDE_CODE_DISABLE_TERMINAL_TITLE", "1"),
            ("LANG", "C.UTF-8"),
        ];
        env.extend_from_slice(more_env);
        let kept: Vec<(String, String)> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        if served {
            let daemon = crate::daemon::Daemon::start_env(&ws, &[], &env);
            let (code, body) =
                daemon.post("/api/sessions/mod/task-auto", &json!({ "taskDir": "mod", "agent": "claude" }));
            assert_eq!(code, 201, "{body}");
            return Self {
                ws,
                api,
                supervisor: std::cell::RefCell::new(None),
                daemon: Some(daemon),
                env: kept,
                _home: home,
            };
        }
        let supervisor = std::process::Command::new(assert_cmd::cargo::cargo_bin!("loopwright"))
            .args(["auto", "start", "mod", "--agent", "claude"])
            .current_dir(ws.path())
            .envs(env.iter().copied())
            .env_remove("TMUX")
            .env_remove("ANTHROPIC_AUTH_TOKEN")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("auto start");
        Self { ws, api, supervisor: std::cell::RefCell::new(Some(supervisor)), daemon: None, env: kept, _home: home }
    }

    /// `kill -9` of the daemon, and a new one in its place (it takes the loop over).
    fn kill_daemon_and_serve_again(&mut self) {
        let old = self.daemon.take().expect("a daemon");
        crate::daemon::nix_kill(old.pid(), "KILL").expect("kill -9");
        drop(old);
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.daemon = Some(crate::daemon::Daemon::start_env(&self.ws, &[], &env));
    }

    /// A person at a Claude Code permission menu, through the daemon's API: its "No" (choice 3),
    /// then, where Claude Code asks what to do instead, `instruction` with Enter.
    fn answer_no_then(&self, instruction: &str) {
        let d = self.daemon.as_ref().expect("a daemon");
        let keys = |body: Value| d.post("/api/sessions/mod/task-auto/keys", &body);
        let (code, body) = keys(json!({ "text": "3", "by": "alice" }));
        assert_eq!(code, 200, "{body}");
        wait_until(
            "Claude Code asking what to do instead",
            20,
            || self.screen()["screen"].as_str().unwrap_or_default().contains("What should Claude do instead?"),
            || self.shown(),
        );
        let (code, body) = keys(json!({ "text": instruction, "enter": true, "by": "alice" }));
        assert_eq!(code, 200, "{body}");
    }

    /// The loop's journal (empty until the supervisor created it).
    fn journal(&self) -> Vec<Value> {
        let (_, out, _) = self.ws.run(&["auto", "log", "mod", "--json"]);
        let log: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
        log["entries"].as_array().cloned().unwrap_or_default()
    }

    fn kinds(&self) -> Vec<String> {
        self.journal().iter().map(|e| e["kind"].as_str().unwrap_or_default().to_owned()).collect()
    }

    fn screen(&self) -> Value {
        holder(&self.ws, json!({"op": "screen"}))
    }

    /// Waits for `auto start` to return: its exit code, stdout and stderr.
    fn finish(&self) -> (i32, String, String) {
        finish(self.supervisor.borrow_mut().take().expect("not finished yet"))
    }

    fn shown(&self) -> String {
        let screen = self.screen()["screen"].as_str().unwrap_or_default().to_owned();
        format!("journal: {:#?}\nrequests:\n{}\nscreen:\n{screen}", self.journal(), self.api.shown())
    }
}

#[test]
fn the_real_claude_code_tui_is_started_answered_and_resumed_after_its_exit() {
    let Some(claude) = claude_code() else { return };
    let session = Session::start(&claude, |task| {
        let signal_path = task.join(".auto-signal");
        Box::new(move |body| answer(body, &signal_path))
    });
    let (ws, api) = (&session.ws, &session.api);
    let journal = || session.journal();
    let kinds = || session.kinds();
    let screen = || session.screen()["screen"].as_str().unwrap_or_default().to_owned();
    let shown = || session.shown();

    // Three permission prompts back to back (two commands, one file), each answered once, the
    // signal written by Claude Code and journaled, the turn over — well within the heartbeat.
    wait_until("the signal", 50, || kinds().contains(&"signal".to_owned()), shown);
    wait_until(
        "the end of the turn",
        60,
        || api.kinds().contains(&"after_tool".to_owned()) && screen().contains("Planned"),
        shown,
    );
    let entries = journal();
    let started = entries.iter().find(|e| e["kind"] == "agent_started").expect("agent_started");
    let argv: Vec<String> = serde_json::from_value(started["data"]["argv"].clone()).expect("argv");
    let id = started["data"]["session_id"].as_str().expect("session id").to_owned();
    assert_eq!(argv[1..3], ["--session-id".to_owned(), id.clone()], "{argv:?}");
    let answered: Vec<(&str, &str)> = entries
        .iter()
        .filter(|e| e["kind"] == "keys" && e["data"]["why"] != "first message")
        .map(|e| (e["data"]["why"].as_str().unwrap_or_default(), e["data"]["keys"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(answered, [("command prompt", "1"), ("command prompt", "1"), ("edit prompt", "1")], "{}", shown());
    assert_eq!((ws.read("one.txt"), ws.read("two.txt")), ("one\n".to_owned(), "two\n".to_owned()));
    assert!(!kinds().contains(&"needs_human".to_owned()), "{}", shown());
    let keys = entries.iter().find(|e| e["kind"] == "keys" && e["data"]["why"] == "edit prompt").expect("an answer");
    assert_eq!(keys["data"]["keys"], "1");
    assert!(
        keys["data"]["excerpt"].as_str().unwrap_or_default().contains("Do you want to create .auto-signal?"),
        "{keys:#}"
    );
    let signal = entries.iter().find(|e| e["kind"] == "signal").expect("signal");
    assert_eq!(
        (&signal["data"]["signal"]["step"], &signal["data"]["signal"]["next"]),
        (&json!("plan"), &json!("check")),
        "{signal:#}"
    );
    let first = api.body_of("first").expect("the first turn");
    assert!(first["messages"][0].to_string().contains(".auto-signal"), "the protocol was the first message");

    // A person types /exit: the banner names the session; the supervisor resumes it.
    holder(ws, json!({"op": "send", "text": "/exit"}));
    std::thread::sleep(Duration::from_millis(700));
    holder(ws, json!({"op": "send", "text": "\r"}));
    wait_until("the restart", 60, || kinds().contains(&"restart".to_owned()), shown);
    wait_until("the resumed turn", 60, || api.kinds().contains(&"resumed".to_owned()), shown);
    let entries = journal();
    let exited = entries.iter().find(|e| e["kind"] == "exited").expect("exited");
    assert_eq!((&exited["data"]["code"], &exited["data"]["session_id"]), (&json!(0), &json!(id)), "{exited:#}");
    assert!(exited["data"]["excerpt"].as_str().unwrap_or_default().contains(&format!("claude --resume {id}")));
    let again: Vec<&Value> = entries.iter().filter(|e| e["kind"] == "agent_started").collect();
    assert_eq!(again.len(), 2);
    let argv: Vec<String> = serde_json::from_value(again[1]["data"]["argv"].clone()).expect("argv");
    assert_eq!(argv[1..3], ["--resume".to_owned(), id.clone()], "{argv:?}");
    // The resumed request carries the first turn's conversation.
    let resumed = api.body_of("resumed").expect("resumed");
    assert!(resumed["messages"].to_string().contains("toolu_lw1"), "{resumed:#}");
    assert!(resumed["messages"].to_string().contains("You were restarted."), "{resumed:#}");

    // Stopped: the scripted model never reads `.auto-stop`; after the grace the agent is ended.
    let (code, _, err) = ws.run(&["auto", "stop", "mod"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = session.finish();
    assert_eq!(code, 4, "{out}\n{err}\n{}", shown());
    let (_, status, _) = ws.json(&["auto", "status", "mod"]);
    assert_eq!(
        (&status["status"], &status["stop_reason"], &status["restart_count"]),
        (&json!("stopped"), &json!("user_stop"), &json!(1))
    );
}

/// A model that answers the first turn with the tool calls `blocks` and every later turn
/// with a word (a title request, without tools, with a title).
fn one_turn(blocks: Vec<Value>) -> Script {
    Box::new(move |body| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        if let Some(side) = side_request(body) {
            return side;
        }
        if messages.iter().any(|m| m["role"] == "assistant") {
            return ("other_turn", stream(&[json!({"type": "text", "text": "Noted."})], "end_turn"));
        }
        ("first", stream(&blocks, "tool_use"))
    })
}

/// Filler words for a command long enough that Claude Code wraps it: capitalised plain words
/// that name no program, so a wrapped row starting with one reads, by its text alone, like
/// the description Claude Code draws under a command.
const WRAPPED_FILLER: &str = "Alpha Bravo Charlie Delta Echo Foxtrot Golf Hotel India Juliett Kilo Lima Mike November \
Oscar Papa Quebec Romeo Sierra Tango Uniform Victor Whiskey Xray Yankee Zulu";

#[test]
fn a_command_the_real_claude_code_wraps_on_screen_is_read_whole_and_not_answered() {
    let Some(claude) = claude_code() else { return };
    let outside = tempfile::tempdir().expect("outside");
    let target = outside.path().join("sorted.txt");
    // One line: `sort` (allowed) writing outside the workspace, its `-o` on the wrapped tail.
    let command = format!("sort notes.txt {WRAPPED_FILLER} -o {}", target.display());
    // A blank description (Claude Code draws a blank row for it, where it would draw "Run shell
    // command" for none): the command's wrapped tail is the last filled row of the block.
    let bash = json!({"type": "tool_use", "id": "toolu_sort", "name": "Bash", "input": {"command": command, "description": " "}});
    let session = Session::start(&claude, |_| one_turn(vec![bash]));
    session.ws.write("notes.txt", "b\na\n");

    let decided = || {
        session
            .journal()
            .iter()
            .any(|e| e["kind"] == "needs_human" || (e["kind"] == "keys" && e["data"]["why"] == "command prompt"))
    };
    wait_until("the prompt decided on", 60, decided, || session.shown());
    let screen = session.screen();
    let rows: Vec<&str> = screen["screen"].as_str().unwrap_or_default().split('\n').collect();
    let faces = screen["row_faces"].as_array().cloned().unwrap_or_default();
    // The screen has the shape that was once misread: the command over several rows, the last
    // of them starting with a capitalised word and holding the `-o` — drawn like the command.
    let header = rows.iter().position(|r| r.trim() == "Bash command").expect("the Bash prompt");
    let question = rows.iter().position(|r| r.contains("Do you want to proceed?")).expect("the question");
    let block: Vec<usize> = (header + 1..question).filter(|&i| !rows[i].trim().is_empty()).collect();
    let (first, last) = (block[0], block[block.len() - 1]);
    assert!(block.len() >= 2 && rows[first].trim().starts_with("sort notes.txt"), "{}", session.shown());
    let tail = rows[last].trim();
    assert!(
        tail.starts_with(|c: char| c.is_ascii_uppercase()) && tail.contains("-o"),
        "the command did not wrap as intended: {tail:?}\n{}",
        session.shown()
    );
    assert_eq!(faces[last], faces[first], "the wrapped tail is drawn like the command");

    let entries = session.journal();
    let asked = entries.iter().find(|e| e["kind"] == "needs_human").expect("needs_human");
    let read = asked["data"]["subject"]["value"].as_str().unwrap_or_default();
    assert_eq!(read.split_whitespace().collect::<Vec<_>>(), command.split_whitespace().collect::<Vec<_>>());
    let answered: Vec<&Value> =
        entries.iter().filter(|e| e["kind"] == "keys" && e["data"]["why"] != "first message").collect();
    assert_eq!(answered, Vec::<&Value>::new(), "{}", session.shown());
    assert!(!target.exists(), "sort wrote outside the workspace");

    let (code, _, err) = session.ws.run(&["auto", "stop", "mod"]);
    assert_eq!(code, 0, "{err}");
    let shown = session.shown();
    let (code, out, err) = session.finish();
    assert!(code == 3 || code == 4, "{code}: {out}\n{err}\n{shown}");
}

/// Claude Code 2.1.197 draws `This command requires approval` between a command and its
/// question, and commits carry a quoted message: both are read and answered.
#[test]
fn the_real_claude_code_s_approval_row_and_a_quoted_commit_message_are_answered() {
    let Some(claude) = claude_code() else { return };
    let bash = |id: &str, command: &str, description: &str| json!({"type": "tool_use", "id": id, "name": "Bash", "input": {"command": command, "description": description}});
    let blocks = vec![
        bash("toolu_t", "python3 -m pytest -q", "Run the tests"),
        bash("toolu_c", "git commit --allow-empty -m \"Add the greeting\"", "Commit the work"),
    ];
    let session = Session::start(&claude, |_| one_turn(blocks));
    let answered = || {
        session.journal().iter().filter(|e| e["kind"] == "keys" && e["data"]["why"] == "command prompt").count() == 2
            || session.kinds().contains(&"needs_human".to_owned())
    };
    wait_until("both prompts decided", 60, answered, || session.shown());
    wait_until(
        "the commit",
        30,
        || session.ws.git(&["log", "-1", "--format=%s"]).trim() == "Add the greeting",
        || session.shown(),
    );
    let entries = session.journal();
    let keys: Vec<(&str, &str)> = entries
        .iter()
        .filter(|e| e["kind"] == "keys" && e["data"]["why"] != "first message")
        .map(|e| (e["data"]["why"].as_str().unwrap_or_default(), e["data"]["keys"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(keys, [("command prompt", "1"), ("command prompt", "1")], "{}", session.shown());
    let excerpts: String =
        entries.iter().filter(|e| e["kind"] == "keys").map(|e| e["data"]["excerpt"].to_string()).collect();
    assert!(excerpts.contains("This command requires approval"), "the note was on the screen answered: {excerpts}");
    assert!(!session.kinds().contains(&"needs_human".to_owned()), "{}", session.shown());

    let (code, _, err) = session.ws.run(&["auto", "stop", "mod"]);
    assert_eq!(code, 0, "{err}");
    let shown = session.shown();
    let (code, out, err) = session.finish();
    assert!(code == 3 || code == 4, "{code}: {out}\n{err}\n{shown}");
}

/// Seconds between two journal entries' `at`.
fn seconds_between(from: &Value, to: &Value) -> f64 {
    let at = |e: &Value| e["at"].as_str().unwrap_or_default().parse::<jiff::Timestamp>().expect("an entry's time");
    (at(to) - at(from)).total(jiff::Unit::Second).expect("seconds")
}

/// A model that asks to `rm -rf canary`; told to write `after.txt` instead, asks for
/// `echo after > after.txt`; then says it is done.
fn remove_then_instead() -> Script {
    let bash = |id: &str, command: &str, description: &str| json!({"type": "tool_use", "id": id, "name": "Bash", "input": {"command": command, "description": description}});
    let remove = bash("toolu_rm", "rm -rf canary", "Remove the old folder");
    let instead = bash("toolu_echo", "echo after > after.txt", "Write the marker");
    Box::new(move |body| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let last = messages.last().map(Value::to_string).unwrap_or_default();
        if let Some(side) = side_request(body) {
            return side;
        }
        if last.contains("toolu_echo") {
            return ("done", stream(&[json!({"type": "text", "text": "Marker written."})], "end_turn"));
        }
        if last.contains("write after.txt instead") {
            return ("instead", stream(std::slice::from_ref(&instead), "tool_use"));
        }
        if messages.iter().any(|m| m["role"] == "assistant") {
            return ("other_turn", stream(&[json!({"type": "text", "text": "Noted."})], "end_turn"));
        }
        ("first", stream(std::slice::from_ref(&remove), "tool_use"))
    })
}

/// A person at a refused `rm -rf`, the loop under the daemon at its default heartbeat (60 s):
/// a sentence with Enter is refused through the API and `auto send` (the menu's highlighted
/// "Yes" never takes it), so is a "Yes" that does not name the command; the menu's own "No" is
/// typed, then their instruction; the command the model asks for next is answered as soon as it
/// is drawn, not at the next heartbeat; the report says who answered what.
#[test]
fn a_persons_no_at_the_real_claude_code_never_approves_and_the_next_prompt_is_answered_at_once() {
    let Some(claude) = claude_code() else { return };
    let session = Session::served(&claude, |_| remove_then_instead());
    let (ws, d) = (&session.ws, session.daemon.as_ref().expect("a daemon"));
    ws.write("canary/keep.txt", "keep\n");
    wait_until("the refused prompt", 60, || session.kinds().contains(&"needs_human".to_owned()), || session.shown());
    let keys = |body: Value| d.post("/api/sessions/mod/task-auto/keys", &body);

    // A sentence with Enter at the menu: refused with the menu's own choices, nothing typed.
    let choices = "1. Yes · 2. Yes, and always allow access to canary/ from this project · 3. No";
    let (code, body) = keys(json!({ "text": "no, do not delete it", "enter": true, "by": "alice" }));
    assert_eq!(code, 409, "{body}");
    assert!(body.to_string().contains(choices), "{body}");
    let (code, _, err) = ws.run(&["auto", "send", "mod", "no, do not delete it", "--enter"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(choices), "{err}");
    // "Yes" without naming the command: refused too.
    let (code, body) = keys(json!({ "text": "1", "by": "alice" }));
    assert_eq!(code, 409, "{body}");
    assert!(body.to_string().contains("choice 1 (Yes) approves `rm -rf canary`, which the policy refused"), "{body}");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(ws.read("canary/keep.txt"), "keep\n", "{}", session.shown());
    let (code, shown) = d.get("/api/sessions/mod/task-auto/screen");
    assert_eq!(code, 200, "{shown}");
    assert_eq!(
        shown["choices"],
        json!([{"key": "1", "label": "Yes"}, {"key": "2", "label": "Yes, and always allow access to canary/ from this project"}, {"key": "3", "label": "No"}])
    );

    // The menu's "No", then what to do instead: typed where Claude Code takes text.
    session.answer_no_then("Keep it; write after.txt instead.");
    wait_until("the marker", 40, || ws.path().join("after.txt").exists(), || session.shown());
    assert_eq!(ws.read("canary/keep.txt"), "keep\n");

    let entries = session.journal();
    let typed: Vec<(&str, &str)> = entries
        .iter()
        .filter(|e| e["kind"] == "keys" && e["data"]["why"] != "first message")
        .map(|e| (e["data"]["why"].as_str().unwrap_or_default(), e["data"]["keys"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(
        typed,
        [
            ("typed by alice: choice 3 (No)", "3"),
            ("typed by alice", "Keep it; write after.txt instead.⏎"),
            ("command prompt", "1")
        ],
        "{}",
        session.shown()
    );
    let person = entries.iter().rfind(|e| e["data"]["why"] == "typed by alice").expect("the instruction");
    let answered = entries.iter().rfind(|e| e["data"]["why"] == "command prompt").expect("the answer");
    // The model's turn and the prompt's drawing lie between: seconds, not the minute's heartbeat.
    let took = seconds_between(person, answered);
    eprintln!("instruction typed → the next command answered: {took:.2} s");
    assert!(took < 20.0, "answered {took:.1} s after the instruction\n{}", session.shown());

    let (code, report, err) = ws.run(&["auto", "report", "mod"]);
    assert_eq!(code, 0, "{err}");
    let section = |title: &str| {
        let from = report.find(&format!("## {title}\n\n")).unwrap_or_else(|| panic!("no {title}: {report}"));
        let body = &report[from + title.len() + 5..];
        body[..body.find("\n\n").unwrap_or(body.len())]
            .lines()
            .map(|l| l.trim_start_matches("- ").to_owned())
            .collect::<Vec<_>>()
    };
    // Each line after its time: what was answered, by whom; the agent's files, not loopwright's.
    let answers: Vec<String> =
        section("What people answered").iter().map(|l| l[l.find(' ').unwrap_or(0)..].trim().to_owned()).collect();
    assert_eq!(
        answers,
        ["alice answered choice 3 (No)", "alice typed `Keep it; write after.txt instead.⏎`"],
        "{report}"
    );
    assert_eq!(section("Changes in the working tree"), ["new: `after.txt`", "new: `canary/keep.txt`"], "{report}");
    let (code, body) = d.delete("/api/sessions/mod/task-auto");
    assert_eq!(code, 200, "{body}");
}

/// Claude Code 2.1.197's edit prompt for a file it read is answered; its WebFetch prompt is
/// read as a fetch of the address it shows, and with no host allowed goes to a person.
#[test]
fn the_real_claude_code_s_edit_is_answered_and_its_fetch_waits_for_a_person() {
    let Some(claude) = claude_code() else { return };
    let tool = |id: &str, name: &str, input: Value| json!({"type": "tool_use", "id": id, "name": name, "input": input});
    let read = tool("toolu_read", "Read", json!({"file_path": "notes.txt"}));
    let edit = tool("toolu_edit", "Edit", json!({"file_path": "notes.txt", "old_string": "old", "new_string": "new"}));
    let fetch = tool("toolu_web", "WebFetch", json!({"url": "https://example.com/docs", "prompt": "Summarise"}));
    let script: Script = Box::new(move |body| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let last = messages.last().map(Value::to_string).unwrap_or_default();
        if let Some(side) = side_request(body) {
            return side;
        }
        let (kind, next) = if last.contains("toolu_edit") {
            ("fetch", &fetch)
        } else if last.contains("toolu_read") {
            ("edit", &edit)
        } else if messages.iter().any(|m| m["role"] == "assistant") {
            return ("other_turn", stream(&[json!({"type": "text", "text": "Noted."})], "end_turn"));
        } else {
            ("first", &read)
        };
        (kind, stream(std::slice::from_ref(next), "tool_use"))
    });
    let session = Session::served(&claude, |_| script);
    session.ws.write("notes.txt", "old line\n");
    wait_until("the fetch decided on", 60, || session.kinds().contains(&"needs_human".to_owned()), || session.shown());
    assert_eq!(session.ws.read("notes.txt"), "new line\n");
    let entries = session.journal();
    let answered: Vec<(&str, &str)> = entries
        .iter()
        .filter(|e| e["kind"] == "keys" && e["data"]["why"] != "first message")
        .map(|e| (e["data"]["why"].as_str().unwrap_or_default(), e["data"]["keys"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(answered, [("edit prompt", "1")], "{}", session.shown());
    let asked = entries.iter().find(|e| e["kind"] == "needs_human").expect("needs_human");
    assert_eq!(
        (&asked["data"]["pattern"], &asked["data"]["subject"], &asked["data"]["reason"]),
        (
            &json!("claude.fetch@2.1"),
            &json!({"kind": "url", "value": "https://example.com/docs"}),
            &json!("fetching `https://example.com/docs`: example.com is not a host answered for ([auto.policy] fetch)")
        ),
        "{asked:#}"
    );
    let d = session.daemon.as_ref().expect("a daemon");
    let (code, shown) = d.get("/api/sessions/mod/task-auto/screen");
    assert_eq!(code, 200, "{shown}");
    assert_eq!(
        shown["choices"],
        json!([{"key": "1", "label": "Yes"}, {"key": "2", "label": "Yes, and don't ask again for example.com"},
            {"key": "3", "label": "No, and tell Claude what to do differently (esc)"}])
    );
    let (code, body) = d.delete("/api/sessions/mod/task-auto");
    assert_eq!(code, 200, "{body}");
}

/// A model that refuses with 429 (`retry-after: 1`) until `refusing` is over, then plans.
fn refusing_for(refusing: Duration) -> Script {
    let started = Instant::now();
    Box::new(move |body| {
        if let Some(side) = side_request(body) {
            return side;
        }
        if started.elapsed() < refusing {
            return ("429", rate_limited());
        }
        ("planned", stream(&[json!({"type": "text", "text": "Planned."})], "end_turn"))
    })
}

/// The settings of the 429 tests: a night's minutes in seconds (backoff from 1 s, the provider
/// given half a minute), stalls judged every second after 3 unchanged looks (where the loop
/// once ended `stall_limit`), Claude Code retrying once before it prints its `API Error`.
const REFUSED_NIGHT: &str =
    "heartbeat_seconds = 1\nstall_captures = 3\nquota_jitter_seconds = 1\nprovider_wait_minutes = 0.5\n";

fn loop_status(session: &Session) -> Value {
    session.ws.json(&["auto", "status", "mod"]).1
}

#[test]
fn the_real_claude_code_refused_with_429_all_night_ends_the_loop_blocked_never_stalled() {
    let Some(claude) = claude_code() else { return };
    let env = [("CLAUDE_CODE_MAX_RETRIES", "1")];
    let session = Session::served_with(&claude, REFUSED_NIGHT, &env, |_| refusing_for(Duration::from_secs(3600)));
    let ended = || !matches!(loop_status(&session)["status"].as_str(), Some("running" | "quota_wait"));
    wait_until("the loop's end", 120, ended, || session.shown());
    let status = loop_status(&session);
    assert_eq!(
        (&status["status"], &status["stop_reason"]),
        (&json!("blocked"), &Value::Null),
        "{status:#}\n{}",
        session.shown()
    );
    let why = status["needs_human"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("the provider refused requests for 0.5 minutes ([auto] provider_wait_minutes): ")
            && why.contains("API Error: Request rejected (429)"),
        "{why}"
    );
    let kinds = session.kinds();
    let waits = kinds.iter().filter(|k| *k == "quota_wait").count();
    assert!(waits >= 2, "each refusal a wait with backoff: {kinds:?}");
    assert!(!kinds.iter().any(|k| k == "stall" || k == "recovery"), "{kinds:?}\n{}", session.shown());
    // Each wait ended with one continue, the model asked again; the refusal after the last one,
    // past the half minute, ended the loop.
    let continues =
        session.journal().iter().filter(|e| e["kind"] == "keys" && e["data"]["keys"] == "continue\r").count();
    assert_eq!(continues, waits, "{}", session.shown());
    assert!(session.api.kinds().iter().filter(|k| *k == "429").count() >= 2 * waits);
}

#[test]
fn the_real_claude_code_refused_with_429_for_a_while_goes_on_when_the_provider_does() {
    let Some(claude) = claude_code() else { return };
    let env = [("CLAUDE_CODE_MAX_RETRIES", "1")];
    let session = Session::served_with(&claude, REFUSED_NIGHT, &env, |_| refusing_for(Duration::from_secs(6)));
    wait_until("the model's answer", 90, || session.api.kinds().contains(&"planned".to_owned()), || session.shown());
    wait_until(
        "the end of the wait",
        30,
        || {
            loop_status(&session)["status"] == "running"
                && session.screen()["screen"].as_str().unwrap_or_default().contains("Planned.")
        },
        || session.shown(),
    );
    let kinds = session.kinds();
    assert!(kinds.contains(&"quota_wait".to_owned()), "{kinds:?}");
    assert!(
        !kinds.iter().any(|k| k == "stall" || k == "recovery" || k == "needs_human"),
        "{kinds:?}\n{}",
        session.shown()
    );
    let status = loop_status(&session);
    assert_eq!((&status["quota_resets_at"], &status["stop_reason"]), (&Value::Null, &Value::Null), "{status:#}");
    let d = session.daemon.as_ref().expect("a daemon");
    let (code, body) = d.delete("/api/sessions/mod/task-auto");
    assert_eq!(code, 200, "{body}");
}

/// A person who answers after the loop's whole timeout (here 15 s for the night's 30 minutes):
/// the wait was not counted, the loop goes on, the next prompt is answered.
#[test]
fn a_person_answering_the_real_claude_code_after_the_timeout_finds_the_loop_going_on() {
    let Some(claude) = claude_code() else { return };
    let auto = "heartbeat_seconds = 1\nstall_captures = 200\ntimeout_minutes = 0.25\n";
    let session = Session::served_with(&claude, auto, &[], |_| remove_then_instead());
    let (ws, d) = (&session.ws, session.daemon.as_ref().expect("a daemon"));
    ws.write("canary/keep.txt", "keep\n");
    wait_until("the refused prompt", 60, || session.kinds().contains(&"needs_human".to_owned()), || session.shown());
    std::thread::sleep(Duration::from_secs(20));
    let waiting = loop_status(&session);
    assert_eq!((&waiting["status"], &waiting["stop_reason"]), (&json!("needs_human"), &Value::Null), "{waiting:#}");
    assert!(waiting["elapsed_s"].as_f64().unwrap_or(99.0) < 15.0, "{waiting:#}");
    session.answer_no_then("Keep it; write after.txt instead.");
    wait_until("the marker", 40, || ws.path().join("after.txt").exists(), || session.shown());
    let going = loop_status(&session);
    assert_eq!((&going["status"], &going["stop_reason"]), (&json!("running"), &Value::Null), "{going:#}");
    let paused = going["human_paused_s"].as_f64().unwrap_or_default();
    assert!(paused >= 20.0, "the wait for a person is shown apart: {going:#}");
    assert!(going["elapsed_s"].as_f64().unwrap_or(99.0) < 15.0, "{going:#}");
    assert_eq!(ws.read("canary/keep.txt"), "keep\n");
    let (code, body) = d.delete("/api/sessions/mod/task-auto");
    assert_eq!(code, 200, "{body}");
}

/// The scripted model of a whole night: it plans, checks, goes quiet (a stall) until nudged,
/// executes, checks, merges with a quoted commit and then a force push (refused: a person
/// answers No and says what to do), reports, claims "done" without the greeting the module's
/// check wants (sent back by the supervisor), adds it and reports again. As the protocol asks
/// of a model, the step is chosen by the module's `.auto-signal` (in `task`): Claude Code's
/// `--resume` after a `kill -9` does not bring back every turn of the conversation.
fn night(task: &Path) -> Script {
    let signal_file = task.join(".auto-signal");
    let greeting = task.parent().expect("the workspace").join("greeting.txt");
    let bash = |id: &str, command: &str| json!({"type": "tool_use", "id": id, "name": "Bash", "input": {"command": command, "description": "Loop step"}});
    // A file is written as Claude Code wants it: read first (an error when it does not exist
    // yet), then written whole — an edit prompt inside the workspace.
    let write = |id: &str, path: &str, content: &str| {
        [
            json!({"type": "tool_use", "id": format!("{id}_read"), "name": "Read", "input": {"file_path": path}}),
            json!({"type": "tool_use", "id": id, "name": "Write", "input": {"file_path": path, "content": content}}),
        ]
    };
    let signal = move |id: &str, step: &str, result: &str, next: &str, checkpoint: &str, iteration: u32| {
        let s = json!({"step": step, "result": result, "next": next, "checkpoint": checkpoint,
            "iteration": iteration, "timestamp": "2026-11-28T01:00:00Z"});
        write(id, "mod/.auto-signal", &s.to_string())
    };
    let complete =
        write("toolu_index", "mod/.index.md", "---\nstatus: complete\nchecks:\n  - test -f greeting.txt\n---\n");
    let text = |t: &str| json!({"type": "text", "text": t});
    Box::new(move |body| {
        if let Some(side) = side_request(body) {
            return side;
        }
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let all = Value::Array(messages.clone()).to_string();
        let turn = |kind: &'static str, blocks: Vec<Value>| (kind, stream(&blocks, "tool_use"));
        let written: Value = std::fs::read_to_string(&signal_file)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
        // What the supervisor or a person typed may reach the model inside a later message
        // (Claude Code queues what is typed during a turn): looked for in the whole conversation.
        if all.contains("ran the module's checks") && !greeting.exists() {
            return turn(
                "fix",
                [
                    vec![bash("toolu_fix", "echo hello > greeting.txt")],
                    signal("toolu_fix_s", "report", "(done)", "(stop)", "", 7).to_vec(),
                ]
                .concat(),
            );
        }
        match written["iteration"].as_u64() {
            None => turn(
                "plan",
                [
                    vec![text("Planning."), bash("toolu_plan", "echo '1. Write the greeting' > mod/plan.md")],
                    signal("toolu_plan_s", "plan", "(generated)", "check", "post-plan", 1).to_vec(),
                ]
                .concat(),
            ),
            Some(1) => turn("check", signal("toolu_check", "check", "PASS", "exec", "", 2).to_vec()),
            // Quiet after the check, as a model that lost its thread is: a stall, until nudged.
            Some(2) if !all.contains("Continue the loopwright auto loop") => {
                ("quiet", stream(&[text("Thinking about the next step.")], "end_turn"))
            }
            Some(2) => turn(
                "exec",
                [
                    vec![bash("toolu_exec", "echo draft > notes.txt")],
                    signal("toolu_exec_s", "exec", "(done)", "check", "post-exec", 3).to_vec(),
                ]
                .concat(),
            ),
            Some(3) => turn("accept", signal("toolu_accept", "check", "ACCEPT", "merge", "", 4).to_vec()),
            Some(4) if all.contains("the commit is enough") => {
                turn("merged", signal("toolu_merged", "merge", "success", "report", "", 5).to_vec())
            }
            Some(4) => turn(
                "merge",
                vec![
                    bash("toolu_commit", "git add notes.txt && git commit -m \"Add the notes\""),
                    bash("toolu_push", "git push --force origin main"),
                ],
            ),
            // The false "done": the module's check wants greeting.txt, which is not written.
            Some(5) => turn(
                "report",
                [complete.to_vec(), signal("toolu_report_s", "report", "(done)", "(stop)", "", 6).to_vec()].concat(),
            ),
            _ => ("idle", stream(&[text("The loop is complete.")], "end_turn")),
        }
    })
}

/// The night through the real Claude Code under the daemon at `heartbeat` seconds (stalls
/// judged after `captures` unchanged looks), with a daemon `kill -9` and a Claude Code
/// `kill -9` on the way.
fn a_night(heartbeat: u32, captures: u32) {
    let Some(claude) = claude_code() else { return };
    let index = "---\nstatus: draft\nphase: \"\"\nchecks:\n  - test -f greeting.txt\n---\n\n# Plan\n";
    let auto = format!("heartbeat_seconds = {heartbeat}\nstall_captures = {captures}\n");
    let options = Options { auto: &auto, index: Some(index), ..Options::default() };
    let mut session = Session::begin(&claude, night, options);
    // A remote a force push would rewrite.
    let origin = tempfile::tempdir().expect("origin");
    session.ws.git(&["init", "--quiet", "--bare", origin.path().to_str().expect("path")]);
    session.ws.git(&["remote", "add", "origin", origin.path().to_str().expect("path")]);
    session.ws.git(&["push", "--quiet", "origin", "main"]);
    let pushed = session.ws.git(&["--git-dir", origin.path().to_str().expect("path"), "rev-parse", "main"]);
    let signalled = |session: &Session, iteration: u64| {
        session.journal().iter().any(|e| e["kind"] == "signal" && e["data"]["signal"]["iteration"] == iteration)
    };

    // The daemon is killed after the check; another takes the loop over, and the stall after
    // it is seen and nudged.
    wait_until("the check's signal", 60, || signalled(&session, 2), || session.shown());
    session.kill_daemon_and_serve_again();
    let stall_wait = u64::from(heartbeat * (captures + 3)) + 30;
    wait_until("the nudge", stall_wait, || session.api.kinds().contains(&"exec".to_owned()), || session.shown());

    // The force push waits for a person; a sentence at its menu is refused; No, then words.
    wait_until("the refused push", 60, || loop_status(&session)["status"] == "needs_human", || session.shown());
    let d = session.daemon.as_ref().expect("a daemon");
    let keys = |body: Value| d.post("/api/sessions/mod/task-auto/keys", &body);
    let (code, body) = keys(json!({ "text": "no, do not push", "enter": true, "by": "alice" }));
    assert_eq!(code, 409, "{body}");
    session.answer_no_then("Do not push: the commit is enough.");

    // Claude Code is killed after the merge's signal; it is resumed with its conversation.
    wait_until("the merge's signal", 60, || signalled(&session, 5), || session.shown());
    let started = session.journal().into_iter().rfind(|e| e["kind"] == "agent_started").expect("agent_started");
    let (pid, id) = (started["data"]["pid"].as_i64().expect("pid"), started["data"]["session_id"].clone());
    crate::daemon::nix_kill(i32::try_from(pid).expect("pid"), "KILL").expect("kill -9 claude");

    // The false "done" is sent back by the check; the greeting follows; the loop completes.
    let ended = || !matches!(loop_status(&session)["status"].as_str(), Some("running" | "quota_wait"));
    wait_until("the loop's end", 180, ended, || session.shown());
    let status = loop_status(&session);
    assert_eq!((&status["status"], &status["restart_count"]), (&json!("complete"), &json!(1)), "{}", session.shown());
    assert_eq!(session.ws.read("greeting.txt"), "hello\n");
    assert_eq!(session.ws.git(&["log", "-1", "--format=%s"]).trim(), "Add the notes");
    let now = session.ws.git(&["--git-dir", origin.path().to_str().expect("path"), "rev-parse", "main"]);
    assert_eq!(now, pushed, "the force push ran");

    let entries = session.journal();
    let kinds: Vec<&str> = entries.iter().map(|e| e["kind"].as_str().unwrap_or_default()).collect();
    for kind in ["stall", "needs_human", "exited", "restart", "verification_failed", "verified"] {
        assert!(kinds.contains(&kind), "no {kind}: {kinds:?}");
    }
    let restarted = entries.iter().filter(|e| e["kind"] == "agent_started").nth(1).expect("a second start");
    assert_eq!(
        (&restarted["data"]["argv"][1], &restarted["data"]["argv"][2]),
        (&json!("--resume"), &id),
        "{restarted:#}"
    );
    // Every safe prompt answered once — commands: the plan, exec, the quoted commit, the
    // greeting; edits: the seven signals and the index — and nothing for the push.
    let answered = |why: &str| entries.iter().filter(|e| e["kind"] == "keys" && e["data"]["why"] == why).count();
    assert_eq!((answered("command prompt"), answered("edit prompt")), (4, 8), "{}", session.shown());
    let (code, report, err) = session.ws.run(&["auto", "report", "mod"]);
    assert_eq!(code, 0, "{err}");
    assert!(report.contains("alice answered choice 3 (No)"), "{report}");
    assert!(report.contains("commit ") && report.contains("Add the notes"), "{report}");
}

#[test]
fn a_night_with_the_real_claude_code_at_a_one_second_heartbeat() {
    a_night(1, 3);
}

#[test]
fn a_night_with_the_real_claude_code_at_the_default_heartbeat() {
    // One unchanged look at a minute's heartbeat makes the stall: about two minutes in all.
    a_night(60, 1);
}
