//! The HTTP runners against a real HTTP server on 127.0.0.1 started by the test: it answers
//! each connection with the next scripted reply (streamed in chunks, a rate limit, a refusal,
//! garbage, or nothing at all) and records every request.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::support::{Ws, st, stages};

/// One scripted reply.
pub enum Reply {
    /// Status line and headers, then the body in chunks written 20 ms apart; then close.
    Http { status: &'static str, headers: Vec<String>, chunks: Vec<String> },
    /// Read the request, answer nothing, keep the connection open.
    Hang,
    /// Like `Http` with 200 and an event stream, but only the first chunks until the file
    /// `gate` exists, then the rest.
    Gated { first: Vec<String>, gate: std::path::PathBuf, rest: Vec<String> },
}

pub fn sse(events: &[serde_json::Value], done: bool) -> Reply {
    let mut chunks: Vec<String> = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    if done {
        chunks.push("data: [DONE]\n\n".into());
    }
    Reply::Http { status: "200 OK", headers: vec!["content-type: text/event-stream".into()], chunks }
}

pub fn openai_answer(text: &str, input: u64, output: u64) -> Reply {
    // The text arrives in two deltas, then the usage chunk.
    let (a, b) = text.split_at(text.len() / 2);
    sse(
        &[
            json!({"choices": [{"delta": {"role": "assistant", "content": a}}]}),
            json!({"choices": [{"delta": {"content": b}}]}),
            json!({"choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output}}),
        ],
        true,
    )
}

/// Reads one HTTP/1.1 request off a connection: its head (request line and headers, each
/// ending `\r\n`) and its body (`content-length` bytes).
pub fn read_request(conn: &std::net::TcpStream) -> (String, Vec<u8>) {
    let mut reader = BufReader::new(conn);
    let mut head = String::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        head.push_str(&line);
    }
    let mut body = vec![0u8; length];
    let _ = reader.read_exact(&mut body);
    (head, body)
}

/// A server answering connections in order; the requests it got (head and body).
pub struct Server {
    pub port: u16,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Server {
    pub fn start(replies: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for (reply, conn) in replies.into_iter().zip(listener.incoming()) {
                let Ok(mut conn) = conn else { return };
                let (head, body) = read_request(&conn);
                seen.lock().expect("lock").push(format!("{head}\n{}", String::from_utf8_lossy(&body)));
                match reply {
                    Reply::Hang => held.push(conn),
                    Reply::Gated { first, gate, rest } => {
                        let head = "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-type: text/event-stream\r\n\r\n";
                        let _ = conn.write_all(head.as_bytes());
                        for c in first {
                            let _ = conn.write_all(c.as_bytes());
                            let _ = conn.flush();
                        }
                        while !gate.exists() {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        for c in rest {
                            let _ = conn.write_all(c.as_bytes());
                            let _ = conn.flush();
                        }
                    }
                    Reply::Http { status, headers, chunks } => {
                        let mut out = format!("HTTP/1.1 {status}\r\nconnection: close\r\n");
                        for h in headers {
                            out.push_str(&format!("{h}\r\n"));
                        }
                        out.push_str("\r\n");
                        let _ = conn.write_all(out.as_bytes());
                        for c in chunks {
                            let _ = conn.write_all(c.as_bytes());
                            let _ = conn.flush();
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
            }
            // Keep hung connections open until the test ends.
            std::thread::sleep(Duration::from_secs(60));
            drop(held);
        });
        Self { port, requests }
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().expect("lock").clone()
    }
}

fn ws_with(runner: &str, port: u16, mode: &str, stage_extra: &str) -> Ws {
    let ws = Ws::empty();
    ws.write(
        ".loopwright/agents/model.md",
        &format!("---\nrunner: {runner}\nmodel: test-model\nbase_url: http://127.0.0.1:{port}/v1\napi_key_env: LW_TEST_KEY\n---\nYou are careful.\n"),
    );
    ws.write(
        ".loopwright/pipelines/p.yml",
        &format!("name: p\ndescription: d\nversion: 1\nstages:\n  - id: ask\n    description: Summarise\n    agent: model\n    mode: {mode}\n    outputs: [summary]\n{stage_extra}"),
    );
    ws
}

fn run(ws: &Ws) -> (i32, serde_json::Value, String) {
    let out = ws
        .cmd()
        .env("LW_TEST_KEY", "sk-test-key-123456")
        .args(["run", "p", "--task", "summarise", "--json"])
        .output()
        .expect("run");
    let result = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), result, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn openai_streams_the_answer_and_its_usage() {
    let server = Server::start(vec![openai_answer("## summary\nAll good.", 12, 5)]);
    let ws = ws_with("openai", server.port, "plan", "");
    let (code, result, stderr) = run(&ws);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["artifacts"], json!({"summary": "All good."}));
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].starts_with("POST /v1/chat/completions HTTP/1.1\r\n"), "{}", requests[0]);
    assert!(requests[0].contains("authorization: Bearer sk-test-key-123456\r\n"), "{}", requests[0]);
    let body: serde_json::Value =
        serde_json::from_str(requests[0].split_once("\r\n\n").expect("body").1).expect("json");
    assert_eq!((&body["model"], &body["stream"]), (&json!("test-model"), &json!(true)));
    assert!(
        body["messages"][0]["content"].as_str().expect("prompt").starts_with("You are careful.\n\n# Task\nsummarise")
    );
    let (_, logs, _) = ws.run(&["logs", "latest"]);
    assert!(logs.contains("ask: attempt 1 used 12 tokens in, 5 out\n"), "{logs}");
    let (_, shown, _) = ws.json(&["agents", "show", "model", "--mode", "plan"]);
    assert_eq!(
        shown,
        json!({"name": "model", "runner": "openai", "mode": "plan", "model": "test-model", "api_key_env": "LW_TEST_KEY",
               "url": format!("http://127.0.0.1:{}/v1/chat/completions", server.port)})
    );
}

#[test]
fn a_key_named_by_api_key_env_is_redacted_whatever_its_name() {
    // `LW_TEST_KEY` does not look like a secret's name; the agent says it holds its key.
    let server = Server::start(vec![openai_answer("## summary\nthe key is sk-test-key-123456", 4, 2)]);
    let ws = ws_with("openai", server.port, "plan", "");
    let (code, result, stderr) = run(&ws);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["artifacts"]["summary"], "the key is [REDACTED:LW_TEST_KEY]");
}

#[test]
fn anthropic_streams_messages_events() {
    let server = Server::start(vec![sse(
        &[
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 20, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "## summary\n"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Fine."}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}),
            json!({"type": "message_stop"}),
        ],
        false,
    )]);
    let ws = ws_with("anthropic", server.port, "plan", "");
    let (code, result, stderr) = run(&ws);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["artifacts"], json!({"summary": "Fine."}));
    let request = &server.requests()[0];
    assert!(request.starts_with("POST /v1/messages HTTP/1.1\r\n"), "{request}");
    assert!(
        request.contains("x-api-key: sk-test-key-123456\r\n") && request.contains("anthropic-version: 2023-06-01\r\n"),
        "{request}"
    );
    let (_, logs, _) = ws.run(&["logs", "latest"]);
    assert!(logs.contains("ask: attempt 1 used 20 tokens in, 9 out\n"), "{logs}");
}

#[test]
fn a_rate_limit_is_a_wait_and_a_refused_key_is_not_retried() {
    let server = Server::start(vec![
        Reply::Http {
            status: "429 Too Many Requests",
            headers: vec!["retry-after: 1".into()],
            chunks: vec!["slow down".into()],
        },
        openai_answer("## summary\nok", 3, 2),
    ]);
    let ws = ws_with("openai", server.port, "plan", "");
    let (code, result, stderr) = run(&ws);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stages(&result), vec![st("ask", "success", 1, None)], "the wait is not a failed attempt");
    let (_, logs, _) = ws.run(&["logs", "latest"]);
    assert!(logs.contains("ask: attempt 1 used 3 tokens in, 2 out, waited 1.00s for the API's rate limit"), "{logs}");

    let server = Server::start(vec![Reply::Http {
        status: "401 Unauthorized",
        headers: vec!["content-type: application/json".into()],
        chunks: vec!["{\"error\": {\"message\": \"Incorrect API key provided\"}}".into()],
    }]);
    let ws = ws_with(
        "openai",
        server.port,
        "plan",
        "    retry: {max_attempts: 3, backoff: fixed, initial_delay_seconds: 1}\n",
    );
    let (code, result, stderr) = run(&ws);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stages(&result), vec![st("ask", "failed", 1, None)]);
    let (_, status, _) = ws.run(&["status", "latest"]);
    assert!(
        status.contains("answered 401: the key in $LW_TEST_KEY was refused; fix the agent's configuration"),
        "{status}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_malformed_answer_fails_the_attempt_and_a_hung_server_hits_the_timeout() {
    let server = Server::start(vec![
        Reply::Http {
            status: "200 OK",
            headers: vec!["content-type: text/event-stream".into()],
            chunks: vec!["data: this is not json\n\n".into()],
        },
        openai_answer("## summary\nsecond time", 1, 1),
    ]);
    let ws = ws_with(
        "openai",
        server.port,
        "plan",
        "    retry: {max_attempts: 2, backoff: fixed, initial_delay_seconds: 1}\n",
    );
    let (code, result, stderr) = run(&ws);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stages(&result), vec![st("ask", "success", 2, None)]);
    let (_, first, _) = ws.run(&["logs", "latest", "--stage", "ask", "--attempt", "1"]);
    assert!(first.contains("malformed stream from http://127.0.0.1:"), "{first}");

    let server = Server::start(vec![Reply::Hang]);
    let ws = ws_with("openai", server.port, "plan", "    timeout_minutes: 0.03\n");
    let (code, result, stderr) = run(&ws);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stages(&result), vec![st("ask", "timeout", 1, None)]);
}

#[test]
fn an_openai_model_fixes_a_failing_test_through_the_closed_loop_with_edits() {
    // The first answer's edit is wrong (the test says so); the second, written after the
    // failure came back in <retry_context>, is right.
    let wrong = "The bug is in add.\n\nFILE: calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a * b\n>>>>>>> REPLACE\n";
    let right = "Now add really adds.\n\nFILE: calc.py\n<<<<<<< SEARCH\n    return a * b\n=======\n    return a + b\n>>>>>>> REPLACE\n";
    let server = Server::start(vec![openai_answer(wrong, 100, 20), openai_answer(right, 150, 20)]);
    let ws = Ws::empty();
    ws.write("calc.py", "def add(a, b):\n    return a - b\n");
    ws.write(
        "test_calc.py",
        "import unittest\n\nfrom calc import add\n\n\nclass TestAdd(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n\nif __name__ == '__main__':\n    unittest.main()\n",
    );
    ws.write(
        ".loopwright/agents/model.md",
        &format!("---\nrunner: openai\nmodel: test-model\nbase_url: http://127.0.0.1:{}/v1\napi_key_env: LW_TEST_KEY\n---\nYou fix bugs.\n", server.port),
    );
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: fix\n    description: Make the test pass\n    agent: model\n    mode: agent\n    skill: closed-loop-execution\n    checks:\n      - {name: tests_pass, type: test, command: python3 -m unittest test_calc -v}\n",
    );
    let (code, result, stderr) = run(&ws);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(result["stages_executed"][0]["closed_loop"]["attempts"], 2);
    assert_eq!(ws.read("calc.py"), "def add(a, b):\n    return a + b\n");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].contains("# How to change files"), "the model is told the edit format");
    assert!(!requests[0].contains("<retry_context"));
    assert!(requests[1].contains("<retry_context attempt=\\\"2\\\""), "{}", requests[1]);
    assert!(
        requests[1].contains("AssertionError: 6 != 5"),
        "the failing check went back to the model: {}",
        requests[1]
    );
}

#[test]
fn a_model_answer_is_written_to_the_attempt_output_as_it_streams() {
    // The first delta arrives, then the server waits: the stage's output file already shows
    // the whole lines received (what the dashboard and `logs --follow` tail), before the end.
    let gate = tempfile::tempdir().expect("tempdir");
    let release = gate.path().join("release");
    let delta = |text: &str| format!("data: {}\n\n", json!({"choices": [{"delta": {"content": text}}]}));
    let server = Server::start(vec![Reply::Gated {
        first: vec![delta("## summary\nfirst line\nhalf a li")],
        gate: release.clone(),
        rest: vec![delta("ne\n"), "data: [DONE]\n\n".into()],
    }]);
    let ws = ws_with("openai", server.port, "plan", "");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin!("loopwright"))
        .current_dir(ws.path())
        .env("LW_TEST_KEY", "sk-test-key-123456")
        .args(["run", "p", "--task", "summarise", "-q"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let runs = ws.path().join(".loopwright/state/runs");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let live = loop {
        let file = std::fs::read_dir(&runs)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| std::fs::read_to_string(e.ok()?.path().join("outputs/ask-1.out")).ok());
        if let Some(text) = file.filter(|t| t.contains("first line")) {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "the answer never reached the output file while streaming");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(live, "## summary\nfirst line\n", "whole lines only, while the stream is open");
    assert!(child.try_wait().expect("wait").is_none(), "the run waits for the rest of the answer");
    std::fs::write(&release, "").expect("release");
    assert!(child.wait().expect("wait").success());
    let (_, result, _) = ws.json(&["status", "latest"]);
    assert_eq!(result["artifacts"], json!({"summary": "first line\nhalf a line"}));
}
