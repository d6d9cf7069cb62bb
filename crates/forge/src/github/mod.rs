//! The GitHub adapter: the [`Forge`] port over GitHub's REST API (and, for the one thing REST
//! cannot do — marking a draft ready — its GraphQL API), webhook deliveries read into
//! [`Happening`](crate::port::Happening)s, and the App's sign-in.
//!
//! The wire types are written here for the fields loopwright reads, not generated: GitHub's
//! description has over a thousand operations and loopwright uses about twenty; the test
//! suite holds each request and answer to GitHub's published OpenAPI description instead.

pub mod app;
pub mod client;
pub mod webhook;

use std::sync::Arc;

use reqwest::Method;
use serde::{Deserialize, Serialize};

use self::client::{Auth, Client, RateGate};
use crate::port::{
    Actor, ChangeRequest, CheckConclusion, CheckKind, CheckResult, CommentRef, Forge, ForgeError, Happening, IssueText,
    MergeMethod, NewChangeRequest, Permission, Protection, Report, Review, ReviewVerdict,
};
use loopwright_spec::github::{AuthConfig, GithubConfig};

/// The name of loopwright's own check run and commit status.
pub const REPORT_NAME: &str = "loopwright";

/// GitHub, for one repository.
pub struct GitHub {
    client: Client,
    owner: String,
    name: String,
    me: tokio::sync::OnceCell<Actor>,
}

impl GitHub {
    /// The adapter for `[github]`, its credentials read from the environment or the key file
    /// (`base` is where a relative `private_key_file` is read from).
    pub fn from_config(
        config: &GithubConfig,
        base: &std::path::Path,
        gate: Arc<dyn RateGate>,
    ) -> Result<GitHub, ForgeError> {
        let (owner, name) = config
            .owner_and_name()
            .ok_or_else(|| ForgeError::Setup(format!("[github] repo `{}`: expected OWNER/NAME", config.repo)))?;
        let auth = match config.auth() {
            Some(AuthConfig::Token { env }) => {
                let token = std::env::var(env).ok().filter(|t| !t.trim().is_empty()).ok_or_else(|| {
                    ForgeError::Setup(format!("[github] token_env: the environment variable {env} is not set"))
                })?;
                Auth::Token(token.trim().to_owned())
            }
            Some(AuthConfig::App { app_id, key_file, installation_id }) => {
                let path = base.join(key_file);
                let pem = std::fs::read_to_string(&path).map_err(|e| {
                    ForgeError::Setup(format!("[github] private_key_file: {} could not be read: {e}", path.display()))
                })?;
                let key = app::AppKey::from_pem(app_id, &pem)?;
                Auth::App { key: Box::new(key), installation_id, token: std::sync::Mutex::new(None) }
            }
            None => return Err(ForgeError::Setup("[github]: no sign-in (token_env, or an App) is set".into())),
        };
        Ok(GitHub::new(Client::new(&config.api_url, auth, gate)?, owner, name))
    }

    /// The adapter over a client, for `OWNER/NAME`.
    pub fn new(client: Client, owner: &str, name: &str) -> GitHub {
        GitHub { client, owner: owner.to_owned(), name: name.to_owned(), me: tokio::sync::OnceCell::new() }
    }

    /// The client (its counters, for the polling benchmark).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// `OWNER/NAME`.
    pub fn repo(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    fn path(&self, rest: &str) -> String {
        format!("/repos/{}/{}{rest}", self.owner, self.name)
    }

    /// Every page of a list, following `Link: <…>; rel="next"`.
    /// Pull request `number` as GitHub's REST API answers it.
    async fn pull(&self, number: u64, what: &str) -> Result<Pull, ForgeError> {
        self.client.json(Method::GET, &self.path(&format!("/pulls/{number}")), None::<&()>, what).await
    }

    /// Runs a GraphQL mutation: errors GitHub answers with (under `200`) are refusals.
    async fn graphql(&self, query: &'static str, variables: impl Serialize, what: &str) -> Result<(), ForgeError> {
        #[derive(Serialize)]
        struct Query<V> {
            query: &'static str,
            variables: V,
        }
        let graphql = graphql_url(self.client.api());
        let answer: GraphqlAnswer =
            self.client.json(Method::POST, &graphql, Some(&Query { query, variables }), what).await?;
        match answer.errors.first() {
            Some(e) => Err(ForgeError::Refused { what: what.to_owned(), status: 200, message: e.message.clone() }),
            None => Ok(()),
        }
    }

    async fn all_pages<T: serde::de::DeserializeOwned>(&self, first: String, what: &str) -> Result<Vec<T>, ForgeError> {
        let mut items = Vec::new();
        let mut next = Some(first);
        let mut pages = 0;
        while let Some(url) = next.take() {
            let answer = self.client.send(Method::GET, &url, None::<&()>, what, false).await?;
            let page: Vec<T> = serde_json::from_slice(&answer.body)
                .map_err(|e| ForgeError::Answer { what: what.to_owned(), message: e.to_string() })?;
            items.extend(page);
            pages += 1;
            next = answer.link.as_deref().and_then(next_link).filter(|_| pages < 50);
        }
        Ok(items)
    }
}

/// The `rel="next"` URL of a `Link` header.
fn next_link(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (url, rel) = part.split_once(';')?;
        rel.contains("rel=\"next\"").then(|| url.trim().trim_start_matches('<').trim_end_matches('>').to_owned())
    })
}

/// A person or bot as GitHub's answers and payloads name one.
#[derive(Deserialize)]
pub(crate) struct User {
    login: String,
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

impl User {
    pub(crate) fn actor(self) -> Actor {
        let bot = self.kind.as_deref() == Some("Bot") || self.login.ends_with("[bot]");
        Actor { login: self.login, bot }
    }
}

/// An issue (or pull request) as GitHub's answers and payloads carry it.
#[derive(Deserialize)]
pub(crate) struct Issue {
    number: u64,
    title: String,
    #[serde(default)]
    body: Option<String>,
    updated_at: jiff::Timestamp,
    user: Option<User>,
    #[serde(default)]
    pull_request: Option<serde_json::Value>,
}

impl Issue {
    /// Its text as it is now.
    pub(crate) fn current(self) -> IssueText {
        let updated_at = self.updated_at;
        self.text(updated_at)
    }

    /// Its text, as of `updated_at`.
    pub(crate) fn text(self, updated_at: jiff::Timestamp) -> IssueText {
        IssueText {
            number: self.number,
            title: self.title,
            body: self.body.unwrap_or_default(),
            updated_at,
            author: self.user.map_or_else(|| "ghost".into(), |u| u.login),
        }
    }
}

#[derive(Deserialize)]
struct ListedComment {
    id: u64,
    #[serde(default)]
    body: Option<String>,
    user: Option<User>,
    created_at: jiff::Timestamp,
    updated_at: jiff::Timestamp,
    issue_url: String,
}

#[derive(Deserialize)]
struct IssueEvent {
    event: String,
    actor: Option<User>,
    created_at: jiff::Timestamp,
    #[serde(default)]
    label: Option<EventLabel>,
    #[serde(default)]
    issue: Option<Issue>,
}

#[derive(Deserialize)]
struct EventLabel {
    name: String,
}

#[derive(Deserialize)]
struct Comment {
    id: u64,
    html_url: String,
    #[serde(default)]
    body: Option<String>,
    user: Option<User>,
}

#[derive(Deserialize)]
struct Repo {
    full_name: String,
}

#[derive(Deserialize)]
struct Branch {
    #[serde(rename = "ref")]
    branch: String,
    sha: String,
    repo: Option<Repo>,
}

#[derive(Deserialize)]
struct Pull {
    number: u64,
    node_id: String,
    html_url: String,
    state: String,
    #[serde(default)]
    draft: Option<bool>,
    #[serde(default)]
    merged_at: Option<String>,
    #[serde(default)]
    body: Option<String>,
    user: Option<User>,
    head: Branch,
    base: Branch,
    /// Set while GitHub's auto-merge is enabled.
    #[serde(default)]
    auto_merge: Option<serde_json::Value>,
}

impl Pull {
    fn change(self) -> ChangeRequest {
        ChangeRequest {
            number: self.number,
            url: self.html_url,
            head_branch: self.head.branch,
            head_sha: self.head.sha,
            head_repo: self.head.repo.map(|r| r.full_name),
            base_branch: self.base.branch,
            author: self.user.map_or(Actor { login: "ghost".into(), bot: false }, User::actor),
            draft: self.draft.unwrap_or(false),
            open: self.state == "open",
            merged: self.merged_at.is_some(),
            auto_merge: self.auto_merge.is_some_and(|a| !a.is_null()),
            body: self.body.unwrap_or_default(),
        }
    }
}

#[derive(Deserialize)]
struct CheckApp {
    slug: Option<String>,
}

#[derive(Deserialize)]
struct CheckOutput {
    title: Option<String>,
    summary: Option<String>,
    text: Option<String>,
}

#[derive(Deserialize)]
struct CheckRun {
    id: u64,
    name: String,
    head_sha: String,
    conclusion: Option<String>,
    details_url: Option<String>,
    app: Option<CheckApp>,
    output: CheckOutput,
}

#[derive(Deserialize)]
struct CheckRuns {
    check_runs: Vec<CheckRun>,
}

#[derive(Deserialize)]
struct Status {
    id: u64,
    context: String,
    state: String,
    target_url: Option<String>,
    description: Option<String>,
}

#[derive(Deserialize)]
struct CombinedStatus {
    sha: String,
    statuses: Vec<Status>,
}

#[derive(Deserialize)]
struct RawReview {
    id: u64,
    user: Option<User>,
    #[serde(default)]
    body: Option<String>,
    state: String,
    #[serde(default)]
    commit_id: Option<String>,
}

#[derive(Serialize)]
struct Body<'a> {
    body: &'a str,
}

#[derive(Serialize)]
struct NewPull<'a> {
    title: &'a str,
    body: &'a str,
    head: &'a str,
    base: &'a str,
    draft: bool,
}

#[derive(Serialize)]
struct Merge<'a> {
    sha: &'a str,
    merge_method: &'a str,
}

/// `GET /repos/{owner}/{repo}/branches/{branch}/protection`, as far as loopwright reads it.
#[derive(Deserialize)]
struct BranchProtection {
    required_status_checks: Option<RequiredChecks>,
    required_pull_request_reviews: Option<RequiredReviews>,
}

#[derive(Deserialize)]
struct RequiredChecks {
    #[serde(default)]
    contexts: Vec<String>,
    #[serde(default)]
    checks: Vec<RequiredCheck>,
}

#[derive(Deserialize)]
struct RequiredCheck {
    context: String,
}

#[derive(Deserialize)]
struct RequiredReviews {
    required_approving_review_count: Option<u32>,
}

/// A GraphQL answer's errors (GitHub answers 200 with them).
#[derive(Deserialize)]
struct GraphqlAnswer {
    #[serde(default)]
    errors: Vec<GraphqlError>,
}

#[derive(Deserialize)]
struct GraphqlError {
    message: String,
}

impl Forge for GitHub {
    async fn identity(&self) -> Result<Actor, ForgeError> {
        self.me
            .get_or_try_init(|| async {
                if let Some(jwt) = self.client.app_jwt() {
                    #[derive(Deserialize)]
                    struct App {
                        slug: String,
                    }
                    let what = "the GitHub App (GET /app)";
                    let response = self
                        .client
                        .http()
                        .get(format!("{}/app", self.client.api()))
                        .header("Accept", "application/vnd.github+json")
                        .header("X-GitHub-Api-Version", "2022-11-28")
                        .header("Authorization", format!("Bearer {}", jwt?))
                        .send()
                        .await
                        .map_err(|e| ForgeError::Unreachable(format!("{what}: {e}")))?;
                    let body = response.bytes().await.map_err(|e| ForgeError::Unreachable(format!("{what}: {e}")))?;
                    let app: App = serde_json::from_slice(&body)
                        .map_err(|e| ForgeError::Answer { what: what.into(), message: e.to_string() })?;
                    return Ok(Actor { login: format!("{}[bot]", app.slug), bot: true });
                }
                let user: User =
                    self.client.json(Method::GET, "/user", None::<&()>, "who loopwright is (GET /user)").await?;
                Ok(user.actor())
            })
            .await
            .cloned()
    }

    async fn permission(&self, login: &str) -> Result<Permission, ForgeError> {
        #[derive(Deserialize)]
        struct Answer {
            permission: String,
            #[serde(default)]
            role_name: Option<String>,
        }
        let what = format!("{login}'s permission");
        let path = self.path(&format!("/collaborators/{}/permission", url_part(login)));
        match self.client.json::<Answer>(Method::GET, &path, None::<&()>, &what).await {
            Ok(a) => Ok(a
                .role_name
                .as_deref()
                .and_then(Permission::parse)
                .or_else(|| Permission::parse(&a.permission))
                .unwrap_or(Permission::None)),
            Err(ForgeError::Denied { status: 404, .. }) => Ok(Permission::None),
            Err(e) => Err(e),
        }
    }

    async fn issue(&self, number: u64) -> Result<IssueText, ForgeError> {
        let issue: Issue = self
            .client
            .json(Method::GET, &self.path(&format!("/issues/{number}")), None::<&()>, &format!("issue #{number}"))
            .await?;
        Ok(issue.current())
    }

    async fn comment(&self, issue: u64, body: &str) -> Result<CommentRef, ForgeError> {
        let c: Comment = self
            .client
            .json(
                Method::POST,
                &self.path(&format!("/issues/{issue}/comments")),
                Some(&Body { body }),
                &format!("a comment on #{issue}"),
            )
            .await?;
        Ok(CommentRef { id: c.id, url: c.html_url })
    }

    async fn edit_comment(&self, id: u64, body: &str) -> Result<CommentRef, ForgeError> {
        let c: Comment = self
            .client
            .json(
                Method::PATCH,
                &self.path(&format!("/issues/comments/{id}")),
                Some(&Body { body }),
                "an update of loopwright's comment",
            )
            .await?;
        Ok(CommentRef { id: c.id, url: c.html_url })
    }

    async fn find_comment(&self, issue: u64, marker: &str) -> Result<Option<CommentRef>, ForgeError> {
        let me = self.identity().await?;
        let first = format!("{}{}", self.client.api(), self.path(&format!("/issues/{issue}/comments?per_page=100")));
        let comments: Vec<Comment> = self.all_pages(first, &format!("the comments on #{issue}")).await?;
        Ok(comments
            .into_iter()
            .filter(|c| c.user.as_ref().is_some_and(|u| u.login.eq_ignore_ascii_case(&me.login)))
            .find(|c| c.body.as_deref().is_some_and(|b| b.contains(marker)))
            .map(|c| CommentRef { id: c.id, url: c.html_url }))
    }

    async fn find_change_request(&self, branch: &str) -> Result<Option<ChangeRequest>, ForgeError> {
        let me = self.identity().await?;
        let repo = self.repo();
        let first = format!(
            "{}{}",
            self.client.api(),
            self.path(&format!("/pulls?state=all&per_page=100&head={}:{}", url_part(&self.owner), url_part(branch)))
        );
        let pulls: Vec<Pull> = self.all_pages(first, &format!("the pull requests of {branch}")).await?;
        Ok(pulls
            .into_iter()
            .map(Pull::change)
            .filter(|p| {
                p.head_branch == branch && p.head_repo.as_deref().is_some_and(|r| r.eq_ignore_ascii_case(&repo))
            })
            .find(|p| p.author.login.eq_ignore_ascii_case(&me.login)))
    }

    async fn change_request(&self, number: u64) -> Result<ChangeRequest, ForgeError> {
        Ok(self.pull(number, &format!("pull request #{number}")).await?.change())
    }

    async fn open_change_request(&self, new: &NewChangeRequest<'_>) -> Result<ChangeRequest, ForgeError> {
        let body = NewPull {
            title: new.title,
            body: new.body,
            head: new.head_branch,
            base: new.base_branch,
            draft: new.draft,
        };
        let pull: Pull = self.client.json(Method::POST, &self.path("/pulls"), Some(&body), "a pull request").await?;
        Ok(pull.change())
    }

    async fn edit_change_request(&self, number: u64, body: &str) -> Result<ChangeRequest, ForgeError> {
        let pull: Pull = self
            .client
            .json(
                Method::PATCH,
                &self.path(&format!("/pulls/{number}")),
                Some(&Body { body }),
                &format!("an update of #{number}"),
            )
            .await?;
        Ok(pull.change())
    }

    async fn mark_ready(&self, change: &ChangeRequest) -> Result<(), ForgeError> {
        let pull = self.pull(change.number, "the pull request to mark ready").await?;
        if pull.draft != Some(true) {
            return Ok(());
        }
        #[derive(Serialize)]
        struct Vars<'a> {
            id: &'a str,
        }
        self.graphql(
            "mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { isDraft } } }",
            Vars { id: &pull.node_id },
            &format!("marking #{} ready", change.number),
        )
        .await
    }

    async fn checks(&self, commit: &str) -> Result<Vec<CheckResult>, ForgeError> {
        let runs: CheckRuns = self
            .client
            .json_cached(&self.path(&format!("/commits/{commit}/check-runs?per_page=100")), "the commit's check runs")
            .await?;
        let combined: CombinedStatus =
            self.client.json_cached(&self.path(&format!("/commits/{commit}/status")), "the commit's statuses").await?;
        let mut out: Vec<CheckResult> = runs
            .check_runs
            .into_iter()
            .filter(|r| r.name != REPORT_NAME)
            .map(|r| CheckResult {
                kind: CheckKind::CheckRun,
                id: r.id,
                name: r.name,
                commit: r.head_sha,
                conclusion: CheckConclusion::parse(r.conclusion.as_deref()),
                url: r.details_url,
            })
            .collect();
        out.extend(combined.statuses.into_iter().filter(|s| s.context != REPORT_NAME).map(|s| CheckResult {
            kind: CheckKind::Status,
            id: s.id,
            name: s.context,
            commit: combined.sha.clone(),
            conclusion: CheckConclusion::from_status(&s.state),
            url: s.target_url,
        }));
        Ok(out)
    }

    async fn check_output(&self, check: &CheckResult) -> Result<String, ForgeError> {
        match check.kind {
            CheckKind::CheckRun => {
                let run: CheckRun = self
                    .client
                    .json(Method::GET, &self.path(&format!("/check-runs/{}", check.id)), None::<&()>, "a check run")
                    .await?;
                if run.app.as_ref().and_then(|a| a.slug.as_deref()) == Some("github-actions") {
                    // An Actions job's check run has the job's id.
                    let log = self
                        .client
                        .send(
                            Method::GET,
                            &self.path(&format!("/actions/jobs/{}/logs", run.id)),
                            None::<&()>,
                            "the job's log",
                            false,
                        )
                        .await?;
                    return Ok(String::from_utf8_lossy(&log.body).into_owned());
                }
                let parts = [run.output.title, run.output.summary, run.output.text];
                Ok(parts.into_iter().flatten().collect::<Vec<_>>().join("\n\n"))
            }
            CheckKind::Status => {
                let combined: CombinedStatus = self
                    .client
                    .json(
                        Method::GET,
                        &self.path(&format!("/commits/{}/status", check.commit)),
                        None::<&()>,
                        "the commit's statuses",
                    )
                    .await?;
                Ok(combined
                    .statuses
                    .into_iter()
                    .find(|s| s.id == check.id)
                    .and_then(|s| s.description)
                    .unwrap_or_default())
            }
        }
    }

    async fn reviews(&self, number: u64) -> Result<Vec<Review>, ForgeError> {
        let first = format!("{}{}", self.client.api(), self.path(&format!("/pulls/{number}/reviews?per_page=100")));
        let raw: Vec<RawReview> = self.all_pages(first, &format!("the reviews of #{number}")).await?;
        Ok(raw
            .into_iter()
            .filter_map(|r| {
                Some(Review {
                    id: r.id,
                    actor: r.user?.actor(),
                    verdict: ReviewVerdict::parse(&r.state),
                    commit: r.commit_id?,
                    body: r.body.unwrap_or_default(),
                })
            })
            .collect())
    }

    async fn merge(&self, number: u64, sha: &str, method: MergeMethod) -> Result<(), ForgeError> {
        let body = Merge { sha, merge_method: method.as_str() };
        let _: serde_json::Value = self
            .client
            .json(
                Method::PUT,
                &self.path(&format!("/pulls/{number}/merge")),
                Some(&body),
                &format!("merging #{number}"),
            )
            .await?;
        Ok(())
    }

    async fn protection(&self, branch: &str) -> Result<Option<Protection>, ForgeError> {
        let path = self.path(&format!("/branches/{}/protection", url_part(branch)));
        let found: BranchProtection =
            // Asked conditionally: a poll that looks again costs nothing when it did not change.
            match self.client.json_cached(&path, &format!("the protection of {branch}")).await {
                Ok(found) => found,
                // Not protected (404), or not readable without administration (403).
                Err(ForgeError::Denied { .. }) => return Ok(None),
                Err(e) => return Err(e),
            };
        let mut required_checks = Vec::new();
        if let Some(checks) = found.required_status_checks {
            required_checks.extend(checks.contexts);
            required_checks.extend(checks.checks.into_iter().map(|c| c.context));
        }
        required_checks.sort();
        required_checks.dedup();
        let requires_review =
            found.required_pull_request_reviews.is_some_and(|r| r.required_approving_review_count != Some(0));
        Ok(Some(Protection { required_checks, requires_review }))
    }

    async fn enable_auto_merge(
        &self,
        change: &ChangeRequest,
        sha: &str,
        method: MergeMethod,
    ) -> Result<(), ForgeError> {
        let pull = self.pull(change.number, "the pull request to merge").await?;
        #[derive(Serialize)]
        struct Vars<'a> {
            id: &'a str,
            head: &'a str,
            method: &'static str,
        }
        let method = match method {
            MergeMethod::Merge => "MERGE",
            MergeMethod::Squash => "SQUASH",
            MergeMethod::Rebase => "REBASE",
        };
        self.graphql(
            "mutation($id: ID!, $head: GitObjectID!, $method: PullRequestMergeMethod!) { enablePullRequestAutoMerge(input: {pullRequestId: $id, expectedHeadOid: $head, mergeMethod: $method}) { pullRequest { autoMergeRequest { enabledAt } } } }",
            Vars { id: &pull.node_id, head: sha, method },
            &format!("auto-merge of #{}", change.number),
        )
        .await
    }

    async fn recent(&self, since: jiff::Timestamp) -> Result<Vec<Happening>, ForgeError> {
        let repo = self.repo();
        let mut out = Vec::new();
        // Newest first, the same URL every time: what did not change is answered 304.
        let comments: Vec<ListedComment> = self
            .client
            .json_cached(&self.path("/issues/comments?sort=created&direction=desc&per_page=100"), "the latest comments")
            .await?;
        for c in comments.into_iter().filter(|c| c.created_at >= since) {
            let body = c.body.unwrap_or_default();
            // Only what may be a command costs the issue's read.
            if !body.trim_start().starts_with('/') {
                continue;
            }
            let Some(number) = c.issue_url.rsplit('/').next().and_then(|n| n.parse::<u64>().ok()) else { continue };
            // Asked conditionally too: looked at again next time, it costs nothing.
            let issue: Issue =
                self.client.json_cached(&self.path(&format!("/issues/{number}")), &format!("issue #{number}")).await?;
            let on_pull_request = issue.pull_request.is_some();
            let updated_at = issue.updated_at;
            out.push(Happening::Comment {
                repo: repo.clone(),
                on_pull_request,
                issue: issue.text(updated_at),
                comment_id: c.id,
                body,
                created_at: c.created_at,
                edited: c.updated_at > c.created_at,
                actor: c.user.map_or(Actor { login: "ghost".into(), bot: false }, User::actor),
            });
        }
        let events: Vec<IssueEvent> =
            self.client.json_cached(&self.path("/issues/events?per_page=100"), "the latest issue events").await?;
        for e in events.into_iter().filter(|e| e.event == "labeled" && e.created_at >= since) {
            let (Some(label), Some(issue), Some(actor)) = (e.label, e.issue, e.actor) else { continue };
            if issue.pull_request.is_some() {
                continue;
            }
            // The labelling's time, as the webhook's `issue.updated_at` says it.
            out.push(Happening::IssueLabeled {
                repo: repo.clone(),
                issue: issue.text(e.created_at),
                label: label.name,
                actor: actor.actor(),
            });
        }
        out.sort_by_key(|h| match h {
            Happening::Comment { created_at, .. } => *created_at,
            Happening::IssueLabeled { issue, .. } => issue.updated_at,
            _ => jiff::Timestamp::UNIX_EPOCH,
        });
        Ok(out)
    }

    async fn clone_url(&self) -> Result<String, ForgeError> {
        self.repository().await
    }

    async fn git_authorization(&self) -> Result<String, ForgeError> {
        use base64::Engine as _;
        let token = self.client.token().await?;
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
        Ok(format!("Basic {basic}"))
    }

    async fn report(&self, report: &Report<'_>) -> Result<(), ForgeError> {
        if self.client.app_jwt().is_some() {
            return self.report_check_run(report).await;
        }
        #[derive(Serialize)]
        struct NewStatus<'a> {
            state: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            target_url: Option<&'a str>,
            description: String,
            context: &'a str,
        }
        let state = match report.conclusion {
            None => "pending",
            Some(true) => "success",
            Some(false) => "failure",
        };
        let description: String = report.title.chars().take(140).collect();
        let body = NewStatus { state, target_url: report.details_url, description, context: REPORT_NAME };
        let _: serde_json::Value = self
            .client
            .json(
                Method::POST,
                &self.path(&format!("/statuses/{}", report.commit)),
                Some(&body),
                "loopwright's commit status",
            )
            .await?;
        Ok(())
    }
}

impl GitHub {
    /// The repository's clone URL (asked once).
    async fn repository(&self) -> Result<String, ForgeError> {
        #[derive(Deserialize)]
        struct Repository {
            clone_url: String,
        }
        let repo: Repository = self
            .client
            .json(Method::GET, &self.path(""), None::<&()>, &format!("the repository {}", self.repo()))
            .await?;
        Ok(repo.clone_url)
    }

    /// loopwright's check run on the commit: created once, then updated in place.
    async fn report_check_run(&self, report: &Report<'_>) -> Result<(), ForgeError> {
        #[derive(Serialize)]
        struct Annotation<'a> {
            path: &'a str,
            start_line: u64,
            end_line: u64,
            annotation_level: &'a str,
            title: &'a str,
            message: &'a str,
        }
        #[derive(Serialize)]
        struct Output<'a> {
            title: &'a str,
            summary: &'a str,
            annotations: Vec<Annotation<'a>>,
        }
        #[derive(Serialize)]
        struct Run<'a> {
            name: &'a str,
            head_sha: &'a str,
            status: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            conclusion: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            details_url: Option<&'a str>,
            output: Output<'a>,
        }
        let annotations = report
            .annotations
            .iter()
            .take(50)
            .map(|a| Annotation {
                path: &a.path,
                start_line: a.line,
                end_line: a.line,
                // On a head whose stages passed, the failures were overcome on the way.
                annotation_level: if report.conclusion == Some(true) { "warning" } else { "failure" },
                title: &a.title,
                message: &a.message,
            })
            .collect();
        let body = Run {
            name: REPORT_NAME,
            head_sha: report.commit,
            status: if report.conclusion.is_some() { "completed" } else { "in_progress" },
            conclusion: report.conclusion.map(|ok| if ok { "success" } else { "failure" }),
            details_url: report.details_url,
            output: Output { title: report.title, summary: report.summary, annotations },
        };
        let existing: CheckRuns = self
            .client
            .json(
                Method::GET,
                &self.path(&format!("/commits/{}/check-runs?check_name={REPORT_NAME}", report.commit)),
                None::<&()>,
                "loopwright's check run",
            )
            .await?;
        let _: serde_json::Value = match existing.check_runs.first() {
            Some(run) => {
                self.client
                    .json(
                        Method::PATCH,
                        &self.path(&format!("/check-runs/{}", run.id)),
                        Some(&body),
                        "loopwright's check run",
                    )
                    .await?
            }
            None => {
                self.client.json(Method::POST, &self.path("/check-runs"), Some(&body), "loopwright's check run").await?
            }
        };
        Ok(())
    }
}

/// GraphQL's endpoint beside the REST API's root (`/api/v3` → `/api/graphql` on Enterprise).
fn graphql_url(api: &str) -> String {
    match api.strip_suffix("/api/v3") {
        Some(host) => format!("{host}/api/graphql"),
        None => format!("{api}/graphql"),
    }
}

/// A path segment with what is not a login's or branch's letter escaped.
fn url_part(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_is_read_from_the_link_header() {
        let link = r#"<https://api.github.com/repositories/1/issues/1/comments?page=2>; rel="next", <https://api.github.com/repositories/1/issues/1/comments?page=5>; rel="last""#;
        assert_eq!(next_link(link).as_deref(), Some("https://api.github.com/repositories/1/issues/1/comments?page=2"));
        assert_eq!(next_link(r#"<https://x?page=1>; rel="prev""#), None);
    }

    #[test]
    fn graphql_is_found_beside_the_rest_api() {
        assert_eq!(graphql_url("https://api.github.com"), "https://api.github.com/graphql");
        assert_eq!(graphql_url("https://ghe.example/api/v3"), "https://ghe.example/api/graphql");
    }
}
