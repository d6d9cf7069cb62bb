//! The forge port: what loopwright asks of and hears from a code host, in its own words.
//!
//! GitHub's pull request, GitLab's merge request and Forgejo's pull request are each a
//! [`ChangeRequest`]; check runs, commit statuses and pipeline jobs are each a [`CheckResult`];
//! reviews and approvals a [`ReviewVerdict`]. An adapter maps its host's API and webhooks onto
//! these and nothing else crosses: the engine and the store never see a host's payload.

pub use loopwright_spec::github::{MergeMethod, Permission};

/// A person or bot on the forge.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Actor {
    /// Their login (`octocat`, `dependabot[bot]`).
    pub login: String,
    /// Whether the forge says it is a bot.
    pub bot: bool,
}

/// An issue's text as a trigger carried it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IssueText {
    /// Its number in the repository.
    pub number: u64,
    /// Its title.
    pub title: String,
    /// Its body (Markdown, as written).
    pub body: String,
    /// When it last changed.
    pub updated_at: jiff::Timestamp,
    /// Who opened it.
    pub author: String,
}

/// What happened on the forge, as a delivery or a poll tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Happening {
    /// An issue was given a label.
    IssueLabeled {
        /// `OWNER/NAME`.
        repo: String,
        /// The issue as the delivery carried it.
        issue: IssueText,
        /// The label given.
        label: String,
        /// Who gave it.
        actor: Actor,
    },
    /// A comment on an issue or a pull request was created or edited.
    Comment {
        /// `OWNER/NAME`.
        repo: String,
        /// Whether the issue is a pull request.
        on_pull_request: bool,
        /// The issue (or pull request) as the delivery carried it.
        issue: IssueText,
        /// The comment's id.
        comment_id: u64,
        /// Its text.
        body: String,
        /// When it was created.
        created_at: jiff::Timestamp,
        /// Whether this is an edit of it (commands never act on an edit).
        edited: bool,
        /// Who wrote it.
        actor: Actor,
    },
    /// A review was submitted on a pull request.
    Review {
        /// `OWNER/NAME`.
        repo: String,
        /// The pull request's number.
        pull_request: u64,
        /// Its head branch.
        head_branch: String,
        /// The review's id.
        review_id: u64,
        /// What it says.
        verdict: ReviewVerdict,
        /// Its text.
        body: String,
        /// The head commit it reviewed.
        commit: String,
        /// Who reviewed.
        actor: Actor,
    },
    /// A comment on a line of a pull request's diff.
    ReviewComment {
        /// `OWNER/NAME`.
        repo: String,
        /// The pull request's number.
        pull_request: u64,
        /// Its head branch.
        head_branch: String,
        /// The comment's id.
        comment_id: u64,
        /// Its text.
        body: String,
        /// The file it is on.
        path: String,
        /// The line, when it is on one.
        line: Option<u64>,
        /// Who wrote it.
        actor: Actor,
    },
    /// A check run or commit status finished.
    CheckDone {
        /// `OWNER/NAME`.
        repo: String,
        /// Its result.
        check: CheckResult,
    },
    /// The forge checking the webhook works.
    Ping,
    /// Anything else: nothing loopwright acts on.
    Other {
        /// The event's name.
        event: String,
        /// Its action, when it has one.
        action: Option<String>,
    },
}

impl Happening {
    /// The repository it is about (none for a ping or an event loopwright does not read).
    pub fn repo(&self) -> Option<&str> {
        match self {
            Happening::IssueLabeled { repo, .. }
            | Happening::Comment { repo, .. }
            | Happening::Review { repo, .. }
            | Happening::ReviewComment { repo, .. }
            | Happening::CheckDone { repo, .. } => Some(repo),
            Happening::Ping | Happening::Other { .. } => None,
        }
    }
}

/// What a review says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewVerdict {
    /// Approved.
    Approved,
    /// Changes requested.
    ChangesRequested,
    /// A comment only.
    Commented,
    /// Dismissed, pending or anything else.
    Other,
}

impl ReviewVerdict {
    /// From GitHub's `state` (`approved`, `APPROVED`, `changes_requested`, …).
    pub fn parse(state: &str) -> Self {
        match state.to_ascii_lowercase().as_str() {
            "approved" => ReviewVerdict::Approved,
            "changes_requested" => ReviewVerdict::ChangesRequested,
            "commented" => ReviewVerdict::Commented,
            _ => ReviewVerdict::Other,
        }
    }
}

/// Which kind of CI result a check is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// A check run (GitHub Actions jobs are check runs too).
    CheckRun,
    /// A commit status.
    Status,
}

/// How a check ended, or that it has not yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckConclusion {
    /// Still queued or running.
    Pending,
    /// Passed.
    Success,
    /// Failed (`failure`, `timed_out`, `action_required`, a status `error`).
    Failure,
    /// Ended without a verdict (`neutral`, `skipped`, `cancelled`, `stale`).
    Neutral,
}

impl CheckConclusion {
    /// From a check run's `conclusion` (none while it runs).
    pub fn parse(conclusion: Option<&str>) -> Self {
        match conclusion {
            None => CheckConclusion::Pending,
            Some("success") => CheckConclusion::Success,
            Some("failure" | "timed_out" | "action_required" | "startup_failure") => CheckConclusion::Failure,
            Some(_) => CheckConclusion::Neutral,
        }
    }

    /// From a commit status's `state`.
    pub fn from_status(state: &str) -> Self {
        match state {
            "success" => CheckConclusion::Success,
            "failure" | "error" => CheckConclusion::Failure,
            _ => CheckConclusion::Pending,
        }
    }
}

/// One CI result on a commit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckResult {
    /// Check run or status.
    pub kind: CheckKind,
    /// Its id on the forge.
    pub id: u64,
    /// Its name (a check run's name, a status's context).
    pub name: String,
    /// The commit it ran on.
    pub commit: String,
    /// How it ended.
    pub conclusion: CheckConclusion,
    /// Where a person reads it.
    pub url: Option<String>,
}

/// A pull request (GitHub, Forgejo) or merge request (GitLab).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChangeRequest {
    /// Its number.
    pub number: u64,
    /// Where a person opens it.
    pub url: String,
    /// Its head branch.
    pub head_branch: String,
    /// Its head commit.
    pub head_sha: String,
    /// The repository its head branch is in (`OWNER/NAME`; another one for a fork).
    pub head_repo: Option<String>,
    /// The branch it merges into.
    pub base_branch: String,
    /// Who opened it.
    pub author: Actor,
    /// Whether it is a draft.
    pub draft: bool,
    /// Whether it is open.
    pub open: bool,
    /// Whether it was merged.
    pub merged: bool,
    /// Whether the forge's auto-merge is enabled for it (it merges itself once allowed).
    #[serde(default)]
    pub auto_merge: bool,
    /// Its body.
    pub body: String,
}

/// A comment as loopwright finds it again.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommentRef {
    /// Its id.
    pub id: u64,
    /// Where a person reads it.
    pub url: String,
}

/// A pull request to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewChangeRequest<'a> {
    /// Its title.
    pub title: &'a str,
    /// Its body.
    pub body: &'a str,
    /// The branch pushed.
    pub head_branch: &'a str,
    /// The branch it merges into.
    pub base_branch: &'a str,
    /// Opened as a draft.
    pub draft: bool,
}

/// What a protected branch requires before a change request merges into it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Protection {
    /// The checks (check runs' names, statuses' contexts) that must pass.
    pub required_checks: Vec<String>,
    /// An approving review is required.
    pub requires_review: bool,
}

/// A submitted review.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Review {
    /// Its id.
    pub id: u64,
    /// Who reviewed.
    pub actor: Actor,
    /// What it says.
    pub verdict: ReviewVerdict,
    /// The commit it reviewed.
    pub commit: String,
    /// Its text.
    pub body: String,
}

/// loopwright's own report on a commit: a check run (App) or a commit status (token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report<'a> {
    /// The commit.
    pub commit: &'a str,
    /// `success`, `failure` or pending (none).
    pub conclusion: Option<bool>,
    /// One line.
    pub title: &'a str,
    /// Markdown.
    pub summary: &'a str,
    /// Where the run is read on the dashboard.
    pub details_url: Option<&'a str>,
    /// The failures loopwright classified, at their lines.
    pub annotations: &'a [Annotation],
}

/// A failure at a file's line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Annotation {
    /// The file, relative to the repository.
    pub path: String,
    /// The line.
    pub line: u64,
    /// The classified headline.
    pub title: String,
    /// The key lines.
    pub message: String,
}

/// What went wrong talking to the forge.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ForgeError {
    /// The credentials were refused (401).
    #[error("GitHub refused loopwright's credentials: {0}")]
    Unauthorized(String),
    /// Not allowed, or not found to this identity (403, 404).
    #[error("GitHub: {what} not found or not allowed ({status}): {message}")]
    Denied {
        /// What was asked for.
        what: String,
        /// The HTTP status.
        status: u16,
        /// What GitHub said.
        message: String,
    },
    /// The request was refused as it stands (409, 422).
    #[error("GitHub refused {what} ({status}): {message}")]
    Refused {
        /// What was asked for.
        what: String,
        /// The HTTP status.
        status: u16,
        /// What GitHub said.
        message: String,
    },
    /// The rate limit asks for a longer wait than loopwright may take now.
    #[error("GitHub's rate limit asks to wait until {until}")]
    RateLimited {
        /// When requests may be sent again.
        until: jiff::Timestamp,
    },
    /// The forge could not be reached, or answered with a server error.
    #[error("GitHub could not be reached: {0}")]
    Unreachable(String),
    /// An answer that is not what the API describes.
    #[error("GitHub's answer to {what} could not be read: {message}")]
    Answer {
        /// What was asked for.
        what: String,
        /// What was wrong with it.
        message: String,
    },
    /// Configuration or credentials that cannot be used (a missing variable, a bad key).
    #[error("{0}")]
    Setup(String),
}

impl ForgeError {
    /// Whether trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, ForgeError::RateLimited { .. } | ForgeError::Unreachable(_))
    }
}

/// What loopwright asks of a forge. One adapter per host; a test server stands in for
/// GitHub in the tests (held to GitHub's published API description).
#[allow(async_fn_in_trait)]
pub trait Forge {
    /// Who loopwright is on the forge (its own comments and pull requests are told by it).
    async fn identity(&self) -> Result<Actor, ForgeError>;
    /// A person's permission on the repository (none for a stranger).
    async fn permission(&self, login: &str) -> Result<Permission, ForgeError>;
    /// An issue's current text.
    async fn issue(&self, number: u64) -> Result<IssueText, ForgeError>;
    /// Posts a comment on an issue or pull request.
    async fn comment(&self, issue: u64, body: &str) -> Result<CommentRef, ForgeError>;
    /// Replaces a comment's text.
    async fn edit_comment(&self, id: u64, body: &str) -> Result<CommentRef, ForgeError>;
    /// loopwright's own comment on the issue whose body holds `marker`, if there is one.
    async fn find_comment(&self, issue: u64, marker: &str) -> Result<Option<CommentRef>, ForgeError>;
    /// The open pull request whose head is `branch` of the repository itself (not a fork).
    async fn find_change_request(&self, branch: &str) -> Result<Option<ChangeRequest>, ForgeError>;
    /// A pull request by number.
    async fn change_request(&self, number: u64) -> Result<ChangeRequest, ForgeError>;
    /// Opens a pull request.
    async fn open_change_request(&self, new: &NewChangeRequest<'_>) -> Result<ChangeRequest, ForgeError>;
    /// Replaces a pull request's body.
    async fn edit_change_request(&self, number: u64, body: &str) -> Result<ChangeRequest, ForgeError>;
    /// Marks a draft ready for review.
    async fn mark_ready(&self, change: &ChangeRequest) -> Result<(), ForgeError>;
    /// Every CI result on a commit (check runs and statuses), loopwright's own report left out.
    async fn checks(&self, commit: &str) -> Result<Vec<CheckResult>, ForgeError>;
    /// What a failed check printed: the failed job's log for GitHub Actions, else the check
    /// run's output or the status's description.
    async fn check_output(&self, check: &CheckResult) -> Result<String, ForgeError>;
    /// The reviews submitted on a pull request, oldest first.
    async fn reviews(&self, number: u64) -> Result<Vec<Review>, ForgeError>;
    /// Merges the pull request at exactly `sha`.
    async fn merge(&self, number: u64, sha: &str, method: MergeMethod) -> Result<(), ForgeError>;
    /// What `branch`'s protection requires; none when it is not protected (or its protection
    /// cannot be read by this identity: then every check counts, and the forge's own merge
    /// still enforces what it requires).
    async fn protection(&self, branch: &str) -> Result<Option<Protection>, ForgeError>;
    /// Has the forge merge `change` itself, at head `sha` only, once what protects its base is
    /// satisfied (GitHub's auto-merge).
    async fn enable_auto_merge(&self, change: &ChangeRequest, sha: &str, method: MergeMethod)
    -> Result<(), ForgeError>;
    /// Reports loopwright's run on a commit.
    async fn report(&self, report: &Report<'_>) -> Result<(), ForgeError>;
    /// What happened lately that may be a trigger, as a webhook would have said it: comments
    /// created since `since` (an edited one as edited) and issues labelled since then. Asked
    /// conditionally: a poll that finds nothing new costs no rate limit.
    async fn recent(&self, since: jiff::Timestamp) -> Result<Vec<Happening>, ForgeError>;
    /// The repository's URL for git over HTTPS.
    async fn clone_url(&self) -> Result<String, ForgeError>;
    /// The `Authorization` header git sends with a push (given to git in its environment, never
    /// on its command line).
    async fn git_authorization(&self) -> Result<String, ForgeError>;
}
