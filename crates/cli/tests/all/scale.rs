//! A team's dashboard at scale (SPEC §11, "At a team's scale"), through a real daemon: the
//! live stream an open page follows says a run's status changes and nothing of its work, the
//! dead letters are grouped and paged on the server, stray inputs are refused.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::daemon::{Daemon, gate_ws, read_sse};

/// A run of three quick stages: many journal events, two statuses.
const BUSY: &str = "name: busy\ndescription: d\nversion: 1\nstages:\n  - id: a\n    agent: shell\n    mode: plan\n    description: d\n    run: echo a\n  - id: b\n    agent: shell\n    mode: plan\n    description: d\n    run: echo b\n  - id: c\n    agent: shell\n    mode: plan\n    description: d\n    run: echo c\n";

/// `/live`'s `run` frames as (run, status, started).
fn changes(frames: &[(Option<u64>, String, String)]) -> Vec<(String, String, bool)> {
    frames
        .iter()
        .filter(|f| f.1 == "run")
        .map(|(id, _, data)| {
            assert!(id.is_some(), "a change has its feed position");
            let v: Value = serde_json::from_str(data).expect("data");
            let keys: Vec<&str> = v.as_object().expect("an object").keys().map(String::as_str).collect();
            assert!(keys.iter().all(|k| ["run", "status", "started", "needs"].contains(k)), "{v}");
            (
                v["run"].as_str().expect("run").to_owned(),
                v["status"].as_str().expect("status").to_owned(),
                v.get("started") == Some(&Value::Bool(true)),
            )
        })
        .collect()
}

/// The badge's counts `/live` said, in order: a change's `needs`, or a `count` frame's (sent
/// once a burst of changes is read, instead of a count per change).
fn counts(frames: &[(Option<u64>, String, String)]) -> Vec<u64> {
    frames
        .iter()
        .filter(|f| f.1 == "run" || f.1 == "count")
        .filter_map(|(_, _, data)| serde_json::from_str::<Value>(data).ok()?["needs"].as_u64())
        .collect()
}

#[test]
fn an_open_page_is_told_each_status_change_once_and_nothing_of_a_runs_work() {
    let ws = gate_ws();
    ws.write(".loopwright/pipelines/busy.yml", BUSY);
    let d = Daemon::start(&ws, &[]);
    let start = |pipeline: &str| {
        let (code, accepted) = d.post("/api/runs", &json!({ "pipeline": pipeline }));
        assert_eq!(code, 202, "{accepted}");
        accepted["run_id"].as_str().expect("run id").to_owned()
    };
    // Followed live from the start: the badge's count as each change happens.
    let live = d.stream("/live?after=0");
    let gate = start("gate");
    d.wait_status(&gate, "waiting");
    assert_eq!(d.post(&format!("/api/runs/{gate}/approve"), &json!({})).0, 200);
    d.wait_status(&gate, "success");
    let busy = start("busy");
    d.wait_status(&busy, "success");
    let mut seen = 0;
    let frames = read_sse(live, |f| {
        seen += usize::from(f.2.contains("\"success\""));
        seen == 2
    });
    let s = |run: &str, status: &str, started: bool| (run.to_owned(), status.to_owned(), started);
    let expected = vec![
        s(&gate, "queued", true),
        s(&gate, "running", false),
        s(&gate, "waiting", false),
        s(&gate, "running", false),
        s(&gate, "success", false),
        s(&busy, "queued", true),
        s(&busy, "running", false),
        s(&busy, "success", false),
    ];
    assert_eq!(changes(&frames), expected);
    // The badge went to 1 while the gate waited, and back to 0.
    let said = counts(&frames);
    assert!(said.contains(&1) && said.last() == Some(&0), "{said:?}");
    let events = |run: &str| d.get(&format!("/api/runs/{run}/events")).1.as_array().map_or(0, Vec::len);
    assert!(events(&busy) > 8, "the busy run wrote more than its statuses: {}", events(&busy));
    // Read again from the start, later: the same changes, and the count as it is now.
    let mut read = 0;
    let again = read_sse(d.stream("/live?after=0"), |f| {
        read += usize::from(f.2.contains(&busy) && f.2.contains("\"success\""));
        read > 0 && f.1 == "count"
    });
    assert_eq!(changes(&again), expected);
    assert_eq!(counts(&again).last(), Some(&0));
    // Without a token or the cookie: nothing.
    let (code, ..) = d.request_as("GET", "/live", None, None, &[]);
    assert_eq!(code, 401);
}

#[test]
fn inputs_a_pipeline_does_not_declare_are_refused_with_the_field_named() {
    let ws = gate_ws();
    ws.write(
        ".loopwright/pipelines/takes.yml",
        "name: takes\ndescription: d\nversion: 1\ninitial_inputs: [ticket]\nstages:\n  - id: a\n    agent: shell\n    mode: plan\n    description: d\n    inputs: [ticket]\n    run: echo a\n",
    );
    let d = Daemon::start(&ws, &[]);
    let (code, body) = d.post("/api/runs", &json!({ "pipeline": "gate", "inputs": { "ticket": "LW-1" } }));
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["error"]["message"],
        "inputs.ticket: pipeline `gate` declares no initial input `ticket` (it takes `task_description`, `context`); \
         declare it under `initial_inputs:`"
    );
    let (code, body) =
        d.post("/api/runs", &json!({ "pipeline": "takes", "inputs": { "ticket": "LW-1", "other": "x" } }));
    assert_eq!(code, 422, "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.starts_with("inputs.other: ")), "{body}");
    for (pipeline, inputs) in [("takes", json!({ "ticket": "LW-1" })), ("gate", json!({ "context": "c" }))] {
        let (code, body) = d.post("/api/runs", &json!({ "pipeline": pipeline, "inputs": inputs }));
        assert_eq!(code, 202, "{pipeline}: {body}");
    }
}

/// A dead letter as a closed loop writes it (seed 000's frontmatter, then its report).
fn letter(task: &str, signature: &str, pattern: &str, minute: u32, reason: &str) -> String {
    format!(
        "---\ntask_id: {task}\nerror_signature: \"{signature}\"\nfinal_pattern: {pattern}\nerror_line: \"{reason}\"\n\
         blocked_at: \"2026-11-30T03:{minute:02}:00Z\"\nstage: implement\nrun_id: 20261130-030000-0a0a0a\n\
         total_attempts: 3\nblocked_reason: \"{reason}\"\nsimilar_failures: 0\n---\n\n# Dead letter: {task}\n\n\
         ## Suggested next steps\n\n- Raise the coverage of `src/lib.rs`.\n"
    )
}

#[test]
fn dead_letters_are_grouped_by_how_they_failed_and_paged_on_the_server() {
    let ws = gate_ws();
    let dir = ".loopwright/state/dead-letters";
    for i in 0..100u32 {
        let reason = "coverage gate: total 50% is under the floor of 80%";
        ws.write(
            &format!("{dir}/cov-{i:03}.md"),
            &letter(&format!("cov-{i:03}"), "coverage_gate:py:floor", "coverage_gate", i % 60, reason),
        );
    }
    for i in 0..20u32 {
        ws.write(
            &format!("{dir}/lint-{i:02}.md"),
            &letter(&format!("lint-{i:02}"), "lint_error:py:E501", "lint_error", 59, "E501 line too long"),
        );
    }
    let d = Daemon::start(&ws, &[]);
    let (code, html) = d.page("/dead-letters");
    assert_eq!(code, 200);
    let groups: Vec<&str> = html.lines().filter(|l| l.contains("<strong class=\"count\">")).collect();
    assert_eq!(groups.len(), 2, "{html}");
    assert!(groups[0].contains("<strong class=\"count\">×100</strong> <code>coverage_gate</code>: coverage gate: total 50% is under the floor of 80%"), "{}", groups[0]);
    assert!(
        groups[1].contains("<strong class=\"count\">×20</strong> <code>lint_error</code>: E501 line too long"),
        "{}",
        groups[1]
    );
    let rows = |html: &str| html.matches("<tr><td><a href=\"/dead-letters/").count();
    assert_eq!(rows(&html), 50);
    assert!(html.contains("Dead letters 1–50 of <strong>120</strong>, newest first"), "{html}");
    assert!(html.contains("<time datetime=\"2026-11-30T03:59:00Z\">"), "times are given for the reader's zone");
    assert!(html.len() < 60_000, "a page of dead letters is {} bytes", html.len());
    let (_, third) = d.page("/dead-letters?page=3");
    assert_eq!(rows(&third), 20);
    assert!(third.contains("Dead letters 101–120 of <strong>120</strong>"), "{third}");
    // One group alone, by the link its count carries.
    let (_, lint) = d.page("/dead-letters?signature=lint_error%3Apy%3AE501&pattern=lint_error");
    assert_eq!(rows(&lint), 20);
    assert!(lint.contains("Dead letters 1–20 of <strong>20</strong>"), "{lint}");
    assert_eq!(lint.matches("<a href=\"/dead-letters/lint-").count(), 20);
    // A letter's own page renders it; a name that is not a letter's is 404.
    let (code, one) = d.page("/dead-letters/cov-007");
    assert_eq!(code, 200);
    assert!(one.contains("<h2>Suggested next steps</h2>") && one.contains("<code>src/lib.rs</code>"), "{one}");
    assert_eq!(d.page("/dead-letters/..%2Fserve.token").0, 404);
    assert_eq!(d.page("/dead-letters/nothing").0, 404);
}

/// A closed loop that gives up: its check never passes.
const STUCK: &str = "name: stuck\ndescription: d\nversion: 1\nstages:\n  - id: implement\n    agent: dev\n    mode: agent\n    description: Try\n    skill: closed-loop-execution\n    closed_loop:\n      max_retries: 1\n    checks:\n      - name: floor\n        type: custom\n        command: 'echo \"coverage gate: total 50% is under the floor of 80%\"; exit 1'\n";

#[test]
fn a_dead_letter_is_one_message_with_its_stage_and_each_target_is_known_by_its_name() {
    use crate::http::{Reply, Server};
    let ws = gate_ws();
    ws.write(
        ".loopwright/agents/dev.md",
        "---\nname: dev\nrunner: command\ncommand: [\"sh\", \"-c\", \"echo tried\"]\n---\nYou try.\n",
    );
    ws.write(".loopwright/pipelines/stuck.yml", STUCK);
    let ok = || Reply::Http { status: "200 OK", headers: vec![], chunks: vec![] };
    let server = Server::start((0..6).map(|_| ok()).collect());
    ws.write(
        ".loopwright/config.toml",
        &format!(
            "[[notify]]\nname = \"team channel\"\nurl = \"http://127.0.0.1:{port}/team\"\nevents = [\"failed\", \"dead_letter\"]\n\n\
             [[notify]]\nname = \"on call\"\nurl = \"http://127.0.0.1:{port}/oncall\"\nevents = [\"failed\"]\n",
            port = server.port
        ),
    );
    let d = Daemon::start(&ws, &[]);
    let (code, accepted) = d.post("/api/runs", &json!({ "pipeline": "stuck" }));
    assert_eq!(code, 202, "{accepted}");
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&run, "failed");
    // Each target's messages: (path, event, stage).
    let sent = || -> Vec<(String, String, String)> {
        let mut sent: Vec<_> = server
            .requests()
            .iter()
            .filter_map(|r| {
                let path = r.split_whitespace().nth(1)?.to_owned();
                let body = r.split_once("\r\n\r\n\n").or_else(|| r.split_once("\n\n"))?.1;
                let body: Value = serde_json::from_str(body.trim()).ok()?;
                Some((path, body["event"].as_str()?.to_owned(), body["stage"].as_str()?.to_owned()))
            })
            .collect();
        sent.sort();
        sent
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while sent().len() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Anything more would have come with these.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(
        sent(),
        vec![
            ("/oncall".to_owned(), "failed".to_owned(), "implement".to_owned()),
            ("/team".to_owned(), "dead_letter".to_owned(), "implement".to_owned()),
        ]
    );
    let conn = rusqlite::Connection::open(ws.path().join(".loopwright/state/state.db")).expect("db");
    let mut stmt = conn.prepare("SELECT event, target FROM notifications ORDER BY target").expect("sql");
    let journaled: Vec<(String, String)> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).expect("rows").map(|r| r.expect("row")).collect();
    assert_eq!(
        journaled,
        vec![("failed".to_owned(), "on call".to_owned()), ("dead_letter".to_owned(), "team channel".to_owned())]
    );
    let (_, page) = d.page(&format!("/runs/{run}"));
    assert!(page.contains("dead letter → team channel: sent") && page.contains("failed → on call: sent"), "{page}");
}

/// A gate only bob or an admin may answer, and never the person who started the run.
const GUARDED: &str = "name: guarded\ndescription: d\nversion: 1\nstages:\n  - id: build\n    agent: shell\n    mode: agent\n    description: d\n    run: echo built >> built.txt\n  - id: ship\n    agent: shell\n    mode: agent\n    description: Ship it\n    requires_approval: true\n    approvers: [bob, \"role:admin\"]\n    prevent_self_approval: true\n    run: echo shipped >> shipped.txt\n";

fn person(ws: &crate::support::Ws, name: &str, role: &str) -> String {
    let (code, out, err) = ws.json(&["serve", "token", "create", name, "--role", role]);
    assert_eq!(code, 0, "{err}");
    out["token"].as_str().expect("token").to_owned()
}

/// A workspace with the `guarded` pipeline, and a server that takes eight notifications.
fn guarded() -> (crate::support::Ws, crate::http::Server) {
    use crate::http::{Reply, Server};
    let ws = gate_ws();
    ws.write(".loopwright/pipelines/guarded.yml", GUARDED);
    let ok = || Reply::Http { status: "200 OK", headers: vec![], chunks: vec![] };
    (ws, Server::start((0..8).map(|_| ok()).collect()))
}

#[test]
fn a_gate_refuses_its_starter_and_those_it_does_not_name_and_keeps_the_channel_of_each_answer() {
    let (ws, server) = guarded();
    ws.write(
        ".loopwright/config.toml",
        &format!(
            "[[notify]]\nname = \"as carol\"\nurl = \"http://127.0.0.1:{p}/carol\"\nevents = [\"needs_human\"]\nas = \"carol\"\n\n\
             [[notify]]\nname = \"as dana\"\nurl = \"http://127.0.0.1:{p}/dana\"\nevents = [\"needs_human\"]\nas = \"dana\"\n",
            p = server.port
        ),
    );
    let bob = person(&ws, "bob", "approver");
    let carol = person(&ws, "carol", "approver");
    person(&ws, "dana", "admin");
    let d = Daemon::start(&ws, &[]);
    let as_person = |token: &str, path: &str| d.request_as("POST", path, Some(token), Some(&json!({})), &[]);

    // bob starts a run: the run names him as its starter.
    let (code, accepted, _) = d.request_as("POST", "/api/runs", Some(&bob), Some(&json!({"pipeline": "guarded"})), &[]);
    assert_eq!(code, 202, "{accepted}");
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&run, "waiting");
    let approve = format!("/api/runs/{run}/approve");
    // carol is not named; bob started it; both are refused with why, and the run waits on.
    let (code, refused, _) = as_person(&carol, &approve);
    assert_eq!(
        (code, refused["error"]["message"].as_str().unwrap_or_default()),
        (403, "stage `ship`: this gate may be answered only by bob, role:admin; carol is not one of them")
    );
    let (code, refused, _) = as_person(&bob, &approve);
    assert_eq!(
        (code, refused["error"]["message"].as_str().unwrap_or_default()),
        (403, "stage `ship`: bob started this run: its gate needs someone else's approval (prevent_self_approval)")
    );
    // Through the dashboard's cookie it is the same.
    let cookie = format!("{}={carol}", loopwright_daemon::api::auth::cookie_name(&d.token()));
    let (code, _, _) = d.request_as(
        "POST",
        &approve,
        None,
        Some(&json!({})),
        &[("Cookie", &cookie), ("Content-Type", "application/json")],
    );
    assert_eq!(code, 403);
    assert_eq!(d.get(&format!("/api/runs/{run}")).1["status"], "waiting");
    // carol's one-tap link (`as = "carol"`) is refused too, and not spent by it.
    let links = |path: &str| -> Vec<String> {
        crate::team::bodies_at(&server, path)
            .iter()
            .flat_map(|b| b["actions"].as_array().cloned().unwrap_or_default())
            .filter(|a| a["label"] == "Approve")
            .filter_map(|a| a["url"].as_str().map(str::to_owned))
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while (links("/carol").is_empty() || links("/dana").is_empty()) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let http = reqwest::blocking::Client::new();
    let carols = links("/carol").pop().expect("carol's link");
    let r = http.post(&carols).json(&json!({})).send().expect("tap");
    assert_eq!(r.status().as_u16(), 403);
    assert_eq!(http.get(&carols).send().expect("open").status().as_u16(), 200, "a refused tap spends nothing");
    // dana, an admin, through her link: the answer says it came through a link.
    let danas = links("/dana").pop().expect("dana's link");
    assert_eq!(http.post(&danas).json(&json!({})).send().expect("tap").status().as_u16(), 200);
    let result = d.wait_status(&run, "success");
    let answers: Vec<(String, String, String, String)> = result["answers"]
        .as_array()
        .expect("answers")
        .iter()
        .map(|a| {
            let s = |k: &str| a[k].as_str().unwrap_or_default().to_owned();
            (s("stage"), s("by"), s("answer"), s("via"))
        })
        .collect();
    assert_eq!(answers, vec![("ship".to_owned(), "dana".to_owned(), "approved".to_owned(), "link".to_owned())]);
    let granted: Vec<Value> = ws
        .journal(&run)
        .into_iter()
        .filter(|e| e["event"]["type"] == "approval_granted")
        .map(|e| e["event"].clone())
        .collect();
    assert_eq!(granted, vec![json!({"type": "approval_granted", "stage": "ship", "by": "dana", "via": "link"})]);
    // The used link's page says who used it, when and how.
    let again = http.get(&danas).send().expect("again");
    assert_eq!(again.status().as_u16(), 410);
    let page = again.text().expect("page");
    assert!(page.contains("by dana, through a one-tap link: approved. Each link answers once."), "{page}");
    // `status --json` carries the same answers.
    let (_, status, _) = ws.json(&["status", &run]);
    assert_eq!(status["answers"], result["answers"]);
}

#[test]
fn links_issued_per_recipient_reach_each_person_alone_and_prove_them() {
    let (ws, server) = guarded();
    ws.write(
        ".loopwright/config.toml",
        &format!(
            "[[notify]]\nname = \"phones\"\nurl = \"http://127.0.0.1:{p}/to/{{person}}\"\nevents = [\"needs_human\"]\nrecipients = [\"bob\", \"carol\"]\n\n\
             [[notify]]\nname = \"team channel\"\nurl = \"http://127.0.0.1:{p}/shared\"\nevents = [\"needs_human\"]\nas = \"bob\"\n",
            p = server.port
        ),
    );
    person(&ws, "bob", "approver");
    person(&ws, "carol", "approver");
    let dana = person(&ws, "dana", "admin");
    let d = Daemon::start(&ws, &[]);
    let (code, accepted, _) =
        d.request_as("POST", "/api/runs", Some(&dana), Some(&json!({"pipeline": "guarded"})), &[]);
    assert_eq!(code, 202, "{accepted}");
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&run, "waiting");
    // One message to each person's own address, naming them; one to the shared channel.
    let approve_at = |path: &str| -> Option<(Value, String)> {
        let body = crate::team::bodies_at(&server, path).pop()?;
        let url = body["actions"].as_array()?.iter().find(|a| a["label"] == "Approve")?["url"].as_str()?.to_owned();
        Some((body["recipient"].clone(), url))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while ["/to/bob", "/to/carol", "/shared"].iter().any(|p| approve_at(p).is_none()) {
        assert!(std::time::Instant::now() < deadline, "{:?}", server.requests());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (bob_to, bobs) = approve_at("/to/bob").expect("bob's");
    let (carol_to, carols) = approve_at("/to/carol").expect("carol's");
    let (shared_to, shared) = approve_at("/shared").expect("the channel's");
    assert_eq!((bob_to, carol_to, shared_to), (json!("bob"), json!("carol"), Value::Null));
    let http = reqwest::blocking::Client::new();
    let tap = |url: &str| {
        let r = http.post(url).json(&json!({})).send().expect("tap");
        (r.status().as_u16(), r.json::<Value>().map(|v| v["error"]["message"].clone()).unwrap_or_default())
    };
    // The channel's link says "bob" but proves nobody: the gate that names bob refuses it.
    assert_eq!(
        tap(&shared),
        (
            403,
            json!(
                "stage `ship`: this gate may be answered only by bob, role:admin; an answer as `bob` that no token proves is not one of them"
            )
        )
    );
    // carol's own link proves her, and she is not named.
    assert_eq!(
        tap(&carols),
        (403, json!("stage `ship`: this gate may be answered only by bob, role:admin; carol is not one of them"))
    );
    assert_eq!(d.get(&format!("/api/runs/{run}")).1["status"], "waiting");
    // bob's own link answers as bob, proven: the gate opens.
    assert_eq!(tap(&bobs).0, 200);
    let result = d.wait_status(&run, "success");
    assert_eq!(
        (&result["answers"][0]["by"], &result["answers"][0]["via"], result["answers"].as_array().map(Vec::len)),
        (&json!("bob"), &json!("link"), Some(1))
    );
    // Each copy is its own target in the notifications journal, named for its person.
    let conn = rusqlite::Connection::open(ws.path().join(".loopwright/state/state.db")).expect("db");
    let mut stmt = conn.prepare("SELECT target FROM notifications ORDER BY target").expect("sql");
    let targets: Vec<String> = stmt.query_map([], |r| r.get(0)).expect("rows").map(|r| r.expect("row")).collect();
    assert_eq!(targets, ["phones → bob", "phones → carol", "team channel"]);
}

#[test]
fn a_sign_in_link_opens_only_for_a_signed_in_person_and_answers_as_them() {
    use crate::http::{Reply, Server};
    let ws = gate_ws();
    let ok = || Reply::Http { status: "200 OK", headers: vec![], chunks: vec![] };
    let server = Server::start((0..4).map(|_| ok()).collect());
    ws.write(
        ".loopwright/config.toml",
        &format!(
            "[[notify]]\nurl = \"http://127.0.0.1:{}/hook\"\nevents = [\"needs_human\"]\nas = \"team\"\nlinks = \"sign-in\"\n",
            server.port
        ),
    );
    let carol = person(&ws, "carol", "approver");
    let vic = person(&ws, "vic", "viewer");
    let d = Daemon::start(&ws, &[]);
    let (code, accepted) = d.post("/api/runs", &json!({"pipeline": "gate"}));
    assert_eq!(code, 202);
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&run, "waiting");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let approve = loop {
        let found = crate::team::bodies_at(&server, "/hook")
            .iter()
            .flat_map(|b| b["actions"].as_array().cloned().unwrap_or_default())
            .find(|a| a["label"] == "Approve")
            .and_then(|a| a["url"].as_str().map(str::to_owned));
        if let Some(url) = found {
            break url;
        }
        assert!(std::time::Instant::now() < deadline, "no notification");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let http = reqwest::blocking::Client::new();
    let cookie = |token: &str| format!("{}={token}", loopwright_daemon::api::auth::cookie_name(&d.token()));
    // Signed out: the sign-in page, and no answer.
    let page = http.get(&approve).send().expect("open");
    assert_eq!(page.status().as_u16(), 401);
    assert!(page.text().expect("html").contains("Sign in"), "the sign-in page");
    let tap = http.post(&approve).json(&json!({})).send().expect("tap");
    assert_eq!(tap.status().as_u16(), 401);
    // A viewer signed in: refused.
    let viewer = http.get(&approve).header("Cookie", cookie(&vic)).send().expect("open");
    assert_eq!(viewer.status().as_u16(), 403);
    // carol signed in: the page says she answers as herself, and she does.
    let page = http.get(&approve).header("Cookie", cookie(&carol)).send().expect("open");
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.text().expect("html").contains("Approve as carol"));
    let done = http.post(&approve).header("Cookie", cookie(&carol)).json(&json!({})).send().expect("tap");
    assert_eq!(done.status().as_u16(), 200);
    let result = d.wait_status(&run, "success");
    assert_eq!(result["answers"][0]["by"], "carol");
    assert_eq!(result["answers"][0]["via"], "link");
}

/// The row of `run` in the list's HTML.
fn row_of<'a>(html: &'a str, run: &str) -> &'a str {
    let start = html.find(&format!("id=\"row-{run}\"")).expect("the row");
    let end = html[start..].find("</tr>").map_or(html.len(), |e| start + e);
    &html[start..end]
}

#[test]
fn a_row_says_what_waits_since_when_and_why_a_run_failed_and_waiting_is_not_working() {
    let ws = gate_ws();
    ws.write(
        ".loopwright/pipelines/breaks.yml",
        "name: breaks\ndescription: d\nversion: 1\nstages:\n  - id: compile\n    agent: shell\n    mode: plan\n    description: d\n    run: \"echo 'error: expected ; at line 3' >&2; exit 2\"\n",
    );
    let d = Daemon::start(&ws, &[]);
    let start = |pipeline: &str| {
        let (code, accepted) = d.post("/api/runs", &json!({ "pipeline": pipeline }));
        assert_eq!(code, 202, "{accepted}");
        accepted["run_id"].as_str().expect("run id").to_owned()
    };
    let gate = start("gate");
    d.wait_status(&gate, "waiting");
    std::thread::sleep(std::time::Duration::from_millis(1300));
    let (_, html) = d.page("/");
    let row = row_of(&html, &gate);
    assert!(
        row.contains(
            "<small class=\"row-why\">gate at <code>second</code>, waiting <span class=\"clock\" data-clock-from=\""
        ),
        "{row}"
    );
    assert!(!row.contains("needs you"), "{row}");
    assert_eq!(d.post(&format!("/api/runs/{gate}/approve"), &json!({})).0, 200);
    d.wait_status(&gate, "success");
    let (_, html) = d.page("/");
    let row = row_of(&html, &gate);
    // About 1.3 s waited; its work took less than a second, and is said apart.
    let said = |prefix: &str| row.split(prefix).nth(1).and_then(|r| r.split('<').next()).unwrap_or_default().to_owned();
    let ran = said("<span class=\"ran\" title=\"worked\">ran ");
    let waited = said("<span class=\"waited\" title=\"waited for people\">waited ");
    assert!(ran.ends_with(" ms"), "worked {ran}: {row}");
    assert!(waited.starts_with("1.") && waited.ends_with(" s"), "waited {waited}: {row}");
    // A failed run's row says why, in one line.
    let broken = start("breaks");
    d.wait_status(&broken, "failed");
    let (_, html) = d.page("/");
    let row = row_of(&html, &broken);
    assert!(row.contains("<small class=\"row-why\">Stage compile failed: execution error (exit 2) — "), "{row}");
    // Run again from `second`: `first` was taken from the earlier run, and says so.
    let (code, again) = d.post(&format!("/api/runs/{gate}/rerun"), &json!({ "from": "second" }));
    assert_eq!(code, 202, "{again}");
    let rerun = again["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&rerun, "waiting");
    let (_, page) = d.page(&format!("/runs/{rerun}"));
    assert!(page.contains(&format!("taken from run {gate}")), "{page}");
    assert!(page.contains("stage-row status-reused"), "{page}");
}

#[test]
fn on_change_a_channel_hears_the_first_failure_and_the_recovery_and_a_digest_gathers_the_rest() {
    use crate::http::{Reply, Server};
    let ws = gate_ws();
    ws.write(
        ".loopwright/pipelines/flaky.yml",
        "name: flaky\ndescription: d\nversion: 1\nstages:\n  - id: check\n    agent: shell\n    mode: plan\n    description: d\n    run: test -f pass.flag\n",
    );
    let ok = || Reply::Http { status: "200 OK", headers: vec![], chunks: vec![] };
    let server = Server::start((0..12).map(|_| ok()).collect());
    ws.write(
        ".loopwright/config.toml",
        &format!(
            "[[notify]]\nname = \"changes\"\nurl = \"http://127.0.0.1:{p}/changes\"\nevents = [\"failed\", \"finished\"]\non = \"change\"\n\n\
             [[notify]]\nname = \"digest\"\nurl = \"http://127.0.0.1:{p}/digest\"\nevents = [\"failed\", \"finished\"]\non = \"change\"\ndigest_minutes = 1\n",
            p = server.port
        ),
    );
    let d = Daemon::start(&ws, &[]);
    let mut runs = Vec::new();
    for (i, pass) in [false, false, true].into_iter().enumerate() {
        if pass {
            ws.write("pass.flag", "");
        }
        let (code, accepted) = d.post("/api/runs", &json!({ "pipeline": "flaky", "task": format!("round {i}") }));
        assert_eq!(code, 202, "{accepted}");
        let run = accepted["run_id"].as_str().expect("run").to_owned();
        d.wait_status(&run, if pass { "success" } else { "failed" });
        runs.push(run);
    }
    let heard = |path: &str| -> Vec<(String, String)> {
        crate::team::bodies_at(&server, path)
            .iter()
            .map(|b| {
                (b["event"].as_str().unwrap_or_default().to_owned(), b["run_id"].as_str().unwrap_or("").to_owned())
            })
            .collect()
    };
    let wait_for = |path: &str, n: usize, seconds: u64| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
        while heard(path).len() < n && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    wait_for("/changes", 2, 20);
    std::thread::sleep(std::time::Duration::from_millis(500));
    // The first failure and the first success after it; the second failure is no news.
    let expected = vec![("failed".to_owned(), runs[0].clone()), ("finished".to_owned(), runs[2].clone())];
    assert_eq!(heard("/changes"), expected);
    // The digest target hears the same at once, then the rest in one message a minute on.
    wait_for("/digest", 3, 90);
    let digest = crate::team::bodies_at(&server, "/digest");
    assert_eq!(heard("/digest")[..2], expected[..]);
    assert_eq!(digest.len(), 3, "{digest:?}");
    assert_eq!(digest[2]["event"], "digest");
    assert_eq!(digest[2]["headline"], format!("1 run ended: 1 failed, 0 finished otherwise — {} failed", runs[1]));
    let conn = rusqlite::Connection::open(ws.path().join(".loopwright/state/state.db")).expect("db");
    let status: String = conn
        .query_row("SELECT status FROM notifications WHERE run_id = ?1 AND target = 'digest'", [&runs[1]], |r| r.get(0))
        .expect("held");
    assert_eq!(status, "digested");
}
