//! `loopwright dead-letters [list|show ID]`: the tasks the closed loop gave up on (seed 000
//! "Dead Letter Format"), written to `.loopwright/state/dead-letters/TASK.md`.

use loopwright_app::ops::dead_letters;

use super::Global;
use crate::error::CliError;

/// Arguments of `dead-letters`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// `dead-letters` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List the dead letters, newest first (the default).
    List,
    /// Print one dead letter: its task id (or file name).
    Show {
        /// The task id.
        id: String,
    },
}

/// `loopwright dead-letters`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    match args.command.unwrap_or(Command::List) {
        Command::List => {
            let letters = dead_letters::list(&ws);
            if global.json {
                println!("{}", serde_json::to_string_pretty(&letters)?);
                return Ok(0);
            }
            if letters.is_empty() {
                println!("no dead letters in {}", ws.shown(&ws.state_dir().join("dead-letters")));
                return Ok(0);
            }
            println!(
                "{:<40} {:<14} {:<20} {:>8}  {:<20}  similar",
                "task", "stage", "final pattern", "attempts", "blocked at"
            );
            for s in &letters {
                println!(
                    "{:<40} {:<14} {:<20} {:>8}  {:<20}  {}",
                    s.task_id,
                    s.stage,
                    s.final_pattern,
                    s.total_attempts,
                    s.blocked_at.get(..19).unwrap_or(&s.blocked_at),
                    s.similar_failures
                );
            }
            Ok(0)
        }
        Command::Show { id } => {
            let letter = dead_letters::show(&ws, &id)?;
            if global.json {
                println!("{}", serde_json::to_string_pretty(&letter)?);
            } else {
                print!("{}", letter.text);
            }
            Ok(0)
        }
    }
}
