//! `loopwright patterns test|list`: the failure-pattern library (SPEC §6).

use std::io::Read;

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
    /// Classify one error output (a file, or `-`/nothing for standard input).
    Test {
        /// The file holding the output.
        file: Option<String>,
    },
    /// List the effective library: the built-ins with the project's file merged over them.
    List,
}

/// The workspace's effective library.
pub fn library(ws: &Workspace) -> Result<Library, CliError> {
    let path = ws.root.join(".loopwright/failure-patterns.yml");
    let project = match std::fs::read_to_string(&path) {
        Ok(text) => Some(PatternFile::parse(&SourceFile::new(ws.shown(&path), text)).map_err(CliError::Invalid)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(CliError::usage(format!("cannot read {}: {e}", path.display()))),
    };
    Library::new(project).map_err(|e| CliError::usage(format!("{}: {e}", ws.shown(&path))))
}

/// `loopwright patterns`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = Workspace::locate(global.dir.as_deref())?;
    let lib = library(&ws)?;
    match args.command {
        Command::Test { file } => {
            let text = match file.as_deref() {
                None | Some("-") => {
                    let mut s = String::new();
                    std::io::stdin()
                        .read_to_string(&mut s)
                        .map_err(|e| CliError::usage(format!("cannot read stdin: {e}")))?;
                    s
                }
                Some(path) => std::fs::read(path)
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .map_err(|e| CliError::usage(format!("cannot read {path}: {e}")))?,
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
