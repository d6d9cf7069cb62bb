//! `loopwright store copy --to URL`: moves a workspace's journal to PostgreSQL.

use super::Global;
use crate::error::CliError;

/// Arguments of `store`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: StoreCommand,
}

/// What to do with the journal.
#[derive(Debug, clap::Subcommand)]
pub enum StoreCommand {
    /// Copy every run's journal of this workspace to a PostgreSQL database (made ready on the
    /// way). Copying again brings it up to date: runs already there are left alone, runs that
    /// moved on get the events they lack. Auto loops' state and the notifications journal stay
    /// in this workspace.
    Copy(CopyArgs),
}

/// Arguments of `store copy`.
#[derive(Debug, clap::Args)]
pub struct CopyArgs {
    /// The database: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE.
    #[arg(long, value_name = "URL")]
    pub to: String,
}

/// `loopwright store`.
pub async fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let StoreCommand::Copy(copy) = args.command;
    let ws = global.workspace()?;
    let from = super::open_existing_local_store(&ws)?;
    let to = loopwright_app::ops::copy::connect(&copy.to).await?;
    let shown = loopwright_store::pg::shown_url(&copy.to);
    let quiet = global.json;
    let copied = loopwright_app::ops::copy::copy(&from, &to, |done, all| {
        if !quiet && (done % 100 == 0 || done == all) {
            eprintln!("  {done}/{all} runs");
        }
    })
    .await?;
    if global.json {
        println!("{}", serde_json::json!({"to": shown, "copied": copied}));
    } else {
        println!(
            "copied {} run{} ({} event{}) to {shown}; {} already there",
            copied.runs,
            if copied.runs == 1 { "" } else { "s" },
            copied.events,
            if copied.events == 1 { "" } else { "s" },
            copied.unchanged
        );
        for (run, why) in &copied.differ {
            println!("  left alone: run {run}: {why}");
        }
    }
    Ok(if copied.differ.is_empty() { 0 } else { 1 })
}
