//! Provider limits (`[[limits]]`, SPEC §13) through the binary: runs in separate processes —
//! ten workspaces sharing a PostgreSQL store, or runs in worktrees of one workspace sharing its
//! SQLite file — against a scripted OpenAI-compatible server on 127.0.0.1 that counts the
//! requests in flight and answers one with a 429 and a `Retry-After`.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::{Ws, finish, spawn_env};

/// A model server answering every request on a thread of its own after `delay`: the most
/// requests it had in flight at once, and when each started (`Instant`s) with its status.
struct Model {
    port: u16,
    busiest: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<(Instant, u16)>>>,
}

impl Model {
    /// Request number `limited` (from 1), if any, is answered 429 with `Retry-After: 2`.
    fn start(delay: Duration, limited: Option<usize>) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (busiest, log) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Vec::new())));
        let (most, seen) = (Arc::clone(&busiest), Arc::clone(&log));
        let now = Arc::new(AtomicUsize::new(0));
        let count = Arc::new(AtomicUsize::new(0));
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (most, seen, now, count) =
                    (Arc::clone(&most), Arc::clone(&seen), Arc::clone(&now), Arc::clone(&count));
                std::thread::spawn(move || {
                    let mut conn = conn;
                    let _ = crate::http::read_request(&conn);
                    let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                    let inside = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(inside, Ordering::SeqCst);
                    let out = if Some(n) == limited {
                        seen.lock().expect("log").push((Instant::now(), 429));
                        "HTTP/1.1 429 Too Many Requests\r\nconnection: close\r\nretry-after: 2\r\ncontent-length: 0\r\n\r\n"
                            .to_owned()
                    } else {
                        seen.lock().expect("log").push((Instant::now(), 200));
                        std::thread::sleep(delay);
                        let body = json!({
                            "choices": [{"message": {"role": "assistant", "content": "done"}}],
                            "usage": {"prompt_tokens": 10, "completion_tokens": 5}
                        })
                        .to_string();
                        format!(
                            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        )
                    };
                    now.fetch_sub(1, Ordering::SeqCst);
                    let _ = conn.write_all(out.as_bytes());
                });
            }
        });
        Self { port, busiest, log }
    }
}

/// A workspace whose one stage asks the model server, with `config` as its config.toml.
fn workspace(port: u16, config: &str) -> Ws {
    let ws = Ws::empty();
    ws.write(
        ".loopwright/agents/model.md",
        &format!("---\nrunner: openai\nmodel: test-model\nbase_url: http://127.0.0.1:{port}/v1\napi_key_env: LW_TEST_KEY\n---\nYou are careful.\n"),
    );
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: ask\n    description: Answer\n    agent: model\n    mode: plan\n",
    );
    ws.write(".loopwright/config.toml", config);
    ws
}

/// The `limit_waiting` reasons of a run's journal.
fn waits(ws: &Ws, run: &str, store: &[&str]) -> Vec<String> {
    let mut cmd = ws.cmd();
    let out = cmd.args(["logs", run, "--json"]).args(store).output().expect("logs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"]["type"] == "limit_waiting")
        .map(|v| v["event"]["reason"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn ten_runs_on_machines_sharing_a_store_keep_to_two_at_once_and_a_429_pauses_them_all() {
    let Some(url) = crate::postgres::fresh_database("limits") else { return };
    let model = Model::start(Duration::from_millis(300), Some(3));
    let config = format!("store = \"{url}\"\n\n[[limits]]\nprovider = \"openai\"\nconcurrent = 2\n");
    let spaces: Vec<Ws> = (0..10).map(|_| workspace(model.port, &config)).collect();
    let started = Instant::now();
    let runs: Vec<_> =
        spaces.iter().map(|ws| spawn_env(ws, &["run", "p", "--json", "--quiet"], &[("LW_TEST_KEY", "k")])).collect();
    let mut ids = Vec::new();
    for child in runs {
        let (code, out, err) = finish(child);
        assert_eq!(code, 0, "{err}");
        let result: Value = serde_json::from_str(&out).expect("json");
        assert_eq!(result["status"], "success", "{result}");
        ids.push(result["run_id"].as_str().expect("id").to_owned());
    }
    let took = started.elapsed();
    // Never more than two requests in flight, and two at times.
    assert_eq!(model.busiest.load(Ordering::SeqCst), 2);
    let log = model.log.lock().expect("log").clone();
    assert_eq!(log.iter().filter(|(_, s)| *s == 200).count(), 10, "{log:?}");
    // The 429 said "in 2 s": no request started in the pause but the one in flight then.
    let (limited_at, _) = *log.iter().find(|(_, s)| *s == 429).expect("a 429");
    let inside: Vec<Duration> = log
        .iter()
        .filter(|(t, _)| *t > limited_at + Duration::from_millis(300) && *t < limited_at + Duration::from_millis(1800))
        .map(|(t, _)| *t - limited_at)
        .collect();
    assert_eq!(inside, Vec::<Duration>::new(), "requests started while the provider was paused");
    assert!(took >= Duration::from_millis(300 * 5 + 2000), "{took:?}");
    // Runs that waited said why: a slot, or the pause.
    let reasons: Vec<String> = spaces.iter().zip(&ids).flat_map(|(ws, run)| waits(ws, run, &[])).collect();
    assert!(reasons.iter().any(|r| r == "openai: 2 of 2 concurrent stages in use"), "{reasons:?}");
    assert!(
        reasons.iter().any(|r| r.starts_with("openai is paused until ") && r.ends_with("answered 429")),
        "{reasons:?}"
    );
}

#[test]
fn runs_sharing_a_workspaces_sqlite_file_keep_to_its_limit_too() {
    let model = Model::start(Duration::from_millis(400), None);
    let ws = workspace(model.port, "[[limits]]\nprovider = \"openai\"\nmodel = \"test-model\"\nconcurrent = 1\n");
    ws.init_git();
    let runs: Vec<_> = (0..3)
        .map(|_| spawn_env(&ws, &["run", "p", "--json", "--quiet", "--worktree"], &[("LW_TEST_KEY", "k")]))
        .collect();
    let mut ids = Vec::new();
    for child in runs {
        let (code, out, err) = finish(child);
        assert_eq!(code, 0, "{err}");
        ids.push(serde_json::from_str::<Value>(&out).expect("json")["run_id"].as_str().expect("id").to_owned());
    }
    assert_eq!(model.busiest.load(Ordering::SeqCst), 1);
    let reasons: Vec<String> = ids.iter().flat_map(|run| waits(&ws, run, &[])).collect();
    assert!(reasons.iter().any(|r| r == "openai (model test-model): 1 of 1 concurrent stages in use"), "{reasons:?}");
}

#[test]
fn a_reset_an_attempt_printed_pauses_no_provider_for_other_runs() {
    let model = Model::start(Duration::from_millis(10), None);
    let ws = workspace(model.port, "[[limits]]\nprovider = \"openai\"\nconcurrent = 5\n");
    // An agent of the same provider that prints a rate limit "resetting" in ten years: text
    // an attempt printed (its agent, a file it read, a check) is not the provider's word.
    ws.write(
        ".loopwright/agents/loud.md",
        "---\nrunner: command\nmodel: gpt-4o\ncommand: [\"sh\", \"-c\", \"cat > /dev/null; echo 'Error: rate limit reached for gpt-4o, resets at 2036-11-24 10:00 UTC (429)' >&2; exit 1\"]\n---\nYou are loud.\n",
    );
    ws.write(
        ".loopwright/pipelines/loud.yml",
        "name: loud\ndescription: d\nversion: 1\nstages:\n  - id: shout\n    description: d\n    agent: loud\n    mode: plan\n",
    );
    let (code, result, err) = ws.json(&["run", "loud"]);
    assert_eq!((code, result["status"].clone()), (1, json!("failed")), "{err}");
    // The next run of the provider is not held back.
    let started = Instant::now();
    let child = spawn_env(&ws, &["run", "p", "--json", "--quiet"], &[("LW_TEST_KEY", "k")]);
    let (code, out, err) = finish(child);
    assert_eq!(code, 0, "{err}");
    assert!(started.elapsed() < Duration::from_secs(60));
    let run = serde_json::from_str::<Value>(&out).expect("json")["run_id"].as_str().expect("id").to_owned();
    assert_eq!(waits(&ws, &run, &[]), Vec::<String>::new());
}

#[test]
fn stages_at_once_keep_to_their_providers_limit_and_a_waiting_stage_holds_up_none_that_runs() {
    let model = Model::start(Duration::from_millis(700), None);
    let ws = workspace(model.port, "[[limits]]\nprovider = \"openai\"\nconcurrent = 1\n");
    let stage =
        |id: &str| format!("  - id: {id}\n    description: Answer\n    agent: model\n    mode: plan\n    needs: []\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        &format!("name: p\ndescription: d\nversion: 1\nstages:\n{}{}{}", stage("a"), stage("b"), stage("c")),
    );
    let started = Instant::now();
    let child = spawn_env(&ws, &["run", "p", "--json", "--quiet"], &[("LW_TEST_KEY", "k")]);
    let (code, out, stderr) = finish(child);
    assert_eq!(code, 0, "{stderr}\n{out}");
    let result = serde_json::from_str::<Value>(&out).expect("json");
    // One at a time, as the limit says, and the driver went on taking the others' ends
    // meanwhile: a stage waiting for its provider did not hold the slot's lease (a minute).
    assert_eq!(model.busiest.load(Ordering::SeqCst), 1);
    let statuses: Vec<(String, String)> =
        crate::support::stages(&result).into_iter().map(|(id, status, _, _)| (id, status)).collect();
    assert_eq!(statuses, [("a", "success"), ("b", "success"), ("c", "success")].map(|(a, b)| (a.into(), b.into())));
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
}

/// What each agent attempt of `run` used (`usage_recorded` tokens), in journal order.
fn usages(ws: &Ws, run: &str, store: &[&str]) -> Vec<u64> {
    let mut cmd = ws.cmd();
    let out = cmd.args(["logs", run, "--json"]).args(store).output().expect("logs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"]["type"] == "usage_recorded")
        .map(|v| {
            v["event"]["usage"]["input_tokens"].as_u64().unwrap_or(0)
                + v["event"]["usage"]["output_tokens"].as_u64().unwrap_or(0)
        })
        .collect()
}

/// A workspace whose pipeline `work` runs six stages of an agent that takes 0.4 s, and `one`
/// runs one; `config` is its config.toml.
fn spend_workspace(config: &str) -> Ws {
    let ws = Ws::empty();
    ws.write(
        ".loopwright/agents/dev.md",
        "---\nname: dev\nrunner: command\ncommand: [\"sh\", \"-c\", \"cat > /dev/null; sleep 0.4; echo done\"]\n---\nYou work.\n",
    );
    let stages: String =
        (1..=6).map(|i| format!("  - id: s{i}\n    description: Step {i}\n    agent: dev\n    mode: plan\n")).collect();
    ws.write(".loopwright/pipelines/work.yml", &format!("name: work\ndescription: d\nversion: 1\nstages:\n{stages}"));
    ws.write(
        ".loopwright/pipelines/one.yml",
        "name: one\ndescription: d\nversion: 1\nstages:\n  - id: s1\n    description: Step 1\n    agent: dev\n    mode: plan\n",
    );
    ws.write(".loopwright/config.toml", config);
    ws
}

/// One attempt's use in `ws`, measured by a run of `one` (which a cap on `work` does not count).
fn one_attempts_use(ws: &Ws) -> u64 {
    let (code, result, stderr) = ws.json(&["run", "one", "--quiet"]);
    assert_eq!(code, 0, "{stderr}");
    usages(ws, result["run_id"].as_str().expect("id"), &[])[0]
}

#[test]
fn a_cap_is_told_once_at_50_80_and_100_percent_and_the_api_and_stats_page_show_it() {
    let hook = crate::http::Server::start(
        (0..10).map(|_| crate::http::Reply::Http { status: "200 OK", headers: vec![], chunks: vec![] }).collect(),
    );
    let ws = spend_workspace("");
    let per = one_attempts_use(&ws);
    ws.write(
        ".loopwright/config.toml",
        &format!(
            "[[notify]]\nurl = \"http://127.0.0.1:{}/hook\"\nevents = [\"spend\"]\n\n[[spend]]\nperiod = \"day\"\ntokens = {}\npipeline = \"work\"\non_exceed = \"fail\"\n",
            hook.port,
            per * 4
        ),
    );
    let daemon = crate::daemon::Daemon::start(&ws, &[]);
    // Four attempts reach the cap (50 % after two, 75 % after three, 100 % after four); the
    // fifth is refused. A second run is refused at once, and tells nobody again.
    for _ in 0..2 {
        let (code, result, stderr) = ws.json(&["run", "work", "--quiet"]);
        assert_eq!((code, result["status"].as_str()), (1, Some("failed")), "{stderr}");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while crate::team::bodies(&hook).len() < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let told: Vec<(String, String)> = crate::team::bodies(&hook)
        .iter()
        .map(|b| {
            (b["event"].as_str().unwrap_or_default().to_owned(), b["headline"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    let mut shares: Vec<u32> = told
        .iter()
        .map(|(event, headline)| {
            assert_eq!(event, "spend", "{headline}");
            assert!(headline.starts_with("pipeline work's daily spend cap is "), "{headline}");
            let share = headline.split(" % used").next().and_then(|h| h.rsplit(' ').next()).unwrap_or_default();
            share.parse().unwrap_or(0)
        })
        .collect();
    shares.sort_unstable();
    assert_eq!(shares, [50, 80, 100], "{told:?}");
    assert!(told.iter().any(|(_, h)| h.contains("attempts under it fail until ")), "{told:?}");
    // The API and the Stats page show the cap's use.
    let (status, caps) = daemon.get("/api/spend");
    assert_eq!(status, 200);
    let cap = per * 4;
    assert_eq!(
        (&caps[0]["key"], &caps[0]["tokens_cap"], &caps[0]["on_exceed"], &caps[0]["period"]),
        (&json!("day:pipeline=work"), &json!(cap), &json!("fail"), &json!("day")),
        "{caps}"
    );
    assert!(caps[0]["tokens_used"].as_u64().is_some_and(|u| u >= cap), "{caps}");
    let (status, page) = daemon.page("/stats");
    assert_eq!(status, 200);
    assert!(page.contains("<h2>Spend against its caps</h2>"), "{page}");
    assert!(page.contains("pipeline work&#x27;s daily spend cap</td>"), "{page}");
}

/// Two processes racing stages of one pipeline past its daily token cap on one store (`store`:
/// a config line naming it, empty for the workspace's SQLite file): the cap is reached, at most
/// one attempt ends over it, and every attempt after it fails with the cap's reason.
fn two_processes_race_past_a_daily_cap(store: &str) {
    let ws = spend_workspace(store);
    // Each run in a worktree of its own: two runs never share a working tree.
    ws.init_git();
    let per = one_attempts_use(&ws);
    let cap = per * 5 / 2;
    ws.write(
        ".loopwright/config.toml",
        &format!("{store}\n[[spend]]\nperiod = \"day\"\ntokens = {cap}\npipeline = \"work\"\non_exceed = \"fail\"\n"),
    );
    ws.git(&["commit", "--quiet", "-am", "a daily cap"]);
    let runs: Vec<_> =
        (0..2).map(|_| spawn_env(&ws, &["run", "work", "--json", "--quiet", "--worktree"], &[])).collect();
    let mut used = Vec::new();
    for child in runs {
        let (code, out, err) = finish(child);
        let result: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
        assert_eq!((code, result["status"].as_str()), (1, Some("failed")), "{result}");
        let run = result["run_id"].as_str().expect("id");
        let mut cmd = ws.cmd();
        let logs = cmd.args(["logs", run, "--json"]).output().expect("logs");
        let failed: Value = String::from_utf8_lossy(&logs.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["event"]["type"] == "stage_failed")
            .expect("a stage failed")["event"]
            .clone();
        assert_eq!(failed["error"]["kind"], "budget_exceeded", "{failed}");
        let message = failed["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("pipeline work's daily spend cap is used up: "), "{message}");
        used.extend(usages(&ws, run, &[]));
    }
    let total: u64 = used.iter().sum();
    let largest = used.iter().copied().max().unwrap_or(0);
    assert!(total >= cap, "the cap ({cap}) was never reached: {used:?}");
    assert!(total - largest < cap, "more than one attempt ended over the cap ({cap}): {used:?}");
    // `spend` shows the period's use against the cap.
    let (code, shown, _) = ws.json(&["spend"]);
    assert_eq!(code, 0);
    assert_eq!(shown[0]["key"], "day:pipeline=work");
    assert_eq!(shown[0]["tokens"], json!([total, cap]));
    assert!(shown[0]["percent"].as_f64().is_some_and(|p| p >= 100.0), "{shown}");
}

#[test]
fn two_processes_on_a_sqlite_file_never_run_more_than_one_attempt_over_a_daily_cap() {
    two_processes_race_past_a_daily_cap("");
}

#[test]
fn two_processes_on_postgresql_never_run_more_than_one_attempt_over_a_daily_cap() {
    let Some(url) = crate::postgres::fresh_database("spend") else { return };
    two_processes_race_past_a_daily_cap(&format!("store = \"{url}\"\n"));
}

#[test]
fn a_run_waiting_past_a_used_up_cap_that_says_wait_is_queued_with_the_reason_and_cancelled_at_once() {
    let ws = spend_workspace("");
    let per = one_attempts_use(&ws);
    ws.write(
        ".loopwright/config.toml",
        &format!("[[spend]]\nperiod = \"week\"\ntokens = {}\npipeline = \"work\"\non_exceed = \"wait\"\n", per / 2),
    );
    // The first attempt finds the cap unused and uses it up; the second waits for next week.
    let run = spawn_env(&ws, &["run", "work", "--quiet"], &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let id = loop {
        let (_, latest, _) = ws.json(&["status", "latest"]);
        if latest["status"] == "queued" {
            break latest["run_id"].as_str().expect("id").to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "the run never waited: {latest}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let reasons = waits(&ws, &id, &[]);
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(reasons[0].starts_with("pipeline work's weekly spend cap is used up: "), "{reasons:?}");
    // Cancelled while it waits: its own process ends it, at once, not at the period's end.
    let asked = std::time::Instant::now();
    let (code, _, stderr) = ws.run(&["cancel", &id]);
    assert_eq!(code, 4, "cancel says the run ended cancelled: {stderr}");
    let (code, _, stderr) = finish(run);
    assert_eq!(code, 4, "the waiting run ends cancelled: {stderr}");
    assert!(asked.elapsed() < std::time::Duration::from_secs(15), "it ended {:?} after the cancel", asked.elapsed());
    let (_, status, _) = ws.json(&["status", &id]);
    assert_eq!(status["status"], "cancelled");
    let kinds: Vec<String> =
        ws.journal(&id).iter().map(|e| e["event"]["type"].as_str().unwrap_or_default().to_owned()).collect();
    assert_eq!(kinds.iter().filter(|k| *k == "cancel_requested").count(), 1, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "run_cancelled").count(), 1, "{kinds:?}");
}
