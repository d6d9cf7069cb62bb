//! `loopwright serve` through HTTP: a real daemon on 127.0.0.1 (port 0) in a temporary
//! workspace, driven with a real HTTP client; SSE read off the wire; the CLI and the daemon
//! acting on the same journal; `kill -9` of the daemon mid-run.

use std::io::{BufRead, BufReader, Read};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::{Ws, finish, processes_with, spawn, wait_for};

/// A daemon serving a workspace; ended (SIGTERM, then waited for) when dropped.
pub(crate) struct Daemon {
    child: Option<std::process::Child>,
    addr: String,
    token: String,
    http: reqwest::blocking::Client,
}

impl Daemon {
    pub(crate) fn start(ws: &Ws, extra: &[&str]) -> Self {
        Self::start_env(ws, extra, &[])
    }

    /// [`Daemon::start`] with more environment variables.
    pub(crate) fn start_env(ws: &Ws, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut args = vec!["serve", "--heartbeat-ms", "200", "--json"];
        if !extra.contains(&"--addr") {
            args.extend(["--addr", "127.0.0.1:0"]);
        }
        args.extend_from_slice(extra);
        let mut child = crate::support::spawn_env(ws, &args, env);
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read the first line");
        let started: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
            let mut err = String::new();
            let _ = child.stderr.take().map(|mut s| s.read_to_string(&mut err));
            panic!("serve printed {line:?} ({e}); stderr: {err}")
        });
        let token = ws.read(".loopwright/state/serve.token");
        loopwright_runners::http::tls();
        let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30)).build().expect("client");
        Self { child: Some(child), addr: started["addr"].as_str().expect("addr").to_owned(), token, http }
    }

    /// The daemon's own token.
    pub(crate) fn token(&self) -> String {
        self.token.clone()
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A live stream from `path` (`Accept: text/event-stream`).
    pub(crate) fn stream(&self, path: &str) -> reqwest::blocking::Response {
        self.http
            .get(self.url(path))
            .bearer_auth(&self.token)
            .header("Accept", "text/event-stream")
            .send()
            .expect("a stream")
    }

    pub(crate) fn get(&self, path: &str) -> (u16, Value) {
        let r = self.http.get(self.url(path)).bearer_auth(&self.token).send().expect("GET");
        (r.status().as_u16(), r.json().unwrap_or(Value::Null))
    }

    pub(crate) fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self.http.post(self.url(path)).bearer_auth(&self.token).json(body).send().expect("POST");
        (r.status().as_u16(), r.json().unwrap_or(Value::Null))
    }

    /// A request with `token` (none: no `Authorization`) and extra headers: status, body and
    /// the response's headers.
    pub(crate) fn request_as(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value, reqwest::header::HeaderMap) {
        let mut r = self.http.request(method.parse().expect("method"), self.url(path));
        if let Some(token) = token {
            r = r.bearer_auth(token);
        }
        if let Some(body) = body {
            r = r.json(body);
        }
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let r = r.send().expect("request");
        let (status, head) = (r.status().as_u16(), r.headers().clone());
        (status, r.json().unwrap_or(Value::Null), head)
    }

    /// A page of the dashboard as `token` sees it (signed in by the cookie).
    pub(crate) fn page_as(&self, path: &str, token: &str) -> (u16, String) {
        let cookie = format!("{}={token}", loopwright_daemon::api::auth::cookie_name(&self.token));
        let r = self.http.get(self.url(path)).header("Cookie", cookie).send().expect("GET page");
        (r.status().as_u16(), r.text().unwrap_or_default())
    }

    /// A page of the dashboard as the daemon's own token sees it.
    pub(crate) fn page(&self, path: &str) -> (u16, String) {
        self.page_as(path, &self.token)
    }

    pub(crate) fn delete(&self, path: &str) -> (u16, Value) {
        let r = self.http.delete(self.url(path)).bearer_auth(&self.token).send().expect("DELETE");
        (r.status().as_u16(), r.json().unwrap_or(Value::Null))
    }

    /// Waits (up to 30 s) until the run's status is `status`.
    pub(crate) fn wait_status(&self, run: &str, status: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, result) = self.get(&format!("/api/runs/{run}"));
            if result["status"] == status {
                return result;
            }
            assert!(Instant::now() < deadline, "run {run} never became {status}: {result}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the gate pipeline through the API and waits until it waits at its gate.
    fn run_waiting_at_the_gate(&self) -> String {
        let (code, accepted) = self.post("/api/runs", &json!({"pipeline": "gate", "task": "count"}));
        assert_eq!(code, 202, "{accepted}");
        let run = accepted["run_id"].as_str().expect("run id").to_owned();
        self.wait_status(&run, "waiting");
        run
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    /// SIGTERM, then the exit code and stderr.
    pub(crate) fn stop(mut self) -> (i32, String) {
        let child = self.child.take().expect("running");
        let _ = nix_kill(child.id() as i32, "TERM");
        let (code, _, stderr) = finish(child);
        (code, stderr)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = nix_kill(child.id() as i32, "TERM");
            let _ = child.wait();
        }
    }
}

pub(crate) fn nix_kill(pid: i32, signal: &str) -> std::io::Result<std::process::ExitStatus> {
    std::process::Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status()
}

/// A pipeline of shell stages: `first`, a gate, then `second`; each appends to a counter file.
const GATE: &str = "name: gate\ndescription: a gate\nversion: 1\nstages:\n  - id: first\n    agent: shell\n    mode: agent\n    description: d\n    run: echo one >> count.txt\n  - id: second\n    agent: shell\n    mode: agent\n    description: d\n    requires_approval: true\n    run: echo two >> count.txt\n";

pub(crate) fn gate_ws() -> Ws {
    let ws = Ws::empty();
    ws.write(".loopwright/pipelines/gate.yml", GATE);
    ws.init_git();
    ws
}

#[test]
fn access_errors_and_a_gate_answered_once_of_two_concurrent_approvals() {
    let ws = gate_ws();
    let d = Daemon::start(&ws, &[]);
    let info: Value = serde_json::from_str(&ws.read(".loopwright/state/serve.json")).expect("serve.json");
    assert_eq!(info["addr"], d.addr.as_str());
    assert_eq!(info["pid"], d.pid());
    let mode = std::fs::metadata(ws.path().join(".loopwright/state/serve.token")).expect("token").permissions();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777, 0o600);

    // Access.
    let health = d.http.get(d.url("/api/health")).send().expect("health");
    assert_eq!(health.status().as_u16(), 200);
    assert_eq!(health.json::<Value>().expect("json"), json!({"status": "ok", "version": env!("CARGO_PKG_VERSION")}));
    let anonymous = d.http.get(d.url("/api/runs")).send().expect("runs");
    assert_eq!(anonymous.status().as_u16(), 401);
    assert_eq!(anonymous.json::<Value>().expect("json")["error"]["code"], "unauthorized");
    let wrong = d.http.get(d.url("/api/runs")).bearer_auth("x".repeat(48)).send().expect("runs");
    assert_eq!(wrong.status().as_u16(), 401);
    let rebinding = d.http.get(d.url("/api/runs")).bearer_auth(&d.token).header("Host", "evil.example:80").send();
    assert_eq!(rebinding.expect("runs").status().as_u16(), 403);
    let cross = d.http.post(d.url("/api/runs")).bearer_auth(&d.token).header("Origin", "http://evil.example");
    let cross = cross.json(&json!({"pipeline": "gate"})).send().expect("post");
    assert_eq!(cross.status().as_u16(), 403);
    assert_eq!(cross.json::<Value>().expect("json")["error"]["code"], "forbidden");
    let same = d.http.get(d.url("/api/runs")).bearer_auth(&d.token).header("Host", "localhost").send();
    assert_eq!(same.expect("runs").status().as_u16(), 200);

    // A run through the API waits at the gate; it is listed first among runs.
    let (code, accepted) = d.post("/api/runs", &json!({"pipeline": "gate", "task": "count"}));
    assert_eq!(code, 202, "{accepted}");
    assert_eq!(accepted["status"], "queued");
    let run = accepted["run_id"].as_str().expect("run id").to_owned();
    d.wait_status(&run, "waiting");
    let (code, rows) = d.get("/api/runs?status=waiting");
    assert_eq!(code, 200);
    assert_eq!(
        rows.as_array().expect("rows").iter().map(|r| r["run_id"].clone()).collect::<Vec<_>>(),
        vec![json!(run)]
    );
    // `GET /api/runs/{run}` is `status RUN --json`.
    let (_, api) = d.get(&format!("/api/runs/{run}"));
    let (_, cli, _) = ws.json(&["status", &run]);
    assert_eq!(api, cli);

    // Two approvals at once: exactly one wins, the stage runs once.
    let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
        let both: Vec<_> = ["alice", "bob"]
            .into_iter()
            .map(|by| {
                let d = &d;
                let run = &run;
                s.spawn(move || d.post(&format!("/api/runs/{run}/approve"), &json!({"by": by})))
            })
            .collect();
        both.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    let mut codes: Vec<u16> = answers.iter().map(|a| a.0).collect();
    codes.sort_unstable();
    assert_eq!(codes, vec![200, 409], "{answers:?}");
    let loser = answers.iter().find(|a| a.0 == 409).expect("a loser");
    assert_eq!(loser.1["error"]["code"], "conflict");
    let result = d.wait_status(&run, "success");
    assert_eq!(ws.read("count.txt"), "one\ntwo\n");
    assert_eq!(result, ws.json(&["status", &run]).1);

    // The journal over HTTP is what `logs RUN --json` prints.
    let (_, events) = d.get(&format!("/api/runs/{run}/events"));
    assert_eq!(events, Value::Array(ws.journal(&run)));
    let kinds: Vec<&str> =
        events.as_array().expect("events").iter().filter_map(|e| e["event"]["type"].as_str()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "approval_granted").count(), 1);
    assert_eq!(&kinds[..3], ["run_started", "run_queued", "run_resumed"]);

    // A second approval of an ended run: 409.
    let (code, body) = d.post(&format!("/api/runs/{run}/approve"), &json!({}));
    assert_eq!((code, body["error"]["code"].clone()), (409, json!("conflict")));
    let (code, _) = d.post(&format!("/api/runs/{run}/cancel"), &json!({}));
    assert_eq!(code, 409);

    // The classifier with the command's context, as `patterns test --json`.
    let text = "env: 'pytset': No such file or directory\n";
    let (code, got) = d.post(
        "/api/patterns/test",
        &json!({"text": text, "command": "sh tools/test.sh", "exit_code": 127, "check_type": "test"}),
    );
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["matched_pattern"], "command-not-found");
    assert_eq!(got["evidence"], json!([{"kind": "exit_code", "value": "127", "strength": 0.95}]));
    let (code, got) = d.post("/api/patterns/test", &json!({"text": "", "signal": "SIGKILL"}));
    assert_eq!((code, got["matched_pattern"].clone()), (200, json!("out-of-memory")), "{got}");
    let (code, got) = d.post("/api/patterns/test", &json!({"text": text, "signal": "NOPE"}));
    assert_eq!((code, got["error"]["code"].clone()), (422, json!("invalid")), "{got}");

    // The insight endpoints answer what the CLI's `--json` prints, through their own wire types.
    ws.write(
        ".loopwright/agents/fetcher.md",
        "---\nrunner: command\ncommand: [\"true\"]\nmodes: [plan]\nnetwork: [api.example.com:8443]\n---\nFetches.\n",
    );
    for (path, args) in
        [("/api/agents", &["agents"][..]), ("/api/stats", &["stats"]), ("/api/dead-letters", &["dead-letters", "list"])]
    {
        let (code, got) = d.get(path);
        assert_eq!((code, got), (200, ws.json(args).1), "{path}");
    }

    // A second daemon of the workspace is refused, naming the first.
    let (code, _, stderr) = ws.run(&["serve", "--addr", "127.0.0.1:0"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(&format!("process {}", d.pid())) && stderr.contains(&d.addr), "{stderr}");

    let (code, stderr) = d.stop();
    assert_eq!(code, 0, "{stderr}");
    assert!(!ws.path().join(".loopwright/state/serve.json").exists());
}

#[test]
fn bad_requests_get_clear_errors_and_the_daemon_keeps_serving() {
    let ws = gate_ws();
    ws.write(".loopwright/pipelines/broken.yml", "name: broken\ndescription: d\nversion: 1\nstages:\n  - id: a\n    agent: ghost\n    mode: plan\n    description: d\n");
    let d = Daemon::start(&ws, &[]);
    let raw = |body: &str| {
        let r = d.http.post(d.url("/api/runs")).bearer_auth(&d.token).header("Content-Type", "application/json");
        let r = r.body(body.to_owned()).send().expect("post");
        (r.status().as_u16(), r.json::<Value>().unwrap_or(Value::Null))
    };
    let (code, body) = raw("{not json");
    assert_eq!((code, body["error"]["code"].clone()), (422, json!("invalid")), "{body}");
    let (code, body) = raw(r#"{"pipeline": 7}"#);
    assert_eq!(code, 422, "{body}");
    let (code, body) = raw(r#"{"pipeline": "gate", "colour": "red"}"#);
    assert_eq!(code, 422, "{body}");
    assert!(body["error"]["message"].as_str().expect("message").contains("colour"), "{body}");
    let huge = format!(r#"{{"pipeline": "gate", "task": "{}"}}"#, "x".repeat(2 << 20));
    let r = d.http.post(d.url("/api/runs")).bearer_auth(&d.token).header("Content-Type", "application/json");
    let r = r.body(huge).send().expect("post");
    // The unread rest of the body ends the connection: the client must not reuse it.
    assert_eq!(
        (r.status().as_u16(), r.headers().get("connection").map(|v| v.to_str().unwrap_or(""))),
        (413, Some("close"))
    );
    assert_eq!(r.json::<Value>().expect("json")["error"]["code"], "invalid");
    let (code, body) = d.post("/api/runs", &json!({"pipeline": "../gate"}));
    assert_eq!(code, 422, "{body}");
    let (code, body) = d.post("/api/runs", &json!({"pipeline": "nope"}));
    assert_eq!((code, body["error"]["code"].clone()), (404, json!("not_found")), "{body}");
    let (code, body) = d.post("/api/runs", &json!({"pipeline": "broken"}));
    assert_eq!(code, 422, "{body}");
    let diagnostics = body["error"]["diagnostics"].as_array().expect("diagnostics");
    assert!(diagnostics.iter().any(|d| d["file"] == ".loopwright/pipelines/broken.yml"), "{body}");
    let (code, body) = d.post("/api/runs", &json!({"pipeline": "gate", "vars": {"nope": "1"}}));
    assert_eq!(code, 422, "{body}");
    let (code, _) = d.get("/api/runs/20990101-000000-abcdef");
    assert_eq!(code, 404);
    let (code, _) = d.get("/api/runs/..%2F..%2Fetc");
    assert_eq!(code, 404);
    let (code, _) = d.post("/api/runs/20990101-000000-abcdef/approve", &json!({}));
    assert_eq!(code, 404);
    let (code, body) = d.get("/api/dead-letters/..%2Fstate");
    assert_eq!(code, 404, "a path is no dead letter's id: {body}");
    let (code, _) = d.get("/api/runs?status=sideways");
    assert_eq!(code, 422);
    for query in ["/api/runs?limit=many", "/api/runs?colour=red", "/api/runs/x/events?after=-1"] {
        let (code, body) = d.get(query);
        assert_eq!((code, body["error"]["code"].clone()), (422, json!("invalid")), "{query}: {body}");
    }
    // `fix` without text, on a run that exists.
    let (_, accepted) = d.post("/api/runs", &json!({"pipeline": "gate"}));
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&run, "waiting");
    let (code, body) = d.post(&format!("/api/runs/{run}/respond"), &json!({"answer": "fix"}));
    assert_eq!(code, 422, "{body}");
    let (code, body) = d.post(&format!("/api/runs/{run}/respond"), &json!({"answer": "retry"}));
    assert_eq!(code, 409, "{body}");
    // Nothing half-written: the refused requests left no runs.
    let (_, rows) = d.get("/api/runs");
    assert_eq!(rows.as_array().expect("rows").len(), 1);
    let (code, _) = d.get("/api/health");
    assert_eq!(code, 200);
    // Reject with no body: the run ends rejected.
    let r = d.http.post(d.url(&format!("/api/runs/{run}/reject"))).bearer_auth(&d.token).send().expect("reject");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(d.wait_status(&run, "rejected")["status"], "rejected");
    let (_, rows) = d.get("/api/runs?status=rejected");
    assert_eq!(
        rows.as_array().map(|r| r.iter().map(|r| r["run_id"].clone()).collect::<Vec<_>>()),
        Some(vec![json!(run)])
    );
}

/// A workspace with pipeline `slow`: `stages` shell stages, each sleeping `seconds`.
fn slow_ws(stages: u32, seconds: &str) -> Ws {
    let ws = Ws::empty();
    let stages: String = (1..=stages)
        .map(|i| {
            format!("  - id: s{i}\n    agent: shell\n    mode: plan\n    description: d\n    run: sleep {seconds}\n")
        })
        .collect();
    ws.write(".loopwright/pipelines/slow.yml", &format!("name: slow\ndescription: d\nversion: 1\nstages:\n{stages}"));
    ws
}

/// Reads SSE frames from a response until `stop` says so: (id, event, data) per frame.
pub(crate) fn read_sse(
    response: reqwest::blocking::Response,
    mut stop: impl FnMut(&(Option<u64>, String, String)) -> bool,
) -> Vec<(Option<u64>, String, String)> {
    let mut frames = Vec::new();
    let (mut id, mut event, mut data) = (None, String::new(), String::new());
    for line in BufReader::new(response).lines() {
        let Ok(line) = line else { break };
        if line.is_empty() {
            if !event.is_empty() || !data.is_empty() {
                let frame = (id.take(), std::mem::take(&mut event), std::mem::take(&mut data));
                let done = stop(&frame);
                frames.push(frame);
                if done {
                    break;
                }
            }
            continue;
        }
        if let Some(v) = line.strip_prefix("id: ") {
            id = v.parse().ok();
        } else if let Some(v) = line.strip_prefix("event: ") {
            event = v.to_owned();
        } else if let Some(v) = line.strip_prefix("data: ") {
            data = v.to_owned();
        }
    }
    frames
}

#[test]
fn an_event_stream_resumes_after_a_disconnect_with_no_gap_and_no_duplicate() {
    let ws = slow_ws(6, "0.15");
    let d = Daemon::start(&ws, &[]);
    let (_, accepted) = d.post("/api/runs", &json!({"pipeline": "slow"}));
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    let stream = |last: Option<u64>| {
        let mut r = d.http.get(d.url(&format!("/api/runs/{run}/events"))).bearer_auth(&d.token);
        r = r.header("Accept", "text/event-stream");
        if let Some(last) = last {
            r = r.header("Last-Event-ID", last.to_string());
        }
        r.send().expect("stream")
    };
    // Read a few events, then hang up mid-run.
    let first = read_sse(stream(None), |f| f.0.is_some_and(|id| id >= 5));
    let last = first.iter().filter_map(|f| f.0).max().expect("an id");
    assert_eq!(d.get(&format!("/api/runs/{run}")).1["status"], "running");
    let second = read_sse(stream(Some(last)), |f| f.1 == "end");
    assert_eq!(second.last().map(|f| f.1.as_str()), Some("end"));
    let ids: Vec<u64> = first.iter().chain(&second).filter_map(|f| f.0).collect();
    let (_, journal) = d.get(&format!("/api/runs/{run}/events"));
    let seqs: Vec<u64> = journal.as_array().expect("events").iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(ids, seqs);
    // Every frame's data is the journal's object, and its event name the event's type.
    for (frame, record) in
        first.iter().chain(&second).filter(|f| f.0.is_some()).zip(journal.as_array().expect("events"))
    {
        assert_eq!(serde_json::from_str::<Value>(&frame.2).expect("data"), *record);
        assert_eq!(frame.1, record["event"]["type"].as_str().expect("type"));
    }
    // A finished run's stream replays and ends; `?after=` resumes too.
    let tail = read_sse(
        d.http
            .get(d.url(&format!("/api/runs/{run}/events?after={}", seqs.len() - 1)))
            .bearer_auth(&d.token)
            .header("Accept", "text/event-stream")
            .send()
            .expect("stream"),
        |f| f.1 == "end",
    );
    assert_eq!(
        tail.iter().map(|f| (f.0, f.1.as_str())).collect::<Vec<_>>(),
        vec![(Some(seqs.len() as u64), "run_finished"), (None, "end")]
    );
}

#[test]
fn a_run_driven_by_the_cli_is_followed_live_by_the_daemon() {
    let ws = Ws::empty();
    ws.write(".loopwright/pipelines/two.yml", "name: two\ndescription: d\nversion: 1\nstages:\n  - id: a\n    agent: shell\n    mode: plan\n    description: d\n    run: sleep 0.2\n  - id: b\n    agent: shell\n    mode: plan\n    description: d\n    run: sleep 0.2\n");
    let d = Daemon::start(&ws, &[]);
    let feed = d
        .http
        .get(d.url("/api/events"))
        .bearer_auth(&d.token)
        .header("Accept", "text/event-stream")
        .send()
        .expect("feed");
    let cli = spawn(&ws, &["run", "two", "-q"]);
    let frames = read_sse(feed, |f| f.1 == "run_finished");
    let (code, _, stderr) = finish(cli);
    assert_eq!(code, 0, "{stderr}");
    let run = ws.json(&["status", "latest"]).1["run_id"].clone();
    let datas: Vec<Value> =
        frames.iter().filter(|f| f.0.is_some()).map(|f| serde_json::from_str(&f.2).expect("data")).collect();
    assert!(datas.iter().all(|v| v["run_id"] == run), "{datas:?}");
    let (_, journal) = d.get(&format!("/api/runs/{}/events", run.as_str().expect("run")));
    let seqs: Vec<Value> = datas.iter().map(|v| v["seq"].clone()).collect();
    let expected: Vec<Value> = journal.as_array().expect("events").iter().map(|e| e["seq"].clone()).collect();
    assert_eq!(seqs, expected);
    // Feed ids grow by one.
    let ids: Vec<u64> = frames.iter().filter_map(|f| f.0).collect();
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
}

#[test]
fn a_daemon_killed_mid_run_is_restarted_and_the_run_resumes_without_repeating_finished_work() {
    let ws = Ws::empty();
    // Outside the workspace: restoring the interrupted attempt's changes does not undo it.
    let outside = tempfile::tempdir().expect("tempdir");
    let again = outside.path().join("again");
    let token = format!("lw-kill-{}", std::process::id());
    ws.write(
        ".loopwright/pipelines/crash.yml",
        &format!(
            "name: crash\ndescription: d\nversion: 1\nstages:\n  - id: one\n    agent: shell\n    mode: agent\n    description: d\n    run: echo 1 >> one.txt\n  - id: two\n    agent: shell\n    mode: agent\n    description: d\n    run: \"if [ -f {again} ]; then echo 2 >> two.txt; else touch {again}; sleep 60 # {token}\\nfi\"\n  - id: three\n    agent: shell\n    mode: agent\n    description: d\n    run: echo 3 >> three.txt\n",
            again = again.display()
        ),
    );
    ws.init_git();
    let d = Daemon::start(&ws, &[]);
    let (_, accepted) = d.post("/api/runs", &json!({"pipeline": "crash"}));
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    wait_for(&again);
    let _ = nix_kill(d.pid(), "KILL");
    drop(d);
    // The stage's process outlived the daemon; the next daemon ends it and redoes the stage.
    let d = Daemon::start(&ws, &[]);
    let result = d.wait_status(&run, "success");
    assert_eq!(
        crate::support::stages(&result),
        vec![
            crate::support::st("one", "success", 1, None),
            crate::support::st("two", "success", 1, None),
            crate::support::st("three", "success", 1, None),
        ]
    );
    assert_eq!(
        (ws.read("one.txt"), ws.read("two.txt"), ws.read("three.txt")),
        ("1\n".into(), "2\n".into(), "3\n".into())
    );
    assert_eq!(processes_with(&token), Vec::<u32>::new());
    let (_, events) = d.get(&format!("/api/runs/{run}/events"));
    let resumed: Vec<&Value> =
        events.as_array().expect("events").iter().filter(|e| e["event"]["type"] == "run_resumed").collect();
    assert_eq!(resumed.len(), 2, "queued → daemon 1, crashed → daemon 2");
    assert!(resumed.iter().all(|e| e["event"]["owner"]["daemon"] == true));
}

#[test]
fn shutdown_interrupts_the_run_in_flight_and_a_queue_keeps_order() {
    let ws = Ws::empty();
    let token = format!("lw-stop-{}", std::process::id());
    ws.write(
        ".loopwright/pipelines/long.yml",
        &format!("name: long\ndescription: d\nversion: 1\nstages:\n  - id: wait\n    agent: shell\n    mode: plan\n    description: d\n    run: \"touch started-$RANDOM; sleep 60 # {token}\"\n"),
    );
    let d = Daemon::start(&ws, &["--max-runs", "1"]);
    let (_, first) = d.post("/api/runs", &json!({"pipeline": "long"}));
    let (_, second) = d.post("/api/runs", &json!({"pipeline": "long"}));
    let (first, second) =
        (first["run_id"].as_str().expect("run").to_owned(), second["run_id"].as_str().expect("run").to_owned());
    d.wait_status(&first, "running");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(d.get(&format!("/api/runs/{second}")).1["status"], "queued");
    let (code, stderr) = d.stop();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(ws.json(&["status", &first]).1["status"], "interrupted");
    assert_eq!(ws.json(&["status", &second]).1["status"], "queued");
    assert_eq!(processes_with(&token), Vec::<u32>::new());
    // The next daemon takes the interrupted run up first; cancelling it lets the queued one run.
    let d = Daemon::start(&ws, &["--max-runs", "1"]);
    d.wait_status(&first, "running");
    let (code, body) = d.post(&format!("/api/runs/{first}/cancel"), &json!({"by": "carol"}));
    assert_eq!(code, 202, "{body}");
    assert_eq!(d.wait_status(&first, "cancelled")["status"], "cancelled");
    d.wait_status(&second, "running");
    let (code, _) = d.post(&format!("/api/runs/{second}/cancel"), &json!({}));
    assert_eq!(code, 202);
    d.wait_status(&second, "cancelled");
    assert_eq!(processes_with(&token), Vec::<u32>::new());
}

#[test]
fn demo_serve_runs_the_bundled_demo_under_a_daemon_and_prints_the_dashboard_url() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().join("demo");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin!("loopwright"))
        .args(["demo", "--serve", "--json", "--dir"])
        .arg(&dir)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("line");
    let started: Value = serde_json::from_str(&line).expect("json");
    let url = started["url"].as_str().expect("url");
    let token = std::fs::read_to_string(dir.join(".loopwright/state/serve.token")).expect("token");
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with(&format!("/?token={token}")), "{url}");
    loopwright_runners::http::tls();
    let http =
        reqwest::blocking::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    // The URL leaves the token in an HttpOnly, SameSite=Strict cookie.
    let opened = http.get(url).send().expect("open");
    assert_eq!(opened.status().as_u16(), 303);
    let cookie = opened.headers()["set-cookie"].to_str().expect("cookie").to_owned();
    let (name, _) = cookie.split_once('=').expect("name=value");
    assert!(name.starts_with("loopwright_") && name.len() == "loopwright_".len() + 16, "{cookie}");
    assert_eq!(cookie, format!("{name}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age=604800"));
    let base = url.split("/?").next().expect("base");
    let run = started["run_id"].as_str().expect("run");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        let result: Value = http
            .get(format!("{base}/api/runs/{run}"))
            .header("Cookie", format!("{name}={token}"))
            .send()
            .expect("get")
            .json()
            .expect("json");
        if result["status"] != "running" && result["status"] != "queued" || Instant::now() > deadline {
            break result["status"].clone();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status, "success");
    let _ = nix_kill(child.id() as i32, "TERM");
    let (code, _, stderr) = finish(child);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn logs_follow_prints_a_daemon_run_as_it_goes_until_it_ends() {
    let ws = slow_ws(4, "0.1");
    let d = Daemon::start(&ws, &[]);
    let (_, accepted) = d.post("/api/runs", &json!({"pipeline": "slow"}));
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    let follow = spawn(&ws, &["logs", &run, "--follow", "--json"]);
    let (code, stdout, stderr) = finish(follow);
    assert_eq!(code, 0, "{stderr}");
    let printed: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("line")).collect();
    assert_eq!(printed.last().map(|e| e["event"]["type"].clone()), Some(json!("run_finished")));
    let (_, journal) = d.get(&format!("/api/runs/{run}/events"));
    assert_eq!(Value::Array(printed), journal);
}

#[test]
fn a_run_the_daemon_cannot_drive_is_reported_and_not_retried_in_a_loop() {
    let ws = gate_ws();
    let d = Daemon::start(&ws, &[]);
    let (_, accepted) = d.post("/api/runs", &json!({"pipeline": "gate"}));
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&run, "waiting");
    // The workspace's failure patterns break while the run waits: no host can assemble it.
    ws.write(".loopwright/failure-patterns.yml", "patterns: [unclosed\n");
    let (code, body) = d.post(&format!("/api/runs/{run}/approve"), &json!({"by": "alice"}));
    assert_eq!(code, 200, "{body}");
    std::thread::sleep(Duration::from_millis(2500));
    let (code, _) = d.get("/api/health");
    assert_eq!(code, 200);
    let (_, stderr) = d.stop();
    let reports = stderr.matches(&format!("loopwright serve: run {run}: ")).count();
    assert_eq!(reports, 1, "{stderr}");
    assert!(stderr.contains("failure-patterns.yml") && stderr.contains("(tried again in 30 s)"), "{stderr}");
    assert_eq!(ws.read("count.txt"), "one\n");
}

/// A stage that prints a line, then waits for the test to create `release` (outside the
/// workspace: a plan stage may not change it), then prints more.
fn talker(release: &std::path::Path) -> String {
    let run = format!(
        "echo first line; echo warming up >&2; while [ ! -f {} ]; do sleep 0.05; done; printf 'second line\\\\nno newline'",
        release.display()
    );
    format!(
        "name: talker\ndescription: d\nversion: 1\nstages:\n  - id: talk\n    agent: shell\n    mode: plan\n    description: d\n    run: \"{run}\"\n"
    )
}

fn output_stream(d: &Daemon, run: &str) -> reqwest::blocking::Response {
    let r = d.http.get(d.url(&format!("/api/runs/{run}/output"))).bearer_auth(&d.token);
    r.header("Accept", "text/event-stream").send().expect("output stream")
}

/// The stage's output as the stream carried it: (stream, text joined), and whether it ended.
fn joined(frames: &[(Option<u64>, String, String)]) -> (String, String, bool) {
    let (mut out, mut err) = (String::new(), String::new());
    for (id, event, data) in frames {
        assert_eq!(*id, None, "output is not journaled: no id");
        if event != "output" {
            continue;
        }
        let chunk: Value = serde_json::from_str(data).expect("data");
        assert_eq!((chunk["stage"].as_str(), chunk["attempt"].as_u64()), (Some("talk"), Some(1)), "{chunk}");
        let text = chunk["text"].as_str().expect("text");
        if chunk["stream"] == "stdout" { out.push_str(text) } else { err.push_str(text) }
    }
    (out, err, frames.last().is_some_and(|f| f.1 == "end"))
}

#[test]
fn the_output_of_the_stage_in_flight_streams_live_for_daemon_and_cli_runs() {
    let ws = Ws::empty();
    let flags = tempfile::tempdir().expect("tempdir");
    let release = flags.path().join("release");
    ws.write(".loopwright/pipelines/talker.yml", &talker(&release));
    let d = Daemon::start(&ws, &[]);
    for driver in ["daemon", "cli"] {
        let _ = std::fs::remove_file(&release);
        let cli = (driver == "cli").then(|| spawn(&ws, &["run", "talker", "-q"]));
        let run = match &cli {
            None => d.post("/api/runs", &json!({"pipeline": "talker"})).1["run_id"].as_str().expect("run").to_owned(),
            Some(_) => {
                let deadline = Instant::now() + Duration::from_secs(30);
                loop {
                    let latest = ws.json(&["status", "latest"]).1;
                    if latest["status"] == "running" {
                        break latest["run_id"].as_str().expect("run").to_owned();
                    }
                    assert!(Instant::now() < deadline, "the CLI's run never started: {latest}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        };
        // `logs --follow` shows the same output under the journal's lines, as it comes.
        let mut follow = spawn(&ws, &["logs", &run, "--follow"]);
        let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
        let follow_out = follow.stdout.take().expect("stdout");
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(follow_out).lines().map_while(Result::ok) {
                let _ = lines_tx.send(line);
            }
        });
        let mut followed = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(followed.contains(&"      talk#1 | first line".to_owned())
            && followed.contains(&"      talk#1 ! warming up".to_owned()))
        {
            let wait = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(wait) {
                Ok(line) => followed.push(line),
                Err(_) => panic!("{driver}: logs --follow never showed the live output: {followed:#?}"),
            }
        }
        // The first line arrives while the stage is still blocked.
        let mut seen = String::new();
        let live = read_sse(output_stream(&d, &run), |f| {
            if f.1 == "output" {
                seen.push_str(serde_json::from_str::<Value>(&f.2).expect("data")["text"].as_str().unwrap_or(""));
            }
            seen.contains("first line\n")
        });
        assert!(!release.exists());
        assert_eq!(d.get(&format!("/api/runs/{run}")).1["status"], "running", "{driver}");
        assert_eq!(joined(&live).0, "first line\n", "{driver}");
        // A second reader, joining later, gets the attempt from its beginning and the end.
        std::fs::write(&release, "").expect("release");
        let whole = read_sse(output_stream(&d, &run), |f| f.1 == "end");
        assert_eq!(
            joined(&whole),
            ("first line\nsecond line\nno newline".into(), "warming up\n".into(), true),
            "{driver}"
        );
        if let Some(cli) = cli {
            assert_eq!(finish(cli).0, 0);
        }
        d.wait_status(&run, "success");
        // `logs --follow` ends with the run, its last line the journal's.
        let (code, _, stderr) = finish(follow);
        reader.join().expect("reader");
        followed.extend(lines.try_iter());
        assert_eq!((code, stderr.as_str()), (0, ""), "{driver}");
        assert!(followed.last().is_some_and(|l| l.ends_with("run success")), "{driver}: {followed:#?}");
        let shown = followed.iter().filter(|l| l.as_str() == "      talk#1 | first line").count();
        assert_eq!(shown, 1, "{driver}: {followed:#?}");
        assert_eq!(
            ws.read(&format!(".loopwright/state/runs/{run}/outputs/talk-1.out")),
            "first line\nsecond line\nno newline"
        );
        // A finished run's stream ends at once.
        assert_eq!(read_sse(output_stream(&d, &run), |f| f.1 == "end"), vec![(None, "end".into(), "{}".into())]);
    }
    assert_eq!(d.get("/api/runs/20990101-000000-00000000/output").0, 404);
}

#[test]
fn another_local_port_a_form_or_a_text_body_changes_nothing_and_each_daemon_has_its_own_cookie() {
    let ws = gate_ws();
    let d = Daemon::start(&ws, &[]);
    let run = d.run_waiting_at_the_gate();
    let port = d.addr.rsplit(':').next().expect("port").to_owned();
    let http =
        reqwest::blocking::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let cookie = http.get(d.url(&format!("/?token={}", d.token))).send().expect("sign in");
    let cookie = cookie.headers()["set-cookie"].to_str().expect("cookie").split(';').next().expect("pair").to_owned();
    let approve = d.url(&format!("/api/runs/{run}/approve"));
    let attempt = |origin: Option<&str>, content_type: Option<&str>, body: &str| {
        let mut r = http.post(&approve).header("Cookie", &cookie).body(body.to_owned());
        if let Some(o) = origin {
            r = r.header("Origin", o);
        }
        if let Some(t) = content_type {
            r = r.header("Content-Type", t);
        }
        r.send().expect("post").status().as_u16()
    };
    let own = format!("http://127.0.0.1:{port}");
    let other_port = format!("http://127.0.0.1:{}", if port == "9" { "10" } else { "9" });
    let answers = [
        attempt(Some(&other_port), Some("application/json"), r#"{"by": "page"}"#),
        attempt(Some("http://localhost:1"), Some("application/json"), "{}"),
        attempt(Some(&format!("https://127.0.0.1:{port}")), Some("application/json"), "{}"),
        attempt(Some(&other_port), Some("text/plain"), r#"{"by": "page"}"#),
        attempt(Some(&own), Some("text/plain"), r#"{"by": "page"}"#),
        attempt(Some(&own), Some("application/x-www-form-urlencoded"), "by=page"),
        attempt(Some(&own), Some("multipart/form-data; boundary=x"), "--x--"),
        attempt(None, None, ""),
    ];
    assert_eq!(answers, [403, 403, 403, 403, 415, 415, 415, 415]);
    let (_, still) = d.get(&format!("/api/runs/{run}"));
    assert_eq!(still["status"], "waiting", "{still:#}");
    // The dashboard's own request (its origin, JSON) is answered.
    assert_eq!(attempt(Some(&own), Some("application/json; charset=utf-8"), r#"{"by": "me"}"#), 200);
    // A script with the token may send a request without a body and without a type.
    let resume = http.post(d.url(&format!("/api/runs/{run}/resume"))).bearer_auth(&d.token).send().expect("resume");
    assert_ne!(resume.status().as_u16(), 415);

    // A visit without the cookie gets the sign-in page (HTML, 401) saying how to get a link.
    let page = http.get(d.url("/")).send().expect("page");
    assert_eq!(page.status().as_u16(), 401);
    assert!(page.headers()["content-type"].to_str().unwrap_or_default().starts_with("text/html"));
    let html = page.text().expect("text");
    assert!(html.contains("loopwright serve --url") && html.contains("7 days"), "{html}");
    let (code, out, err) = ws.run(&["serve", "--url"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("http://{}/?token={}", d.addr, d.token));

    // A second workspace's daemon on the same machine names its cookie otherwise.
    let ws2 = gate_ws();
    let d2 = Daemon::start(&ws2, &[]);
    let other = http.get(d2.url(&format!("/?token={}", d2.token))).send().expect("sign in");
    let other = other.headers()["set-cookie"].to_str().expect("cookie").split('=').next().expect("name").to_owned();
    assert_ne!(other, cookie.split('=').next().expect("name"));
}

#[test]
fn allow_remote_answers_through_the_machines_address_and_a_proxy_at_the_public_url() {
    let ws = gate_ws();
    let d =
        Daemon::start(&ws, &["--addr", "0.0.0.0:0", "--allow-remote", "--public-url", "https://Loops.Example.com/"]);
    let port = d.addr.rsplit(':').next().expect("port").to_owned();
    let local = format!("http://127.0.0.1:{port}");
    loopwright_runners::http::tls();
    let http = reqwest::blocking::Client::new();
    let post = |host: &str, origin: &str| {
        let r =
            http.post(format!("{local}/api/runs")).bearer_auth(&d.token).header("Host", host).header("Origin", origin);
        r.json(&json!({"pipeline": "gate"})).send().expect("post").status().as_u16()
    };
    // Through the machine's own address, as a browser on another machine sends it.
    assert_eq!(post(&format!("192.0.2.7:{port}"), &format!("http://192.0.2.7:{port}")), 202);
    // Through the proxy: its Host (or the one it passes on) and its origin.
    assert_eq!(post("loops.example.com", "https://loops.example.com"), 202);
    assert_eq!(post(&format!("127.0.0.1:{port}"), "https://loops.example.com"), 202);
    // Another name, or another origin, is refused.
    assert_eq!(post("evil.example.com", "https://loops.example.com"), 403);
    assert_eq!(post("loops.example.com", "https://evil.example.com"), 403);
    assert_eq!(post("loops.example.com", "https://loops.example.com:8443"), 403);
    let (code, out, err) = ws.run(&["serve", "--url"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("https://loops.example.com/?token={}", d.token));
    // --public-url needs --allow-remote, and a URL with nothing but scheme, host and port.
    let (code, _, err) = ws.run(&["serve", "--addr", "127.0.0.1:0", "--public-url", "https://x.example/app"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--public-url"), "{err}");
}

#[test]
fn state_an_older_version_left_open_is_closed_at_start_and_an_open_token_replaced() {
    use std::os::unix::fs::PermissionsExt;
    let ws = gate_ws();
    let (code, _, err) = ws.run(&["run", "gate", "--yes"]);
    assert_eq!(code, 0, "{err}");
    let state = ws.path().join(".loopwright/state");
    let old_token = "a".repeat(48);
    ws.write(".loopwright/state/serve.token", &old_token);
    for (path, mode) in [(state.clone(), 0o755), (state.join("state.db"), 0o644), (state.join("serve.token"), 0o644)] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    let d = Daemon::start(&ws, &[]);
    let mode = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.permissions().mode() & 0o777).ok();
    assert_eq!(mode(&state), Some(0o700));
    assert_eq!(mode(&state.join("state.db")), Some(0o600));
    assert_eq!(mode(&state.join("serve.token")), Some(0o600));
    assert_ne!(d.token, old_token, "a token others could read is replaced");
    loopwright_runners::http::tls();
    let (code, _) = d.get("/api/runs");
    assert_eq!(code, 200);
    let old = reqwest::blocking::Client::new().get(d.url("/api/runs")).bearer_auth(&old_token).send().expect("get");
    assert_eq!(old.status().as_u16(), 401);
    let (_, stderr) = d.stop();
    assert!(stderr.contains("a new token replaces it"), "{stderr}");
}

#[test]
fn a_thousand_idle_connections_and_a_slow_sender_do_not_keep_others_from_being_answered() {
    // The daemon starts with the soft limit of open files an ordinary login has (1024); another
    // local process opens 1100 connections that send nothing and one that sends its headers a
    // byte a second.
    let ws = gate_ws();
    let mut child = std::process::Command::new("prlimit")
        .args(["--nofile=1024:8192", "--"])
        .arg(assert_cmd::cargo::cargo_bin!("loopwright"))
        .args(["serve", "--addr", "127.0.0.1:0", "--json"])
        .current_dir(ws.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("prlimit");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("line");
    let addr = serde_json::from_str::<Value>(&line).expect("json")["addr"].as_str().expect("addr").to_owned();
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).expect("limits");
    let open_files = limits.lines().find(|l| l.starts_with("Max open files")).expect("line").to_owned();
    assert!(open_files.split_whitespace().nth(3) == Some("8192"), "the soft limit is raised: {open_files}");
    let (host, port) = addr.rsplit_once(':').expect("addr");
    let hold = r#"
import resource, socket, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
host, port = sys.argv[1], int(sys.argv[2])
held = []
for _ in range(1100):
    s = socket.socket(); s.setblocking(False)
    try: s.connect((host, port))
    except BlockingIOError: pass
    held.append(s)
slow = socket.create_connection((host, port))
print("holding", flush=True)
for b in b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n":
    try: slow.send(bytes([b]))
    except OSError: break
    time.sleep(1)
time.sleep(60)
"#;
    let mut holder = std::process::Command::new("python3")
        .args(["-c", hold, host, port])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut said = String::new();
    BufReader::new(holder.stdout.take().expect("stdout")).read_line(&mut said).expect("line");
    assert_eq!(said.trim(), "holding");
    std::thread::sleep(Duration::from_secs(1));
    loopwright_runners::http::tls();
    let http = reqwest::blocking::Client::builder().timeout(Duration::from_secs(60)).build().expect("client");
    let started = Instant::now();
    let health = http.get(format!("http://{addr}/api/health")).send().expect("answered");
    let waited = started.elapsed();
    assert_eq!(health.status().as_u16(), 200);
    eprintln!("answered after {waited:?} with 1101 connections held");
    // The oldest idle connection gave its place at once (before, the request waited for the
    // idle ones' header timeout: 7.9 s).
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    // And again at once, on a connection of its own.
    let again = reqwest::blocking::Client::new().get(format!("http://{addr}/api/health")).send().expect("again");
    assert_eq!(again.status().as_u16(), 200);
    // The owner's tools go through the daemon's Unix socket, which nobody else can reach.
    let socket = ws.path().join(".loopwright/state/serve.sock");
    let token = ws.read(".loopwright/state/serve.token");
    let owner = reqwest::blocking::Client::builder().unix_socket(socket.as_path()).build().expect("client");
    let health = owner.get("http://localhost/api/health").bearer_auth(token.trim()).send().expect("over the socket");
    assert_eq!(health.status().as_u16(), 200);
    let probe = "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1]); print('reached')\nexcept OSError as e:\n    print('refused', e.errno)\n";
    let nobody = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--", "/usr/bin/python3", "-c", probe])
        .arg(&socket)
        .output()
        .expect("setpriv");
    if nix::unistd::getuid().is_root() {
        assert_eq!(String::from_utf8_lossy(&nobody.stdout).trim(), "refused 13", "another user reached the socket");
    }
    let _ = holder.kill();
    let _ = holder.wait();
    let _ = nix_kill(child.id() as i32, "TERM");
    let (code, _, stderr) = finish(child);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn the_cli_approving_a_run_the_daemon_drives_exits_0_and_the_daemon_goes_on() {
    let ws = gate_ws();
    let d = Daemon::start(&ws, &[]);
    let run = d.run_waiting_at_the_gate();
    let (code, out, err) = ws.run(&["approve", &run, "--by", "carol"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("driven by the daemon"), "{err}");
    d.wait_status(&run, "success");
    assert_eq!(ws.read("count.txt"), "one\ntwo\n");
}

#[test]
fn escape_sequences_an_agent_printed_never_reach_the_terminal() {
    // A stage prints OSC 52 (set the clipboard), a colour, a title and a bell.
    let ws = Ws::empty();
    ws.write(
        ".loopwright/pipelines/esc.yml",
        "name: esc\ndescription: d\nversion: 1\nstages:\n  - id: loud\n    agent: shell\n    mode: plan\n    description: d\n    run: \"printf 'copy\\\\033]52;c;cm0gLXJmIH4=\\\\007 \\\\033[31mred\\\\033[0m \\\\033]0;owned\\\\007 bell\\\\007 done'; exit 3\"\n",
    );
    ws.init_git();
    let (_, _, _) = ws.run(&["run", "esc"]);
    let (_, runs) = ws.json(&["status"]).1.as_array().cloned().map(|r| (0, r)).unwrap_or_default();
    let run = runs[0]["run_id"].as_str().expect("run").to_owned();
    for args in
        [vec!["status", run.as_str()], vec!["logs", run.as_str()], vec!["logs", run.as_str(), "--stage", "loud"]]
    {
        let (_, out, err) = ws.run(&args);
        assert!(!out.contains('\u{1b}') && !out.contains('\u{7}') && !err.contains('\u{1b}'), "{args:?}: {out:?}");
        if args.len() == 4 {
            assert!(out.contains("copy red  bell done"), "{out}");
        }
    }
}

#[test]
fn runs_queued_on_one_working_tree_start_in_the_order_they_were_queued_each_when_the_last_ends() {
    let ws = Ws::empty();
    let order = tempfile::NamedTempFile::new().expect("order file");
    ws.write(
        ".loopwright/pipelines/q.yml",
        &format!(
            "name: q\ndescription: d\nversion: 1\nstages:\n  - id: s\n    description: d\n    agent: shell\n    mode: agent\n    run: \"echo $LOOPWRIGHT_RUN_ID >> {}; sleep 0.03\"\n",
            order.path().display()
        ),
    );
    let d = Daemon::start(&ws, &["--max-runs", "4"]);
    let mut queued = Vec::new();
    for i in 0..12 {
        let (code, accepted) = d.post("/api/runs", &json!({"pipeline": "q", "task": format!("t{i}")}));
        assert_eq!(code, 202, "{accepted}");
        queued.push(accepted["run_id"].as_str().expect("run id").to_owned());
    }
    for run in &queued {
        d.wait_status(run, "success");
    }
    let started: Vec<String> =
        std::fs::read_to_string(order.path()).expect("order").lines().map(str::to_owned).collect();
    assert_eq!(started, queued, "the runs sharing the workspace ran one at a time, in the order they were queued");
}
