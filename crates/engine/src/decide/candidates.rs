//! Best of N (SPEC §16): the winner among a round's candidates, chosen by the stage's
//! selectors among those whose checks passed; when none passed, the most promising failure.

use std::cmp::Ordering;

use loopwright_spec::pipeline::Selector;

use crate::event::CandidateResult;

/// One candidate as the choice sees it.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// Which candidate.
    pub candidate: u32,
    /// Its agent.
    pub agent: &'a str,
    /// What it did.
    pub result: &'a CandidateResult,
}

/// The choice of a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The winner, when a candidate passed.
    pub winner: Option<u32>,
    /// The most promising candidate: the winner, else the failure whose feedback the next
    /// attempt gets.
    pub best: Option<u32>,
    /// Why, in words.
    pub why: String,
}

/// The candidates of a round that ended, as the choice sees them.
pub fn entries_of(candidates: &[crate::state::CandidateState]) -> Vec<Entry<'_>> {
    candidates
        .iter()
        .filter_map(|c| Some(Entry { candidate: c.candidate, agent: &c.agent, result: c.result.as_ref()? }))
        .collect()
}

/// How many checks a candidate passed.
fn passed_checks(r: &CandidateResult) -> usize {
    r.checks.iter().filter(|(_, ok)| *ok).count()
}

/// How `a` and `b` compare by one selector (less is better).
fn by(selector: Selector, a: &CandidateResult, b: &CandidateResult) -> Ordering {
    match selector {
        Selector::Checks => passed_checks(b).cmp(&passed_checks(a)),
        Selector::SmallestDiff => a.files.len().cmp(&b.files.len()),
        Selector::Cheapest => {
            a.tokens.cmp(&b.tokens).then(a.cost_usd.unwrap_or(0.0).total_cmp(&b.cost_usd.unwrap_or(0.0)))
        }
    }
}

/// What a candidate did, in a few words.
fn said(e: &Entry<'_>) -> String {
    let r = e.result;
    format!(
        "candidate {} (agent {}): {} of {} check{} passed, {} file{} changed, {} tokens",
        e.candidate + 1,
        e.agent,
        passed_checks(r),
        r.checks.len(),
        if r.checks.len() == 1 { "" } else { "s" },
        r.files.len(),
        if r.files.len() == 1 { "" } else { "s" },
        r.tokens
    )
}

/// Chooses the winner of a round: among the candidates that passed, the first by `select`
/// (each selector in turn breaks the ties of the one before, then the lower number); when
/// none passed, the most promising failure (most checks passed, then the smallest change).
pub fn choose(select: &[Selector], entries: &[Entry<'_>]) -> Choice {
    let order = |a: &&Entry<'_>, b: &&Entry<'_>, selectors: &[Selector]| {
        selectors
            .iter()
            .map(|s| by(*s, a.result, b.result))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
            .then(a.candidate.cmp(&b.candidate))
    };
    let mut passed: Vec<&Entry<'_>> = entries.iter().filter(|e| e.result.passed).collect();
    if passed.is_empty() {
        let mut failed: Vec<&Entry<'_>> = entries.iter().collect();
        failed.sort_by(|a, b| order(a, b, &[Selector::Checks, Selector::SmallestDiff]));
        let best = failed.first().map(|e| e.candidate);
        let why = match failed.first() {
            Some(e) => format!(
                "none of the {} candidates passed; the most promising was {}{}",
                entries.len(),
                said(e),
                e.result.error.as_ref().map(|m| format!(" — {m}")).unwrap_or_default()
            ),
            None => "no candidate ran".to_owned(),
        };
        return Choice { winner: None, best, why };
    }
    passed.sort_by(|a, b| order(a, b, select));
    let winner = passed[0];
    let mut why = format!("{} won", said(winner));
    match passed.get(1) {
        None => why.push_str("; the only one whose checks passed"),
        Some(next) => {
            let decided = select.iter().find(|s| by(**s, winner.result, next.result).is_ne());
            match decided {
                Some(s) => why.push_str(&format!(" on {} over {}", s.as_str(), said(next))),
                None => why.push_str(&format!("; tied with {} on every selector, the lower number wins", said(next))),
            }
        }
    }
    let failed = entries.len() - passed.len();
    if failed > 0 {
        why.push_str(&format!("; {failed} did not pass"));
    }
    Choice { winner: Some(winner.candidate), best: Some(winner.candidate), why }
}
