//! What the tests that drive a real agent CLI's TUI share: the CLI the project's script
//! installed, a foreground `auto start` on task module `mod` with its journal and screen, and a
//! person answering "no" at a refused removal.

use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Ws, finish};

/// The installed CLI `bin` (`name` in what is said), or `None` (said) when it is not installed.
pub(crate) fn installed(bin: &str, name: &str) -> Option<PathBuf> {
    let path = crate::presets::installed_clis().join("node_modules/.bin").join(bin);
    let version = Command::new(&path).arg("--version").output();
    let Some(version) = version.ok().filter(|v| v.status.success()) else {
        eprintln!("skipped: {name} is not installed ({}): its TUI was not driven", path.display());
        return None;
    };
    eprintln!("driving {name} {}", String::from_utf8_lossy(&version.stdout).trim());
    Some(path)
}

/// A scripted model API on 127.0.0.1: request `n` (its path, its JSON body) is answered with
/// what `answer` returns — a line recorded for the test's output, the content type and the
/// body — or a 404 for `None`.
/// A workspace with the auto module `mod` for an agent file `agent` (`.loopwright/agents/NAME.md`
/// → its text), supervised patiently (no stall judged), and a canary folder no agent may remove.
pub(crate) fn module_for(name: &str, agent: &str) -> Ws {
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "[auto]\nstall_captures = 200\nstop_grace_seconds = 1\n");
    ws.write(&format!(".loopwright/agents/{name}.md"), agent);
    let (code, _, err) = ws.run(&["auto", "init", "mod", "--target", "Add a greeting file."]);
    assert_eq!(code, 0, "{err}");
    ws.write("canary/keep.txt", "keep\n");
    ws
}

pub(crate) struct Scripted {
    pub port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

/// What a scripted API answers a request with: (recorded, content type, body), or a 404.
pub(crate) type Answer = Option<(String, &'static str, String)>;

impl Scripted {
    pub fn start(answer: impl Fn(usize, &str, &Value) -> Answer + Send + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for (n, conn) in listener.incoming().enumerate() {
                let Ok(mut conn) = conn else { return };
                let (head, body) = crate::http::read_request(&conn);
                let path = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let reply = match answer(n, &path, &body) {
                    Some((recorded, kind, text)) => {
                        log.lock().expect("lock").push(format!("{path} {recorded}"));
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                            text.len()
                        )
                    }
                    None => "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned(),
                };
                let _ = conn.write_all(reply.as_bytes());
                let _ = conn.flush();
            }
        });
        Self { port, seen }
    }

    /// Every request answered, one line each.
    pub fn shown(&self) -> String {
        self.seen.lock().expect("lock").join("\n")
    }
}

/// `auto start mod --agent AGENT` in the foreground of a workspace; stopped when dropped.
pub(crate) struct Loop {
    pub ws: Ws,
    supervisor: Option<Child>,
}

impl Loop {
    /// Started with `env` added to the environment and `unset` taken from it.
    pub fn start(ws: Ws, agent: &str, env: &[(&str, String)], unset: &[&str]) -> Self {
        let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("loopwright"));
        cmd.args(["auto", "start", "mod", "--agent", agent]).current_dir(ws.path()).env("LANG", "C.UTF-8");
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        // The agent's terminal is interactive: a CI runner's variables would make a CLI act
        // headless (Gemini CLI then refuses a folder it was not told to trust).
        let ci = std::env::vars()
            .map(|(k, _)| k)
            .filter(|k| k == "CI" || k.starts_with("CI_") || k == "CONTINUOUS_INTEGRATION");
        for name in unset.iter().map(|n| (*n).to_owned()).chain(["TMUX".to_owned()]).chain(ci) {
            cmd.env_remove(name);
        }
        let supervisor =
            cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("auto start");
        Self { ws, supervisor: Some(supervisor) }
    }

    /// The loop's journal (empty until the supervisor created it).
    pub fn journal(&self) -> Vec<Value> {
        let (_, out, _) = self.ws.run(&["auto", "log", "mod", "--json"]);
        let log: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
        log["entries"].as_array().cloned().unwrap_or_default()
    }

    /// The agent's screen as its holder has it.
    pub fn screen(&self) -> String {
        let screen = crate::claude_tui::holder(&self.ws, json!({"op": "screen"}));
        screen["screen"].as_str().unwrap_or_default().to_owned()
    }

    /// Each key typed but the first message: why, and the keys.
    pub fn answered(&self) -> Vec<(String, String)> {
        self.journal()
            .iter()
            .filter(|e| e["kind"] == "keys" && e["data"]["why"] != "first message")
            .map(|e| {
                let field = |k: &str| e["data"][k].as_str().unwrap_or_default().to_owned();
                (field("why"), field("keys"))
            })
            .collect()
    }

    /// Waits, `seconds` at most, for `auto start` to end: its exit code, stdout and stderr.
    pub fn until_it_ends(&mut self, seconds: u64) -> (i32, String, String) {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        while self.supervisor.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none()) {
            let shown = || format!("journal: {:#?}\nscreen:\n{}", self.journal(), self.screen());
            assert!(Instant::now() < deadline, "the loop did not end\n{}", shown());
            std::thread::sleep(Duration::from_millis(200));
        }
        finish(self.supervisor.take().expect("not ended yet"))
    }
}

impl Drop for Loop {
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
/// is refused with the menu's own choices (one of `menus`: a CLI may leave a choice out), and
/// so is a "yes" that does not name the command; the menu's "No" (labelled `no`) is typed
/// alone, journaled as the person's, and the CLI takes it (`taken` shows on its screen). The
/// folder is kept.
pub(crate) fn a_person_says_no_to_the_removal(run: &Loop, menus: &[&str], no: &str, taken: &str) {
    let ws = &run.ws;
    let shown = || format!("journal: {:#?}\nscreen:\n{}", run.journal(), run.screen());
    let (code, _, err) = ws.run(&["auto", "send", "mod", "no, do not delete it", "--enter"]);
    assert_eq!(code, 2, "{err}");
    let menu = menus.iter().find(|m| err.contains(*m)).unwrap_or_else(|| panic!("{err}\n{}", shown()));
    let key = menu.split(" · ").find_map(|c| c.strip_suffix(&format!(". {no}"))).expect("the menu's No");
    let (code, _, err) = ws.run(&["auto", "send", "mod", "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("approves `rm -rf canary`, which the policy refused"), "{err}");
    let (code, _, err) = ws.run(&["auto", "send", "mod", key]);
    assert_eq!(code, 0, "{err}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !run.screen().contains(taken) {
        assert!(Instant::now() < deadline, "the CLI did not take the No:\n{}", run.screen());
        std::thread::sleep(Duration::from_millis(100));
    }
    let by_people: Vec<(String, String)> =
        run.answered().into_iter().filter(|(why, _)| why.starts_with("typed by")).collect();
    assert_eq!(by_people, [(format!("typed by tester: choice {key} ({no})"), key.to_owned())]);
    assert_eq!(ws.read("canary/keep.txt"), "keep\n");
}
