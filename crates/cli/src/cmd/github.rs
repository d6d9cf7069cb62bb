//! `loopwright github poll`: one look at GitHub instead of a webhook (SPEC §14) — the comments
//! and labellings of the last `max_delivery_age_minutes` that start runs or answer them, and CI
//! on the heads runs wait on — done as the daemon's webhook would.

use super::{Global, on_daemon_runtime};
use crate::error::CliError;

/// Arguments of `github`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

/// `github` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Look at GitHub once for triggers and CI results, as `[github]` in config.toml says.
    ///
    /// Runs it starts are queued: a daemon (`loopwright serve`) drives them. A daemon with
    /// `[github] poll_seconds` looks by itself; this is for a workspace without webhooks or a
    /// daemon that polls, or to catch up after an outage.
    Poll,
}

/// `loopwright github`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    let Command::Poll = args.command;
    on_daemon_runtime(async {
        let store = loopwright_app::assemble::open_store(&ws)?;
        let (github, config) = loopwright_app::ops::github::adapter(&ws)?;
        let since = jiff::Timestamp::now() - jiff::SignedDuration::from_mins(config.max_delivery_age_minutes as i64);
        let seen = loopwright_daemon::github::Seen::default();
        let outcomes = loopwright_daemon::github::poll_once(&ws, &store, &github, since, &seen).await?;
        if global.json {
            let text = serde_json::to_string_pretty(&outcomes).map_err(|e| CliError::Internal(e.into()))?;
            println!("{text}");
            return Ok(0);
        }
        if outcomes.is_empty() {
            println!("nothing new on GitHub since {since}");
        }
        for outcome in &outcomes {
            println!("{}", crate::terminal::safe(&loopwright_daemon::github::describe(outcome)));
        }
        Ok(0)
    })
}
