//! The journal on PostgreSQL through the binary: `store copy --to URL` against a throwaway
//! server (`scripts/with-postgres.sh` sets `LOOPWRIGHT_TEST_PG`; without one these tests say so
//! and pass, unless `LOOPWRIGHT_REQUIRE_PG` is set).

use loopwright_engine::{RunId, Store};
use loopwright_store::pg::PgStore;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support::Ws;

/// A new database on the test server (made with `psql`): its URL.
pub fn fresh_database(name: &str) -> Option<String> {
    let Ok(base) = std::env::var("LOOPWRIGHT_TEST_PG") else {
        assert!(std::env::var_os("LOOPWRIGHT_REQUIRE_PG").is_none(), "LOOPWRIGHT_TEST_PG is not set");
        eprintln!("skipped: no PostgreSQL (run through scripts/with-postgres.sh)");
        return None;
    };
    let name = format!("{name}_{}", std::process::id());
    let out = std::process::Command::new("psql")
        .args([base.as_str(), "-qAtc", &format!("CREATE DATABASE {name}")])
        .output()
        .expect("psql");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (head, _) = base.rsplit_once('/').expect("a database in the URL");
    Some(format!("{head}/{name}"))
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(f)
}

#[test]
fn store_copy_moves_every_run_and_copying_again_brings_the_target_up_to_date() {
    let Some(url) = fresh_database("copy") else { return };
    let ws = Ws::empty();
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - {id: a, description: d, agent: shell, mode: plan, run: 'echo one'}\n  - {id: b, description: d, agent: shell, mode: plan, run: 'echo two'}\n",
    );
    for task in ["first", "second"] {
        let (code, _, err) = ws.run(&["run", "p", "--task", task]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, out, err) = ws.json(&["store", "copy", "--to", &url]);
    assert_eq!(code, 0, "{err}");
    let shown = url.clone();
    assert_eq!(out["to"], json!(shown));
    assert_eq!((out["copied"]["runs"].clone(), out["copied"]["unchanged"].clone()), (json!(2), json!(0)));
    // Every run's journal is in PostgreSQL as it is here, event for event.
    let runs: Vec<String> = {
        let (_, list, _) = ws.json(&["status"]);
        list.as_array().expect("runs").iter().map(|r| r["run_id"].as_str().expect("id").to_owned()).collect()
    };
    assert_eq!(runs.len(), 2);
    let copied_events: usize = block_on(async {
        let pg = PgStore::connect(&url, 2).await.expect("connect");
        let mut n = 0;
        for run in &runs {
            let there: Vec<serde_json::Value> = pg
                .events(&RunId::new(run.clone()))
                .await
                .expect("events")
                .into_iter()
                .map(|r| json!({"seq": r.seq, "at": r.at.to_string(), "event": r.event}))
                .collect();
            let here: Vec<serde_json::Value> = ws
                .journal(run)
                .into_iter()
                .map(|e| json!({"seq": e["seq"], "at": e["at"], "event": e["event"]}))
                .collect();
            assert_eq!(there, here, "run {run}");
            n += there.len();
        }
        n
    });
    assert_eq!(out["copied"]["events"], json!(copied_events));
    // Again: nothing to do. After one more run here, only that run is written.
    let (_, again, _) = ws.json(&["store", "copy", "--to", &url]);
    assert_eq!((again["copied"]["runs"].clone(), again["copied"]["unchanged"].clone()), (json!(0), json!(2)));
    let (code, _, err) = ws.run(&["run", "p", "--task", "third"]);
    assert_eq!(code, 0, "{err}");
    let (code, text, err) = ws.run(&["store", "copy", "--to", &url]);
    assert_eq!(code, 0, "{err}");
    assert!(text.starts_with("copied 1 run ("), "{text}");
    assert!(text.trim_end().ends_with("; 2 already there"), "{text}");
}

#[test]
fn store_copy_to_a_server_that_is_not_there_says_so_without_the_password() {
    let ws = Ws::empty();
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - {id: a, description: d, agent: shell, mode: plan, run: 'true'}\n",
    );
    let (code, _, err) = ws.run(&["run", "p"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = ws.run(&["store", "copy", "--to", "postgres://lw:hunter2@127.0.0.1:1/db"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cannot reach PostgreSQL at postgres://lw:***@127.0.0.1:1/db") && !err.contains("hunter2"),
        "{err}"
    );
}

const TWO_STAGES: &str = "name: p\ndescription: d\nversion: 1\nstages:\n  - {id: a, description: d, agent: shell, mode: plan, run: 'echo one'}\n  - {id: b, description: d, agent: shell, mode: plan, run: 'echo two'}\n";

/// What `status RUN --json` says, without what differs between two workspaces.
fn shown(ws: &Ws, args: &[&str]) -> serde_json::Value {
    let (code, out, err) = ws.json(args);
    assert_eq!(code, 0, "{err}");
    out
}

#[test]
fn a_journal_kept_in_postgres_is_read_and_answered_from_another_workspace_that_names_it() {
    let Some(url) = fresh_database("journal") else { return };
    let here = Ws::empty();
    here.write(".loopwright/pipelines/p.yml", TWO_STAGES);
    let (code, out, err) = here.json(&["run", "p", "--task", "from here", "--store", &url]);
    assert_eq!(code, 0, "{err}");
    let run = out["run_id"].as_str().expect("run id").to_owned();
    // The workspace's own SQLite file holds no run: the journal is in PostgreSQL.
    assert_eq!(here.json(&["status"]).1, json!([]));
    // Another workspace (another machine, for all it knows) names the same store in its
    // config.toml, as a string, and sees the run, its result and its journal, event for event.
    let there = Ws::empty();
    there.write(".loopwright/config.toml", &format!("store = \"{url}\"\n"));
    let listed = shown(&there, &["status"]);
    assert_eq!(
        listed.as_array().map(|l| l.iter().map(|r| r["run_id"].clone()).collect::<Vec<_>>()),
        Some(vec![json!(run)])
    );
    assert_eq!(shown(&there, &["status", &run]), out);
    let (_, logs_there, _) = there.run(&["logs", &run, "--json"]);
    let (_, logs_here, _) = here.run(&["logs", &run, "--json", "--store", &url]);
    assert_eq!(logs_there, logs_here);
    assert!(logs_there.lines().count() >= 8, "{logs_there}");
    // LOOPWRIGHT_STORE does the same as --store; `[store] url` the same as the string.
    let mut cmd = here.cmd();
    cmd.args(["status", "--json"]).env("LOOPWRIGHT_STORE", &url);
    let listed: serde_json::Value = serde_json::from_slice(&cmd.output().expect("status").stdout).expect("json");
    assert_eq!(listed[0]["run_id"], json!(run));
    here.write(".loopwright/config.toml", &format!("[store]\nurl = \"{url}\"\n"));
    let (code, again, err) = here.json(&["rerun", &run]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(shown(&there, &["status"]).as_array().map(Vec::len), Some(2));
    assert_eq!(again["status"], json!("success"));
}

#[test]
fn a_store_that_is_not_postgres_is_refused_where_it_is_named() {
    let ws = Ws::empty();
    ws.write(".loopwright/pipelines/p.yml", TWO_STAGES);
    ws.write(".loopwright/config.toml", "sandbox = \"off\"\nstore = \"mysql://db/x\"\n");
    let (code, _, err) = ws.run(&["status"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("config.toml:2") && err.contains("`mysql://db/x` is not a PostgreSQL URL"), "{err}");
    ws.write(".loopwright/config.toml", "");
    let (code, _, err) = ws.run(&["status", "--store", "https://lw:secret@db/x"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--store: `https://lw:***@db/x` is not a PostgreSQL URL") && !err.contains("secret"), "{err}");
    let mut cmd = ws.cmd();
    let out = cmd.args(["status"]).env("LOOPWRIGHT_STORE", "state.db").output().expect("status");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("LOOPWRIGHT_STORE: `state.db` is not a PostgreSQL URL"), "{err}");
    // A server that is not there: said, with where, without the password.
    let (code, _, err) = ws.run(&["status", "--store", "postgres://lw:hunter2@127.0.0.1:1/db"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cannot reach PostgreSQL at postgres://lw:***@127.0.0.1:1/db") && !err.contains("hunter2"),
        "{err}"
    );
}

#[test]
fn the_stores_password_reaches_no_stage_no_output_and_no_journal() {
    let Some(url) = fresh_database("password") else { return };
    // The test server trusts every connection: the password is carried, never checked.
    let url = url.replacen("postgres://lw@", "postgres://lw:PLANTED-PW@", 1) + "?password=PLANTED-PW2";
    for sandbox in ["off", "auto"] {
        let ws = Ws::empty();
        ws.write(".loopwright/config.toml", &format!("sandbox = \"{sandbox}\"\n"));
        ws.write(
            ".loopwright/pipelines/p.yml",
            "name: p\ndescription: d\nversion: 1\nstages:\n  - {id: look, description: d, agent: shell, mode: agent, run: 'env > env.txt; env'}\n",
        );
        let out = ws.cmd().args(["run", "p"]).env("LOOPWRIGHT_STORE", &url).output().expect("run");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{sandbox}: {stderr}");
        let env = ws.read("env.txt");
        let logs = ws.cmd().args(["logs", "latest", "--json"]).env("LOOPWRIGHT_STORE", &url).output().expect("logs");
        let journal = String::from_utf8_lossy(&logs.stdout);
        assert!(journal.contains("\"look\""), "{sandbox}: {journal}");
        for (what, text) in [("env", env.as_str()), ("stdout", &stdout), ("stderr", &stderr), ("journal", &journal)] {
            assert!(!text.contains("PLANTED-PW"), "{sandbox}: the password is in the {what}:\n{text}");
        }
    }
}
