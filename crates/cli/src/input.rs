//! Reading what a user points loopwright at (`--input KEY=@FILE`, `patterns test FILE`), with
//! a stated limit: a device (`/dev/zero`), a FIFO or a huge file is refused with a clear error
//! instead of being read until the machine runs out of memory.

use std::io::Read;

use crate::error::CliError;

/// The largest file `--input KEY=@FILE` reads (an input is capped to a few hundred tokens in
/// prompts anyway).
pub const MAX_INPUT_BYTES: u64 = 4 * 1024 * 1024;

/// The largest output `patterns test` classifies (the application layer's limit).
pub const MAX_PATTERN_TEXT_BYTES: u64 = loopwright_app::ops::patterns::MAX_TEXT_BYTES as u64;

/// The text of the regular file `path`, if it holds at most `limit` bytes; `what` names the
/// option in the error.
pub fn read_file(path: &str, limit: u64, what: &str) -> Result<String, CliError> {
    let file = std::fs::File::open(path).map_err(|e| CliError::usage(format!("{what}: cannot read {path}: {e}")))?;
    let meta = file.metadata().map_err(|e| CliError::usage(format!("{what}: cannot read {path}: {e}")))?;
    if !meta.is_file() {
        return Err(CliError::usage(format!(
            "{what}: {path} is not a regular file (a device, FIFO or folder); give a file, or pipe the text in with `-` where that is accepted"
        )));
    }
    if meta.len() > limit {
        return Err(too_big(what, path, limit));
    }
    read_limited(file, limit, what, path)
}

/// Standard input, if it holds at most `limit` bytes.
pub fn read_stdin(limit: u64, what: &str) -> Result<String, CliError> {
    read_limited(std::io::stdin().lock(), limit, what, "standard input")
}

fn read_limited(reader: impl Read, limit: u64, what: &str, shown: &str) -> Result<String, CliError> {
    let mut bytes = Vec::new();
    // One byte more than the limit tells a file that grew (or a stream) past it.
    reader
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CliError::usage(format!("{what}: cannot read {shown}: {e}")))?;
    if bytes.len() as u64 > limit {
        return Err(too_big(what, shown, limit));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn too_big(what: &str, shown: &str, limit: u64) -> CliError {
    CliError::usage(format!("{what}: {shown} is larger than the {} MiB accepted", limit / (1024 * 1024)))
}
