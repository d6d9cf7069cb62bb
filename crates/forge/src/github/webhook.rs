//! GitHub's webhook deliveries: the signature checked (HMAC SHA-256 of the raw body with the
//! webhook's secret, `X-Hub-Signature-256: sha256=HEX`) before anything is read, then the
//! payload parsed into the forge's typed [`Happening`]s. Only what loopwright acts on is
//! read; every other event or action is [`Happening::Other`].

use serde::Deserialize;

use super::{Issue, User};
use crate::port::{CheckConclusion, CheckKind, CheckResult, Happening, ReviewVerdict};

/// Whether `signature` (the `X-Hub-Signature-256` header) signs `body` with `secret`, compared
/// in constant time. A missing, malformed or wrong signature is false.
pub fn verify(secret: &[u8], body: &[u8], signature: Option<&str>) -> bool {
    let Some(hex) = signature.and_then(|s| s.strip_prefix("sha256=")) else {
        return false;
    };
    let Some(tag) = decode_hex(hex) else {
        return false;
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    ring::hmac::verify(&key, body, &tag).is_ok()
}

/// The signature GitHub sends for `body` (what a test signs its deliveries with).
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let tag = ring::hmac::sign(&key, body);
    let mut out = String::from("sha256=");
    for b in tag.as_ref() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok()).collect()
}

/// Why a delivery could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeliveryError {
    /// Its body is not the JSON its event has.
    #[error("the `{event}` delivery's body is not what GitHub sends: {message}")]
    Body {
        /// The `X-GitHub-Event` header.
        event: String,
        /// What serde said.
        message: String,
    },
}

/// Reads a verified delivery of `event` (the `X-GitHub-Event` header).
pub fn parse(event: &str, body: &[u8]) -> Result<Happening, DeliveryError> {
    let bad = |e: serde_json::Error| DeliveryError::Body { event: event.to_owned(), message: e.to_string() };
    Ok(match event {
        "issues" => {
            let p: IssuesPayload = serde_json::from_slice(body).map_err(bad)?;
            match (p.action.as_str(), p.label) {
                ("labeled", Some(label)) => Happening::IssueLabeled {
                    repo: p.repository.full_name,
                    issue: p.issue.current(),
                    label: label.name,
                    actor: p.sender.actor(),
                },
                _ => Happening::Other { event: event.to_owned(), action: Some(p.action) },
            }
        }
        "issue_comment" => {
            let p: IssueCommentPayload = serde_json::from_slice(body).map_err(bad)?;
            let edited = match p.action.as_str() {
                "created" => false,
                "edited" => true,
                _ => return Ok(Happening::Other { event: event.to_owned(), action: Some(p.action) }),
            };
            Happening::Comment {
                repo: p.repository.full_name,
                on_pull_request: p.issue.pull_request.is_some(),
                issue: p.issue.current(),
                comment_id: p.comment.id,
                body: p.comment.body.unwrap_or_default(),
                created_at: p.comment.created_at,
                edited,
                actor: p.comment.user.actor(),
            }
        }
        "pull_request_review" => {
            let p: ReviewPayload = serde_json::from_slice(body).map_err(bad)?;
            if p.action != "submitted" {
                return Ok(Happening::Other { event: event.to_owned(), action: Some(p.action) });
            }
            Happening::Review {
                repo: p.repository.full_name,
                pull_request: p.pull_request.number,
                head_branch: p.pull_request.head.branch,
                review_id: p.review.id,
                verdict: ReviewVerdict::parse(&p.review.state),
                body: p.review.body.unwrap_or_default(),
                commit: p.review.commit_id,
                actor: p.review.user.actor(),
            }
        }
        "pull_request_review_comment" => {
            let p: ReviewCommentPayload = serde_json::from_slice(body).map_err(bad)?;
            if p.action != "created" {
                return Ok(Happening::Other { event: event.to_owned(), action: Some(p.action) });
            }
            Happening::ReviewComment {
                repo: p.repository.full_name,
                pull_request: p.pull_request.number,
                head_branch: p.pull_request.head.branch,
                comment_id: p.comment.id,
                body: p.comment.body,
                path: p.comment.path,
                line: p.comment.line,
                actor: p.comment.user.actor(),
            }
        }
        "check_run" => {
            let p: CheckRunPayload = serde_json::from_slice(body).map_err(bad)?;
            if p.action != "completed" {
                return Ok(Happening::Other { event: event.to_owned(), action: Some(p.action) });
            }
            Happening::CheckDone {
                repo: p.repository.full_name,
                check: CheckResult {
                    kind: CheckKind::CheckRun,
                    id: p.check_run.id,
                    name: p.check_run.name,
                    commit: p.check_run.head_sha,
                    conclusion: CheckConclusion::parse(p.check_run.conclusion.as_deref()),
                    url: p.check_run.details_url,
                },
            }
        }
        "status" => {
            let p: StatusPayload = serde_json::from_slice(body).map_err(bad)?;
            Happening::CheckDone {
                repo: p.repository.full_name,
                check: CheckResult {
                    kind: CheckKind::Status,
                    id: p.id,
                    name: p.context,
                    commit: p.sha,
                    conclusion: CheckConclusion::from_status(&p.state),
                    url: p.target_url,
                },
            }
        }
        "ping" => Happening::Ping,
        other => Happening::Other { event: other.to_owned(), action: None },
    })
}

#[derive(Deserialize)]
struct Repository {
    full_name: String,
}

#[derive(Deserialize)]
struct Label {
    name: String,
}

#[derive(Deserialize)]
struct IssuesPayload {
    action: String,
    issue: Issue,
    #[serde(default)]
    label: Option<Label>,
    sender: User,
    repository: Repository,
}

#[derive(Deserialize)]
struct Comment {
    id: u64,
    #[serde(default)]
    body: Option<String>,
    user: User,
    created_at: jiff::Timestamp,
}

#[derive(Deserialize)]
struct IssueCommentPayload {
    action: String,
    issue: Issue,
    comment: Comment,
    repository: Repository,
}

#[derive(Deserialize)]
struct Head {
    #[serde(rename = "ref")]
    branch: String,
}

#[derive(Deserialize)]
struct PullRequest {
    number: u64,
    head: Head,
}

#[derive(Deserialize)]
struct Review {
    id: u64,
    user: User,
    #[serde(default)]
    body: Option<String>,
    state: String,
    commit_id: String,
}

#[derive(Deserialize)]
struct ReviewPayload {
    action: String,
    review: Review,
    pull_request: PullRequest,
    repository: Repository,
}

#[derive(Deserialize)]
struct ReviewComment {
    id: u64,
    body: String,
    user: User,
    path: String,
    #[serde(default)]
    line: Option<u64>,
}

#[derive(Deserialize)]
struct ReviewCommentPayload {
    action: String,
    comment: ReviewComment,
    pull_request: PullRequest,
    repository: Repository,
}

#[derive(Deserialize)]
struct CheckRun {
    id: u64,
    name: String,
    head_sha: String,
    #[serde(default)]
    conclusion: Option<String>,
    #[serde(default)]
    details_url: Option<String>,
}

#[derive(Deserialize)]
struct CheckRunPayload {
    action: String,
    check_run: CheckRun,
    repository: Repository,
}

#[derive(Deserialize)]
struct StatusPayload {
    id: u64,
    sha: String,
    context: String,
    state: String,
    #[serde(default)]
    target_url: Option<String>,
    repository: Repository,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_is_checked_against_the_raw_body() {
        // GitHub's documented example (docs.github.com, "Validating webhook deliveries").
        let secret = b"It's a Secret to Everybody";
        let body = b"Hello, World!";
        let expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert_eq!(sign(secret, body), expected);
        assert!(verify(secret, body, Some(expected)));
        assert!(!verify(secret, b"Hello, World?", Some(expected)));
        assert!(!verify(b"another secret", body, Some(expected)));
        assert!(!verify(secret, body, None));
        assert!(!verify(secret, body, Some("sha1=757107ea0eb2509fc211221cce984b8a37570b6d")));
        assert!(!verify(secret, body, Some(&expected.replace("757", "75g"))));
        assert!(!verify(secret, body, Some(&expected[..expected.len() - 2])));
    }
}
