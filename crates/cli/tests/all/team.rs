//! A team on one daemon: people with tokens and roles (created, listed and revoked from the
//! CLI), a trusted proxy's user header, answers journaled under the person's name, re-runs and
//! retries from a stage (API and CLI), and the runs list paged, counted and searched.

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::daemon::Daemon;
use crate::support::Ws;

/// `first`, a gate, then `second`, each appending to `count.txt`.
const GATE: &str = "name: gate\ndescription: a gate\nversion: 1\nstages:\n  - id: first\n    agent: shell\n    mode: agent\n    description: d\n    run: echo one >> count.txt\n  - id: second\n    agent: shell\n    mode: agent\n    description: d\n    requires_approval: true\n    run: echo two >> count.txt\n";

/// Two stages with no gate; `b` fails while `fail-b` exists.
const TWO: &str = "name: two\ndescription: two stages\nversion: 1\nstages:\n  - id: a\n    agent: shell\n    mode: agent\n    description: d\n    run: echo a >> log.txt\n  - id: b\n    agent: shell\n    mode: agent\n    description: d\n    run: test ! -e fail-b && echo b >> log.txt\n";

fn team_ws() -> Ws {
    let ws = Ws::empty();
    ws.write(".loopwright/pipelines/gate.yml", GATE);
    ws.write(".loopwright/pipelines/two.yml", TWO);
    ws
}

/// A workspace whose `fixit` pipeline runs a closed-loop stage: its agent (`dev`, running
/// `script`) writes `scripts/check.sh`, and the check runs it (a permission error escalates at
/// once while it is not executable).
fn fixit_ws(script: &str) -> Ws {
    let ws = team_ws();
    ws.write(
        ".loopwright/agents/dev.md",
        "---\nname: dev\nrunner: command\ncommand: [\"sh\", \".loopwright/agents/dev.sh\"]\n---\nYou fix code.\n",
    );
    ws.write(".loopwright/agents/dev.sh", script);
    ws.write(
        ".loopwright/pipelines/fixit.yml",
        "name: fixit\ndescription: d\nversion: 1\nstages:\n  - id: implement\n    description: Write the check script\n    agent: dev\n    mode: agent\n    skill: closed-loop-execution\n    checks:\n      - {name: script_runs, type: command, command: ./scripts/check.sh}\n",
    );
    ws
}

/// `serve token create NAME --role ROLE --json`: the token.
fn create(ws: &Ws, name: &str, role: &str) -> String {
    let (code, out, err) = ws.json(&["serve", "token", "create", name, "--role", role]);
    assert_eq!(code, 0, "{err}");
    assert_eq!((&out["name"], &out["role"]), (&json!(name), &json!(role)));
    out["token"].as_str().expect("token").to_owned()
}

fn kinds_and_people(ws: &Ws, run: &str) -> Vec<(String, Option<String>)> {
    ws.journal(run)
        .iter()
        .map(|e| &e["event"])
        .filter(|e| e.get("by").is_some())
        .map(|e| (e["type"].as_str().unwrap_or_default().to_owned(), e["by"].as_str().map(str::to_owned)))
        .collect()
}

#[test]
fn people_sign_in_with_their_own_tokens_and_act_within_their_roles() {
    let ws = team_ws();
    let carol = create(&ws, "carol", "approver");
    let vic = create(&ws, "vic", "viewer");
    // Only hashes are kept; the list names people and roles, never tokens.
    let kept = ws.read(".loopwright/state/people.json");
    assert!(!kept.contains(&carol) && !kept.contains(&vic), "{kept}");
    let (code, list, _) = ws.json(&["serve", "token", "list"]);
    assert_eq!(code, 0);
    let listed: Vec<(String, String)> = list
        .as_array()
        .expect("rows")
        .iter()
        .map(|p| (p["name"].as_str().unwrap_or_default().into(), p["role"].as_str().unwrap_or_default().into()))
        .collect();
    assert_eq!(listed, vec![("carol".to_owned(), "approver".to_owned()), ("vic".to_owned(), "viewer".to_owned())]);
    let (code, _, err) = ws.run(&["serve", "token", "create", "carol"]);
    assert_eq!((code, err.contains("already has a token")), (2, true), "{err}");

    let d = Daemon::start(&ws, &[]);
    // A viewer reads, and may change nothing.
    let (code, _, _) = d.request_as("GET", "/api/runs", Some(&vic), None, &[]);
    assert_eq!(code, 200);
    let (code, body, _) = d.request_as("POST", "/api/runs", Some(&vic), Some(&json!({"pipeline": "gate"})), &[]);
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["error"]["message"],
        "vic is a viewer: this needs the approver role (`loopwright serve token create NAME --role approver`)"
    );
    // An approver starts a run and answers its gate; the `by` it sends is not who it is.
    let (code, accepted, _) =
        d.request_as("POST", "/api/runs", Some(&carol), Some(&json!({"pipeline": "gate", "task": "count"})), &[]);
    assert_eq!(code, 202, "{accepted}");
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&run, "waiting");
    let (code, _, _) =
        d.request_as("POST", &format!("/api/runs/{run}/approve"), Some(&vic), Some(&json!({"by": "vic"})), &[]);
    assert_eq!(code, 403);
    let (code, body, _) = d.request_as(
        "POST",
        &format!("/api/runs/{run}/approve"),
        Some(&carol),
        Some(&json!({"by": "mallory", "comment": "ship it"})),
        &[],
    );
    assert_eq!(code, 200, "{body}");
    d.wait_status(&run, "success");
    assert_eq!(
        kinds_and_people(&ws, &run),
        vec![
            ("run_started".to_owned(), Some("carol".to_owned())),
            ("approval_granted".to_owned(), Some("carol".to_owned()))
        ]
    );
    // Starting an auto loop launches an agent: admins only.
    let (code, body, _) =
        d.request_as("POST", "/api/sessions/night/task-auto", Some(&carol), Some(&json!({"taskDir": "mod"})), &[]);
    assert_eq!((code, body["error"]["code"].clone()), (403, json!("forbidden")), "{body}");

    // The list finds the run by who acted on it, and counts.
    let (code, rows, head) = d.request_as("GET", "/api/runs?by=carol", Some(&vic), None, &[]);
    assert_eq!(code, 200);
    let found: Vec<(&str, &Value)> = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| (r["run_id"].as_str().unwrap_or_default(), &r["people"]))
        .collect();
    assert_eq!(found, vec![(run.as_str(), &json!(["carol"]))]);
    assert_eq!(head.get("x-total-count").and_then(|v| v.to_str().ok()), Some("1"));

    // The dashboard says who is signed in; a viewer gets no buttons that change anything.
    let (code, page) = d.page_as(&format!("/runs/{run}"), &vic);
    assert_eq!(code, 200);
    assert!(page.contains("Signed in as <strong>vic</strong>"), "{page}");
    assert!(!page.contains("data-action=") && !page.contains("id=\"who\""), "a viewer's page has buttons");
    let (_, page) = d.page_as(&format!("/runs/{run}"), &carol);
    assert!(page.contains("Signed in as <strong>carol</strong>") && page.contains("data-action=\"rerun\""));
    assert!(
        page.contains(
            "<strong>carol</strong> approved <code>second</code> <small class=\"via\">via api</small> — <q>ship it</q>"
        ),
        "{page}"
    );
    let (_, page) = d.page_as("/", &vic);
    assert!(!page.contains("id=\"start-form\""), "a viewer may not start runs");

    // A revoked token signs in as nobody from the next request on.
    let (code, out, _) = ws.json(&["serve", "token", "revoke", "carol"]);
    assert_eq!((code, out), (0, json!({"name": "carol", "revoked": true})));
    let (code, _, _) = d.request_as("GET", "/api/runs", Some(&carol), None, &[]);
    assert_eq!(code, 401);
    let (code, page) = d.page_as("/", &carol);
    assert_eq!(code, 401, "{page}");
}

#[test]
fn a_trusted_proxy_names_the_person_only_from_its_own_addresses() {
    let ws = team_ws();
    create(&ws, "carol", "approver");
    let d = Daemon::start(&ws, &["--trust-proxy-header", "X-Forwarded-User", "--trust-proxy-from", "127.0.0.0/8"]);
    fn as_user(name: &str) -> [(&'static str, &str); 1] {
        [("X-Forwarded-User", name)]
    }
    // No token: the proxy vouches. A name with a token has its role; anyone else only reads.
    let (code, _, _) = d.request_as("GET", "/api/runs", None, None, &as_user("zed"));
    assert_eq!(code, 200);
    let start = json!({"pipeline": "gate", "task": "count"});
    let (code, _, _) = d.request_as("POST", "/api/runs", None, Some(&start), &as_user("zed"));
    assert_eq!(code, 403);
    let (code, accepted, _) = d.request_as("POST", "/api/runs", None, Some(&start), &as_user("carol"));
    assert_eq!(code, 202, "{accepted}");
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&run, "waiting");
    let (code, _, _) = d.request_as(
        "POST",
        &format!("/api/runs/{run}/reject"),
        None,
        Some(&json!({"by": "someone else", "comment": "Not on a Friday"})),
        &as_user("carol"),
    );
    assert_eq!(code, 200);
    d.wait_status(&run, "rejected");
    assert_eq!(
        kinds_and_people(&ws, &run),
        vec![
            ("run_started".to_owned(), Some("carol".to_owned())),
            ("approval_rejected".to_owned(), Some("carol".to_owned()))
        ]
    );
    // A name that is not a plain word is no one.
    let (code, _, _) = d.request_as("GET", "/api/runs", None, None, &as_user("carol\tadmin"));
    assert_eq!(code, 401);
    drop(d);

    // From an address the proxy does not connect from, the header is anyone's to write.
    let d = Daemon::start(&ws, &["--trust-proxy-header", "X-Forwarded-User", "--trust-proxy-from", "10.0.0.0/8"]);
    let (code, _, _) = d.request_as("GET", "/api/runs", None, None, &as_user("carol"));
    assert_eq!(code, 401);
    drop(d);
    let (code, _, err) = ws.run(&["serve", "--trust-proxy-header", "X-Forwarded-User"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = ws.run(&[
        "serve",
        "--trust-proxy-header",
        "X-Forwarded-User",
        "--trust-proxy-from",
        "everyone",
        "--addr",
        "127.0.0.1:0",
    ]);
    assert_eq!(
        (code, err.contains("--trust-proxy-from everyone: expected an address or a network")),
        (2, true),
        "{err}"
    );
}

#[test]
fn a_run_runs_again_whole_or_from_a_stage_through_the_api_and_the_cli() {
    let ws = team_ws();
    let d = Daemon::start(&ws, &[]);
    let (code, accepted) =
        d.post("/api/runs", &json!({"pipeline": "two", "task": "letters", "vars": {"complexity": "low"}}));
    assert_eq!(code, 202);
    let first = accepted["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&first, "success");
    assert_eq!(ws.read("log.txt"), "a\nb\n");

    let (code, again) = d.post(&format!("/api/runs/{first}/rerun"), &json!({"by": "dan"}));
    assert_eq!(code, 202, "{again}");
    let second = again["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&second, "success");
    assert_eq!(ws.read("log.txt"), "a\nb\na\nb\n");
    let (code, from_b) = d.post(&format!("/api/runs/{first}/rerun"), &json!({"from": "b"}));
    assert_eq!(code, 202, "{from_b}");
    let third = from_b["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&third, "success");
    assert_eq!(ws.read("log.txt"), "a\nb\na\nb\nb\n");
    // The new runs name the old one, the stage and who asked; the task and variables are the
    // same.
    let start_of = |run: &str| ws.journal(run).into_iter().next().expect("run_started")["event"].clone();
    let (s2, s3) = (start_of(&second), start_of(&third));
    let picked = |s: &Value| json!({"rerun_of": s["rerun_of"], "start_from": s["start_from"], "by": s["by"], "task": s["task"], "vars": s["vars"], "task_id": s["task_id"]});
    let task_id = start_of(&first)["task_id"].clone();
    assert_eq!(
        (picked(&s2), picked(&s3)),
        (
            json!({"rerun_of": first, "start_from": null, "by": "dan", "task": "letters", "vars": {"complexity": "low"}, "task_id": task_id}),
            json!({"rerun_of": first, "start_from": "b", "by": "api", "task": "letters", "vars": {"complexity": "low"}, "task_id": task_id}),
        )
    );
    let (code, body) = d.post(&format!("/api/runs/{first}/rerun"), &json!({"from": "nope"}));
    assert_eq!((code, body["error"]["code"].clone()), (422, json!("invalid")), "{body}");
    let (code, _) = d.post("/api/runs/no-such-run/rerun", &json!({}));
    assert_eq!(code, 404);
    drop(d);

    // The CLI runs it again in the foreground, as whoever is at the keyboard.
    ws.write("fail-b", "");
    let (code, _, err) = ws.run(&["rerun", &first, "--from", "b", "--quiet"]);
    assert_eq!(code, 1, "{err}");
    std::fs::remove_file(ws.path().join("fail-b")).expect("rm");
    let (code, result, err) = ws.json(&["rerun", "latest", "--from", "b", "--quiet"]);
    assert_eq!((code, result["status"].clone()), (0, json!("success")), "{err}");
    assert_eq!(ws.read("log.txt"), "a\nb\na\nb\nb\nb\n");
    let (code, _, err) = ws.run(&["rerun", &first, "--from", "zzz"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn the_runs_list_pages_counts_and_searches_on_the_server() {
    let ws = team_ws();
    let (code, _, err) = ws.run(&["bench", "--list-runs", "120", "--seed-only"]);
    assert_eq!(code, 0, "{err}");
    let d = Daemon::start(&ws, &[]);
    let ids = |rows: &Value| -> Vec<String> {
        rows.as_array().expect("rows").iter().map(|r| r["run_id"].as_str().unwrap_or_default().to_owned()).collect()
    };
    let (_, first, head) = d.request_as("GET", "/api/runs?limit=50", Some(&token(&ws)), None, &[]);
    assert_eq!(head.get("x-total-count").and_then(|v| v.to_str().ok()), Some("120"));
    let (_, second, _) = d.request_as("GET", "/api/runs?limit=50&offset=50", Some(&token(&ws)), None, &[]);
    let (_, third, _) = d.request_as("GET", "/api/runs?limit=50&offset=100", Some(&token(&ws)), None, &[]);
    let all: Vec<String> = [ids(&first), ids(&second), ids(&third)].concat();
    let mut unique = all.clone();
    unique.sort();
    unique.dedup();
    assert_eq!((all.len(), unique.len()), (120, 120));
    // Search by task text (the seeded task 57 says "refactor the parser, part 57").
    let (_, found, head) = d.request_as("GET", "/api/runs?q=PARSER%2C%20part%2057", Some(&token(&ws)), None, &[]);
    assert_eq!(head.get("x-total-count").and_then(|v| v.to_str().ok()), Some("1"));
    assert_eq!(found[0]["task"], "refactor the parser, part 57");
    let (code, body, _) = d.request_as("GET", "/api/runs?since=yesterday", Some(&token(&ws)), None, &[]);
    assert_eq!(code, 422, "{body}");
    // The dashboard pages 50 at a time and says how many there are.
    let (_, page) = d.page_as("/?page=3", &token(&ws));
    assert!(page.contains("Runs 101–120 of <strong id=\"runs-total\">120</strong>"), "{page}");
    assert_eq!(page.matches("<tr class=\"status-").count(), 20);
    // (minijinja writes `/` in attributes as `&#x2f;`.)
    assert!(page.contains("rel=\"prev\" href=\"&#x2f;?page=2\"") && !page.contains("rel=\"next\""), "{page}");
    let (_, page) = d.page_as("/?q=part+57", &token(&ws));
    assert!(page.contains("Runs 1–1 of <strong id=\"runs-total\">1</strong> matching"), "{page}");
}

fn token(ws: &Ws) -> String {
    ws.read(".loopwright/state/serve.token").trim().to_owned()
}

/// A notification target that answers 500 once, then 200 to everything.
fn receiver(n: usize) -> crate::http::Server {
    use crate::http::Reply;
    let ok = || Reply::Http { status: "200 OK", headers: vec![], chunks: vec![] };
    let mut replies = vec![Reply::Http { status: "500 Internal Server Error", headers: vec![], chunks: vec![] }];
    replies.extend((0..n).map(|_| ok()));
    crate::http::Server::start(replies)
}

/// The JSON bodies the receiver got, in order (the failed first try included).
pub(crate) fn bodies(server: &crate::http::Server) -> Vec<Value> {
    server
        .requests()
        .iter()
        .filter_map(|r| r.split_once("\r\n\r\n\n").or_else(|| r.split_once("\n\n")).map(|(_, b)| b.to_owned()))
        .filter_map(|b| serde_json::from_str(b.trim()).ok())
        .collect()
}

/// The JSON bodies of the requests to `path`, in order.
pub(crate) fn bodies_at(server: &crate::http::Server, path: &str) -> Vec<Value> {
    server
        .requests()
        .iter()
        .filter(|r| r.split_whitespace().nth(1) == Some(path))
        .filter_map(|r| r.split_once("\r\n\r\n\n").or_else(|| r.split_once("\n\n")).map(|(_, b)| b.to_owned()))
        .filter_map(|b| serde_json::from_str(b.trim()).ok())
        .collect()
}

/// Tells the workspace's daemon to notify the server on `port` of what needs a person, with
/// one-tap links answering as `answer_as`.
fn notify_needs_human(ws: &Ws, port: u16, answer_as: Option<&str>) {
    let answer_as = answer_as.map(|a| format!("as = \"{a}\"\n")).unwrap_or_default();
    ws.write(
        ".loopwright/config.toml",
        &format!("[[notify]]\nurl = \"http://127.0.0.1:{port}/hook\"\nevents = [\"needs_human\"]\n{answer_as}"),
    );
}

fn wait_until<T>(what: &str, seconds: u64, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_gate_is_notified_once_retried_journaled_and_answered_by_its_one_tap_link_once() {
    let ws = team_ws();
    let server = receiver(6);
    ws.write(
        ".loopwright/config.toml",
        &format!(
            "[[notify]]\nurl = \"http://127.0.0.1:{}/hook/s3cret\"\nevents = [\"needs_human\", \"finished\"]\nas = \"carol\"\n",
            server.port
        ),
    );
    create(&ws, "carol", "approver");
    let d = Daemon::start(&ws, &[]);
    let (code, accepted) = d.post("/api/runs", &json!({"pipeline": "gate", "task": "count"}));
    assert_eq!(code, 202);
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&run, "waiting");
    // The first try gets 500; the retry (2 s later) is delivered.
    let sent = wait_until("the retried notification", 20, || {
        let got = bodies(&server);
        (got.len() >= 2).then_some(got)
    });
    assert_eq!(sent[0], sent[1], "the retry sends the same notification");
    let n = &sent[1];
    let picked = json!({"event": n["event"], "run_id": n["run_id"], "pipeline": n["pipeline"], "task": n["task"], "stage": n["stage"],
        "headline": n["headline"], "url": n["url"], "labels": n["actions"].as_array().expect("actions").iter().map(|a| a["label"].clone()).collect::<Vec<_>>()});
    assert_eq!(
        picked,
        json!({"event": "needs_human", "run_id": run, "pipeline": "gate", "task": "count", "stage": "second",
            "headline": "Stage second waits for your approval: d — Approve to run second, or reject to cancel the run.",
            "url": d.url(&format!("/runs/{run}")), "labels": ["Approve", "Reject"]})
    );
    let approve = n["actions"][0]["url"].as_str().expect("url").to_owned();
    let reject = n["actions"][1]["url"].as_str().expect("url").to_owned();
    // Journaled: sent after two attempts, named by the target's host only (its path is a secret).
    let journal = || -> Vec<(String, String, String, i64)> {
        let conn = rusqlite::Connection::open(ws.path().join(".loopwright/state/state.db")).expect("db");
        let mut stmt =
            conn.prepare("SELECT event, target, status, attempts FROM notifications ORDER BY at").expect("sql");
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .expect("rows")
            .map(|r| r.expect("row"))
            .collect()
    };
    let target = "webhook http://127.0.0.1".to_owned();
    wait_until("the outcome journaled", 10, || {
        (journal().first().map(|r| r.2.clone()) == Some("notification_sent".into())).then_some(())
    });
    assert_eq!(journal(), vec![("needs_human".to_owned(), target.clone(), "notification_sent".to_owned(), 2)]);

    // The link opens a confirmation page without signing in; confirming answers as carol.
    let http = reqwest::blocking::Client::new();
    let page = http.get(&approve).send().expect("page");
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().expect("html");
    assert!(html.contains("Stage second waits for your approval") && html.contains("Approve as carol"), "{html}");
    let forged = format!("{}x", &approve[..approve.len() - 1]);
    assert_eq!(http.get(&forged).send().expect("forged").status().as_u16(), 403);
    let done = http.post(&approve).json(&json!({"comment": "from my phone"})).send().expect("confirm");
    assert_eq!(done.status().as_u16(), 200);
    d.wait_status(&run, "success");
    assert_eq!(kinds_and_people(&ws, &run), vec![("approval_granted".to_owned(), Some("carol".to_owned()))]);
    // Used: the link, and its twin for the same notification, are refused with a page that
    // says so.
    for link in [&approve, &reject] {
        let again = http.get(link).send().expect("again");
        assert_eq!(again.status().as_u16(), 410);
        assert!(again.text().expect("html").contains("This link was already used"));
    }
    assert_eq!(http.post(&approve).json(&json!({})).send().expect("again").status().as_u16(), 410);
    // The run's page lists what was sent where, and that its link was used.
    let (_, page) = d.page_as(&format!("/runs/{run}"), &token(&ws));
    assert!(
        page.contains("needs human → webhook http:&#x2f;&#x2f;127.0.0.1: sent (2 tries); its link was used at"),
        "{page}"
    );
    // The run's end is notified too, once.
    wait_until("the end notified", 10, || (journal().len() == 2).then_some(()));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let events: Vec<String> =
        bodies(&server).iter().map(|b| b["event"].as_str().unwrap_or_default().to_owned()).collect();
    assert_eq!(events, ["needs_human", "needs_human", "finished"]);
}

#[test]
fn an_escalation_is_answered_with_guidance_through_its_fix_link() {
    // The agent writes a check script; the check fails (not executable): permission-error
    // escalates at once; told to "make it executable", the agent does.
    let ws = fixit_ws(
        "prompt=$(cat)\nmkdir -p scripts\nprintf '#!/bin/sh\\necho checked\\n' > scripts/check.sh\ncase \"$prompt\" in *\"make it executable\"*) chmod +x scripts/check.sh;; esac\necho wrote the check\n",
    );
    let server = receiver(4);
    notify_needs_human(&ws, server.port, Some("erin"));
    ws.init_git();
    let d = Daemon::start(&ws, &[]);
    let (code, accepted) = d.post("/api/runs", &json!({"pipeline": "fixit", "task": "add the check"}));
    assert_eq!(code, 202);
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&run, "waiting");
    let sent = wait_until("the escalation's notification", 20, || {
        bodies(&server).into_iter().find(|b| b["run_id"] == run.as_str())
    });
    let labels: Vec<&str> =
        sent["actions"].as_array().expect("actions").iter().filter_map(|a| a["label"].as_str()).collect();
    assert_eq!(labels, ["Retry", "Fix with guidance", "Skip the stage", "Abort the run"]);
    assert!(
        sent["headline"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Escalated to you — Stage implement: the check `script_runs` failed"),
        "{sent}"
    );
    let fix = sent["actions"][1]["url"].as_str().expect("url").to_owned();
    let http = reqwest::blocking::Client::new();
    let page = http.get(&fix).send().expect("page").text().expect("html");
    // The question: the escalation's report, with its suggested steps first.
    assert!(page.contains("Guidance for the next attempt") && page.contains("Suggested Actions"), "{page}");
    let empty = http.post(&fix).json(&json!({"text": "  "})).send().expect("post");
    assert_eq!(empty.status().as_u16(), 422, "guidance is needed, and the link is not spent");
    let done = http.post(&fix).json(&json!({"text": "make it executable"})).send().expect("post");
    assert_eq!(done.status().as_u16(), 200);
    d.wait_status(&run, "success");
    let answered: Vec<Value> = ws
        .journal(&run)
        .into_iter()
        .map(|e| e["event"].clone())
        .filter(|e| e["type"] == "escalation_answered")
        .map(|e| json!([e["answer"], e["by"]]))
        .collect();
    assert_eq!(answered, [json!([{"answer": "fix", "text": "make it executable"}, "erin"])]);
}

#[test]
fn two_taps_of_one_link_at_the_same_moment_answer_once_in_twenty_tries() {
    let ws = team_ws();
    let server = crate::http::Server::start(
        (0..40).map(|_| crate::http::Reply::Http { status: "200 OK", headers: vec![], chunks: vec![] }).collect(),
    );
    notify_needs_human(&ws, server.port, Some("carol"));
    let d = Daemon::start(&ws, &[]);
    let http = reqwest::blocking::Client::new();
    for attempt in 0..20 {
        let (_, accepted) = d.post("/api/runs", &json!({"pipeline": "gate", "task": format!("try {attempt}")}));
        let run = accepted["run_id"].as_str().expect("run").to_owned();
        d.wait_status(&run, "waiting");
        let sent =
            wait_until("the notification", 10, || bodies(&server).into_iter().find(|b| b["run_id"] == run.as_str()));
        let approve = sent["actions"][0]["url"].as_str().expect("url").to_owned();
        let taps: Vec<u16> = std::thread::scope(|s| {
            let tap = || s.spawn(|| http.post(&approve).json(&json!({})).send().expect("tap").status().as_u16());
            let (a, b) = (tap(), tap());
            vec![a.join().expect("tap"), b.join().expect("tap")]
        });
        // One answers; the other finds the link spent (410) or, if it looked before the first
        // spent it, the run no longer waiting (409): either way it answers nothing.
        let mut sorted = taps.clone();
        sorted.sort_unstable();
        assert!(sorted[0] == 200 && matches!(sorted[1], 409 | 410), "try {attempt}: {taps:?}");
        d.wait_status(&run, "success");
        let granted = kinds_and_people(&ws, &run).iter().filter(|(k, _)| k == "approval_granted").count();
        assert_eq!(granted, 1, "try {attempt}: the gate was approved {granted} times");
        // The stage after the gate ran once.
        assert_eq!(ws.read("count.txt").matches("two").count(), attempt + 1, "try {attempt}");
    }
}

#[test]
fn a_revoked_persons_link_and_a_link_for_an_earlier_question_answer_nothing() {
    // A gate notified as carol, who is revoked before she taps.
    let ws = team_ws();
    let server = receiver(10);
    notify_needs_human(&ws, server.port, Some("carol"));
    create(&ws, "carol", "approver");
    let d = Daemon::start(&ws, &[]);
    let (code, accepted) = d.post("/api/runs", &json!({"pipeline": "gate", "task": "revoked"}));
    assert_eq!(code, 202);
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&run, "waiting");
    let sent =
        wait_until("the gate's notification", 20, || bodies(&server).into_iter().find(|b| b["run_id"] == run.as_str()));
    let approve = sent["actions"][0]["url"].as_str().expect("url").to_owned();
    let (code, _, err) = ws.run(&["serve", "token", "revoke", "carol"]);
    assert_eq!(code, 0, "{err}");
    let http = reqwest::blocking::Client::new();
    let page = http.get(&approve).send().expect("page");
    assert_eq!(page.status().as_u16(), 403);
    assert!(page.text().expect("html").contains("carol may no longer answer: their access was revoked."));
    assert_eq!(http.post(&approve).json(&json!({})).send().expect("post").status().as_u16(), 403);
    assert_eq!(kinds_and_people(&ws, &run), Vec::<(String, Option<String>)>::new());
    drop(d);

    // An escalation answered another way, then a second one at the same stage: the first
    // notification's links do not answer the second.
    let ws = fixit_ws(
        "cat > /dev/null\nmkdir -p scripts\nprintf '#!/bin/sh\\necho checked\\n' > scripts/check.sh\necho wrote the check\n",
    );
    let server = receiver(10);
    notify_needs_human(&ws, server.port, Some("erin"));
    ws.init_git();
    let d = Daemon::start(&ws, &[]);
    let (code, accepted) = d.post("/api/runs", &json!({"pipeline": "fixit", "task": "twice"}));
    assert_eq!(code, 202);
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&run, "waiting");
    let first =
        wait_until("the first escalation", 20, || bodies(&server).into_iter().find(|b| b["run_id"] == run.as_str()));
    let abort = first["actions"][3]["url"].as_str().expect("url").to_owned();
    let (code, body) = d.post(&format!("/api/runs/{run}/respond"), &json!({"answer": "retry"}));
    assert_eq!(code, 200, "{body}");
    wait_until("the second escalation", 30, || {
        (bodies(&server).iter().filter(|b| b["run_id"] == run.as_str()).count() >= 2).then_some(())
    });
    d.wait_status(&run, "waiting");
    let http = reqwest::blocking::Client::new();
    let page = http.get(&abort).send().expect("page");
    assert_eq!(page.status().as_u16(), 409);
    assert!(page.text().expect("html").contains("This link was for an earlier question at implement"), "stale link");
    assert_eq!(http.post(&abort).json(&json!({})).send().expect("post").status().as_u16(), 409);
    d.wait_status(&run, "waiting");
}

#[test]
fn notifications_survive_a_restart_and_a_kill_and_each_happening_is_sent_once() {
    use crate::http::Reply;
    let ok = || Reply::Http { status: "200 OK", headers: vec![], chunks: vec![] };
    // A gate reached while no daemon follows the journal is notified by the next daemon.
    let ws = team_ws();
    let server = crate::http::Server::start((0..10).map(|_| ok()).collect());
    notify_needs_human(&ws, server.port, None);
    let (code, _) = Daemon::start(&ws, &[]).stop();
    assert_eq!(code, 0);
    let (code, result, err) = ws.json(&["run", "gate", "--task", "while down"]);
    assert_eq!((code, result["status"].clone()), (3, json!("waiting")), "{err}");
    let run = result["run_id"].as_str().expect("run").to_owned();
    let d = Daemon::start(&ws, &[]);
    let sent = wait_until("the gate reached while down, notified", 20, || {
        bodies(&server).into_iter().find(|b| b["run_id"] == run.as_str())
    });
    assert_eq!(sent["event"], "needs_human");
    let (code, _) = d.stop();
    assert_eq!(code, 0);
    // Started again, nothing is sent twice.
    let d = Daemon::start(&ws, &[]);
    std::thread::sleep(std::time::Duration::from_millis(800));
    assert_eq!(bodies(&server).iter().filter(|b| b["run_id"] == run.as_str()).count(), 1);
    drop(d);

    // A target down when the daemon is killed: the next daemon sends what was claimed, once.
    let ws = team_ws();
    let server = receiver(10);
    notify_needs_human(&ws, server.port, None);
    let d = Daemon::start(&ws, &[]);
    let (code, accepted) = d.post("/api/runs", &json!({"pipeline": "gate", "task": "killed"}));
    assert_eq!(code, 202);
    let run = accepted["run_id"].as_str().expect("run").to_owned();
    d.wait_status(&run, "waiting");
    let attempts = || -> Vec<(String, i64)> {
        let conn = rusqlite::Connection::open(ws.path().join(".loopwright/state/state.db")).expect("db");
        let mut stmt = conn.prepare("SELECT status, attempts FROM notifications").expect("sql");
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).expect("rows").map(|r| r.expect("row")).collect()
    };
    wait_until("the first try, refused", 10, || (attempts() == [("pending".to_owned(), 1)]).then_some(()));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(d.pid()), nix::sys::signal::Signal::SIGKILL).expect("kill -9");
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(d);
    let d = Daemon::start(&ws, &[]);
    wait_until("the claimed notification sent by the next daemon", 20, || {
        (attempts() == [("notification_sent".to_owned(), 2)]).then_some(())
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    let got = bodies(&server);
    assert_eq!(got.len(), 2, "the failed try and the one that went through: {got:?}");
    assert_eq!(got[0], got[1]);
    drop(d);
}
