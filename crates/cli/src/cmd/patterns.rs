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
    ///
    /// `--ci-log FILE` reads a GitHub Actions job's log as downloaded (timestamps and
    /// `##[group]` markers included): the failed step's output is classified, with its command
    /// and exit code as what is known of it, and the earlier steps' warnings are left out.
    Test {
        /// The file holding the output.
        #[arg(conflicts_with = "ci_log")]
        file: Option<String>,
        /// A GitHub Actions job's log (a file, or `-` for standard input).
        #[arg(long, value_name = "FILE")]
        ci_log: Option<String>,
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
    /// List the failures the stages' agents labelled when nothing sure could: each with the
    /// category named, whether it was used, the phrase quoted and a candidate pattern
    /// (`.loopwright/state/learned/`).
    ///
    /// A label that would stop the run for a person (disk-full, permission-error,
    /// merge-conflict, git-error) is never used, only kept. `--export DIR` writes the samples
    /// in the failure corpus's layout (`DIR/CATEGORY/NAME.txt` and a row each in
    /// `DIR/samples.tsv`), to review and add to the statistical classifier's training set.
    Learned {
        /// Write the samples as corpus samples into this folder.
        #[arg(long, value_name = "DIR")]
        export: Option<std::path::PathBuf>,
    },
}

/// `loopwright patterns`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    match args.command {
        Command::Test { file, ci_log, command, exit_code, signal, check_type, timed_out } => {
            use crate::input::{MAX_PATTERN_TEXT_BYTES, read_file, read_stdin};
            let source = ci_log.as_deref().or(file.as_deref());
            let text = match source {
                None | Some("-") => read_stdin(MAX_PATTERN_TEXT_BYTES, "patterns test")?,
                Some(path) => read_file(path, MAX_PATTERN_TEXT_BYTES, "patterns test")?,
            };
            let context = loopwright_engine::patterns::Context { command, exit_code, signal, check_type, timed_out };
            let c = if ci_log.is_some() {
                let ci = loopwright_app::ops::patterns::test_ci_log(&ws, &text, &context)?;
                if global.json {
                    println!("{}", to_json(&ci)?);
                    return Ok(0);
                }
                match &ci.step {
                    Some(step) => {
                        let exit = ci.exit_code.map_or(String::new(), |c| format!(", exit code {c}"));
                        println!("failed step: {}{exit}", crate::terminal::safe(step));
                    }
                    None => println!("no step failed in this log: all of it was classified"),
                }
                ci.classification
            } else {
                loopwright_app::ops::patterns::test(&ws, &text, &context)?
            };
            if global.json {
                println!("{}", to_json(&c)?);
            } else {
                match &c.matched_pattern {
                    Some(id) => println!(
                        "{id} (confidence {:.2}, strategy {}, classified by {})",
                        c.confidence, c.strategy, c.classified_by
                    ),
                    None => println!("unclassified: nothing was sure; strategy {}", c.strategy),
                }
                for e in &c.evidence {
                    println!("  {:<18} {:.2}  {}", e.kind, e.strength, e.value);
                }
            }
            Ok(0)
        }
        Command::Learned { export } => learned(global, &ws, export.as_deref()),
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

/// `patterns learned [--export DIR]`.
fn learned(
    global: &Global,
    ws: &loopwright_app::workspace::Workspace,
    export: Option<&std::path::Path>,
) -> Result<u8, CliError> {
    let listing = loopwright_app::learned::list(&ws.runs_dir())?;
    for skipped in &listing.skipped {
        eprintln!("loopwright: warning: not a learned sample, left alone: {}", crate::terminal::safe(skipped));
    }
    if let Some(dir) = export {
        let written = loopwright_app::learned::export(&listing.samples, dir)?;
        eprintln!("wrote {} sample{} into {}", written.len(), if written.len() == 1 { "" } else { "s" }, dir.display());
        return Ok(0);
    }
    if global.json {
        println!("{}", to_json(&listing.samples)?);
        return Ok(0);
    }
    if listing.samples.is_empty() {
        println!("no failure has been labelled by an agent yet");
        return Ok(0);
    }
    for s in &listing.samples {
        let used = if s.used { "used" } else { "kept, not used (it would stop the run for a person)" };
        let tool = s.tool.as_deref().unwrap_or("?");
        println!("{} {} — {used}; {tool}, run {} stage {} attempt {}", s.at, s.category, s.run, s.stage, s.attempt);
        let reason = crate::terminal::safe(&s.reason);
        if !reason.is_empty() {
            println!("  why: {reason}");
        }
        for signal in &s.candidate.signals {
            println!("  candidate pattern {}: signal {:?}", s.candidate.id, crate::terminal::safe(signal));
        }
    }
    Ok(0)
}

fn to_json(value: &impl serde::Serialize) -> Result<String, CliError> {
    serde_json::to_string_pretty(value).map_err(|e| CliError::Internal(e.into()))
}
