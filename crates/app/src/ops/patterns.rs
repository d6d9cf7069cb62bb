//! `patterns`: classify an error output against the workspace's failure-pattern library, or
//! list the library (SPEC §6).

use loopwright_engine::patterns::{Classification, Context, Pattern, signal_name};

use crate::error::Error;
use crate::workspace::Workspace;

/// The most text one classification reads (16 MiB).
pub const MAX_TEXT_BYTES: usize = 16 << 20;

/// Classifies `text` with the workspace's library and what is known of the command that
/// printed it.
pub fn test(ws: &Workspace, text: &str, context: &Context) -> Result<Classification, Error> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(Error::usage(format!("the text is {} bytes; at most {MAX_TEXT_BYTES} are classified", text.len())));
    }
    let mut context = context.clone();
    if let Some(signal) = &context.signal {
        let name = signal_name(signal).ok_or_else(|| {
            Error::usage(format!("`{signal}` is not a signal: give a name (SIGKILL, KILL) or a number (9)"))
        })?;
        context.signal = Some(name.to_owned());
    }
    if context.command.as_ref().is_some_and(|c| c.len() > MAX_COMMAND_BYTES) {
        return Err(Error::usage(format!("the command is longer than {MAX_COMMAND_BYTES} bytes")));
    }
    Ok(crate::assemble::library(ws)?.classify_in(text, &context))
}

/// A GitHub Actions job's log classified: its failed step, and that step's output classified
/// with its command and exit code as the context.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CiLogClassification {
    /// The failed step's name (none when no step failed: the whole log was classified).
    pub step: Option<String>,
    /// Its command, as the log shows it.
    pub command: Option<String>,
    /// The exit code the runner reported.
    pub exit_code: Option<i32>,
    /// How its output is classified.
    #[serde(flatten)]
    pub classification: Classification,
}

/// Classifies a job's log as GitHub writes it: the failed step's output alone, with what the
/// log says of its command and exit code unless `context` says otherwise.
pub fn test_ci_log(ws: &Workspace, log: &str, context: &Context) -> Result<CiLogClassification, Error> {
    let (text, context, step) = crate::forge::ci_failure(log, context);
    let classification = test(ws, &text, &context)?;
    Ok(CiLogClassification {
        step: step.map(|s| s.name),
        command: context.command,
        exit_code: context.exit_code,
        classification,
    })
}

/// The longest command one classification reads.
pub const MAX_COMMAND_BYTES: usize = 64 << 10;

/// The effective library: the built-ins with the project's file merged over them.
pub fn list(ws: &Workspace) -> Result<Vec<Pattern>, Error> {
    Ok(crate::assemble::library(ws)?.patterns().to_vec())
}
