//! The GitHub adapter against a stateful GitHub-compatible server (`tests/forge/github-server.mjs`)
//! that holds every request and answer to GitHub's published OpenAPI description: what the
//! port promises — one's own comments and pull requests found again, checks and their logs,
//! reviews, a merge of exactly the tested head, reports — and how the client treats rate limits,
//! ETags and a GitHub App's sign-in. Each test ends by asking the server for the requests that
//! did not conform to GitHub's description: there must be none.
//!
//! The server needs Node and `tests/forge/node_modules` (`scripts/forge-test.sh` installs them);
//! without them these tests say so and pass, unless `LOOPWRIGHT_REQUIRE_FORGE=1`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use loopwright_forge::github::GitHub;
use loopwright_forge::github::client::{Auth, Client, LocalGate};
use loopwright_forge::port::{
    Actor, Annotation, CheckConclusion, CheckKind, Forge, ForgeError, MergeMethod, NewChangeRequest, Permission,
    Report, ReviewVerdict,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/forge").canonicalize().expect("tests/forge")
}

/// The test server with `tokens` (`login:token:permission,…`), or none where it cannot run.
fn server(tokens: &str, public_key: Option<&Path>) -> Option<Server> {
    let dir = tests_dir();
    if !dir.join("node_modules/@octokit/openapi").exists() {
        assert!(
            std::env::var("LOOPWRIGHT_REQUIRE_FORGE").is_err(),
            "LOOPWRIGHT_REQUIRE_FORGE is set but tests/forge/node_modules is missing: run scripts/forge-test.sh"
        );
        eprintln!("skipped: tests/forge/node_modules is missing (scripts/forge-test.sh installs it)");
        return None;
    }
    let mut cmd = Command::new("node");
    cmd.arg(dir.join("github-server.mjs")).env("GITHUB_TEST_TOKENS", tokens).stdout(Stdio::piped());
    if let Some(key) = public_key {
        cmd.env("GITHUB_APP_PUBLIC_KEY_FILE", key);
    }
    let mut child = cmd.spawn().expect("node");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
    let url = line.split_whitespace().nth(1).expect("listening URL").to_owned();
    Some(Server { child, url })
}

impl Server {
    async fn control(&self, what: &str, body: Value) -> Value {
        loopwright_forge::tls();
        let answer = reqwest::Client::new()
            .post(format!("{}/__test/{what}", self.url))
            .body(serde_json::to_vec(&body).expect("json"))
            .send()
            .await
            .expect("control");
        serde_json::from_slice(&answer.bytes().await.expect("body")).expect("json")
    }

    async fn state(&self) -> Value {
        self.control("state", json!({})).await
    }

    /// Fails the test with every request or answer that did not conform to GitHub's API.
    async fn assert_conforming(&self) {
        let state = self.state().await;
        assert_eq!(state["violations"], json!([]), "requests or answers outside GitHub's API description");
    }

    fn github(&self, token: &str) -> GitHub {
        let client = Client::new(&self.url, Auth::Token(token.into()), Arc::new(LocalGate::default())).expect("client");
        GitHub::new(client, "acme", "shop")
    }
}

const TOKENS: &str = "loopwright-bot:tok-lw:admin,carol:tok-carol:write,rita:tok-rita:read";

#[tokio::test]
async fn the_adapter_speaks_githubs_api_as_described() {
    let Some(s) = server(TOKENS, None) else { return };
    let gh = s.github("tok-lw");
    s.control("commit", json!({"branch": "main"})).await;
    let issue =
        s.control("issue", json!({"title": "Totals are off", "body": "Closes nothing. @carol", "user": "dana"})).await;
    let number = issue["number"].as_u64().expect("number");

    assert_eq!(gh.identity().await.expect("identity"), Actor { login: "loopwright-bot".into(), bot: false });
    assert_eq!(gh.permission("carol").await.expect("carol"), Permission::Write);
    assert_eq!(gh.permission("rita").await.expect("rita"), Permission::Read);
    assert_eq!(gh.permission("nobody-at-all").await.expect("stranger"), Permission::None);
    let text = gh.issue(number).await.expect("issue");
    assert_eq!(
        (text.title.as_str(), text.body.as_str(), text.author.as_str()),
        ("Totals are off", "Closes nothing. @carol", "dana")
    );

    // A comment is found again by its marker, and only loopwright's own.
    let marker = "<!-- loopwright:failure run=r1 -->";
    s.github("tok-carol").comment(number, &format!("quoting {marker}")).await.expect("carol's comment");
    assert_eq!(gh.find_comment(number, marker).await.expect("find"), None);
    let posted = gh.comment(number, &format!("first\n{marker}")).await.expect("comment");
    assert_eq!(gh.find_comment(number, marker).await.expect("find"), Some(posted.clone()));
    let edited = gh.edit_comment(posted.id, &format!("second\n{marker}")).await.expect("edit");
    assert_eq!(edited.id, posted.id);
    let state = s.state().await;
    let bodies: Vec<&str> =
        state["comments"].as_array().expect("comments").iter().map(|c| c["body"].as_str().expect("body")).collect();
    assert_eq!(bodies, [format!("quoting {marker}"), format!("second\n{marker}")]);

    // A pull request is found again by its head branch only when loopwright opened it from the
    // repository itself.
    let head =
        s.control("commit", json!({"branch": "loopwright/r1", "files": {"src/total.rs": "fn total() {}\n"}})).await;
    let head = head["sha"].as_str().expect("sha").to_owned();
    s.control("commit", json!({"branch": "carol/r2"})).await;
    s.control("pull", json!({"head": "loopwright/r1", "headRepo": "mallory/shop", "user": "loopwright-bot"})).await;
    s.control("pull", json!({"head": "carol/r2", "user": "carol"})).await;
    assert_eq!(
        gh.find_change_request("loopwright/r1").await.expect("find"),
        None,
        "a fork's branch of that name is not ours"
    );
    assert_eq!(gh.find_change_request("carol/r2").await.expect("find"), None, "carol's pull request is not ours");
    let new = NewChangeRequest {
        title: "Fix totals",
        body: "body",
        head_branch: "loopwright/r1",
        base_branch: "main",
        draft: true,
    };
    let opened = gh.open_change_request(&new).await.expect("open");
    assert_eq!(
        (opened.head_branch.as_str(), opened.head_sha.as_str(), opened.base_branch.as_str(), opened.draft, opened.open),
        ("loopwright/r1", head.as_str(), "main", true, true)
    );
    assert_eq!(gh.find_change_request("loopwright/r1").await.expect("find"), Some(opened.clone()));
    let again = gh.open_change_request(&new).await.expect_err("a second one");
    assert!(matches!(again, ForgeError::Refused { status: 422, .. }), "{again:?}");
    let body = gh.edit_change_request(opened.number, "the run's body").await.expect("edit");
    assert_eq!(body.body, "the run's body");
    gh.mark_ready(&opened).await.expect("ready");
    assert!(!gh.change_request(opened.number).await.expect("read").draft);

    // CI: an Actions job's log through its redirect, a status's description.
    s.control(
        "job",
        json!({"sha": head, "name": "test", "conclusion": "failure", "log": "2026-11-20T10:00:00.0000000Z boom\n"}),
    )
    .await;
    s.control(
        "status",
        json!({"sha": head, "state": "error", "context": "ci/legacy", "description": "legacy CI broke"}),
    )
    .await;
    s.control("status", json!({"sha": head, "state": "pending", "context": "loopwright", "creator": "loopwright-bot"}))
        .await;
    let checks = gh.checks(&head).await.expect("checks");
    assert_eq!(
        checks.iter().map(|c| (c.kind, c.name.as_str(), c.conclusion)).collect::<Vec<_>>(),
        [
            (CheckKind::CheckRun, "test", CheckConclusion::Failure),
            (CheckKind::Status, "ci/legacy", CheckConclusion::Failure)
        ],
        "loopwright's own report is not one of the checks"
    );
    assert_eq!(gh.check_output(&checks[0]).await.expect("log"), "2026-11-20T10:00:00.0000000Z boom\n");
    assert_eq!(gh.check_output(&checks[1]).await.expect("description"), "legacy CI broke");

    // Reviews, and a merge of exactly the head that was tested.
    s.control("review", json!({"pull": opened.number, "user": "carol", "state": "APPROVED", "commit": head})).await;
    let reviews = gh.reviews(opened.number).await.expect("reviews");
    assert_eq!(
        reviews.iter().map(|r| (r.actor.login.as_str(), r.verdict, r.commit.as_str())).collect::<Vec<_>>(),
        [("carol", ReviewVerdict::Approved, head.as_str())]
    );
    let stale = gh
        .merge(opened.number, "0123456789012345678901234567890123456789", MergeMethod::Squash)
        .await
        .expect_err("stale");
    assert!(matches!(stale, ForgeError::Refused { status: 409, .. }), "{stale:?}");
    gh.merge(opened.number, &head, MergeMethod::Squash).await.expect("merge");
    assert!(gh.change_request(opened.number).await.expect("read").merged);

    // A token reports as a commit status named loopwright.
    let report = Report {
        commit: &head,
        conclusion: Some(false),
        title: "test-failure in verify",
        summary: "s",
        details_url: Some("http://127.0.0.1:1/runs/r1"),
        annotations: &[],
    };
    gh.report(&report).await.expect("report");
    let state = s.state().await;
    let ours: Vec<(&str, &str, &str)> = state["statuses"]
        .as_array()
        .expect("statuses")
        .iter()
        .filter(|x| x["creator"] == "loopwright-bot" && x["description"].is_string())
        .map(|x| {
            (x["context"].as_str().expect("c"), x["state"].as_str().expect("s"), x["description"].as_str().expect("d"))
        })
        .collect();
    assert_eq!(ours, [("loopwright", "failure", "test-failure in verify")]);
    s.assert_conforming().await;
}

#[tokio::test]
async fn a_secondary_rate_limit_is_waited_out_and_a_long_one_is_said() {
    let Some(s) = server(TOKENS, None) else { return };
    s.control("rate-limit", json!({"count": 2, "retryAfter": 1})).await;
    let gh = s.github("tok-lw");
    assert_eq!(gh.identity().await.expect("identity after the waits").login, "loopwright-bot");
    let state = s.state().await;
    let seen: Vec<(u64, bool)> = state["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .map(|r| (r["status"].as_u64().expect("status"), r["limited"].as_bool().unwrap_or(false)))
        .collect();
    assert_eq!(seen, [(403, true), (403, true), (200, false)]);

    // A wait longer than the client may take in place is a typed error with its end.
    s.control("rate-limit", json!({"count": 1, "retryAfter": 3600, "status": 429})).await;
    let client = Client::new(&s.url, Auth::Token("tok-lw".into()), Arc::new(LocalGate::default()))
        .expect("client")
        .with_max_wait(Duration::from_secs(5));
    let gh = GitHub::new(client, "acme", "shop");
    let err = gh.issue(1).await.expect_err("limited");
    let ForgeError::RateLimited { until } = err else { panic!("{err:?}") };
    let ahead = until.duration_since(jiff::Timestamp::now());
    assert!(ahead > jiff::SignedDuration::from_mins(59), "{ahead:?}");
    s.assert_conforming().await;
}

#[tokio::test]
async fn a_poll_that_finds_nothing_new_is_answered_not_modified() {
    let Some(s) = server(TOKENS, None) else { return };
    let head = s.control("commit", json!({"branch": "main"})).await["sha"].as_str().expect("sha").to_owned();
    s.control("job", json!({"sha": head, "conclusion": "success"})).await;
    let gh = s.github("tok-lw");
    let first = gh.checks(&head).await.expect("checks");
    let again = gh.checks(&head).await.expect("checks again");
    assert_eq!(first, again);
    let counters = &gh.client().counters;
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!((counters.requests.load(Relaxed), counters.not_modified.load(Relaxed)), (4, 2));
    s.control("job", json!({"sha": head, "name": "lint", "conclusion": "failure"})).await;
    assert_eq!(gh.checks(&head).await.expect("checks").len(), 2, "a change is seen");
    s.assert_conforming().await;
}

#[tokio::test]
async fn a_github_app_signs_in_with_its_key_and_reports_a_check_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("app.pem");
    let public = dir.path().join("app.pub");
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).output().expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    // GitHub hands out PKCS#1 keys (`BEGIN RSA PRIVATE KEY`).
    openssl(&["genrsa", "-traditional", "-out", key.to_str().expect("utf-8"), "2048"]);
    openssl(&["rsa", "-in", key.to_str().expect("utf-8"), "-pubout", "-out", public.to_str().expect("utf-8")]);
    let Some(s) = server(TOKENS, Some(&public)) else { return };
    let config = loopwright_spec::Config::parse(&loopwright_spec::SourceFile::new(
        "config.toml",
        format!(
            "[github]\nrepo = \"acme/shop\"\napi_url = \"{}\"\napp_id = 4242\nprivate_key_file = \"app.pem\"\ninstallation_id = 99\n",
            s.url
        )
        .as_str(),
    ))
    .expect("config")
    .github
    .expect("github");
    let gh = GitHub::from_config(&config, dir.path(), Arc::new(LocalGate::default())).expect("adapter");
    assert_eq!(gh.identity().await.expect("identity"), Actor { login: "loopwright-test[bot]".into(), bot: true });
    let head = s.control("commit", json!({"branch": "main"})).await["sha"].as_str().expect("sha").to_owned();
    let annotations = [Annotation {
        path: "src/total.rs".into(),
        line: 14,
        title: "test-failure".into(),
        message: "assertion failed".into(),
    }];
    let running = Report {
        commit: &head,
        conclusion: None,
        title: "running",
        summary: "verify is running",
        details_url: None,
        annotations: &[],
    };
    if let Err(e) = gh.report(&running).await {
        panic!("in progress: {e}: {}", s.state().await["violations"]);
    }
    let done = Report {
        commit: &head,
        conclusion: Some(false),
        title: "test-failure in verify",
        summary: "why",
        details_url: None,
        annotations: &annotations,
    };
    gh.report(&done).await.expect("done");
    let state = s.state().await;
    let runs = state["checkRuns"].as_array().expect("check runs");
    assert_eq!(runs.len(), 1, "one check run, updated in place: {runs:?}");
    assert_eq!(
        (
            &runs[0]["name"],
            &runs[0]["status"],
            &runs[0]["conclusion"],
            &runs[0]["output"]["annotations"][0]["start_line"],
            &runs[0]["output"]["annotations"][0]["annotation_level"]
        ),
        (&json!("loopwright"), &json!("completed"), &json!("failure"), &json!(14), &json!("failure"))
    );
    // One installation token served every request after it.
    let auth: Vec<&str> =
        state["requests"].as_array().expect("requests").iter().map(|r| r["auth"].as_str().expect("auth")).collect();
    assert_eq!(auth.iter().filter(|a| **a == "jwt").count(), 2, "GET /app and one token: {auth:?}");
    assert!(auth.iter().skip(2).all(|a| *a == "installation"), "{auth:?}");
    s.assert_conforming().await;

    // A key that is not the App's is refused by GitHub.
    openssl(&["genrsa", "-traditional", "-out", key.to_str().expect("utf-8"), "2048"]);
    let other = GitHub::from_config(&config, dir.path(), Arc::new(LocalGate::default())).expect("adapter");
    let err = other.issue(1).await.expect_err("refused");
    assert!(matches!(err, ForgeError::Unauthorized(_)), "{err:?}");
}
