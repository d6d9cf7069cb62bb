//! `loopwright patterns test|list`: the failure-pattern library (SPEC §6).

use loopwright_engine::patterns::Library;
use loopwright_spec::SourceFile;
use loopwright_spec::patterns::PatternFile;

use super::Global;
use crate::error::CliError;
use crate::workspace::Workspace;

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
    Test {
        /// The file holding the output.
        file: Option<String>,
    },
    /// List the effective library: the built-ins with the project's file merged over them.
    List,
}

/// The workspace's `failure-patterns.yml`, if it has one.
fn project_file(ws: &Workspace) -> Result<Option<PatternFile>, CliError> {
    let path = ws.root.join(".loopwright/failure-patterns.yml");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(PatternFile::parse(&SourceFile::new(ws.shown(&path), text)).map_err(CliError::Invalid)?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(CliError::usage(format!("cannot read {}: {e}", path.display()))),
    }
}

/// The workspace's effective library.
pub fn library(ws: &Workspace) -> Result<Library, CliError> {
    let path = ws.root.join(".loopwright/failure-patterns.yml");
    Library::new(project_file(ws)?).map_err(|e| CliError::usage(format!("{}: {e}", ws.shown(&path))))
}

/// The closed loop's settings: `verification-gates.yml` and the `strategies` section of
/// `failure-patterns.yml`.
pub fn closed_loop_settings(ws: &Workspace) -> Result<loopwright_engine::closed_loop::Settings, CliError> {
    let path = ws.root.join(".loopwright/verification-gates.yml");
    let regression = match std::fs::read_to_string(&path) {
        Ok(text) => loopwright_engine::closed_loop::regression::Settings::parse(&text)
            .map_err(|e| CliError::usage(format!("{}: {e}", ws.shown(&path))))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Default::default(),
        Err(e) => return Err(CliError::usage(format!("cannot read {}: {e}", path.display()))),
    };
    let strategies = project_file(ws)?.and_then(|f| f.strategies);
    Ok(loopwright_engine::closed_loop::Settings { regression, ..Default::default() }
        .with_strategies(strategies.as_ref()))
}

/// `loopwright patterns`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = Workspace::locate(global.dir.as_deref())?;
    let lib = library(&ws)?;
    match args.command {
        Command::Test { file } => {
            use crate::input::{MAX_PATTERN_TEXT_BYTES, read_file, read_stdin};
            let text = match file.as_deref() {
                None | Some("-") => read_stdin(MAX_PATTERN_TEXT_BYTES, "patterns test")?,
                Some(path) => read_file(path, MAX_PATTERN_TEXT_BYTES, "patterns test")?,
            };
            let c = lib.classify(&text);
            if global.json {
                println!("{}", to_json(&c)?);
            } else {
                match &c.matched_pattern {
                    Some(id) => println!(
                        "{id} (confidence {:.2}, strategy {})\nsignals: {}",
                        c.confidence,
                        c.strategy,
                        c.signals.join(" | ")
                    ),
                    None => {
                        println!("no pattern matched (best confidence {:.2}); strategy {}", c.confidence, c.strategy)
                    }
                }
            }
            Ok(0)
        }
        Command::List => {
            if global.json {
                println!("{}", to_json(&lib.patterns())?);
            } else {
                println!("{:<22} {:<20} {:<9} {:<7} SIGNALS", "ID", "STRATEGY", "RETRYABLE", "RETRIES");
                for p in lib.patterns() {
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
