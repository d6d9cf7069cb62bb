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

/// A non-streamed JSON reply (what a structured request gets).
fn json_reply(body: serde_json::Value) -> Reply {
    Reply::Http {
        status: "200 OK",
        headers: vec!["content-type: application/json".into()],
        chunks: vec![body.to_string()],
    }
}

/// An OpenAI chat completion whose message is `content`.
fn openai_message(content: &str, input: u64, output: u64) -> Reply {
    json_reply(json!({"choices": [{"message": {"role": "assistant", "content": content}}],
                      "usage": {"prompt_tokens": input, "completion_tokens": output}}))
}

/// A workspace whose one closed-loop stage (agent `model`, `runner`) fails a check whose output
/// no pattern is sure of, once (`max_retries: 1`); `config` adds keys to `[classify]`.
fn unsure_failure_ws(runner: &str, port: u16, config: &str) -> Ws {
    let ws = Ws::empty();
    ws.write(
        ".loopwright/agents/model.md",
        &format!("---\nrunner: {runner}\nmodel: test-model\nbase_url: http://127.0.0.1:{port}/v1\napi_key_env: LW_TEST_KEY\n---\nYou fix code.\n"),
    );
    ws.write("check.sh", "echo 'compiling widgets'\necho 'quux: the widget is not ready (slot 7)'\nexit 1\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: fix\n    description: Make the check pass\n    agent: model\n    mode: agent\n    skill: closed-loop-execution\n    closed_loop:\n      max_retries: 1\n    checks:\n      - {name: widgets, type: custom, command: sh check.sh}\n",
    );
    // The statistical classifier is off: what it would say of this output is not the point.
    ws.write(".loopwright/config.toml", &format!("[classify]\nstatistical = false\n{config}"));
    ws
}

/// The failure the check's evaluation journaled, and the usage recorded for attempt 1.
fn evaluated_failure(ws: &Ws, result: &serde_json::Value) -> (serde_json::Value, Vec<u64>) {
    let journal = ws.journal(result["run_id"].as_str().expect("run id"));
    let failure = journal
        .iter()
        .find(|e| e["event"]["type"] == "evaluated")
        .map(|e| e["event"]["failure"].clone())
        .expect("an evaluated event");
    let usage = journal
        .iter()
        .filter(|e| e["event"]["type"] == "usage_recorded" && e["event"]["attempt"] == 1)
        .map(|e| e["event"]["usage"]["input_tokens"].as_u64().expect("tokens"))
        .collect();
    (failure, usage)
}

fn kinds(failure: &serde_json::Value) -> Vec<(String, String)> {
    // (An empty list is not written.)
    failure["evidence"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|e| (e["kind"].as_str().expect("kind").to_owned(), e["value"].as_str().expect("value").to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[test]
fn an_unsure_failure_is_labelled_by_the_stages_own_model_and_kept_as_a_sample() {
    let answer = r#"{"category":"runtime-error","signal":"the widget is not ready","reason":"the program reported a state it cannot handle"}"#;
    let server = Server::start(vec![
        openai_answer("I looked; nothing to change yet.", 100, 10),
        openai_message(answer, 300, 20),
    ]);
    let ws = unsure_failure_ws("openai", server.port, "");
    let (code, result, stderr) = run_task(&ws);
    assert_eq!(code, 1, "{stderr}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    // The question: structured (json_schema, not streamed), the categories, the output's lines.
    let body: serde_json::Value =
        serde_json::from_str(requests[1].split_once("\r\n\n").expect("body").1).expect("json");
    assert_eq!((&body["stream"], &body["response_format"]["type"]), (&json!(false), &json!("json_schema")));
    let categories = body["response_format"]["json_schema"]["schema"]["properties"]["category"]["enum"].clone();
    assert_eq!(categories.as_array().expect("enum").len(), 21, "20 categories and unknown: {categories}");
    let prompt = body["messages"][0]["content"].as_str().expect("prompt");
    assert!(prompt.contains("What ran: the command `sh check.sh`, a `custom` check, exit code 1.\n"), "{prompt}");
    assert!(
        prompt.contains("<output>\ncompiling widgets\nquux: the widget is not ready (slot 7)\n</output>"),
        "{prompt}"
    );
    assert!(!prompt.contains("# How to change files"), "a question, not an attempt: {prompt}");
    // Used: the pattern, its strategy, who classified it, the quoted phrase and the reason.
    let (failure, usage) = evaluated_failure(&ws, &result);
    assert_eq!(
        (&failure["pattern"], &failure["classified_by"], &failure["strategy"], &failure["confidence"]),
        (&json!("runtime-error"), &json!("agent"), &json!("analyze_then_fix"), &json!(0.7))
    );
    // (What the statistical classifier proposed below its threshold comes first; the model decides it.)
    let agents: Vec<(String, String)> =
        kinds(&failure).into_iter().filter(|(k, _)| k != "unsure_statistical").collect();
    assert_eq!(
        agents,
        pairs(&[
            ("agent", "runtime-error"),
            ("agent_signal", "the widget is not ready"),
            ("agent_reason", "the program reported a state it cannot handle")
        ])
    );
    // Its tokens count: the attempt's 100 and the question's 300.
    assert_eq!(usage, vec![100, 300]);
    let (_, logs, _) = ws.run(&["logs", "latest"]);
    assert!(
        logs.contains(
            "EVALUATE widgets failed; pattern runtime-error (0.70, strategy analyze_then_fix, classified by agent)\n"
        ),
        "{logs}"
    );
    // Kept as a labelled sample with a candidate pattern, listed and exported.
    let (code, learned, _) = ws.json(&["patterns", "learned"]);
    assert_eq!(code, 0);
    let sample = &learned[0];
    assert_eq!(
        (&sample["category"], &sample["used"], &sample["command"], &sample["exit_code"], &sample["tool"]),
        (&json!("runtime-error"), &json!(true), &json!("sh check.sh"), &json!(1), &json!("sh"))
    );
    assert_eq!(sample["candidate"]["signals"], json!(["the widget is not ready"]));
    assert_eq!(sample["candidate"]["strategy"], "analyze_then_fix");
    let out = tempfile::tempdir().expect("tempdir");
    let (code, _, stderr) = ws.run(&["patterns", "learned", "--export", out.path().to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{stderr}");
    let table = std::fs::read_to_string(out.path().join("samples.tsv")).expect("samples.tsv");
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert_eq!(rows[0], "file\ttool\tecosystem\tcheck_type\texit\tcommand");
    let cols: Vec<&str> = rows[1].split('\t').collect();
    assert_eq!(cols[1..], ["sh", "learned", "custom", "1", "sh check.sh"]);
    let text = std::fs::read_to_string(out.path().join(format!("{}.txt", cols[0]))).expect("sample");
    assert_eq!(text, "compiling widgets\nquux: the widget is not ready (slot 7)\n");
    // Exported again: the same rows, not twice.
    ws.run(&["patterns", "learned", "--export", out.path().to_str().expect("utf-8")]);
    assert_eq!(std::fs::read_to_string(out.path().join("samples.tsv")).expect("samples.tsv"), table);
    // A sample file edited to name a folder outside is not a sample: said, and nothing written
    // outside the export folder.
    let kept = std::fs::read_dir(ws.path().join(".loopwright/state/learned"))
        .expect("learned")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .expect("a sample file");
    let forged =
        std::fs::read_to_string(&kept).expect("sample").replace("\"runtime-error\"", "\"../../escaped\\u001b[31m\"");
    ws.write(".loopwright/state/learned/forged.json", &forged);
    let (code, listed, stderr) = ws.json(&["patterns", "learned"]);
    assert_eq!((code, listed.as_array().map(Vec::len)), (0, Some(1)));
    // (Said safely: the escape sequence it carried does not reach the terminal.)
    assert!(stderr.contains("forged.json: `../../escaped` is not a failure category"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    let (code, _, _) = ws.run(&["patterns", "learned", "--export", out.path().to_str().expect("utf-8")]);
    assert_eq!(code, 0);
    assert!(
        !out.path().join("../escaped").exists()
            && !out.path().parent().expect("parent").join("escaped\u{1b}[31m").exists()
    );
    assert_eq!(std::fs::read_to_string(out.path().join("samples.tsv")).expect("samples.tsv"), table);
}

#[test]
fn an_agents_label_that_would_stop_the_run_garbage_or_silence_leaves_the_failure_unclassified() {
    // A category that stops for a person is kept, never used; garbage and a timeout are said.
    let stop = r#"{"category":"disk-full","signal":"the widget is not ready","reason":"maybe the disk"}"#;
    type Case<'a> = (Reply, &'a str, Vec<(&'a str, &'a str)>, bool);
    let cases: [Case<'_>; 3] = [
        (
            openai_message(stop, 300, 20),
            "",
            vec![
                ("unsure_agent", "disk-full"),
                ("agent_signal", "the widget is not ready"),
                ("agent_reason", "maybe the disk"),
            ],
            true,
        ),
        (
            openai_message("Probably a flaky test, I would retry.", 300, 20),
            "",
            vec![("agent_unusable", "the answer is not the JSON asked for: Probably a flaky test, I would retry.")],
            false,
        ),
        (Reply::Hang, "timeout_seconds = 2\n", vec![("agent_unusable", "no answer within 2 s")], false),
    ];
    for (reply, config, evidence, kept) in cases {
        let server = Server::start(vec![openai_answer("Nothing to change.", 100, 10), reply]);
        let ws = unsure_failure_ws("openai", server.port, config);
        let (code, result, stderr) = run_task(&ws);
        assert_eq!(code, 1, "{stderr}");
        assert_eq!(server.requests().len(), 2);
        let (failure, _) = evaluated_failure(&ws, &result);
        assert_eq!((&failure["pattern"], &failure["classified_by"]), (&serde_json::Value::Null, &json!("none")));
        // What the statistical classifier proposed below its threshold depends on the model; the agent's part does not.
        let got: Vec<(String, String)> =
            kinds(&failure).into_iter().filter(|(k, _)| k != "unsure_statistical").collect();
        assert_eq!(got, pairs(&evidence));
        let (_, logs, _) = ws.run(&["logs", "latest"]);
        let said = match evidence[0] {
            ("unsure_agent", category) => format!(
                "EVALUATE widgets failed; unclassified (strategy analyze_then_fix); the agent said {category}, not used: only a sure pattern may stop the run for a person\n"
            ),
            (_, why) => format!(
                "EVALUATE widgets failed; unclassified (strategy analyze_then_fix); the agent's answer was not used: {why}\n"
            ),
        };
        assert!(logs.contains(&said), "{said}\n{logs}");
        let (_, learned, _) = ws.json(&["patterns", "learned"]);
        let listed: Vec<(serde_json::Value, serde_json::Value)> =
            learned.as_array().expect("list").iter().map(|s| (s["category"].clone(), s["used"].clone())).collect();
        assert_eq!(listed, if kept { vec![(json!("disk-full"), json!(false))] } else { vec![] });
    }
}

#[test]
fn an_anthropic_model_answers_the_question_with_its_forced_tool_and_ask_agent_off_asks_nothing() {
    let tool = json!({"type": "message", "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "answer",
                     "input": {"category": "test-failure", "signal": "the widget is not ready", "reason": "a check failed"}}],
        "usage": {"input_tokens": 250, "output_tokens": 30}});
    let first = sse(
        &[
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 80, "output_tokens": 1}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Nothing to change."}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}}),
            json!({"type": "message_stop"}),
        ],
        false,
    );
    let server = Server::start(vec![first, json_reply(tool)]);
    let ws = unsure_failure_ws("anthropic", server.port, "");
    let (code, result, stderr) = run_task(&ws);
    assert_eq!(code, 1, "{stderr}");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let body: serde_json::Value =
        serde_json::from_str(requests[1].split_once("\r\n\n").expect("body").1).expect("json");
    assert_eq!((&body["stream"], &body["tool_choice"]), (&json!(false), &json!({"type": "tool", "name": "answer"})));
    assert_eq!(body["tools"][0]["input_schema"]["required"], json!(["category", "signal", "reason"]));
    let (failure, usage) = evaluated_failure(&ws, &result);
    assert_eq!((&failure["pattern"], &failure["classified_by"]), (&json!("test-failure"), &json!("agent")));
    assert_eq!(usage, vec![80, 250]);
    // Turned off: the one request is the attempt's.
    let server = Server::start(vec![openai_answer("Nothing to change.", 100, 10)]);
    let ws = unsure_failure_ws("openai", server.port, "ask_agent = false\n");
    let (code, result, stderr) = run_task(&ws);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(server.requests().len(), 1);
    let (failure, usage) = evaluated_failure(&ws, &result);
    assert_eq!((&failure["pattern"], &failure["classified_by"]), (&serde_json::Value::Null, &json!("none")));
    assert!(kinds(&failure).iter().all(|(k, _)| !k.starts_with("agent") && k != "unsure_agent"), "{failure}");
    assert_eq!(usage, vec![100]);
}

fn run_task(ws: &Ws) -> (i32, serde_json::Value, String) {
    run(ws)
}

#[test]
fn a_run_whose_budget_is_spent_does_not_ask_its_agent() {
    // The attempt used 100 tokens of a budget of 50: the question would spend more.
    let server = Server::start(vec![openai_answer("Nothing to change.", 100, 10)]);
    let ws = unsure_failure_ws("openai", server.port, "");
    let pipeline = ws.read(".loopwright/pipelines/p.yml").replace("version: 1\n", "version: 1\nbudget: {tokens: 50}\n");
    ws.write(".loopwright/pipelines/p.yml", &pipeline);
    let (code, result, stderr) = run_task(&ws);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(server.requests().len(), 1, "only the attempt's request");
    let (failure, usage) = evaluated_failure(&ws, &result);
    assert_eq!((&failure["pattern"], &failure["classified_by"]), (&serde_json::Value::Null, &json!("none")));
    assert_eq!(
        kinds(&failure),
        pairs(&[("agent_unusable", "not asked: run token budget exhausted: 110 of 50 tokens used")])
    );
    assert_eq!(usage, vec![100]);
}

#[test]
fn loopwright_killed_while_its_agent_is_being_asked_asks_again_on_resume_and_journals_one_answer() {
    // The question hangs; loopwright is killed -9 then; `resume` runs the check again, asks
    // again, and the failure is journaled once, with the second question's answer and usage.
    let answer = r#"{"category":"runtime-error","signal":"the widget is not ready","reason":"it gave up"}"#;
    let server =
        Server::start(vec![openai_answer("Nothing to change.", 100, 10), Reply::Hang, openai_message(answer, 300, 20)]);
    let ws = unsure_failure_ws("openai", server.port, "");
    let env = [("LW_TEST_KEY", "sk-test-key-123456")];
    let child = crate::support::spawn_env(&ws, &["run", "p", "--task", "summarise"], &env);
    let asked = std::time::Instant::now();
    while server.requests().len() < 2 {
        assert!(asked.elapsed() < Duration::from_secs(30), "never asked: {:?}", server.requests());
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL)
        .expect("kill");
    let (code, _, _) = crate::support::finish(child);
    assert_eq!(code, -1, "killed");
    let (_, status, _) = ws.json(&["status", "latest"]);
    let run = status["run_id"].as_str().expect("run id").to_owned();
    assert!(
        ws.journal(&run).iter().all(|e| e["event"]["type"] != "evaluated"),
        "nothing of the evaluation was journaled"
    );
    let out = ws.cmd().env("LW_TEST_KEY", "sk-test-key-123456").args(["resume", &run]).output().expect("resume");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(server.requests().len(), 3, "the attempt once, the question twice");
    let journal = ws.journal(&run);
    let evaluated: Vec<&serde_json::Value> =
        journal.iter().filter(|e| e["event"]["type"] == "evaluated").map(|e| &e["event"]["failure"]).collect();
    assert_eq!(evaluated.len(), 1);
    assert_eq!((&evaluated[0]["pattern"], &evaluated[0]["classified_by"]), (&json!("runtime-error"), &json!("agent")));
    let used: Vec<u64> = journal
        .iter()
        .filter(|e| e["event"]["type"] == "usage_recorded")
        .map(|e| e["event"]["usage"]["input_tokens"].as_u64().expect("tokens"))
        .collect();
    assert_eq!(used, vec![100, 300], "the killed question's use was never known");
    let generated = journal.iter().filter(|e| e["event"]["type"] == "generated").count();
    assert_eq!(generated, 1, "the attempt is not run again");
}

#[test]
fn a_model_rate_limited_past_its_wait_then_a_refused_key_fall_back_to_the_next_agents() {
    let refused = |status: &'static str, body: &str| Reply::Http {
        status,
        headers: vec!["content-type: application/json".into(), "retry-after: 0".into()],
        chunks: vec![body.to_owned()],
    };
    // The first model answers 429 to every try (six), the second refuses the key.
    let limited =
        Server::start((0..6).map(|_| refused("429 Too Many Requests", "{\"error\": \"slow down\"}")).collect());
    let unauthorized =
        Server::start(vec![refused("401 Unauthorized", "{\"error\": {\"message\": \"Incorrect API key provided\"}}")]);
    let ws = Ws::empty();
    let model = |name: &str, runner: &str, port: u16, fallback: &str| {
        ws.write(
            &format!(".loopwright/agents/{name}.md"),
            &format!("---\nrunner: {runner}\nmodel: test-model\nbase_url: http://127.0.0.1:{port}/v1\napi_key_env: LW_TEST_KEY\n{fallback}---\nYou are careful.\n"),
        );
    };
    model("busy", "openai", limited.port, "fallback: [locked, local]\n");
    model("locked", "anthropic", unauthorized.port, "");
    ws.write(
        ".loopwright/agents/local.md",
        "---\nrunner: command\ncommand: [\"sh\", \"-c\", \"cat > prompt.txt; printf '## summary\\\\nfrom local\\\\n'\"]\n---\n",
    );
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: ask\n    description: Summarise\n    agent: busy\n    mode: agent\n    outputs: [summary]\n",
    );
    let (code, result, stderr) = run(&ws);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stages(&result), vec![st("ask", "success", 3, None)]);
    assert_eq!(result["artifacts"], json!({"summary": "from local"}));
    assert_eq!((limited.requests().len(), unauthorized.requests().len()), (6, 1));

    // The journal says who took over and why.
    let (_, logs, _) = ws.run(&["logs", "latest", "--json"]);
    let logs: Vec<serde_json::Value> = logs.lines().map(|l| serde_json::from_str(l).expect("an event")).collect();
    let fell_back: Vec<&serde_json::Value> = logs.iter().filter(|e| e["event"]["type"] == "agent_fell_back").collect();
    assert_eq!(
        fell_back.iter().map(|e| e["event"].clone()).collect::<Vec<_>>(),
        vec![
            json!({"type": "agent_fell_back", "stage": "ask", "attempt": 1, "from": "busy", "to": "locked", "reason": "rate_limit"}),
            json!({"type": "agent_fell_back", "stage": "ask", "attempt": 2, "from": "locked", "to": "local", "reason": "authentication"}),
        ]
    );
    let failed: Vec<serde_json::Value> = logs
        .iter()
        .filter(|e| e["event"]["type"] == "attempt_failed")
        .map(|e| e["event"]["error"]["unfixable"].clone())
        .collect();
    assert_eq!(failed, vec![json!("rate_limit"), json!("authentication")]);
    let (_, text, _) = ws.run(&["logs", "latest"]);
    assert!(
        text.contains("ask: agent `locked` cannot go on after attempt 2 (authentication: its credentials were refused); agent `local` takes over\n"),
        "{text}"
    );

    // The API and the run's page say which agent made each attempt and who took over.
    let run = result["run_id"].as_str().expect("run id").to_owned();
    let daemon = crate::daemon::Daemon::start(&ws, &[]);
    let (code, attempts) = daemon.get(&format!("/api/runs/{run}/stages/ask/attempts"));
    assert_eq!(code, 200, "{attempts}");
    let who: Vec<(serde_json::Value, serde_json::Value)> =
        attempts.as_array().expect("attempts").iter().map(|a| (a["agent"].clone(), a["fell_back"].clone())).collect();
    assert_eq!(
        who,
        vec![
            (json!(null), json!({"attempt": 1, "from": "busy", "to": "locked", "reason": "rate_limit"})),
            (json!("locked"), json!({"attempt": 2, "from": "locked", "to": "local", "reason": "authentication"})),
            (json!("local"), json!(null)),
        ]
    );
    let (code, page) = daemon.page(&format!("/runs/{run}"));
    assert_eq!(code, 200);
    for shown in [
        "Attempt 2 by locked — failed",
        "Attempt 3 by local — succeeded",
        "<p class=\"fell-back\">Agent locked could not go on (its credentials were refused); agent local took the stage over.</p>",
    ] {
        assert!(page.contains(shown), "{shown}\n{page}");
    }
    drop(daemon);

    // The agent that took over was told who tried what.
    let prompt = std::fs::read_to_string(ws.path().join("prompt.txt")).expect("the local agent's prompt");
    let context = &prompt[prompt.find("<retry_context").expect("retry context")..];
    assert!(context.starts_with("<retry_context attempt=\"3\" max_attempts=\"3\">\n"), "{context}");
    assert!(context.contains("    <failure attempt=\"1\" agent=\"busy\">\n"), "{context}");
    assert!(context.contains("    <failure attempt=\"2\" agent=\"locked\">\n"), "{context}");
    assert!(
        context.contains(
            "  <agent_fallback>\n    Attempt 1: agent `busy` could not go on (rate_limit: its provider kept rate-limiting it past its wait); agent `locked` took over.\n    Attempt 2: agent `locked` could not go on (authentication: its credentials were refused); agent `local` took over.\n  </agent_fallback>\n"
        ),
        "{context}"
    );
}
