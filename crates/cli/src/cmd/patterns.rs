//! `loopwright patterns test|list`: the failure-pattern library (SPEC §6).

use super::Global;
use crate::error::CliError;

/// Arguments of `patterns`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

/// `patterns` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Classify one error output (a regular file of at most 16 MiB, or `-`/nothing for standard
    /// input).
    ///
    /// What is known of the command that printed it counts too: exit 127 means
    /// command-not-found and 126 permission-error whatever was printed, a tool's own words
    /// weigh more when it ran, a failing check's type is evidence when nothing more specific
    /// is printed. `--json` lists the evidence that decided.
    Test {
        /// The file holding the output.
        file: Option<String>,
        /// The command that printed it (`cargo clippy -- -D warnings`).
        #[arg(long, value_name = "CMD")]
        command: Option<String>,
        /// Its exit code.
        #[arg(long, value_name = "N", allow_negative_numbers = true, conflicts_with = "signal")]
        exit_code: Option<i32>,
        /// The signal that ended it (`SIGKILL`, `KILL` or `9`).
        #[arg(long, value_name = "NAME")]
        signal: Option<String>,
        /// The type of the check that ran it (lint, format, type, test, build, syntax, …).
        #[arg(long, value_name = "T")]
        check_type: Option<String>,
        /// loopwright's own timeout ended it.
        #[arg(long)]
        timed_out: bool,
    },
    /// List the effective library: the built-ins with the project's file merged over them.
    List,
}

/// `loopwright patterns`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    match args.command {
        Command::Test { file, command, exit_code, signal, check_type, timed_out } => {
            use crate::input::{MAX_PATTERN_TEXT_BYTES, read_file, read_stdin};
            let text = match file.as_deref() {
                None | Some("-") => read_stdin(MAX_PATTERN_TEXT_BYTES, "patterns test")?,
                Some(path) => read_file(path, MAX_PATTERN_TEXT_BYTES, "patterns test")?,
            };
            let context = loopwright_engine::patterns::Context { command, exit_code, signal, check_type, timed_out };
            let c = loopwright_app::ops::patterns::test(&ws, &text, &context)?;
            if global.json {
                println!("{}", to_json(&c)?);
            } else {
                match &c.matched_pattern {
                    Some(id) => {
                        println!("{id} (confidence {:.2}, strategy {})", c.confidence, c.strategy);
                        for e in &c.evidence {
                            println!("  {:<11} {:.2}  {}", e.kind, e.strength, e.value);
                        }
                    }
                    None => {
                        println!("no pattern matched (best confidence {:.2}); strategy {}", c.confidence, c.strategy)
                    }
                }
            }
            Ok(0)
        }
        Command::List => {
            let patterns = loopwright_app::ops::patterns::list(&ws)?;
            if global.json {
                println!("{}", to_json(&patterns)?);
            } else {
                println!("{:<22} {:<20} {:<9} {:<7} SIGNALS", "ID", "STRATEGY", "RETRYABLE", "RETRIES");
                for p in patterns {
                    println!(
                        "{:<22} {:<20} {:<9} {:<7} {}",
                        p.id,
                        p.strategy,
                        p.retryable,
                        p.max_auto_retries,
                        p.signals.len()
                    );
                }
            }
            Ok(0)
        }
    }
}

fn to_json(value: &impl serde::Serialize) -> Result<String, CliError> {
    serde_json::to_string_pretty(value).map_err(|e| CliError::Internal(e.into()))
}
