//! `loopwright stats`: seed 001's Retry Summary and seed 000's aggregated metrics, from the
//! journal. Failed attempts are classified with the workspace's failure-pattern library.

use std::collections::BTreeMap;

use loopwright_engine::event::{Answer, Event, FeedbackAction};
use loopwright_engine::{RunState, StageStatus, Store};
use serde::Serialize;
use serde_json::json;

use super::{Global, open_existing_store};
use crate::error::CliError;
use crate::workspace::Workspace;

/// Arguments of `stats`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How many recent runs to count.
    #[arg(long, default_value_t = 100)]
    pub runs: usize,
}

/// One stage of one run, as the summary counts it.
#[derive(Debug, Clone, Serialize)]
struct StageRun {
    run_id: String,
    stage: String,
    attempts: u32,
    result: String,
    patterns: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
struct PatternStats {
    occurrences: usize,
    stages: usize,
    succeeded: usize,
    total_attempts: u32,
}

fn pct(n: usize, of: usize) -> String {
    (n * 100 + of / 2).checked_div(of).map_or_else(|| "0%".into(), |p| format!("{p}%"))
}

/// `loopwright stats`.
pub async fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = Workspace::locate(global.dir.as_deref())?;
    let store = open_existing_store(&ws)?;
    let lib = super::patterns::library(&ws)?;
    let mut stage_runs = Vec::new();
    let mut escalations = 0usize;
    let mut skipped = 0usize;
    let mut dead_letters = 0usize;
    // Seed 000's VALIDATE and regression metrics.
    let (mut validations, mut validation_catches) = (0usize, BTreeMap::<String, usize>::new());
    let (mut regression_runs, mut regression_skipped, mut regressions_found) = (0usize, 0usize, 0usize);
    for summary in store.runs(args.runs).await? {
        let events = store.events(&summary.run_id).await?;
        let state = RunState::replay(summary.run_id.clone(), &events);
        let mut patterns: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for record in &events {
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
                        *validation_catches.entry(v.gate.clone()).or_default() += 1;
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
    let total = stage_runs.len();
    let first = stage_runs.iter().filter(|s| s.attempts == 1 && s.result == "success").count();
    let retried: Vec<&StageRun> = stage_runs.iter().filter(|s| s.attempts > 1).collect();
    let retry_success = retried.iter().filter(|s| s.result.starts_with("success")).count();
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
    if global.json {
        let aggregated: BTreeMap<&String, serde_json::Value> = by_pattern
            .iter()
            .map(|(p, s)| {
                (
                    p,
                    json!({"occurrences": s.occurrences, "success_rate": s.succeeded as f64 / s.stages.max(1) as f64,
                           "avg_attempts": f64::from(s.total_attempts) / s.stages.max(1) as f64}),
                )
            })
            .collect();
        let out = json!({
            "stages_run": total, "first_attempt_success": first, "retried": retried.len(),
            "retry_success": retry_success, "escalations": escalations, "skipped": skipped,
            "escalation_rate": escalations as f64 / total.max(1) as f64,
            "dead_letters": dead_letters, "dead_letter_rate": dead_letters as f64 / total.max(1) as f64,
            "pre_validation_runs": validations,
            "pre_validation_catch_rate": validation_catches.values().sum::<usize>() as f64 / validations.max(1) as f64,
            "most_common_pre_validation_catches": validation_catches,
            "regression_checks_run": regression_runs, "regression_checks_skipped": regression_skipped,
            "regressions_detected": regressions_found,
            "by_pattern": aggregated, "stages": stage_runs,
        });
        println!("{}", serde_json::to_string_pretty(&out).map_err(|e| CliError::Internal(e.into()))?);
        return Ok(0);
    }
    println!("## Retry Summary ({total} stage runs in the last {} runs)\n", args.runs);
    println!("| Metric | Value |\n|--------|-------|");
    println!("| Stage runs | {total} |");
    println!("| First-attempt success | {first} ({}) |", pct(first, total));
    println!("| Retried | {} ({}) |", retried.len(), pct(retried.len(), total));
    println!("| Retry success | {retry_success} |");
    println!("| Escalations | {escalations} |");
    println!("| Skipped | {skipped} |");
    println!("| Dead letters | {dead_letters} ({}) |", pct(dead_letters, total));
    if validations > 0 {
        let caught: usize = validation_catches.values().sum();
        println!("| Pre-validation catches | {caught} of {validations} ({}) |", pct(caught, validations));
    }
    if regression_runs + regression_skipped > 0 {
        println!(
            "| Regression checks | {regression_runs} run, {regression_skipped} skipped, {regressions_found} found regressions |"
        );
    }
    if !retried.is_empty() || stage_runs.iter().any(|s| !s.result.starts_with("success")) {
        println!(
            "\n### Retry Details\n\n| Run | Stage | Attempts | Result | Failures |\n|-----|-------|----------|--------|----------|"
        );
        for s in stage_runs.iter().filter(|s| s.attempts > 1 || !s.result.starts_with("success")).take(30) {
            println!("| {} | {} | {} | {} | {} |", s.run_id, s.stage, s.attempts, s.result, s.patterns.join(", "));
        }
    }
    if !by_pattern.is_empty() {
        println!(
            "\n### Common Failure Patterns\n\n| Pattern | Occurrences | Success rate | Avg attempts |\n|---------|-------------|--------------|--------------|"
        );
        let mut rows: Vec<(&String, &PatternStats)> = by_pattern.iter().collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.1.occurrences));
        for (p, s) in rows {
            println!(
                "| {p} | {} | {} | {:.1} |",
                s.occurrences,
                pct(s.succeeded, s.stages),
                f64::from(s.total_attempts) / s.stages.max(1) as f64
            );
        }
    }
    Ok(0)
}
