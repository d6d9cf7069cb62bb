//! `loopwright agents`: the agents found, and how one would be run.

use super::Global;
use crate::error::CliError;
use crate::render;
use crate::workspace::AGENT_DIRS;

/// Arguments of `agents`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub show: Option<Show>,
}

/// `agents show`.
#[derive(Debug, clap::Subcommand)]
pub enum Show {
    /// The exact program and arguments an agent would run with.
    Show {
        /// The agent's name.
        name: String,
        /// The mode to show.
        #[arg(long, value_parser = ["plan", "agent"], default_value = "agent")]
        mode: String,
    },
}

/// `loopwright agents`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    let (agents, diags) = loopwright_app::ops::agents::list(&ws);
    if !diags.is_empty() {
        eprint!("{}", render::diagnostics(&diags, render::stderr_color()));
    }
    match args.show {
        None => {
            if global.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&agents.values().collect::<Vec<_>>())
                        .map_err(|e| CliError::Internal(e.into()))?
                );
            } else if agents.is_empty() {
                println!("no agents found (looked in {})", AGENT_DIRS.join(", "));
            } else {
                println!("{:<20} {:<10} {:<16} FILE", "NAME", "RUNNER", "MODEL");
                for a in agents.values() {
                    println!(
                        "{:<20} {:<10} {:<16} {}",
                        a.name,
                        a.runner.as_str(),
                        a.model.as_deref().unwrap_or("-"),
                        a.file
                    );
                }
            }
            Ok(if diags.is_empty() { 0 } else { 2 })
        }
        Some(Show::Show { name, mode }) => {
            let value = loopwright_app::ops::agents::show(&ws, &name, &mode)?;
            if global.json {
                println!("{}", serde_json::to_string_pretty(&value).map_err(|e| CliError::Internal(e.into()))?);
            } else {
                println!(
                    "{name} ({mode} mode): {}",
                    value.get("argv").map_or_else(|| value.to_string(), ToString::to_string)
                );
            }
            Ok(0)
        }
    }
}
