//! The end of a run whose work came from a forge (SPEC §14): delivered before it succeeds,
//! its CI waited for, a red round sent back to the delivering stage (up to `ci_retries`, then
//! a person asked), and its failure reported once before it ends failed.

use loopwright_spec::Pipeline;

use super::Step;
use crate::event::{Answer, Event, RunStarted, RunStatus};
use crate::forge::{CiOutcome, ForgeLink};
use crate::state::{ForgeState, RunState};

/// How many times delivering is tried (each when the forge said to try again) before the run
/// fails.
pub const DELIVERY_TRIES: usize = 5;

/// Every stage succeeded or was skipped: deliver, wait for CI, or end.
pub(super) fn succeeded(pipeline: &Pipeline, state: &RunState, started: &RunStarted, now: jiff::Timestamp) -> Step {
    let Some(link) = &started.forge else {
        return Step::Record(Event::RunFinished { status: RunStatus::Success });
    };
    let forge = &state.forge;
    let Some(delivered) = forge.delivered() else {
        return match forge.delivery_failures.last() {
            None => Step::Deliver { round: forge.round },
            Some((_, None)) => failed(state, started),
            Some(_) if forge.delivery_failures.len() >= DELIVERY_TRIES => failed(state, started),
            Some((_, Some(at))) if *at > now => Step::Wait { stage: link.stage.clone(), until: *at },
            Some(_) => Step::Deliver { round: forge.round },
        };
    };
    if !delivered.watching {
        return Step::Record(Event::RunFinished { status: RunStatus::Success });
    }
    if !forge.reviews.is_empty() {
        let target = pipeline.index_of(link.stage.as_str()).unwrap_or(0);
        return Step::Record(Event::CiRetried {
            round: forge.round + 1,
            target: link.stage.clone(),
            reset: pipeline.stages[target..].iter().map(|s| s.id.clone()).collect(),
            brief: review_brief(&forge.reviews),
        });
    }
    match forge.report() {
        // Taken up again (a resume) before CI reported on this head: it waits again.
        None => Step::Record(Event::CiAwaited { round: forge.round }),
        Some(CiOutcome::Passed { .. }) if link.merge.is_none() => {
            Step::Record(Event::RunFinished { status: RunStatus::Success })
        }
        Some(CiOutcome::Passed { .. }) => merge(forge),
        Some(failed_round @ CiOutcome::Failed { .. }) => red_round(pipeline, state, link, failed_round),
    }
}

/// CI passed on the watched head and `merge = "auto"`: merged, merge it once a person approved
/// that very head, else wait for them (again, after a failed merge).
fn merge(forge: &ForgeState) -> Step {
    let Some(head) = forge.head() else { return Step::Record(Event::CiAwaited { round: forge.round }) };
    if forge.merged {
        return Step::Record(Event::RunFinished { status: RunStatus::Success });
    }
    if forge.approved() && forge.merge_failed.as_deref() != Some(head) {
        return Step::Merge { head: head.to_owned() };
    }
    Step::Record(Event::ReviewAwaited { head: head.to_owned() })
}

/// CI failed on the current round: send it back, ask a person, or act on their answer.
fn red_round(pipeline: &Pipeline, state: &RunState, link: &ForgeLink, outcome: &CiOutcome) -> Step {
    let forge = &state.forge;
    let retry = |human: Option<&str>| {
        let target = pipeline.index_of(link.stage.as_str()).unwrap_or(0);
        let reset = pipeline.stages[target..].iter().map(|s| s.id.clone()).collect();
        Step::Record(Event::CiRetried {
            round: forge.round + 1,
            target: link.stage.clone(),
            reset,
            brief: brief(outcome, forge.round + 1, link.ci_retries, human),
        })
    };
    // Rounds sent back by reviews are not CI's: only red rounds count against `ci_retries`.
    let red = forge.reports.iter().filter(|(_, _, o)| matches!(o, CiOutcome::Failed { .. })).count();
    match &forge.answer {
        Some(Answer::Retry) => retry(None),
        Some(Answer::Fix { text }) => retry(Some(text)),
        Some(Answer::Skip) => Step::Record(Event::RunFinished { status: RunStatus::Success }),
        Some(Answer::Abort) => Step::Done(state.status),
        None if red <= link.ci_retries as usize => retry(None),
        // Taken up again while a person is asked: asked again (the comment is found, not
        // posted twice), and it waits.
        None if forge.escalated => Step::EscalateCi { round: forge.round },
        None => Step::EscalateCi { round: forge.round },
    }
}

/// A stage failed for good (or delivery did): report it where the work came from, once, then
/// end.
pub(super) fn failed(state: &RunState, started: &RunStarted) -> Step {
    if started.forge.is_some() && !state.forge.failure_reported {
        return Step::ReportFailure;
    }
    Step::Record(Event::RunFinished { status: RunStatus::Failed })
}

/// What the delivering stage's next prompt is told of a red CI round.
fn brief(outcome: &CiOutcome, round: u32, retries: u32, human: Option<&str>) -> String {
    let CiOutcome::Failed { check, url, failure, command, excerpt } = outcome else { return String::new() };
    let mut b = format!(
        "The pull request's CI failed (round {round} of at most {}): check `{check}`{}.\n",
        retries + 1,
        url.as_deref().map_or_else(String::new, |u| format!(" ({u})"))
    );
    let category = failure.pattern.as_deref().unwrap_or("unclassified");
    b.push_str(&format!("Classified: {category}, strategy {}.\n", failure.strategy));
    if let Some(command) = command {
        b.push_str(&format!("Failed step: `{}`\n", command.lines().next().unwrap_or_default()));
    }
    if !excerpt.trim().is_empty() {
        b.push_str("What it printed (the lines that matter):\n```\n");
        b.push_str(excerpt.trim_end());
        b.push_str("\n```\n");
    }
    if let Some(text) = human {
        b.push_str(&format!("Instruction from a human (high priority): {text}\n"));
    }
    b.push_str("Fix the cause; the new commit goes to the same pull request.\n");
    b
}

/// What the delivering stage's next prompt is told of people's review feedback: their words,
/// as a person's guidance.
fn review_brief(reviews: &[(String, String)]) -> String {
    let mut b = String::from("People reviewing the pull request asked for changes:\n<user_intervention>\n");
    for (by, text) in reviews {
        let who = by.split('#').next().unwrap_or(by).trim_end_matches("@github");
        b.push_str(&format!("@{who}: {}\n", text.trim()));
    }
    b.push_str("</user_intervention>\nAddress it; the new commit goes to the same pull request.\n");
    b
}
