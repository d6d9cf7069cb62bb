//! A run's work delivered to the forge it came from (SPEC §14): the engine's [`Delivery`] port
//! over the GitHub adapter. Its branch is pushed to the repository with the forge's own
//! credentials (in git's environment, never on its command line), and its pull request is
//! found again by that branch — only if loopwright opened it from the repository itself — and
//! updated in place, else opened. A failure is reported in one comment, found again by its
//! hidden marker. Either can be done again after a crash and changes nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use loopwright_engine::ports::{Delivered, Delivery, DeliveryError, MergeOutcome};
use loopwright_engine::state::{RunState, StageStatus};
use loopwright_forge::github::GitHub;
use loopwright_forge::github::client::RateGate;
use loopwright_forge::port::{Forge, ForgeError, NewChangeRequest, Report};
use loopwright_forge::text::{fenced, inline, marker};
use loopwright_spec::github::GithubConfig;

/// The GitHub side of a run's delivery.
pub struct ForgeDelivery<'a> {
    /// `[github]`, when the workspace has it.
    pub config: Option<&'a GithubConfig>,
    /// Where a relative `private_key_file` is read from (the workspace's `.loopwright/`).
    pub base: PathBuf,
    /// The dashboard's address, for links to the run.
    pub dashboard: Option<String>,
    /// The workspace, whose store keeps GitHub's rate limits.
    pub store_ws: &'a crate::workspace::Workspace,
    /// Makes the gate GitHub's requests wait on (the store's, `assemble::github_gate`).
    pub gate: fn(&crate::workspace::Workspace) -> Result<Arc<dyn RateGate>, crate::Error>,
}

impl ForgeDelivery<'_> {
    fn adapter(&self) -> Result<GitHub, DeliveryError> {
        let config = self.config.ok_or_else(|| DeliveryError {
            message: "this workspace's config.toml has no [github] section to deliver with".into(),
            retry_at: None,
        })?;
        let gate = (self.gate)(self.store_ws).map_err(|e| refused(&e.message()))?;
        GitHub::from_config(config, &self.base, gate).map_err(from_forge)
    }

    fn link(&self, run: &str) -> Option<String> {
        self.dashboard.as_ref().map(|base| format!("{}/runs/{run}", base.trim_end_matches('/')))
    }
}

/// A forge's error as the engine keeps it: what may pass by waiting is tried again.
fn from_forge(e: ForgeError) -> DeliveryError {
    let retry_at = match &e {
        ForgeError::RateLimited { until } => Some(*until),
        e if e.is_transient() => Some(jiff::Timestamp::now() + jiff::SignedDuration::from_secs(30)),
        _ => None,
    };
    DeliveryError { message: e.to_string(), retry_at }
}

impl Delivery for ForgeDelivery<'_> {
    async fn deliver(&self, state: &RunState, _round: u32) -> Result<Delivered, DeliveryError> {
        let started = state.started.as_ref().ok_or_else(|| refused("the run has no start"))?;
        let link = started.forge.as_ref().ok_or_else(|| refused("the run did not come from a forge"))?;
        let tree =
            started.worktree.as_ref().map_or_else(|| PathBuf::from(&started.workspace), |w| PathBuf::from(&w.path));
        let github = self.adapter()?;
        let head = loopwright_runners::git::git(&tree, &["rev-parse", "HEAD"])
            .map_err(|e| refused(&format!("the run's branch: {e}")))?
            .trim()
            .to_owned();
        push(&github, &tree, &link.branch).await?;
        let files = changed_files(&tree, &link.base);
        let body = pull_request_body(state, &files, self.link(state.run_id.as_str()).as_deref());
        let change = match github.find_change_request(&link.branch).await.map_err(from_forge)? {
            Some(found) if found.open => github.edit_change_request(found.number, &body).await.map_err(from_forge)?,
            Some(found) => {
                return Err(refused(&format!(
                    "pull request #{} of {} was closed; loopwright does not open another for it",
                    found.number, link.branch
                )));
            }
            None => {
                let title = format!("{} (#{})", link.title, link.issue);
                let new = NewChangeRequest {
                    title: &title,
                    body: &body,
                    head_branch: &link.branch,
                    base_branch: &link.base,
                    draft: link.draft_until_green,
                };
                github.open_change_request(&new).await.map_err(from_forge)?
            }
        };
        // loopwright's own word on the head: its stages passed (a check run for an App, a
        // commit status for a token). A token without the permission to say it changes nothing
        // of the delivery.
        let title = format!("loopwright: {} passed its stages", started.pipeline);
        let details = self.link(state.run_id.as_str());
        // The files of the commit reported on, which an annotation may name.
        let files: Vec<String> = loopwright_runners::git::git(&tree, &["ls-files", "-z"])
            .map(|out| out.split('\0').filter(|f| !f.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default();
        let notes = annotations(state, &files);
        let report = Report {
            commit: &head,
            conclusion: Some(true),
            title: &title,
            summary: &body,
            details_url: details.as_deref(),
            annotations: &notes,
        };
        if let Err(e) = github.report(&report).await {
            eprintln!("loopwright: run {}: its own check on {head} could not be reported: {e}", state.run_id);
        }
        Ok(Delivered { number: change.number, url: change.url, head })
    }

    async fn escalate(&self, state: &RunState, round: u32) -> Result<String, DeliveryError> {
        self.ask(state, round).await
    }

    async fn merge(&self, state: &RunState, head: &str) -> MergeOutcome {
        match self.merge_at(state, head).await {
            Ok(outcome) => outcome,
            Err(e) => MergeOutcome::Refused { message: e.message },
        }
    }

    async fn report_failure(&self, state: &RunState) -> Result<String, DeliveryError> {
        let link = state.forge_link().ok_or_else(|| refused("the run did not come from a forge"))?;
        let github = self.adapter()?;
        let mark = marker(state.run_id.as_str(), "failure");
        let body = failure_comment(state, self.link(state.run_id.as_str()).as_deref(), &mark);
        let comment = match github.find_comment(link.issue, &mark).await.map_err(from_forge)? {
            Some(found) => github.edit_comment(found.id, &body).await.map_err(from_forge)?,
            None => github.comment(link.issue, &body).await.map_err(from_forge)?,
        };
        Ok(comment.url)
    }
}

impl ForgeDelivery<'_> {
    /// Merges the run's pull request at `head` exactly: a head someone else pushed since is
    /// not merged; GitHub's auto-merge is enabled instead when the base's protection requires
    /// an approving review (GitHub then merges once it is satisfied), else loopwright merges.
    async fn merge_at(&self, state: &RunState, head: &str) -> Result<MergeOutcome, DeliveryError> {
        let link = state.forge_link().ok_or_else(|| refused("the run did not come from a forge"))?;
        let method = link.merge.ok_or_else(|| refused("[github] merge is not \"auto\" for this run"))?;
        let delivered = state.forge.change().ok_or_else(|| refused("the run delivered no pull request"))?;
        let github = self.adapter()?;
        let change = github.change_request(delivered.number).await.map_err(from_forge)?;
        if change.merged {
            return Ok(MergeOutcome::Merged { auto_merge: false });
        }
        if change.head_sha != head {
            return Ok(MergeOutcome::Moved { head: change.head_sha });
        }
        // Enabled already (a crash after enabling it, before it was journaled): enabled.
        if change.auto_merge {
            return Ok(MergeOutcome::Merged { auto_merge: true });
        }
        let protection = github.protection(&change.base_branch).await.map_err(from_forge)?;
        if protection.is_some_and(|p| p.requires_review) {
            github.enable_auto_merge(&change, head, method).await.map_err(from_forge)?;
            return Ok(MergeOutcome::Merged { auto_merge: true });
        }
        match github.merge(delivered.number, head, method).await {
            Ok(()) => Ok(MergeOutcome::Merged { auto_merge: false }),
            // GitHub's answer when the head is no longer `sha`: say which head it is now.
            Err(ForgeError::Refused { status: 409, .. }) => {
                let now = github.change_request(delivered.number).await.map_err(from_forge)?;
                Ok(MergeOutcome::Moved { head: now.head_sha })
            }
            Err(e) => Err(from_forge(e)),
        }
    }

    /// The comment that asks a person on the pull request after red CI round `round`.
    async fn ask(&self, state: &RunState, round: u32) -> Result<String, DeliveryError> {
        let link = state.forge_link().ok_or_else(|| refused("the run did not come from a forge"))?;
        let change = state.forge.change().ok_or_else(|| refused("the run delivered no pull request"))?;
        let github = self.adapter()?;
        let mark = marker(state.run_id.as_str(), &format!("escalation-{round}"));
        let last = state.forge.reports.last().map(|(_, _, o)| o);
        let what = match last {
            Some(loopwright_engine::forge::CiOutcome::Failed { check, failure, .. }) => {
                format!("`{check}` failed again ({})", failure.pattern.as_deref().unwrap_or("unclassified"))
            }
            _ => "CI failed again".to_owned(),
        };
        let body = format!(
            "loopwright stopped after {} red CI round{}: {what}. It waits for a person with `{}` or more permission:\n\n\
             - `/loopwright retry` sends it back to `{}` once more\n\
             - `/loopwright fix TEXT` sends it back with your words\n\
             - `/loopwright skip` leaves the pull request as it is and ends the run\n\
             - `/loopwright abort` ends the run\n{}\n{mark}\n",
            round + 1,
            if round == 0 { "" } else { "s" },
            self.config.map_or("write", |c| c.min_permission.as_str()),
            link.stage,
            self.link(state.run_id.as_str()).map(|u| format!("\nThe run: {u}\n")).unwrap_or_default(),
        );
        let comment = match github.find_comment(change.number, &mark).await.map_err(from_forge)? {
            Some(found) => found,
            None => github.comment(change.number, &body).await.map_err(from_forge)?,
        };
        Ok(comment.url)
    }
}

fn refused(message: &str) -> DeliveryError {
    DeliveryError { message: message.to_owned(), retry_at: None }
}

/// Pushes the run's branch to the forge's repository, not to any remote of the workspace:
/// a plain push (a branch someone else moved is refused, not overwritten); the same commit
/// pushed again is nothing new.
async fn push(github: &GitHub, tree: &Path, branch: &str) -> Result<(), DeliveryError> {
    let url = github.clone_url().await.map_err(from_forge)?;
    let authorization = github.git_authorization().await.map_err(from_forge)?;
    let refspec = format!("HEAD:refs/heads/{branch}");
    let out = tokio::process::Command::new("git")
        .args(loopwright_runners::git::HARDENED)
        .args(["push", "--porcelain", "--no-verify", &url, &refspec])
        .current_dir(tree)
        .env("LC_ALL", "C")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "http.extraHeader")
        .env("GIT_CONFIG_VALUE_0", format!("Authorization: {authorization}"))
        .output()
        .await
        .map_err(|e| refused(&format!("cannot run git: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let why = format!("{}{}", stdout.trim(), stderr.trim()).replace(&authorization, "***");
    let transient = why.contains("Could not resolve host")
        || why.contains("Connection refused")
        || why.contains("The requested URL returned error: 5");
    Err(DeliveryError {
        message: format!("git push of {branch}: {why}"),
        retry_at: transient.then(|| jiff::Timestamp::now() + jiff::SignedDuration::from_secs(30)),
    })
}

/// The files the branch changes against its base, with what git counts of each.
fn changed_files(tree: &Path, base: &str) -> Vec<(String, String)> {
    let range = format!("{base}...HEAD");
    let Ok(out) = loopwright_runners::git::git(tree, &["diff", "--numstat", "--no-renames", &range]) else {
        return Vec::new();
    };
    out.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, '\t');
            let (added, removed, path) = (parts.next()?, parts.next()?, parts.next()?);
            Some((path.to_owned(), format!("+{added} −{removed}")))
        })
        .collect()
}

/// The pull request's body, written from the run: what was asked, what each stage did, the
/// checks and their results, the files, tokens and cost, the dashboard link, `Closes #N`.
/// Text that came from outside loopwright (the issue, a tool's output) is quoted as code, so
/// its mentions and closing keywords do nothing.
pub fn pull_request_body(state: &RunState, files: &[(String, String)], dashboard: Option<&str>) -> String {
    let Some(started) = &state.started else { return String::new() };
    let Some(link) = &started.forge else { return String::new() };
    let mut b = String::new();
    b.push_str(&format!(
        "loopwright ran the pipeline `{}` for #{} (asked by @{}).\n\n",
        started.pipeline, link.issue, link.actor
    ));
    b.push_str("### What was asked\n\n");
    b.push_str(&inline(&link.title, 200));
    b.push_str("\n\n### What each stage did\n\n| stage | result | attempts | time |\n|---|---|---|---|\n");
    for s in &state.stages {
        let result = match s.status {
            StageStatus::Success => "done",
            StageStatus::Skipped => "skipped",
            StageStatus::Failed | StageStatus::AttemptFailed => "failed",
            _ => "not finished",
        };
        b.push_str(&format!("| `{}` | {result} | {} | {:.1} s |\n", s.id, s.attempts, s.duration_ms as f64 / 1000.0));
    }
    let checks = checks_of(state);
    if !checks.is_empty() {
        b.push_str("\n### Checks\n\n");
        for line in checks {
            b.push_str(&format!("- {line}\n"));
        }
    }
    if !state.forge.reports.is_empty() {
        b.push_str("\n### CI rounds\n\n");
        for (round, head, outcome) in &state.forge.reports {
            let short: String = head.chars().take(7).collect();
            let what = match outcome {
                loopwright_engine::forge::CiOutcome::Passed { .. } => "passed".to_owned(),
                loopwright_engine::forge::CiOutcome::Failed { check, failure, .. } => format!(
                    "`{check}` failed ({}), sent back to `{}`",
                    failure.pattern.as_deref().unwrap_or("unclassified"),
                    link.stage
                ),
            };
            b.push_str(&format!("- round {round}, `{short}`: {what}\n"));
        }
    }
    if !files.is_empty() {
        b.push_str("\n### Files\n\n");
        for (path, counts) in files.iter().take(100) {
            b.push_str(&format!("- {} {counts}\n", inline(path, 200)));
        }
    }
    let spend = state.spend();
    b.push_str(&format!(
        "\n### Spend\n\n{} tokens{}, ${:.4}, {:.1} s of agents' time.\n",
        spend.tokens,
        if spend.estimated { " (estimated)" } else { "" },
        spend.cost_usd,
        spend.active_ms as f64 / 1000.0
    ));
    if let Some(url) = dashboard {
        b.push_str(&format!("\nThe run: {url}\n"));
    }
    b.push_str(&format!("\nCloses #{}\n\n{}\n", link.issue, marker(state.run_id.as_str(), "pr")));
    b
}

/// One line per check the stages ran, with its result (closed-loop stages' last evaluation).
fn checks_of(state: &RunState) -> Vec<String> {
    let mut out = Vec::new();
    for s in &state.stages {
        let Some(lp) = &s.closed else { continue };
        let Some(last) = lp.iterations.last() else { continue };
        for check in last.checks.iter().flatten() {
            let result = if check.passed { "passed" } else { "failed" };
            out.push(format!("`{}` in `{}`: {result}", check.name, s.id));
        }
    }
    out
}

/// The issue's one comment about a failed run: the run's headline, what was tried and the
/// suggested steps, and a marker to find it again.
pub fn failure_comment(state: &RunState, dashboard: Option<&str>, mark: &str) -> String {
    let mut b = String::new();
    let failed = state.failed_stage.as_ref().and_then(|id| state.stage(id.as_str()));
    let headline = match failed.and_then(|s| s.last_error.as_ref()) {
        Some(e) => format!("stage `{}` failed: {}", failed.map_or("?", |s| s.id.as_str()), e.kind.as_str()),
        None if state.forge.delivery_failures.last().is_some() => "its work could not be delivered".to_owned(),
        None => format!("it ended {}", state.status.as_str()),
    };
    b.push_str(&format!("loopwright could not finish this: {headline}.\n\n"));
    if let Some(e) = failed.and_then(|s| s.last_error.as_ref()) {
        b.push_str("What it printed last:\n\n");
        b.push_str(&fenced(e.message.lines().take(20).collect::<Vec<_>>().join("\n").as_str()));
        b.push_str("\n\n");
    }
    if let Some((message, _)) = state.forge.delivery_failures.last() {
        b.push_str("Delivering failed:\n\n");
        b.push_str(&fenced(message));
        b.push_str("\n\n");
    }
    b.push_str("What was tried:\n\n");
    for s in &state.stages {
        b.push_str(&format!(
            "- `{}`: {} attempt{}, {}\n",
            s.id,
            s.attempts,
            if s.attempts == 1 { "" } else { "s" },
            s.status.as_str()
        ));
    }
    b.push_str("\nNext: read why on the run's page, fix what it names, and comment `/loopwright run` to try again.\n");
    if let Some(url) = dashboard {
        b.push_str(&format!("\nThe run: {url}\n"));
    }
    b.push_str(&format!("\n{mark}\n"));
    b
}

/// A forge event in one line for people (`logs`, a run's progress); none for other events.
pub fn describe(event: &loopwright_engine::Event) -> Option<String> {
    use loopwright_engine::Event;
    use loopwright_engine::forge::CiOutcome;
    Some(match event {
        Event::Delivered(d) => format!(
            "delivered: pull request #{} ({}) at {}{}",
            d.number,
            d.url,
            d.head.get(..12).unwrap_or(&d.head),
            if d.watching { "; waits for its CI" } else { "" }
        ),
        Event::DeliveryFailed { message, retry_at, .. } => match retry_at {
            Some(at) => format!("delivering failed, tried again at {at}: {message}"),
            None => format!("delivering failed: {message}"),
        },
        Event::CiReported { round, head, outcome } => match outcome {
            CiOutcome::Passed { checks } => format!(
                "CI passed on {} (round {round}): {}",
                head.get(..12).unwrap_or(head),
                if checks.is_empty() { "no checks".to_owned() } else { checks.join(", ") }
            ),
            CiOutcome::Failed { check, failure, .. } => format!(
                "CI failed on {} (round {round}): `{check}`, {}",
                head.get(..12).unwrap_or(head),
                failure.pattern.as_deref().unwrap_or("unclassified")
            ),
        },
        Event::CiAwaited { round } => format!("waits for the pull request's CI again (round {round})"),
        Event::ReviewReceived { by, .. } => format!("review feedback from {by}: it goes back to the delivering stage"),
        Event::CiRetried { round, target, .. } => format!("CI round {round}: the failure goes back to {target}"),
        Event::CiEscalated { round, stage, comment } => format!(
            "CI failed in round {round}, more often than allowed: {stage} waits for a person (`respond`{})",
            comment.as_ref().map(|c| format!(", or a comment answering {c}")).unwrap_or_default()
        ),
        Event::ApprovalReceived { by, head } => {
            format!("approved by {by} at {}", head.get(..12).unwrap_or(head))
        }
        Event::ReviewAwaited { head } => {
            format!("CI passed: waits for a person to approve {} before merging", head.get(..12).unwrap_or(head))
        }
        Event::HeadMoved { head } => format!(
            "the pull request's head is {}, a commit loopwright did not push: not merged until a person approves it and its CI passes",
            head.get(..12).unwrap_or(head)
        ),
        Event::Merged { number, head, auto_merge: false } => {
            format!("merged pull request #{number} at {}", head.get(..12).unwrap_or(head))
        }
        Event::Merged { number, head, auto_merge: true } => format!(
            "auto-merge enabled for pull request #{number} at {}: GitHub merges it once its protection is satisfied",
            head.get(..12).unwrap_or(head)
        ),
        Event::MergeFailed { head, message } => {
            format!("merging {} failed: {message}; a new approval tries again", head.get(..12).unwrap_or(head))
        }
        Event::FailureReported { url: Some(url), .. } => format!("failure reported on the issue: {url}"),
        Event::FailureReported { error: Some(e), .. } => format!("the failure could not be reported on the issue: {e}"),
        Event::FailureReported { .. } => "failure reported".to_owned(),
        _ => return None,
    })
}

/// Where the failures the run classified point — each `path:line` in their key lines, then in
/// their whole output, that names one of the tree's `files` (read as the closed loop's strategies read them,
/// [`locations`](loopwright_engine::closed_loop::strategies::locations)) — with the failure's
/// category as the title: the annotations on loopwright's check run. At most 50 (GitHub's limit
/// per request), each place once.
pub fn annotations(state: &RunState, files: &[String]) -> Vec<loopwright_forge::port::Annotation> {
    /// The tree's files, as the closed loop's workspace port gives them.
    struct Files<'a>(&'a [String]);
    impl loopwright_engine::ports::Workspace for Files<'_> {
        fn files(&self) -> Vec<String> {
            self.0.to_vec()
        }
    }
    let loops = state.stages.iter().filter_map(|s| s.closed.as_deref());
    let attempts = loops.flat_map(|l| l.iterations.iter().filter_map(|i| i.failure.as_ref()));
    let ci = state.forge.reports.iter().filter_map(|(_, _, outcome)| match outcome {
        loopwright_engine::forge::CiOutcome::Failed { failure, .. } => Some(failure.as_ref()),
        loopwright_engine::forge::CiOutcome::Passed { .. } => None,
    });
    let mut out: Vec<loopwright_forge::port::Annotation> = Vec::new();
    for failure in attempts.chain(ci) {
        let title = failure.pattern.clone().unwrap_or_else(|| failure.summary.clone());
        // The key lines first; then the whole output (a traceback's frames are seldom key lines).
        let lines = failure.lines.iter().map(String::as_str).chain(failure.output.lines());
        for line in lines {
            for (path, at) in loopwright_engine::closed_loop::strategies::locations(line, &Files(files)) {
                let at = at as u64;
                if out.len() < 50 && !out.iter().any(|a| a.path == path && a.line == at) {
                    // The failure's headline, then the line that names the place.
                    let (headline, line) = (failure.headline().trim(), line.trim());
                    let message = if headline == line { line.to_owned() } else { format!("{headline}\n{line}") };
                    let message: String = message.chars().take(1000).collect();
                    out.push(loopwright_forge::port::Annotation { path, line: at, title: title.clone(), message });
                }
            }
        }
    }
    out
}

/// What of a job's log is classified and with which context: the failed step's output, its
/// command and exit code (where `given` does not say them), and the step.
pub fn ci_failure(
    log: &str,
    given: &loopwright_engine::patterns::Context,
) -> (String, loopwright_engine::patterns::Context, Option<loopwright_forge::actions_log::Step>) {
    let log = loopwright_forge::actions_log::JobLog::read(log);
    let text = log.failure_text();
    let step = log.failed_step().cloned();
    let mut context = given.clone();
    if let Some(step) = &step {
        context.command = context.command.or_else(|| step.command.clone().or_else(|| Some(step.name.clone())));
        context.exit_code = context.exit_code.or(step.exit_code);
    }
    (text, context, step)
}
