//! Strategy effectiveness: how often each (pattern, strategy) pair's fix was followed by an
//! attempt that passed, measured from the journal across runs. Once a pair has
//! [`MIN_SAMPLES`] outcomes, ANALYZE tries a pattern's strategies in order of measured success
//! rather than the library's fixed order; a pair under [`UNRELIABLE`] is flagged, one over
//! [`RELIABLE`] marked reliable.

use std::collections::BTreeMap;

use serde::Serialize;

use loopwright_journal::closed_loop::Strategy;
use loopwright_journal::state::{LoopState, RunState};
use loopwright_journal::store::{Store, StoreError};

/// Outcomes a pair needs before its rate counts.
pub const MIN_SAMPLES: u32 = 10;
/// The newest runs whose journals are measured.
pub const MEASURED_RUNS: usize = 200;
/// A measured rate below this is flagged.
pub const UNRELIABLE: f64 = 0.3;
/// A measured rate above this is reliable.
pub const RELIABLE: f64 = 0.8;
/// What a strategy not yet measured counts as when strategies are ordered: neither good nor
/// bad, so a measured strategy moves ahead of it only by doing better than even.
const UNMEASURED: f64 = 0.5;

/// One (pattern, strategy) pair's record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Record {
    /// Fixes whose next attempt has an outcome.
    pub attempts: u32,
    /// Of those, the next attempt passed.
    pub succeeded: u32,
}

/// How far a pair's record can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Fewer than [`MIN_SAMPLES`] outcomes.
    TooFew,
    /// Measured below [`UNRELIABLE`].
    Flagged,
    /// Measured, in between.
    Measured,
    /// Measured above [`RELIABLE`].
    Reliable,
}

impl Verdict {
    /// As written in `stats --json` and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::TooFew => "too_few",
            Verdict::Flagged => "flagged",
            Verdict::Measured => "measured",
            Verdict::Reliable => "reliable",
        }
    }
}

impl Record {
    /// The share of fixes followed by a passing attempt.
    pub fn rate(&self) -> f64 {
        f64::from(self.succeeded) / f64::from(self.attempts.max(1))
    }

    /// What the record says.
    pub fn verdict(&self) -> Verdict {
        match self.rate() {
            _ if self.attempts < MIN_SAMPLES => Verdict::TooFew,
            r if r < UNRELIABLE => Verdict::Flagged,
            r if r > RELIABLE => Verdict::Reliable,
            _ => Verdict::Measured,
        }
    }

    /// Its rate when it has enough samples.
    fn measured(&self) -> Option<f64> {
        (self.attempts >= MIN_SAMPLES).then(|| self.rate())
    }
}

/// Every pair's record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Effectiveness {
    pairs: BTreeMap<(String, Strategy), Record>,
}

/// A pattern's strategies in the order ANALYZE tries them.
#[derive(Debug, Clone, PartialEq)]
pub struct Ordered {
    /// The strategies, best first.
    pub strategies: Vec<Strategy>,
    /// Why the order differs from the fixed one (`None` when it does not).
    pub because: Option<String>,
}

impl Effectiveness {
    /// Measures the newest `runs` runs of the journal. The measure only orders strategies: an
    /// earlier run whose journal cannot be read is left out rather than failing the run being
    /// analyzed (a store that cannot list its runs still fails).
    pub async fn measure<S: Store + ?Sized>(store: &S, runs: usize) -> Result<Self, StoreError> {
        let mut measured = Self::default();
        for summary in store.runs(runs).await? {
            if let Ok(events) = store.events(&summary.run_id).await {
                measured.observe_run(&RunState::replay(summary.run_id, &events));
            }
        }
        Ok(measured)
    }

    /// Adds every closed loop of a run.
    pub fn observe_run(&mut self, state: &RunState) {
        for lp in state.stages.iter().filter_map(|s| s.closed.as_deref()) {
            self.observe(lp);
        }
    }

    /// Adds one stage's closed loop: each fix whose next attempt has an outcome (it failed
    /// again, or the loop succeeded with it).
    pub fn observe(&mut self, lp: &LoopState) {
        let its = &lp.iterations;
        for (k, it) in its.iter().enumerate() {
            let (Some(failure), Some(_), Some(strategy)) =
                (&it.failure, &it.fix, it.analysis.as_ref().and_then(|a| a.strategy))
            else {
                continue;
            };
            let passed = match its.get(k + 1) {
                Some(next) if next.failure.is_some() => false,
                Some(_) if k + 2 == its.len() && lp.succeeded => true,
                _ => continue, // still running, or ended without an outcome (cancelled)
            };
            let r = self.pairs.entry((failure.key().to_owned(), strategy)).or_default();
            r.attempts += 1;
            r.succeeded += u32::from(passed);
        }
    }

    /// A pair's record.
    pub fn record(&self, pattern: &str, strategy: Strategy) -> Record {
        self.pairs.get(&(pattern.to_owned(), strategy)).copied().unwrap_or_default()
    }

    /// Every pair, by pattern then strategy.
    pub fn pairs(&self) -> impl Iterator<Item = (&str, Strategy, Record)> {
        self.pairs.iter().map(|((p, s), r)| (p.as_str(), *s, *r))
    }

    /// `fixed` (a pattern's strategy, its alternatives, the universal fallbacks) reordered by
    /// measured success: a strategy with [`MIN_SAMPLES`] outcomes counts at its rate, one
    /// without at 0.5; equals keep the fixed order.
    pub fn order(&self, pattern: &str, fixed: &[Strategy]) -> Ordered {
        let score = |s: Strategy| self.record(pattern, s).measured().unwrap_or(UNMEASURED);
        let mut strategies = fixed.to_vec();
        strategies.sort_by(|a, b| score(*b).total_cmp(&score(*a)));
        let because = (strategies != fixed).then(|| {
            let shown: Vec<String> = fixed
                .iter()
                .filter_map(|s| {
                    let r = self.record(pattern, *s);
                    r.measured().map(|rate| format!("{s} {}/{} ({rate:.2})", r.succeeded, r.attempts))
                })
                .collect();
            format!(
                "measured across runs for {pattern}: {}; strategies without {MIN_SAMPLES} outcomes count as 0.5",
                shown.join(", ")
            )
        });
        Ordered { strategies, because }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str, u32, u32)]) -> Effectiveness {
        Effectiveness {
            pairs: pairs
                .iter()
                .map(|(p, s, n, ok)| {
                    ((p.to_string(), s.parse().expect("a strategy")), Record { attempts: *n, succeeded: *ok })
                })
                .collect(),
        }
    }

    fn names(list: &[&str]) -> Vec<Strategy> {
        list.iter().map(|s| s.parse().expect("a strategy")).collect()
    }

    #[test]
    fn verdicts_need_ten_samples() {
        assert_eq!(Record { attempts: 9, succeeded: 0 }.verdict(), Verdict::TooFew);
        assert_eq!(Record { attempts: 10, succeeded: 2 }.verdict(), Verdict::Flagged);
        assert_eq!(Record { attempts: 10, succeeded: 3 }.verdict(), Verdict::Measured);
        assert_eq!(Record { attempts: 10, succeeded: 8 }.verdict(), Verdict::Measured);
        assert_eq!(Record { attempts: 10, succeeded: 9 }.verdict(), Verdict::Reliable);
    }

    #[test]
    fn measured_strategies_are_ordered_by_success_and_unmeasured_ones_count_as_even() {
        let fixed = names(&["auto_fix", "context_expand", "analyze_then_fix"]);
        // Too few samples: the fixed order.
        let e = with(&[("lint-error", "auto_fix", 9, 0)]);
        assert_eq!(e.order("lint-error", &fixed), Ordered { strategies: fixed.clone(), because: None });
        // auto_fix flagged: it goes last; the others keep their order.
        let e = with(&[("lint-error", "auto_fix", 10, 1), ("type-error", "context_expand", 10, 0)]);
        let o = e.order("lint-error", &fixed);
        assert_eq!(o.strategies, names(&["context_expand", "analyze_then_fix", "auto_fix"]));
        assert_eq!(
            o.because.as_deref(),
            Some(
                "measured across runs for lint-error: auto_fix 1/10 (0.10); strategies without 10 outcomes count as 0.5"
            )
        );
        // A reliable alternative moves first.
        let e = with(&[("lint-error", "analyze_then_fix", 12, 11), ("lint-error", "auto_fix", 10, 6)]);
        assert_eq!(
            e.order("lint-error", &fixed).strategies,
            names(&["analyze_then_fix", "auto_fix", "context_expand"])
        );
    }
}
