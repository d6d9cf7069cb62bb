//! `loopwright status`: one run's result, or a table of recent runs.

use loopwright_app::ops::read::{self, ListFilter, resolve_run};

use super::{Global, open_existing_store};
use crate::drive::report;
use crate::error::CliError;

/// Arguments of `status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run (`latest` for the most recent); without it, a table of recent runs.
    pub run: Option<String>,
    /// How many runs the table lists.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
}

/// `loopwright status`.
pub async fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    let store = open_existing_store(&ws)?;
    let Some(run) = args.run else {
        // A run recorded as running whose owner is gone was interrupted by a crash.
        let runs = read::list(&store, &ListFilter { limit: args.limit, ..ListFilter::default() }).await?;
        if global.json {
            println!("{}", serde_json::to_string_pretty(&runs).map_err(|e| CliError::Internal(e.into()))?);
            return Ok(0);
        }
        let waiting: Vec<_> = runs.iter().filter(|r| r.status == loopwright_engine::RunStatus::Waiting).collect();
        for w in &waiting {
            println!("⏸ run {} ({}) waits for a human: `loopwright status {}`", w.run_id, w.pipeline, w.run_id);
        }
        if !waiting.is_empty() {
            println!();
        }
        println!("{:<24} {:<20} {:<12} {:<22} TASK", "RUN", "PIPELINE", "STATUS", "UPDATED");
        for r in &runs {
            let updated = r.updated_at.to_zoned(jiff::tz::TimeZone::system()).strftime("%Y-%m-%d %H:%M:%S").to_string();
            println!("{:<24} {:<20} {:<12} {:<22} {}", r.run_id, r.pipeline, r.status.as_str(), updated, r.task_id);
        }
        if runs.is_empty() {
            println!("(no runs yet)");
        }
        return Ok(0);
    };
    let run = resolve_run(&store, &run).await?;
    let state = read::state(&store, &run).await?;
    report(global, &state, None)
}
