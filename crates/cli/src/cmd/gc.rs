//! `loopwright gc`: frees what finished runs no longer need, as `[retention]` in config.toml
//! says (snapshots after `snapshots_days`, default 14; whole runs — files and journal — after
//! `runs_days`), then the copies no snapshot names. Runs that may still roll back are never
//! touched.

use loopwright_app::ops::gc::{Frees, gc};

use super::Global;
use crate::error::CliError;

/// Arguments of `gc`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Say what would be freed, and free nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `loopwright gc`.
pub async fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    let store = super::open_existing_store(&ws)?;
    let freed = gc(&ws, &store, jiff::Timestamp::now(), args.dry_run).await?;
    if global.json {
        println!("{}", serde_json::to_string_pretty(&freed).map_err(|e| CliError::Internal(e.into()))?);
        return Ok(0);
    }
    let mb = |bytes: u64| format!("{:.1} MB", bytes as f64 / 1_000_000.0);
    let (snapshots, runs) = freed.runs.iter().fold((0, 0), |(s, f), r| match r.frees {
        Frees::Snapshots => (s + 1, f),
        Frees::Run => (s, f + 1),
    });
    let verb = if freed.dry_run { "would free" } else { "freed" };
    println!(
        "{verb} {}: the snapshots of {snapshots} finished run(s), {runs} whole run(s) (files and journal), {} copies no snapshot names",
        mb(freed.bytes),
        freed.objects
    );
    if freed.dry_run {
        for r in &freed.runs {
            let what = match r.frees {
                Frees::Snapshots => "snapshots",
                Frees::Run => "run",
            };
            println!("  {}  {what}  {}", r.run_id, mb(r.bytes));
        }
    }
    Ok(0)
}
