//! One-tap links (`/a/{token}`): checked, confirmed, answered once.

use crate::Shared;
use crate::api::auth::Caller;
use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use loopwright_app::ops::{self, read};
use loopwright_engine::result::WaitKind;
use loopwright_engine::{RunId, RunState, RunStatus};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use super::auto::legible;
use super::{Rendered, page, render_markdown};
use loopwright_engine::event::Via;

/// A one-tap link checked — signed here, unexpired, unused, its person still allowed to
/// answer — or the page that refuses it.
pub(super) async fn check_link(shared: &Shared, token: &str) -> Result<crate::notifications::Link, Refusal> {
    use crate::notifications::LinkRefused;
    let link = shared.signer.check(token, jiff::Timestamp::now()).map_err(|r| match r {
        LinkRefused::Forged => {
            Refusal(StatusCode::FORBIDDEN, "This link was not made by this loopwright, or it was changed.".into())
        }
        LinkRefused::Expired => {
            Refusal(StatusCode::GONE, "This link has expired. Open the run in the dashboard to answer it.".into())
        }
    })?;
    let store = Arc::clone(&shared.auto_store);
    let key = link.key.clone();
    let used = tokio::task::spawn_blocking(move || store.notify_link_used(&key)).await;
    match used {
        Ok(Ok(Some(None))) => {}
        Ok(Ok(Some(Some(at)))) => {
            let how = used_how(shared, &link).await.unwrap_or_else(|| format!(" ({at})"));
            return Err(Refusal(StatusCode::GONE, format!("This link was already used{how}. Each link answers once.")));
        }
        _ => {
            return Err(Refusal(
                StatusCode::FORBIDDEN,
                "This link's notification is not in this workspace's journal.".into(),
            ));
        }
    }
    // A sign-in link answers as whoever signs in: its `as` is not who answers.
    if link.sign_in {
        return Ok(link);
    }
    match shared.people.role_of(&link.answer_as) {
        Some(role) if !role.may_answer() => {
            return Err(Refusal(
                StatusCode::FORBIDDEN,
                format!("{} may not answer: their role is viewer.", link.answer_as),
            ));
        }
        None if link.person => {
            return Err(Refusal(
                StatusCode::FORBIDDEN,
                format!("{} may no longer answer: their access was revoked.", link.answer_as),
            ));
        }
        _ => {}
    }
    Ok(link)
}

/// A one-tap link checked: the link and the run it answers, or the page that refuses it.
pub(super) async fn open_link(
    shared: &Shared,
    link: crate::notifications::Link,
) -> Result<(LinkFor, RunState, loopwright_spec::Pipeline), Refusal> {
    use crate::notifications::LinkAction;
    let run = RunId::parse(&link.run).ok_or_else(|| Refusal(StatusCode::NOT_FOUND, "No such run.".into()))?;
    let (pipeline, state) = read::load_run(&shared.ws, &shared.store, &run)
        .await
        .map_err(|e| Refusal(StatusCode::NOT_FOUND, e.message()))?;
    let result = loopwright_engine::result::PipelineResult::from_state(&state);
    let gate = matches!(link.action, LinkAction::Approve | LinkAction::Reject);
    let waits = result.waiting.as_ref().is_some_and(|w| {
        w.stage == link.stage && (w.kind == WaitKind::Approval) == gate && state.status == RunStatus::Waiting
    });
    // The run must still wait the wait the link was made for: a later escalation or gate at the
    // same stage is another question, which this link did not ask.
    let began = if waits && link.since > 0 {
        let events = loopwright_engine::Store::events(&shared.store, &run)
            .await
            .map_err(|e| Refusal(StatusCode::NOT_FOUND, e.to_string()))?;
        events.iter().rev().find(|r| r.event.run_status() == Some(RunStatus::Waiting)).map(|r| r.seq)
    } else {
        None
    };
    if waits && link.since > 0 && began != Some(link.since) {
        return Err(Refusal(
            StatusCode::CONFLICT,
            format!(
                "This link was for an earlier question at {} of run {run}, which was answered. Nothing was answered; open the run to answer the new one.",
                link.stage
            ),
        ));
    }
    if !waits {
        return Err(Refusal(
            StatusCode::CONFLICT,
            format!(
                "Run {run} no longer waits at {}: it is {}. Nothing was answered.",
                link.stage,
                state.status.as_str()
            ),
        ));
    }
    Ok((LinkFor { link, run }, state, pipeline))
}

/// A link that was checked, with its run's id.
pub(super) struct LinkFor {
    link: crate::notifications::Link,
    run: RunId,
}

/// Why a link page refuses: its status and words.
pub(super) struct Refusal(StatusCode, String);

impl Refusal {
    /// The refusal as the answer to a confirmation's `POST` (the page's script shows it).
    fn json(self) -> Response {
        crate::api::error::ApiError::new(self.0, "conflict", self.1).into_response()
    }

    fn page(self) -> Response {
        let mut response = page("link.html", &LinkPage::Refused { refused: self.1 });
        *response.status_mut() = self.0;
        response
    }
}

/// `/a/{token}`: the confirmation page of a one-tap link — the headline, and the change so far
/// (a gate) or the escalation's report (the question).
pub(super) async fn link_page(
    State(shared): State<Arc<Shared>>,
    Path(token): Path<String>,
    caller: Option<Extension<Caller>>,
) -> Response {
    let mut link = match check_link(&shared, &token).await {
        Ok(link) => link,
        Err(refusal) => return refusal.page(),
    };
    if link.sign_in {
        match signed_in(caller.as_deref()) {
            Ok(who) => link.answer_as = who.name,
            Err(SignIn::Needed) => return super::signin(&shared, StatusCode::UNAUTHORIZED, false),
            Err(SignIn::Refused(refusal)) => return refusal.page(),
        }
    }
    if let (Some(session), Some(choice)) = (link.session.clone(), link.choice.clone()) {
        return match auto_question(&shared, &link, &session).await {
            Ok(q) => page(
                "link.html",
                &LinkPage::Auto {
                    auto: true,
                    label: format!("{}. {}", choice.key, choice.label),
                    answer_as: link.answer_as,
                    why: legible(&q.why),
                    approves: if choice.is_yes() { q.approves } else { None },
                    session,
                },
            ),
            Err(refusal) => refusal.page(),
        };
    }
    let (found, state, pipeline) = match open_link(&shared, link).await {
        Ok(found) => found,
        Err(refusal) => return refusal.page(),
    };
    let status = loopwright_app::ownership::shown_status(&state);
    let link = &found.link;
    let report = read::escalation_report(&state).map(|(_, m)| render_markdown(super::without_commands(&m)));
    let gate =
        matches!(link.action, crate::notifications::LinkAction::Approve | crate::notifications::LinkAction::Reject);
    page(
        "link.html",
        &LinkPage::Run(Box::new(RunLink {
            run: found.run.to_string(),
            pipeline: state.started.as_ref().map(|s| s.pipeline.clone()),
            task: state.started.as_ref().map(|s| s.task.clone()),
            stage: link.stage.clone(),
            action: link.action,
            label: link.action.label(),
            answer_as: link.answer_as.clone(),
            headline: ops::why::run_headline(&state, status, &pipeline),
            diff: if gate { read::run_diff(&state, 400) } else { None },
            report: if gate { None } else { report },
            gate,
        })),
    )
}

/// The confirmation page of a one-tap link.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum LinkPage {
    /// The link answers nothing: why.
    Refused { refused: String },
    /// A choice of an auto loop's menu.
    Auto {
        /// Always true: the template shows the loop's question.
        auto: bool,
        session: String,
        /// The choice, as the menu draws it.
        label: String,
        /// Who answers.
        #[serde(rename = "as")]
        answer_as: String,
        /// What the loop asks, legible.
        why: String,
        /// What a yes approves, when the choice is one.
        approves: Option<String>,
    },
    /// A run's gate or escalation.
    Run(Box<RunLink>),
}

/// A link to a run's gate or escalation, as its confirmation page shows it.
#[derive(Debug, Serialize)]
struct RunLink {
    run: String,
    pipeline: Option<String>,
    task: Option<String>,
    stage: String,
    action: crate::notifications::LinkAction,
    /// The action, in words.
    label: &'static str,
    /// Who answers.
    #[serde(rename = "as")]
    answer_as: String,
    headline: Option<ops::why::Headline>,
    /// The change so far (a gate).
    diff: Option<String>,
    /// The escalation's report (a question).
    report: Option<Rendered>,
    gate: bool,
}

/// A link's answer, recorded: what the confirmation page says, and where to go next.
#[derive(Debug, Serialize)]
struct Done {
    /// What was answered, as whom.
    done: String,
    /// The run's page, or the auto loop's.
    run_url: String,
}

/// What a person adds when confirming a link.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LinkConfirm {
    #[serde(default)]
    comment: Option<String>,
    #[serde(default)]
    text: Option<String>,
}

/// `POST /a/{token}`: answers as the link says, once.
pub(super) async fn link_answer(
    State(shared): State<Arc<Shared>>,
    Path(token): Path<String>,
    caller: Option<Extension<Caller>>,
    crate::api::error::OptionalJson(body): crate::api::error::OptionalJson<LinkConfirm>,
) -> Response {
    use crate::notifications::LinkAction;
    let refuse = |code: StatusCode, message: String| Refusal(code, message).json();
    let link = match check_link(&shared, &token).await {
        Ok(link) => link,
        Err(Refusal(code, message)) => return refuse(code, message),
    };
    // Who answers, checked before the link is spent.
    let who = match link_answerer(&shared, &link, caller.as_deref()) {
        Ok(who) => who,
        Err(SignIn::Needed) => {
            return refuse(StatusCode::UNAUTHORIZED, "Sign in to the dashboard to answer with this link.".into());
        }
        Err(SignIn::Refused(Refusal(code, message))) => return refuse(code, message),
    };
    if let (Some(session), Some(choice)) = (link.session.clone(), link.choice.clone()) {
        return auto_link_answer(&shared, link, &who.name, session, choice).await;
    }
    let (found, _, _) = match open_link(&shared, link).await {
        Ok(found) => found,
        Err(Refusal(code, message)) => return refuse(code, message),
    };
    let link = found.link;
    let text = body.text.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
    if link.action == LinkAction::Fix && text.is_none() {
        return refuse(StatusCode::UNPROCESSABLE_ENTITY, "Write the guidance for the next attempt.".into());
    }
    let comment = body.comment.map(|c| c.trim().chars().take(2000).collect::<String>()).filter(|c| !c.is_empty());
    let gate = matches!(link.action, LinkAction::Approve | LinkAction::Reject);
    if gate
        && let Err(e) =
            crate::api::runs::check_gate(&shared, &found.run, link.action == LinkAction::Approve, &who).await
    {
        return e.into_response();
    }
    if let Err(Refusal(code, message)) = spend_link(shared.as_ref(), &link.key).await {
        return refuse(code, message);
    }
    use loopwright_engine::event::Answer;
    let by = who.name.clone();
    let escalation = |reply| crate::api::runs::answer_escalation(&shared, &found.run, reply, by.clone(), Via::Link);
    let answered = match link.action {
        LinkAction::Approve => crate::api::runs::answer_gate(&shared, &found.run, true, &who, comment, false).await,
        LinkAction::Reject => crate::api::runs::answer_gate(&shared, &found.run, false, &who, comment, false).await,
        LinkAction::Retry => escalation(Answer::Retry).await,
        LinkAction::Fix => {
            escalation(Answer::Fix { text: text.unwrap_or_default().chars().take(20_000).collect() }).await
        }
        LinkAction::Skip => escalation(Answer::Skip).await,
        LinkAction::Abort => escalation(Answer::Abort).await,
        LinkAction::Choose => return refuse(StatusCode::FORBIDDEN, "This link answers no run.".into()),
    };
    match answered {
        Ok(()) => axum::Json(Done {
            done: format!("{} — answered as {} on run {}", link.action.label(), who.name, found.run),
            run_url: format!("/runs/{}", found.run),
        })
        .into_response(),
        Err(e) => e.into_response(),
    }
}

/// Who used a run's link, when and how, as the run's journal says: the answer given through a
/// link to its stage after the link was made (" at 04:12:09 UTC by carol, through a one-tap
/// link: approved").
async fn used_how(shared: &Shared, link: &crate::notifications::Link) -> Option<String> {
    let run = RunId::parse(&link.run)?;
    let state = shared.folds.state(&shared.store, &run).await.ok()?;
    let given = state.answers.iter().rev().find(|a| a.stage == link.stage && a.via == Some(Via::Link))?;
    let answer = serde_json::to_value(given.answer).ok()?;
    Some(format!(
        " at {} by {}, through a one-tap link: {}",
        super::when(given.at),
        given.by,
        answer.as_str().unwrap_or_default()
    ))
}

/// Why a sign-in link does not answer for this visitor.
enum SignIn {
    /// Nobody is signed in.
    Needed,
    /// The one signed in may not answer.
    Refused(Refusal),
}

/// Who answers through `link`: the person signed in for a sign-in link; else the name its
/// target gives, with that person's role — proven only when the link was sent to them alone
/// (`recipients`); a link to a shared channel vouches for nobody, and a gate that names people
/// refuses it.
fn link_answerer(
    shared: &Shared,
    link: &crate::notifications::Link,
    caller: Option<&Caller>,
) -> Result<loopwright_app::ops::answer::Answerer, SignIn> {
    if link.sign_in {
        return signed_in(caller);
    }
    Ok(loopwright_app::ops::answer::Answerer {
        name: link.answer_as.clone(),
        role: shared.people.role_of(&link.answer_as).and_then(crate::api::auth::approver_role),
        verified: link.recipient,
        via: Via::Link,
    })
}

/// Who answers through a sign-in link: the person signed in, proven by their token, through a
/// link; nobody when no one is signed in or they may not answer.
fn signed_in(caller: Option<&Caller>) -> Result<loopwright_app::ops::answer::Answerer, SignIn> {
    let caller = caller.ok_or(SignIn::Needed)?;
    if !caller.role.may_answer() {
        let name = caller.person.as_deref().unwrap_or("this token");
        return Err(SignIn::Refused(Refusal(
            StatusCode::FORBIDDEN,
            format!("{name} may not answer: their role is {}.", caller.role.as_str()),
        )));
    }
    // The workspace's own token names nobody: its answers are the dashboard's.
    Ok(loopwright_app::ops::answer::Answerer {
        name: caller.person.clone().unwrap_or_else(|| "dashboard".to_owned()),
        role: crate::api::auth::approver_role(caller.role),
        verified: caller.person.is_some(),
        via: Via::Link,
    })
}

/// Spends the link `key` before its answer is recorded: two taps at once answer once.
pub(super) async fn spend_link(shared: &Shared, key: &str) -> Result<(), Refusal> {
    let (store, key, at) = (Arc::clone(&shared.auto_store), key.to_owned(), jiff::Timestamp::now().to_string());
    match tokio::task::spawn_blocking(move || store.notify_use_link(&key, &at)).await {
        Ok(Ok(loopwright_store::notify::LinkUse::First)) => Ok(()),
        _ => Err(Refusal(StatusCode::GONE, "This link was already used. Each link answers once.".into())),
    }
}

/// The question an auto loop's link was made for, while the loop still waits on it.
pub(super) async fn auto_question(
    shared: &Arc<Shared>,
    link: &crate::notifications::Link,
    session: &str,
) -> Result<ops::auto::Question, Refusal> {
    let (s, name) = (Arc::clone(shared), session.to_owned());
    let found = tokio::task::spawn_blocking(move || ops::auto::question(&s.ws, &s.auto_store, &name)).await;
    match found {
        Ok(Ok(Some(q))) if u64::try_from(q.asked).ok() == Some(link.since) => Ok(q),
        Ok(Err(e)) => Err(Refusal(StatusCode::NOT_FOUND, e.message())),
        _ => Err(Refusal(
            StatusCode::CONFLICT,
            format!(
                "Auto loop {session} no longer waits on the question this link was made for. Nothing was answered; open the Auto page to see where it is."
            ),
        )),
    }
}

/// `POST /a/{token}` of a link to an auto loop's menu: its choice typed, once, as `who` (the
/// link's person, or the one signed in for a sign-in link) — journaled as typed through a link.
pub(super) async fn auto_link_answer(
    shared: &Arc<Shared>,
    link: crate::notifications::Link,
    who: &str,
    session: String,
    choice: loopwright_auto::screen::Choice,
) -> Response {
    let refuse = |code: StatusCode, message: String| Refusal(code, message).json();
    if let Err(Refusal(code, message)) = auto_question(shared, &link, &session).await {
        return refuse(code, message);
    }
    if let Err(Refusal(code, message)) = spend_link(shared.as_ref(), &link.key).await {
        return refuse(code, message);
    }
    let by = format!("{who} (one-tap link)");
    let asked = i64::try_from(link.since).unwrap_or_default();
    let (s, name, picked) = (Arc::clone(shared), session.clone(), choice.clone());
    let answered = tokio::task::spawn_blocking(move || {
        ops::auto::answer_question(&s.ws, &s.auto_store, &name, asked, &picked, &by)
    })
    .await;
    match answered {
        Ok(Ok(_)) => axum::Json(Done {
            done: format!("{}. {} — typed as {who} in auto loop {session}", choice.key, choice.label),
            run_url: format!("/auto#loop-{session}"),
        })
        .into_response(),
        Ok(Err(e)) => refuse(StatusCode::CONFLICT, e.message()),
        Err(_) => refuse(StatusCode::INTERNAL_SERVER_ERROR, "the answer could not be typed".into()),
    }
}
