//! Traces through the binary (SPEC §15 "Traces"): an OTLP/HTTP receiver on 127.0.0.1 decodes
//! what loopwright exports with the official protobuf definitions (`opentelemetry-proto`); the
//! span tree of a closed loop that recovers is compared whole, an agent process sees the
//! `TRACEPARENT` of its invocation's span, a run killed with SIGKILL and resumed stays one trace,
//! and a collector that is down fails nothing.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use pretty_assertions::assert_eq;
use prost::Message;

use crate::support::{Ws, finish, spawn_env};

/// A span as received.
#[derive(Debug, Clone)]
struct Got {
    trace: String,
    id: String,
    parent: String,
    name: String,
    attributes: BTreeMap<String, String>,
    error: bool,
    service: String,
}

/// An OTLP/HTTP receiver: answers 200 to every POST, keeping the spans it decodes.
struct Collector {
    port: u16,
    spans: Arc<Mutex<Vec<Got>>>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(v: Option<&Any>) -> String {
    match v {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        _ => String::new(),
    }
}

impl Collector {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let (head, body) = crate::http::read_request(&conn);
                let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                assert!(head.starts_with("POST /v1/traces "), "{head}");
                let request = ExportTraceServiceRequest::decode(body.as_slice()).expect("an OTLP trace request");
                for rs in request.resource_spans {
                    let service = rs
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|a| a.key == "service.name")
                        .map(|a| text(a.value.as_ref().and_then(|v| v.value.as_ref())))
                        .unwrap_or_default();
                    for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                        let attributes = span
                            .attributes
                            .iter()
                            .map(|a| (a.key.clone(), text(a.value.as_ref().and_then(|v| v.value.as_ref()))))
                            .collect();
                        kept.lock().expect("lock").push(Got {
                            trace: hex(&span.trace_id),
                            id: hex(&span.span_id),
                            parent: hex(&span.parent_span_id),
                            name: span.name,
                            attributes,
                            error: span.status.is_some_and(|s| s.code == 2),
                            service: service.clone(),
                        });
                    }
                }
            }
        });
        Self { port, spans }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The spans received once `done` holds of them (or after 10 s).
    fn wait(&self, done: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let spans = self.spans.lock().expect("lock").clone();
            if done(&spans) || Instant::now() > deadline {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The tree of `spans` as lines `name <- parent's name` (the root's parent `-`), sorted.
fn tree(spans: &[Got]) -> Vec<String> {
    let names: BTreeMap<&str, &str> = spans.iter().map(|s| (s.id.as_str(), s.name.as_str())).collect();
    let mut out: Vec<String> = spans
        .iter()
        .map(|s| {
            let parent = if s.parent.is_empty() { "-" } else { names.get(s.parent.as_str()).copied().unwrap_or("?") };
            format!("{}{} <- {parent}", s.name, if s.error { " (error)" } else { "" })
        })
        .collect();
    out.sort();
    out
}

/// The closed-loop project: a plan stage, then a loop whose check fails until the agent fixes
/// `mean` at its second attempt; the agent writes the `TRACEPARENT` it was given.
fn project() -> Ws {
    let ws = Ws::empty();
    ws.write("stats.py", "def mean(xs):\n    return sum(xs) / len(xs)\n");
    ws.write(
        "tests/test_stats.py",
        "import unittest\n\nfrom stats import mean\n\n\nclass TestMean(unittest.TestCase):\n    def test_empty(self):\n        self.assertEqual(mean([]), 0)\n",
    );
    ws.write(
        ".loopwright/agents/dev.md",
        "---\nname: dev\nrunner: command\ncommand: [\"sh\", \".loopwright/agents/dev.sh\"]\n---\nYou fix code.\n",
    );
    ws.write(
        ".loopwright/agents/dev.sh",
        "cat > /dev/null\necho \"$TRACEPARENT\" >> traceparents.txt\nif [ \"$LOOPWRIGHT_ATTEMPT\" -ge 2 ]; then printf 'def mean(xs):\\n    return sum(xs) / len(xs) if xs else 0\\n' > stats.py; fi\necho done\n",
    );
    ws.write(
        ".loopwright/pipelines/ci.yml",
        "name: ci\ndescription: d\nversion: 1\nstages:\n  - id: plan\n    agent: shell\n    mode: plan\n    description: Plan\n    run: echo planned\n  - id: implement\n    description: Make the checks pass\n    agent: dev\n    mode: agent\n    skill: closed-loop-execution\n    closed_loop:\n      max_retries: 3\n    checks:\n      - name: tests_pass\n        type: test\n        command: python3 -m unittest discover -s tests -v\n",
    );
    ws.init_git();
    ws
}

#[test]
fn a_closed_loop_that_recovers_is_one_trace_of_nested_spans_and_its_agent_joins_it() {
    let collector = Collector::start();
    let ws = project();
    let endpoint = collector.endpoint();
    let child = spawn_env(&ws, &["run", "ci", "--json", "--quiet"], &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)]);
    let (code, out, err) = finish(child);
    assert_eq!(code, 0, "{out}{err}");
    let spans = collector.wait(|s| s.iter().any(|g| g.name == "run ci"));
    assert_eq!(
        tree(&spans),
        [
            "attempt implement#1 (error) <- stage implement",
            "attempt implement#2 <- stage implement",
            "attempt plan#1 <- stage plan",
            "check tests_pass (error) <- attempt implement#1",
            "check tests_pass <- attempt implement#2",
            "fix analyze_then_fix <- attempt implement#1",
            "invoke_agent <- attempt implement#1",
            "invoke_agent <- attempt implement#2",
            "run ci <- -",
            "stage implement <- run ci",
            "stage plan <- run ci",
        ]
    );
    // One trace, its id journaled when the run started; the service is loopwright.
    let run: serde_json::Value = serde_json::from_str(&out).expect("json");
    let run_id = run["run_id"].as_str().expect("id");
    let journal = ws.journal(run_id);
    let trace = journal[0]["event"]["trace_id"].as_str().expect("a journaled trace id").to_owned();
    assert!(spans.iter().all(|s| s.trace == trace && s.service == "loopwright"), "{spans:?}");
    // loopwright's attributes and the GenAI conventions.
    let by_name = |name: &str| spans.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no {name}"));
    let first = by_name("attempt implement#1");
    let attrs = |g: &Got, keys: &[&str]| -> Vec<(String, String)> {
        keys.iter().map(|k| ((*k).to_owned(), g.attributes.get(*k).cloned().unwrap_or_default())).collect()
    };
    assert_eq!(
        attrs(
            first,
            &[
                "loopwright.run_id",
                "loopwright.stage",
                "loopwright.attempt",
                "loopwright.pattern",
                "loopwright.classified_by",
                "loopwright.strategy"
            ]
        ),
        [
            ("loopwright.run_id".into(), run_id.to_owned()),
            ("loopwright.stage".into(), "implement".into()),
            ("loopwright.attempt".into(), "1".into()),
            ("loopwright.pattern".into(), "test-failure".into()),
            ("loopwright.classified_by".into(), "pattern".into()),
            ("loopwright.strategy".into(), "analyze_then_fix".into()),
        ]
    );
    assert!(first.attributes["loopwright.confidence"].parse::<f64>().is_ok_and(|c| c > 0.5), "{first:?}");
    assert_eq!(
        attrs(by_name("run ci"), &["loopwright.status", "loopwright.pipeline"]),
        [("loopwright.status".into(), "success".into()), ("loopwright.pipeline".into(), "ci".into())]
    );
    let agents: Vec<&Got> = spans.iter().filter(|s| s.name == "invoke_agent").collect();
    for agent in &agents {
        assert_eq!(agent.attributes["gen_ai.operation.name"], "invoke_agent");
        assert!(agent.attributes["gen_ai.usage.input_tokens"].parse::<u64>().is_ok_and(|t| t > 0), "{agent:?}");
    }
    // Each agent process was given the traceparent of its own invocation's span.
    let given: Vec<String> = ws.read("traceparents.txt").lines().map(str::to_owned).collect();
    let mut expected: Vec<String> = agents.iter().map(|a| format!("00-{trace}-{}-01", a.id)).collect();
    let mut given_sorted = given.clone();
    given_sorted.sort();
    expected.sort();
    assert_eq!(given_sorted, expected);
}

#[test]
fn a_run_killed_and_resumed_continues_its_trace_under_the_same_run_span() {
    let collector = Collector::start();
    let ws = Ws::empty();
    // The first stage ends; the second hangs until the flag exists (outside the workspace, which
    // a plan-mode stage's restart puts back as it was).
    let flags = tempfile::tempdir().expect("flags");
    let flag = |name: &str| flags.path().join(name).display().to_string();
    ws.write(
        ".loopwright/pipelines/two.yml",
        &format!(
            "name: two\ndescription: d\nversion: 1\nstages:\n  - id: first\n    agent: shell\n    mode: plan\n    description: One\n    run: echo one\n  - id: second\n    agent: shell\n    mode: plan\n    description: Two\n    run: 'touch {}; while [ ! -e {} ]; do sleep 0.05; done'\n",
            flag("started"),
            flag("go")
        ),
    );
    let endpoint = collector.endpoint();
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())];
    let mut child = spawn_env(&ws, &["run", "two", "--quiet"], &env);
    crate::support::wait_for(&flags.path().join("started"));
    // What the first process sent of what it finished, before it is killed.
    let before = collector.wait(|s| s.iter().any(|g| g.name == "stage first"));
    child.kill().expect("kill -9");
    child.wait().expect("reaped");
    std::fs::write(flags.path().join("go"), "").expect("flag");
    let resumed = spawn_env(&ws, &["resume", "latest", "--quiet"], &env);
    let (code, out, err) = finish(resumed);
    assert_eq!(code, 0, "{out}{err}");
    let spans = collector.wait(|s| s.iter().any(|g| g.name == "run two"));
    assert!(before.iter().any(|g| g.name == "stage first"), "{before:?}");
    assert_eq!(
        tree(&spans),
        [
            "attempt first#1 <- stage first",
            "attempt second#1 <- stage second",
            "run two <- -",
            "stage first <- run two",
            "stage second <- run two",
        ]
    );
    let traces: std::collections::BTreeSet<&str> = spans.iter().map(|s| s.trace.as_str()).collect();
    assert_eq!(traces.len(), 1, "{spans:?}");
}

#[test]
fn a_collector_that_is_down_fails_nothing() {
    let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let ws = Ws::empty();
    ws.write(
        ".loopwright/pipelines/one.yml",
        "name: one\ndescription: d\nversion: 1\nstages:\n  - id: only\n    agent: shell\n    mode: plan\n    description: One\n    run: echo one\n",
    );
    let endpoint = format!("http://127.0.0.1:{port}");
    let child = spawn_env(&ws, &["run", "one", "--json"], &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())]);
    let (code, out, err) = finish(child);
    assert_eq!(code, 0, "{out}{err}");
    let result: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(result["status"], "success");
}
