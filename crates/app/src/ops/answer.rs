//! Answers a person gives a run — approve or reject a gate, respond to an escalation — and
//! the claim that goes with them: the answer and `run_resumed` are one compare-and-append on
//! the journal as it was read, so of two answering at once exactly one goes on.

use loopwright_engine::event::{Answer, Via};
use loopwright_engine::{Event, EventRecord, Owner, RunState, Stopper};
use loopwright_spec::pipeline::{Approver, ApproverRole};
use loopwright_spec::{Pipeline, StageId};
use loopwright_store::Journal;

use crate::assemble::RunEngine;
use crate::error::Error;
use crate::ownership::{owner_alive, resumable};
use crate::record;

/// Who answers a gate, as far as the channel the answer came through vouches for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answerer {
    /// The name the answer is journaled under.
    pub name: String,
    /// The highest role that answers gates they hold (`None`: they may not answer at all).
    pub role: Option<ApproverRole>,
    /// The name is proven: a person's own token, a trusted proxy's header, a link issued to
    /// them. Not for the workspace's own token or the command line, which say who they are.
    pub verified: bool,
    /// Where the answer came from.
    pub via: Via,
}

/// Why `who` may not give this answer (`granted`: approve) to a gate that names `approvers`
/// (empty: anyone who may answer) of a run started by `started_by`, with `prevent_self` on or
/// off; `None` when they may. A person named by the gate must be proven to be them; a role
/// named is held by whoever holds it or a higher one.
pub fn gate_refusal(
    approvers: &[Approver],
    prevent_self: bool,
    started_by: Option<&str>,
    who: &Answerer,
    granted: bool,
) -> Option<String> {
    let holds = |role: ApproverRole| who.role.is_some_and(|held| held >= role);
    let named = approvers.iter().any(|a| match a {
        Approver::Person(name) => who.verified && *name == who.name,
        Approver::Role(role) => holds(*role),
    });
    if !approvers.is_empty() && !named {
        let list = approvers.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        let whom =
            if who.verified { who.name.clone() } else { format!("an answer as `{}` that no token proves", who.name) };
        return Some(format!("this gate may be answered only by {list}; {whom} is not one of them"));
    }
    if granted && prevent_self && started_by == Some(who.name.as_str()) {
        return Some(format!(
            "{} started this run: its gate needs someone else's approval (prevent_self_approval)",
            who.name
        ));
    }
    None
}

/// Who may answer a run's gates: its pipeline's `approvers` and `prevent_self_approval`, and
/// the workspace's default for the latter (`[serve] prevent_self_approval`).
#[derive(Debug, Clone, Copy)]
pub struct GatePolicy<'a> {
    /// The run's pipeline.
    pub pipeline: &'a Pipeline,
    /// Whether a gate that does not say refuses its starter's approval.
    pub prevent_self: bool,
}

impl GatePolicy<'_> {
    /// Whether `who` may approve (`granted`) or reject the gate the run waits at: forbidden
    /// with why when not (the run keeps waiting). [`approval`] asks it of every answer it
    /// makes; a prompt asks it before it asks.
    pub fn allows(&self, state: &RunState, granted: bool, who: &Answerer) -> Result<(), Error> {
        let Some(gate) = state.waiting_for_approval().and_then(|s| self.pipeline.stage(s.id.as_str())) else {
            return Ok(());
        };
        let prevent_self = gate.prevent_self_approval.unwrap_or(self.prevent_self);
        let started_by = state.started.as_ref().and_then(|s| s.by.as_deref());
        match gate_refusal(&gate.approvers, prevent_self, started_by, who, granted) {
            Some(why) => Err(Error::Forbidden(format!("stage `{}`: {why}", gate.id))),
            None => Ok(()),
        }
    }
}

/// `approve`/`reject`: `who`'s answer to the approval gate the run waits at — forbidden with
/// why when the gate's policy does not let them give it (the run keeps waiting), so no channel
/// can journal an answer the gate refuses.
pub fn approval(
    policy: GatePolicy<'_>,
    state: &RunState,
    granted: bool,
    who: &Answerer,
    comment: Option<String>,
    rollback: bool,
) -> Result<Event, Error> {
    let Some(stage) = state.waiting_for_approval().map(|s| s.id.clone()) else {
        return Err(Error::conflict(format!(
            "run {} is not waiting for an approval (its status is {})",
            state.run_id,
            crate::ownership::shown_status(state).as_str()
        )));
    };
    policy.allows(state, granted, who)?;
    let (by, via) = (who.name.clone(), Some(who.via));
    Ok(if granted {
        Event::ApprovalGranted { stage, by, comment, via }
    } else {
        Event::ApprovalRejected { stage, by, comment, rollback, via }
    })
}

/// Parses an answer to an escalation: `retry`, `skip`, `abort`, or `fix` with its text.
pub fn parse_answer(word: &str, text: Option<&str>) -> Result<Answer, Error> {
    let text = text.map(str::trim).unwrap_or_default();
    match word {
        "retry" => Ok(Answer::Retry),
        "skip" => Ok(Answer::Skip),
        "abort" => Ok(Answer::Abort),
        "fix" if text.is_empty() => {
            Err(Error::usage("`fix` needs the instruction: `loopwright respond RUN fix \"use the v2 API\"`"))
        }
        "fix" => Ok(Answer::Fix { text: text.to_owned() }),
        other => {
            Err(Error::usage(format!("`{other}` is not an answer: retry, skip, abort, or fix with the instruction")))
        }
    }
}

/// `respond`: the answer to the escalation the run waits on.
pub fn escalation(state: &RunState, answer: Answer, by: String, via: Via) -> Result<(StageId, Event), Error> {
    let Some(stage) = state.waiting_for_escalation().map(|s| s.id.clone()) else {
        return Err(Error::conflict(format!(
            "run {} is not waiting on an escalation (its status is {})",
            state.run_id,
            crate::ownership::shown_status(state).as_str()
        )));
    };
    Ok((stage.clone(), Event::EscalationAnswered { stage, answer, by, via: Some(via) }))
}

/// Seed 001 "Skip Handling": the stages after `stage` that read what it produced, and what
/// that is — said when a person skips a stage.
pub fn skip_impact(pipeline: &Pipeline, state: &RunState, stage: &StageId) -> String {
    let produced: Vec<String> = pipeline.stage(stage.as_str()).map(|s| s.outputs.clone()).unwrap_or_default();
    let dependents: Vec<String> = pipeline
        .stages
        .iter()
        .skip_while(|s| &s.id != stage)
        .skip(1)
        .filter(|s| s.inputs.iter().any(|i| produced.contains(i)))
        .map(|s| s.id.to_string())
        .collect();
    let attempts = state.stage(stage.as_str()).map_or(0, |s| s.attempts);
    let mut text = format!("[SKIPPED] stage `{stage}`\n  Reason: user escalation after {attempts} failed attempt(s)\n");
    if dependents.is_empty() {
        text.push_str("  Impact: no later stage reads its outputs\n");
    } else {
        text.push_str(&format!(
            "  Impact: warning: {} read{} its outputs ({}) and may fail\n",
            dependents.join(", "),
            if dependents.len() == 1 { "s" } else { "" },
            produced.join(", ")
        ));
    }
    text
}

/// True when the answer should be left to the run's owner: a live daemon owns it and acts on
/// answers it finds in the journal (SPEC §9 "Ownership").
pub fn owner_acts(state: &RunState) -> bool {
    state.owner.as_ref().is_some_and(|o| o.daemon) && owner_alive(state)
}

/// True when `run` was submitted to workers (`run --submit`): answers are recorded for them,
/// and a worker continues the run.
pub async fn submitted(store: &Journal, run: &loopwright_engine::RunId) -> Result<bool, Error> {
    match store.postgres() {
        Some(pg) => Ok(pg.submission(run).await?.is_some()),
        None => Ok(false),
    }
}

/// Records an answer to a run workers drive, and queues the run again when it goes on after
/// it (`run_queued`): whichever worker claims it next continues it (compare-and-append).
pub async fn queue_for_workers(store: &Journal, state: &mut RunState, answer: Event) -> Result<(), Error> {
    let mut after = state.clone();
    after.apply(&EventRecord { seq: after.last_seq + 1, at: jiff::Timestamp::now(), event: answer.clone() });
    let mut events = vec![answer];
    if resumable(after.status) {
        events.push(Event::RunQueued {});
    }
    record::after_read(store, state, events).await
}

/// Records an answer given through the daemon: for workers to act on when the run was
/// submitted to them ([`queue_for_workers`]; true), else claimed for `owner`, the daemon
/// ([`claim_in_store`]).
pub async fn record_answer(store: &Journal, state: &mut RunState, answer: Event, owner: Owner) -> Result<bool, Error> {
    if submitted(store, &state.run_id).await? {
        queue_for_workers(store, state, answer).await?;
        Ok(true)
    } else {
        claim_in_store(store, state, Some(answer), owner).await?;
        Ok(false)
    }
}

/// Records an answer for the live owner to act on (compare-and-append: nothing is recorded
/// when the run changed since it was read).
pub async fn record_for_owner(store: &Journal, state: &mut RunState, answer: Event) -> Result<(), Error> {
    record::after_read(store, state, vec![answer]).await
}

/// Claims the run for `owner` with the answer (if any) and `run_resumed`, in one
/// compare-and-append on the journal as `state` read it.
pub async fn claim<X: Stopper>(
    engine: &mut RunEngine<'_, X>,
    state: &mut RunState,
    answer: Option<Event>,
    owner: Owner,
) -> Result<(), Error> {
    let read = state.last_seq;
    let claim = claim_events(state, answer, owner, None);
    if claim.is_empty() {
        return Ok(());
    }
    match engine.record_after(state, claim).await {
        Ok(()) => Ok(()),
        Err(e) => Err(record::moved_on(engine.store, &state.run_id, read, e).await),
    }
}

/// Claims the run for `owner` with the answer (if any) and `run_resumed` (when the run goes on
/// after the answer), in one compare-and-append on the journal as `state` read it, without
/// driving it: the daemon answers the request, and a host drives the run.
pub async fn claim_in_store(
    store: &Journal,
    state: &mut RunState,
    answer: Option<Event>,
    owner: Owner,
) -> Result<(), Error> {
    let claim = claim_events(state, answer, owner, None);
    if claim.is_empty() {
        return Ok(());
    }
    record::after_read(store, state, claim).await
}

/// Claims an interrupted run for `owner` because `by` asked to resume it (compare-and-append,
/// as [`claim_in_store`]); `run_resumed` names who asked.
pub async fn resume_in_store(store: &Journal, state: &mut RunState, owner: Owner, by: String) -> Result<(), Error> {
    let claim = claim_events(state, None, owner, Some(by));
    if claim.is_empty() {
        return Ok(());
    }
    record::after_read(store, state, claim).await
}

/// The events that claim a run: the answer, then `run_resumed` when the run goes on after it.
fn claim_events(state: &RunState, answer: Option<Event>, owner: Owner, by: Option<String>) -> Vec<Event> {
    let mut claim: Vec<Event> = answer.into_iter().collect();
    let mut after = state.clone();
    for event in &claim {
        after.apply(&EventRecord { seq: after.last_seq + 1, at: jiff::Timestamp::now(), event: event.clone() });
    }
    if resumable(after.status) {
        claim.push(Event::RunResumed { owner, by });
    }
    claim
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// (approvers, prevent_self, started_by, who, approve, refusal)
    type Row = (Vec<Approver>, bool, Option<&'static str>, Answerer, bool, Option<String>);

    fn who(name: &str, role: Option<ApproverRole>, verified: bool) -> Answerer {
        Answerer { name: name.into(), role, verified, via: Via::Dashboard }
    }

    #[test]
    fn who_may_answer_a_gate_a_table() {
        let bob = Approver::Person("bob".into());
        let admins = Approver::Role(ApproverRole::Admin);
        let approvers = Approver::Role(ApproverRole::Approver);
        let (approver, admin) = (Some(ApproverRole::Approver), Some(ApproverRole::Admin));
        let only = |list: &str, whom: &str| {
            Some(format!("this gate may be answered only by {list}; {whom} is not one of them"))
        };
        let own = |name: &str| {
            Some(format!("{name} started this run: its gate needs someone else's approval (prevent_self_approval)"))
        };
        // (approvers, prevent_self, started_by, who, approve) → refusal
        let table: Vec<Row> = vec![
            // No list: anyone who may answer.
            (vec![], false, Some("carol"), who("carol", approver, true), true, None),
            // A named person, proven by their token.
            (vec![bob.clone()], false, None, who("bob", approver, true), true, None),
            (vec![bob.clone()], false, None, who("carol", admin, true), true, only("bob", "carol")),
            // A name nothing proves (the workspace's token, the command line, a link) is not bob.
            (
                vec![bob.clone()],
                false,
                None,
                who("bob", admin, false),
                true,
                only("bob", "an answer as `bob` that no token proves"),
            ),
            (
                vec![bob.clone()],
                false,
                None,
                who("bob", admin, false),
                false,
                only("bob", "an answer as `bob` that no token proves"),
            ),
            // A role: held, or a higher one held; proven or not (the token says the role).
            (vec![bob.clone(), admins.clone()], false, None, who("dana", admin, false), true, None),
            (vec![admins.clone()], false, None, who("dana", approver, true), true, only("role:admin", "dana")),
            (vec![approvers.clone()], false, None, who("erin", admin, true), true, None),
            (vec![approvers], false, None, who("vic", None, true), true, only("role:approver", "vic")),
            // The starter may not approve; they may reject; others may approve.
            (vec![], true, Some("carol"), who("carol", approver, true), true, own("carol")),
            (vec![], true, Some("carol"), who("carol", approver, true), false, None),
            (vec![], true, Some("carol"), who("alice", approver, true), true, None),
            (vec![], false, Some("carol"), who("carol", approver, true), true, None),
            // Claiming the starter's name does not get around it.
            (vec![], true, Some("carol"), who("carol", admin, false), true, own("carol")),
            // A run nobody is named as starting has no starter to refuse.
            (vec![], true, None, who("carol", approver, true), true, None),
            // Both: the list first.
            (vec![bob], true, Some("bob"), who("bob", approver, true), true, own("bob")),
            (vec![admins], true, Some("bob"), who("carol", approver, true), true, only("role:admin", "carol")),
        ];
        for (i, (list, prevent, started_by, answerer, granted, expected)) in table.into_iter().enumerate() {
            assert_eq!(gate_refusal(&list, prevent, started_by, &answerer, granted), expected, "row {i}");
        }
    }
}
