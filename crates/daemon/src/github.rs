//! GitHub at the daemon (SPEC §14): what a delivery (a webhook's, or what polling found) asks
//! for is planned by `app::ops::github` and carried out here — a run started from its trigger
//! (its id fixed by the trigger, so a second delivery of it starts nothing), an answer recorded
//! on the run that waits, one reply posted on the issue.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use loopwright_app::Error;
use loopwright_app::ops::github::{self, Plan};
use loopwright_app::ops::{answer, read, start};
use loopwright_app::ownership::this_process;
use loopwright_app::workspace::Workspace;
use loopwright_engine::RunId;
use loopwright_forge::github::GitHub;
use loopwright_forge::port::Happening;
use loopwright_store::Journal;

/// What was done about one delivery.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Nothing: why.
    Ignored {
        /// Why nothing was done.
        reason: String,
    },
    /// A run was started.
    Started {
        /// The run.
        run_id: String,
    },
    /// Its trigger had started its run already.
    AlreadyStarted {
        /// The run.
        run_id: String,
    },
    /// A waiting run was answered.
    Answered {
        /// The run.
        run_id: String,
    },
    /// CI's result was recorded on the run that waited for it.
    Reported {
        /// The run.
        run_id: String,
    },
    /// Nothing was done, and the issue was told why (once).
    Replied {
        /// The reply.
        url: String,
    },
}

/// Delivery ids seen lately (GitHub re-sends a delivery under its own id): a bounded memory,
/// behind which a trigger's fixed run id and the replies' markers still keep a delivery from
/// acting twice.
#[derive(Debug, Default)]
pub struct Seen {
    ids: Mutex<(HashSet<String>, VecDeque<String>)>,
}

impl Seen {
    /// How many ids are remembered.
    const KEPT: usize = 10_000;

    /// True the first time `id` is seen.
    pub fn first(&self, id: &str) -> bool {
        let mut guard = self.ids.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (set, order) = &mut *guard;
        if !set.insert(id.to_owned()) {
            return false;
        }
        order.push_back(id.to_owned());
        if order.len() > Self::KEPT
            && let Some(old) = order.pop_front()
        {
            set.remove(&old);
        }
        true
    }
}

/// Does what `happening` asks for; the runs it starts or answers are for `wake` to take up.
pub async fn act(ws: &Workspace, store: &Journal, github: &GitHub, happening: &Happening) -> Result<Outcome, Error> {
    let plan = github::plan(ws, store, github, happening).await?;
    carry_out(ws, store, github, plan).await
}

/// One look at GitHub instead of webhooks: the comments and labellings since `since` not seen
/// before (`seen`), then CI on the heads that runs wait on. Lists are asked conditionally, so a
/// look that finds nothing new is answered `304 Not Modified` throughout.
pub async fn poll_once(
    ws: &Workspace,
    store: &Journal,
    github: &GitHub,
    since: jiff::Timestamp,
    seen: &Seen,
) -> Result<Vec<Outcome>, Error> {
    use loopwright_forge::port::Forge;
    let mut outcomes = Vec::new();
    for happening in github.recent(since).await.map_err(github::forge_error)? {
        let key = match &happening {
            Happening::Comment { comment_id, .. } => format!("comment-{comment_id}"),
            Happening::IssueLabeled { issue, label, .. } => {
                format!("label-{}-{label}-{}", issue.number, issue.updated_at)
            }
            _ => continue,
        };
        if !seen.first(&key) {
            continue;
        }
        outcomes.push(
            act(ws, store, github, &happening).await.unwrap_or_else(|e| Outcome::Ignored { reason: e.message() }),
        );
    }
    let waiting = github::waiting(ws, store).await?;
    for head in waiting.ci_heads() {
        let plan = github::ci_plan_in(ws, github, &waiting, &head).await?;
        outcomes.push(carry_out(ws, store, github, plan).await?);
    }
    // Approvals of pull requests whose runs wait to merge, as their webhook would bring them.
    let repo = &github::github_config(ws)?.repo;
    for (number, head_branch) in waiting.to_approve() {
        for review in github.reviews(number).await.map_err(github::forge_error)? {
            if review.verdict != loopwright_forge::port::ReviewVerdict::Approved
                || !seen.first(&format!("review-{}", review.id))
            {
                continue;
            }
            let happening = Happening::Review {
                repo: repo.clone(),
                pull_request: number,
                head_branch: head_branch.clone(),
                review_id: review.id,
                verdict: review.verdict,
                body: review.body,
                commit: review.commit,
                actor: review.actor,
            };
            outcomes.push(
                act(ws, store, github, &happening).await.unwrap_or_else(|e| Outcome::Ignored { reason: e.message() }),
            );
        }
    }
    Ok(outcomes)
}

/// The daemon's polling, every `every`, back as far as a delivery may be old.
pub async fn poll_loop(shared: std::sync::Arc<crate::Shared>, every: std::time::Duration) {
    let Some(config) = shared.ws.config.github.clone() else { return };
    let github = match github::adapter(&shared.ws) {
        Ok((github, _)) => github,
        Err(e) => {
            eprintln!("loopwright serve: GitHub is not polled: {}", e.message());
            return;
        }
    };
    let mut shutdown = shared.shutdown.clone();
    loop {
        let since = jiff::Timestamp::now() - jiff::SignedDuration::from_mins(config.max_delivery_age_minutes as i64);
        match poll_once(&shared.ws, &shared.store, &github, since, &shared.github_seen).await {
            Ok(outcomes) if outcomes.iter().any(|o| woken(o).is_some()) => shared.runs.wake.notify_one(),
            Ok(_) => {}
            Err(e) => eprintln!("loopwright serve: polling GitHub: {}", e.message()),
        }
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// Carries out what was planned about a happening.
async fn carry_out(ws: &Workspace, store: &Journal, github: &GitHub, plan: Plan) -> Result<Outcome, Error> {
    match plan {
        Plan::Ignore(reason) => Ok(Outcome::Ignored { reason }),
        Plan::AlreadyStarted(run) => Ok(Outcome::AlreadyStarted { run_id: run.to_string() }),
        Plan::Reply { issue, body, marker } => {
            Ok(Outcome::Replied { url: github::reply_once(github, issue, &body, &marker).await? })
        }
        Plan::Answer { run, event } => {
            let (_, mut state) = read::load_run(ws, store, &run).await?;
            answer::record_answer(store, &mut state, event, this_process(true)).await?;
            Ok(Outcome::Answered { run_id: run.to_string() })
        }
        Plan::Start(plan) => start_run(ws, store, github, *plan).await,
        Plan::Report { run, event } => {
            let (_, mut state) = read::load_run(ws, store, &run).await?;
            if let Some(number) = ready_when_green(&state, &event) {
                use loopwright_forge::port::Forge;
                let change = github.change_request(number).await.map_err(github::forge_error)?;
                github.mark_ready(&change).await.map_err(github::forge_error)?;
            }
            match answer::record_answer(store, &mut state, event, this_process(true)).await {
                Ok(_) => Ok(Outcome::Reported { run_id: run.to_string() }),
                // Another delivery about the same head recorded it first.
                Err(Error::Conflict(_)) => {
                    Ok(Outcome::Ignored { reason: format!("run {run} heard of this CI already") })
                }
                Err(e) => Err(e),
            }
        }
    }
}

/// The draft pull request to mark ready for review before the run hears its CI passed
/// (`draft_until_green`); after a crash it is marked again, which changes nothing.
fn ready_when_green(state: &loopwright_engine::RunState, event: &loopwright_engine::Event) -> Option<u64> {
    use loopwright_engine::forge::CiOutcome;
    let passed = matches!(event, loopwright_engine::Event::CiReported { outcome: CiOutcome::Passed { .. }, .. });
    let draft = state.forge_link().is_some_and(|l| l.draft_until_green);
    state.forge.change().filter(|_| passed && draft).map(|d| d.number)
}

/// Starts a trigger's run in a worktree of its own; a request the workspace refuses (an
/// unknown pipeline, a variable it does not declare) is told on the issue, once.
async fn start_run(
    ws: &Workspace,
    store: &Journal,
    github: &GitHub,
    plan: github::StartPlan,
) -> Result<Outcome, Error> {
    let run_id = plan.run_id.clone();
    let issue = plan.link.issue;
    let request = start::StartRequest {
        pipeline: plan.pipeline,
        name_only: true,
        task: Some(plan.task),
        vars: plan.vars,
        worktree: true,
        by: Some(plan.by),
        forge: Some(plan.link),
        run_id: Some(run_id.clone()),
        ..start::StartRequest::default()
    };
    let prepared = match start::prepare(ws, request, this_process(true)).await {
        Ok(p) => p,
        Err(e @ (Error::NotFound(_) | Error::Usage(_) | Error::Invalid(_))) => {
            let mark = loopwright_forge::text::marker(run_id.as_str(), "start-refused");
            let body = format!(
                "loopwright could not start this:\n\n{}\n\n{mark}\n",
                loopwright_forge::text::fenced(&e.message())
            );
            return Ok(Outcome::Replied { url: github::reply_once(github, issue, &body, &mark).await? });
        }
        Err(e) => return Err(e),
    };
    let worktree = prepared.started.worktree.clone();
    match start::enqueue(store, prepared).await {
        Ok(run) => Ok(Outcome::Started { run_id: run.to_string() }),
        // The only conflict a new run's first events meet: its id is taken.
        Err(Error::Conflict(_)) => {
            // Another delivery of the same trigger won: its worktree stays, this one goes.
            if let Some(wt) = worktree {
                let _ = loopwright_runners::git::git(&ws.root, &["worktree", "remove", "--force", &wt.path]);
                let _ = loopwright_runners::git::git(&ws.root, &["branch", "-D", &wt.branch]);
            }
            Ok(Outcome::AlreadyStarted { run_id: run_id.to_string() })
        }
        Err(e) => Err(e),
    }
}

/// The run an outcome started or answered, for the scheduler.
pub fn woken(outcome: &Outcome) -> Option<RunId> {
    match outcome {
        Outcome::Started { run_id } | Outcome::Answered { run_id } | Outcome::Reported { run_id } => {
            RunId::parse(run_id)
        }
        _ => None,
    }
}

/// An outcome in one line for people.
pub fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Ignored { reason } => format!("nothing done: {reason}"),
        Outcome::Started { run_id } => format!("started run {run_id} (queued: a daemon drives it)"),
        Outcome::AlreadyStarted { run_id } => format!("its run {run_id} was started before"),
        Outcome::Answered { run_id } => format!("answered run {run_id}"),
        Outcome::Reported { run_id } => format!("CI's result recorded on run {run_id}"),
        Outcome::Replied { url } => format!("replied: {url}"),
    }
}
