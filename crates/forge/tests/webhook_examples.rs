//! Every webhook payload GitHub documents (`@octokit/webhooks-examples`, installed by
//! `scripts/forge-test.sh`) is read: the events loopwright acts on into their typed happening
//! with the payload's own ids, every other event and action into `Other`, none an error.

use std::path::Path;

use loopwright_forge::github::webhook::parse;
use loopwright_forge::port::{CheckKind, Happening};
use serde_json::Value;

fn examples() -> Option<Vec<Value>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/forge/node_modules/@octokit/webhooks-examples/api.github.com/index.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        assert!(
            std::env::var("LOOPWRIGHT_REQUIRE_FORGE").is_err(),
            "LOOPWRIGHT_REQUIRE_FORGE is set but {} is missing: run scripts/forge-test.sh",
            path.display()
        );
        eprintln!("skipped: tests/forge/node_modules is missing (scripts/forge-test.sh installs it)");
        return None;
    };
    Some(serde_json::from_str(&text).expect("examples"))
}

#[test]
fn every_documented_payload_is_read_into_what_loopwright_acts_on() {
    let Some(events) = examples() else { return };
    let mut acted = std::collections::BTreeMap::<String, usize>::new();
    let mut read = 0;
    for event in &events {
        let name = event["name"].as_str().expect("name");
        for example in event["examples"].as_array().expect("examples") {
            let body = serde_json::to_vec(example).expect("json");
            let action = example["action"].as_str().unwrap_or("");
            let got = parse(name, &body).unwrap_or_else(|e| panic!("{name}.{action}: {e}"));
            read += 1;
            let repo = example["repository"]["full_name"].as_str().map(str::to_owned);
            let expected_kind = match (name, action) {
                ("issues", "labeled") => "labeled",
                ("issue_comment", "created" | "edited") => "comment",
                ("pull_request_review", "submitted") => "review",
                ("pull_request_review_comment", "created") => "review_comment",
                ("check_run", "completed") | ("status", _) => "check",
                ("ping", _) => "ping",
                _ => "other",
            };
            match (&got, expected_kind) {
                (Happening::IssueLabeled { repo: r, issue, label, actor }, "labeled") => {
                    assert_eq!(Some(r.clone()), repo);
                    assert_eq!(issue.number, example["issue"]["number"].as_u64().expect("number"));
                    assert_eq!(label, example["label"]["name"].as_str().expect("label"));
                    assert_eq!(actor.login, example["sender"]["login"].as_str().expect("sender"));
                }
                (Happening::Comment { comment_id, edited, on_pull_request, actor, body, .. }, "comment") => {
                    assert_eq!(*comment_id, example["comment"]["id"].as_u64().expect("id"));
                    assert_eq!(*edited, action == "edited");
                    assert_eq!(*on_pull_request, example["issue"].get("pull_request").is_some());
                    assert_eq!(actor.login, example["comment"]["user"]["login"].as_str().expect("user"));
                    assert_eq!(actor.bot, example["comment"]["user"]["type"] == "Bot");
                    assert_eq!(Some(body.as_str()), example["comment"]["body"].as_str());
                }
                (Happening::Review { review_id, commit, pull_request, .. }, "review") => {
                    assert_eq!(*review_id, example["review"]["id"].as_u64().expect("id"));
                    assert_eq!(commit, example["review"]["commit_id"].as_str().expect("commit"));
                    assert_eq!(*pull_request, example["pull_request"]["number"].as_u64().expect("number"));
                }
                (Happening::ReviewComment { comment_id, path, .. }, "review_comment") => {
                    assert_eq!(*comment_id, example["comment"]["id"].as_u64().expect("id"));
                    assert_eq!(path, example["comment"]["path"].as_str().expect("path"));
                }
                (Happening::CheckDone { check, .. }, "check") => {
                    if name == "status" {
                        assert_eq!(
                            (check.kind, check.commit.as_str()),
                            (CheckKind::Status, example["sha"].as_str().expect("sha"))
                        );
                    } else {
                        assert_eq!(check.id, example["check_run"]["id"].as_u64().expect("id"));
                    }
                }
                (Happening::Ping, "ping") | (Happening::Other { .. }, "other") => {}
                _ => panic!("{name}.{action} was read as {got:?}, expected {expected_kind}"),
            }
            *acted.entry(expected_kind.to_owned()).or_default() += 1;
        }
    }
    assert!(read > 300, "only {read} examples");
    for kind in ["labeled", "comment", "review", "review_comment", "check", "ping"] {
        assert!(acted.get(kind).copied().unwrap_or(0) >= 1, "no example of {kind}: {acted:?}");
    }
}
