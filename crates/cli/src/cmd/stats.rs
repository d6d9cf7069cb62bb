//! `loopwright stats`: seed 001's Retry Summary and seed 000's aggregated metrics, from the
//! journal. Failed attempts are classified with the workspace's failure-pattern library.

use loopwright_app::ops::stats::{PatternStats, Stats};
use loopwright_engine::closed_loop::effectiveness::{MIN_SAMPLES, RELIABLE, UNRELIABLE, Verdict};

use super::Global;
use crate::error::CliError;

/// Arguments of `stats`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How many recent runs to count.
    #[arg(long, default_value_t = 100)]
    pub runs: usize,
}

fn pct(n: usize, of: usize) -> String {
    (n * 100 + of / 2).checked_div(of).map_or_else(|| "0%".into(), |p| format!("{p}%"))
}

/// `loopwright stats`.
pub async fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    let stats = loopwright_app::ops::stats::stats(&ws, args.runs).await?;
    if global.json {
        println!("{}", serde_json::to_string_pretty(&stats.report()).map_err(|e| CliError::Internal(e.into()))?);
        return Ok(0);
    }
    let Stats { stage_runs, validation_catches, by_pattern, .. } = &stats;
    let (escalations, skipped, dead_letters, validations) =
        (stats.escalations, stats.skipped, stats.dead_letters, stats.validations);
    let (regression_runs, regression_skipped, regressions_found) =
        (stats.regression_runs, stats.regression_skipped, stats.regressions_found);
    let total = stage_runs.len();
    let first = stats.first_attempt_success();
    let retried = stats.retried();
    let retry_success = retried.iter().filter(|s| s.result.starts_with("success")).count();
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
    let pairs: Vec<_> = stats.effectiveness.pairs().collect();
    if !pairs.is_empty() {
        println!(
            "\n### Strategy Effectiveness\n\nA fix counts when the attempt after it passed. With {MIN_SAMPLES} outcomes or more a pair is measured, and the closed loop tries a pattern's strategies by measured success.\n\n| Pattern | Strategy | Fixes | Next attempt passed | Verdict |\n|---------|----------|-------|---------------------|---------|"
        );
        for (pattern, strategy, r) in pairs {
            let verdict = match r.verdict() {
                Verdict::TooFew => format!("too few samples ({} of {MIN_SAMPLES})", r.attempts),
                Verdict::Flagged => format!("flagged: under {UNRELIABLE}"),
                Verdict::Measured => "measured".to_owned(),
                Verdict::Reliable => format!("reliable: over {RELIABLE}"),
            };
            println!(
                "| {pattern} | {strategy} | {} | {} ({}) | {verdict} |",
                r.attempts,
                r.succeeded,
                pct(r.succeeded as usize, r.attempts as usize)
            );
        }
    }
    let c = &stats.candidates;
    if c.proposed + c.accepted + c.rejected > 0 {
        println!(
            "\nCandidate patterns: {} accepted, {} rejected, {} waiting for review (.loopwright/state/dead-letters/candidate-pattern-*.md)",
            c.accepted, c.rejected, c.proposed
        );
    }
    Ok(0)
}
