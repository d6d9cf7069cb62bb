//! `stats`: seed 001's Retry Summary and seed 000's aggregated metrics, from the journal.
//! Failed attempts are classified with the workspace's failure-pattern library.

use std::collections::BTreeMap;

use loopwright_engine::closed_loop::effectiveness::Effectiveness;
use loopwright_engine::event::{Answer, Event, FeedbackAction};
use loopwright_engine::{RunState, StageStatus, Store};
use serde::Serialize;

use crate::error::Error;
use crate::workspace::Workspace;

/// One stage of one run, as the summary counts it.
#[derive(Debug, Clone, Serialize)]
pub struct StageRun {
    /// The run.
    pub run_id: String,
    /// The stage.
    pub stage: String,
    /// Its attempts.
    pub attempts: u32,
    /// How it ended (`success (retry worked)`, `dead_letter`, `escalated`, …).
    pub result: String,
    /// The failure pattern of each failed attempt.
    pub patterns: Vec<String>,
}

/// One failure pattern's counts.
#[derive(Debug, Default, Serialize)]
pub struct PatternStats {
    /// Failed attempts classified as it.
    pub occurrences: usize,
    /// Stage runs it occurred in.
    pub stages: usize,
    /// Of those, how many succeeded in the end.
    pub succeeded: usize,
    /// Their attempts.
    pub total_attempts: u32,
}

/// The figures `stats` shows.
#[derive(Debug, Default)]
pub struct Stats {
    /// Every stage run counted, newest run first.
    pub stage_runs: Vec<StageRun>,
    /// Escalations to a human.
    pub escalations: usize,
    /// Stages skipped by a human's answer.
    pub skipped: usize,
    /// Dead letters.
    pub dead_letters: usize,
    /// VALIDATE phases run.
    pub validations: usize,
    /// Violations caught by VALIDATE, by gate.
    pub validation_catches: BTreeMap<String, usize>,
    /// Regression checks run.
    pub regression_runs: usize,
    /// Regression gates without a baseline.
    pub regression_skipped: usize,
    /// Regression checks that found regressions.
    pub regressions_found: usize,
    /// Counts by failure pattern.
    pub by_pattern: BTreeMap<String, PatternStats>,
    /// How often each fix strategy was applied, and how often the attempt after it succeeded.
    pub by_strategy: BTreeMap<String, StrategyStats>,
    /// Each (pattern, strategy) pair's measured success, as the closed loop orders strategies by.
    pub effectiveness: Effectiveness,
    /// Pattern-learning candidates, by what a human did with them.
    pub candidates: Candidates,
}

/// Pattern-learning candidates (`.loopwright/state/dead-letters/candidate-pattern-*.md`): a
/// human accepts one by adding its pattern to `failure-patterns.yml` (or setting its
/// `status: accepted`), rejects it with `status: rejected`.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Candidates {
    /// Still waiting for review.
    pub proposed: usize,
    /// Accepted.
    pub accepted: usize,
    /// Rejected.
    pub rejected: usize,
}

impl Candidates {
    /// Counts the candidates in `dir` against the workspace's pattern library.
    fn count(dir: &std::path::Path, library: &loopwright_engine::patterns::Library) -> Self {
        let mut counts = Self::default();
        let Ok(entries) = std::fs::read_dir(dir) else { return counts };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(hash) = name.strip_prefix("candidate-pattern-").and_then(|n| n.strip_suffix(".md")) else {
                continue;
            };
            /// The part of a candidate's frontmatter counted here.
            #[derive(serde::Deserialize)]
            struct Front {
                status: Option<String>,
            }
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let status = loopwright_spec::agent::split_frontmatter(&text)
                .ok()
                .and_then(|f| serde_saphyr::from_str::<Front>(f.yaml).ok())
                .and_then(|f| f.status);
            match status.as_deref() {
                _ if library.get(&format!("learned-{hash}")).is_some() => counts.accepted += 1,
                Some("accepted") => counts.accepted += 1,
                Some("rejected") => counts.rejected += 1,
                _ => counts.proposed += 1,
            }
        }
        counts
    }
}

/// One fix strategy's record.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StrategyStats {
    /// Times applied.
    pub applied: usize,
    /// Times the attempt after it succeeded.
    pub succeeded: usize,
}

/// `stats` over the last `runs` runs.
pub async fn stats(ws: &Workspace, runs: usize) -> Result<Stats, Error> {
    let store = crate::assemble::open_existing_store(ws)?;
    let lib = crate::assemble::library(ws)?;
    let mut stage_runs = Vec::new();
    let mut escalations = 0usize;
    let mut skipped = 0usize;
    let mut dead_letters = 0usize;
    // Seed 000's VALIDATE and regression metrics.
    let (mut validations, mut validation_catches) = (0usize, BTreeMap::<String, usize>::new());
    let (mut regression_runs, mut regression_skipped, mut regressions_found) = (0usize, 0usize, 0usize);
    let mut by_strategy: BTreeMap<String, StrategyStats> = BTreeMap::new();
    let mut effectiveness = Effectiveness::default();
    for summary in store.runs(runs).await? {
        let events = store.events(&summary.run_id).await?;
        let state = RunState::replay(summary.run_id.clone(), &events);
        effectiveness.observe_run(&state);
        let mut patterns: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let succeeded: std::collections::BTreeSet<(&str, u32)> = events
            .iter()
            .filter_map(|r| match &r.event {
                Event::AttemptSucceeded { stage, attempt, .. } => Some((stage.as_str(), *attempt)),
                _ => None,
            })
            .collect();
        for record in &events {
            if let Event::FixApplied { stage, attempt, fix } = &record.event {
                let entry = by_strategy.entry(fix.strategy.as_str().to_owned()).or_default();
                entry.applied += 1;
                entry.succeeded += usize::from(succeeded.contains(&(stage.as_str(), attempt + 1)));
            }
            match &record.event {
                Event::AttemptFailed { stage, error, .. } => {
                    // The pattern journaled at the time, else a classification now.
                    let pattern = error
                        .pattern
                        .clone()
                        .or_else(|| lib.classify(&format!("{}\n{}", error.message, error.output_tail)).matched_pattern);
                    patterns
                        .entry(stage.to_string())
                        .or_default()
                        .push(pattern.unwrap_or_else(|| "unclassified".into()));
                }
                Event::Generated { stage, failure: Some(f), .. }
                | Event::Validated { stage, failure: Some(f), .. }
                | Event::Evaluated { stage, failure: Some(f), .. }
                | Event::RegressionChecked { stage, failure: Some(f), .. } => {
                    patterns.entry(stage.to_string()).or_default().push(f.key().to_owned());
                }
                _ => {}
            }
            match &record.event {
                Event::Validated { violations, .. } => {
                    validations += 1;
                    for v in violations {
                        *validation_catches.entry(v.gate.as_str().to_owned()).or_default() += 1;
                    }
                }
                Event::RegressionGate { baseline: None, .. } => regression_skipped += 1,
                Event::RegressionChecked { regressions, .. } => {
                    regression_runs += 1;
                    regressions_found += usize::from(!regressions.is_empty());
                }
                Event::DeadLettered { .. } => dead_letters += 1,
                Event::FeedbackChecked { action: FeedbackAction::Escalate, .. } | Event::LoopEscalated { .. } => {
                    escalations += 1
                }
                Event::EscalationAnswered { answer: Answer::Skip, .. } => skipped += 1,
                _ => {}
            }
        }
        for s in state.stages.iter().filter(|s| s.attempts > 0) {
            let result = match (s.status, s.closed.as_deref()) {
                (StageStatus::Success, _) if s.attempts > 1 => "success (retry worked)".to_owned(),
                (_, Some(l)) if l.dead_letter.is_some() => "dead_letter".to_owned(),
                (StageStatus::Skipped, Some(l)) if l.escalation_reason.is_some() => "skipped (escalated)".to_owned(),
                (_, Some(l)) if l.escalation.is_some() => "escalated".to_owned(),
                (other, _) => other.as_str().to_owned(),
            };
            stage_runs.push(StageRun {
                run_id: summary.run_id.to_string(),
                stage: s.id.to_string(),
                attempts: s.attempts,
                result,
                patterns: patterns.remove(s.id.as_str()).unwrap_or_default(),
            });
        }
    }
    let mut by_pattern: BTreeMap<String, PatternStats> = BTreeMap::new();
    for s in &stage_runs {
        for p in &s.patterns {
            by_pattern.entry(p.clone()).or_default().occurrences += 1;
        }
        let mut seen: Vec<&String> = s.patterns.iter().collect();
        seen.dedup();
        for p in seen {
            let e = by_pattern.entry(p.clone()).or_default();
            e.stages += 1;
            e.total_attempts += s.attempts;
            e.succeeded += usize::from(s.result.starts_with("success"));
        }
    }
    Ok(Stats {
        stage_runs,
        escalations,
        skipped,
        dead_letters,
        validations,
        validation_catches,
        regression_runs,
        regression_skipped,
        regressions_found,
        by_pattern,
        by_strategy,
        effectiveness,
        candidates: Candidates::count(&crate::files::dead_letters_dir(&ws.runs_dir()), &lib),
    })
}

impl Stats {
    /// Stage runs that succeeded at the first attempt.
    pub fn first_attempt_success(&self) -> usize {
        self.stage_runs.iter().filter(|s| s.attempts == 1 && s.result == "success").count()
    }

    /// Stage runs with more than one attempt.
    pub fn retried(&self) -> Vec<&StageRun> {
        self.stage_runs.iter().filter(|s| s.attempts > 1).collect()
    }

    /// The figures with the rates they give: `stats --json` and `GET /api/stats`.
    pub fn report(&self) -> Report {
        let total = self.stage_runs.len();
        let rate = |n: usize, of: usize| n as f64 / of.max(1) as f64;
        let retried = self.retried();
        let retry_success = retried.iter().filter(|s| s.result.starts_with("success")).count();
        Report {
            stages_run: total,
            first_attempt_success: self.first_attempt_success(),
            retried: retried.len(),
            retry_success,
            escalations: self.escalations,
            skipped: self.skipped,
            escalation_rate: rate(self.escalations, total),
            dead_letters: self.dead_letters,
            dead_letter_rate: rate(self.dead_letters, total),
            pre_validation_runs: self.validations,
            pre_validation_catch_rate: rate(self.validation_catches.values().sum(), self.validations),
            most_common_pre_validation_catches: self.validation_catches.clone(),
            regression_checks_run: self.regression_runs,
            regression_checks_skipped: self.regression_skipped,
            regressions_detected: self.regressions_found,
            by_pattern: self
                .by_pattern
                .iter()
                .map(|(p, s)| {
                    let report = PatternReport {
                        occurrences: s.occurrences,
                        success_rate: rate(s.succeeded, s.stages),
                        avg_attempts: f64::from(s.total_attempts) / s.stages.max(1) as f64,
                    };
                    (p.clone(), report)
                })
                .collect(),
            stages: self.stage_runs.clone(),
            by_strategy: self
                .by_strategy
                .iter()
                .map(|(name, s)| {
                    let report = StrategyReport {
                        applied: s.applied,
                        succeeded: s.succeeded,
                        success_rate: rate(s.succeeded, s.applied),
                    };
                    (name.clone(), report)
                })
                .collect(),
            strategy_effectiveness: self
                .effectiveness
                .pairs()
                .map(|(pattern, strategy, r)| PairReport {
                    pattern: pattern.to_owned(),
                    strategy,
                    attempts: r.attempts,
                    succeeded: r.succeeded,
                    success_rate: r.rate(),
                    verdict: r.verdict(),
                })
                .collect(),
            candidate_patterns: self.candidates.clone(),
        }
    }
}

/// The figures `stats --json` prints, with their rates (a rate of nothing is 0).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Stage runs counted.
    pub stages_run: usize,
    /// Of them, passed at the first attempt.
    pub first_attempt_success: usize,
    /// Of them, with more than one attempt.
    pub retried: usize,
    /// Of those, passed in the end.
    pub retry_success: usize,
    /// Escalations to a person.
    pub escalations: usize,
    /// Stages a person's answer skipped.
    pub skipped: usize,
    /// Escalations per stage run.
    pub escalation_rate: f64,
    /// Dead letters.
    pub dead_letters: usize,
    /// Dead letters per stage run.
    pub dead_letter_rate: f64,
    /// VALIDATE phases run.
    pub pre_validation_runs: usize,
    /// Violations VALIDATE caught per phase run.
    pub pre_validation_catch_rate: f64,
    /// Violations caught, by gate.
    pub most_common_pre_validation_catches: BTreeMap<String, usize>,
    /// Regression checks run.
    pub regression_checks_run: usize,
    /// Regression gates without a baseline.
    pub regression_checks_skipped: usize,
    /// Regression checks that found regressions.
    pub regressions_detected: usize,
    /// By failure pattern.
    pub by_pattern: BTreeMap<String, PatternReport>,
    /// Every stage run counted, newest run first.
    pub stages: Vec<StageRun>,
    /// By fix strategy.
    pub by_strategy: BTreeMap<String, StrategyReport>,
    /// Each (pattern, strategy) pair's measured success.
    pub strategy_effectiveness: Vec<PairReport>,
    /// Pattern-learning candidates.
    pub candidate_patterns: Candidates,
}

/// A failure pattern in [`Report`].
#[derive(Debug, Clone, Serialize)]
pub struct PatternReport {
    /// Failed attempts classified as it.
    pub occurrences: usize,
    /// Of the stage runs it occurred in, the share that passed in the end.
    pub success_rate: f64,
    /// Their attempts, on average.
    pub avg_attempts: f64,
}

/// A fix strategy in [`Report`].
#[derive(Debug, Clone, Serialize)]
pub struct StrategyReport {
    /// Times applied.
    pub applied: usize,
    /// Times the attempt after it passed.
    pub succeeded: usize,
    /// `succeeded / applied`.
    pub success_rate: f64,
}

/// A (pattern, strategy) pair's record in [`Report`].
#[derive(Debug, Clone, Serialize)]
pub struct PairReport {
    /// The failure pattern.
    pub pattern: String,
    /// The strategy.
    pub strategy: loopwright_engine::closed_loop::Strategy,
    /// Fixes whose next attempt has an outcome.
    pub attempts: u32,
    /// Of those, the next attempt passed.
    pub succeeded: u32,
    /// `succeeded / attempts`.
    pub success_rate: f64,
    /// How far it can be trusted.
    pub verdict: loopwright_engine::closed_loop::effectiveness::Verdict,
}
