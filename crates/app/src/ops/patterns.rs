//! `patterns`: classify an error output against the workspace's failure-pattern library, or
//! list the library (SPEC §6).

use loopwright_engine::patterns::{Classification, Pattern};

use crate::error::Error;
use crate::workspace::Workspace;

/// The most text one classification reads (16 MiB).
pub const MAX_TEXT_BYTES: usize = 16 << 20;

/// Classifies `text` with the workspace's library.
pub fn test(ws: &Workspace, text: &str) -> Result<Classification, Error> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(Error::usage(format!("the text is {} bytes; at most {MAX_TEXT_BYTES} are classified", text.len())));
    }
    Ok(crate::assemble::library(ws)?.classify(text))
}

/// The effective library: the built-ins with the project's file merged over them.
pub fn list(ws: &Workspace) -> Result<Vec<Pattern>, Error> {
    Ok(crate::assemble::library(ws)?.patterns().to_vec())
}
