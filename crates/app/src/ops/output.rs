//! The output of the stage in flight, as the runner writes it (see `loopwright_runners::live`):
//! `runs/RUN/outputs/STAGE-ATTEMPT.out` and `.err`, read from an offset. Not journaled; a
//! reader follows the journal to know which attempt is in flight, then tails its two files.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};

use loopwright_engine::RunState;
use serde::Serialize;

/// The most bytes one [`Tail::read`] returns per stream.
pub const CHUNK: usize = 64 * 1024;

/// The attempt that is running now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    /// Its stage.
    pub stage: String,
    /// Its number.
    pub attempt: u32,
}

/// The stage attempt of `state` that is running, if one is.
pub fn in_flight(state: &RunState) -> Option<InFlight> {
    state.in_flight().filter(|s| s.attempts > 0).map(|s| InFlight { stage: s.id.to_string(), attempt: s.attempts })
}

/// Follows the output of whichever attempt of a run is in flight: told the run's state as it
/// changes, it moves to the new attempt (from its beginning) and reads what it prints. What
/// the daemon's output stream and `logs --follow` both do.
#[derive(Debug)]
pub struct Follow {
    run_dir: PathBuf,
    tail: Option<Tail>,
}

impl Follow {
    /// Follows the run whose folder is `run_dir`; nothing until [`Follow::track`] is told of
    /// an attempt in flight.
    pub fn new(run_dir: PathBuf) -> Self {
        Self { run_dir, tail: None }
    }

    /// Moves to the attempt in flight in `state` when it is another than the one followed
    /// (none when no attempt is in flight).
    pub fn track(&mut self, state: &RunState) {
        let now = in_flight(state);
        if now.as_ref() != self.tail.as_ref().map(Tail::attempt) {
            self.tail = now.map(|a| Tail::new(&self.run_dir, a));
        }
    }

    /// True while an attempt is followed.
    pub fn following(&self) -> bool {
        self.tail.is_some()
    }

    /// What the attempt followed printed since the last read.
    pub fn read(&mut self) -> Vec<Chunk> {
        self.tail.as_mut().map(Tail::read).unwrap_or_default()
    }
}

/// A piece of what an attempt printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chunk {
    /// The stage.
    pub stage: String,
    /// The attempt.
    pub attempt: u32,
    /// `stdout` or `stderr`.
    pub stream: &'static str,
    /// Where in the stream's file the text starts (bytes).
    pub offset: u64,
    /// The text (whole UTF-8 characters; a character cut by the end of what was written so far
    /// comes with the next chunk).
    pub text: String,
}

/// Follows one attempt's two files from where the reader last was.
#[derive(Debug, Clone)]
pub struct Tail {
    attempt: InFlight,
    files: [(&'static str, PathBuf, u64); 2],
}

impl Tail {
    /// A reader of `attempt`'s output in the run folder `run_dir`, from the start.
    pub fn new(run_dir: &Path, attempt: InFlight) -> Self {
        let (out, err) = loopwright_runners::live::output_files(run_dir, &attempt.stage, attempt.attempt);
        let files = [("stdout", out, 0), ("stderr", err, 0)];
        Self { attempt, files }
    }

    /// The attempt followed.
    pub fn attempt(&self) -> &InFlight {
        &self.attempt
    }

    /// What was written since the last read, per stream (nothing for a stream with nothing new).
    pub fn read(&mut self) -> Vec<Chunk> {
        let mut chunks = Vec::new();
        for (stream, path, offset) in &mut self.files {
            if let Some((text, read)) = read_from(path, *offset) {
                chunks.push(Chunk {
                    stage: self.attempt.stage.clone(),
                    attempt: self.attempt.attempt,
                    stream,
                    offset: *offset,
                    text,
                });
                *offset += read;
            }
        }
        chunks
    }
}

/// Up to [`CHUNK`] bytes of `path` from `offset`, cut after the last whole UTF-8 character;
/// `None` when there is nothing new.
fn read_from(path: &Path, offset: u64) -> Option<(String, u64)> {
    let mut file = std::fs::File::open(path).ok()?;
    if file.metadata().ok()?.len() <= offset {
        return None;
    }
    file.seek(SeekFrom::Start(offset)).ok()?;
    let mut bytes = Vec::with_capacity(4096);
    file.take(CHUNK as u64).read_to_end(&mut bytes).ok()?;
    let whole = match std::str::from_utf8(&bytes) {
        Ok(_) => bytes.len(),
        // An invalid byte is passed on as U+FFFD; a character cut at the end waits.
        Err(e) if e.error_len().is_some() => bytes.len(),
        Err(e) => e.valid_up_to(),
    };
    if whole == 0 {
        return None;
    }
    bytes.truncate(whole);
    Some((String::from_utf8_lossy(&bytes).into_owned(), whole as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_returns_what_was_appended_since_it_last_read_whole_characters_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outputs = dir.path().join("outputs");
        std::fs::create_dir_all(&outputs).expect("mkdir");
        let mut tail = Tail::new(dir.path(), InFlight { stage: "build".into(), attempt: 2 });
        assert_eq!(tail.read(), vec![]);
        let out = outputs.join("build-2.out");
        std::fs::write(&out, "line one\n").expect("write");
        let chunk =
            |stream, offset, text: &str| Chunk { stage: "build".into(), attempt: 2, stream, offset, text: text.into() };
        assert_eq!(tail.read(), vec![chunk("stdout", 0, "line one\n")]);
        assert_eq!(tail.read(), vec![]);
        // "é" is two bytes; only its first has been written so far.
        std::fs::write(&out, b"line one\ncaf\xc3").expect("write");
        std::fs::write(outputs.join("build-2.err"), "warning\n").expect("write");
        assert_eq!(tail.read(), vec![chunk("stdout", 9, "caf"), chunk("stderr", 0, "warning\n")]);
        std::fs::write(&out, "line one\ncafé\n").expect("write");
        assert_eq!(tail.read(), vec![chunk("stdout", 12, "é\n")]);
    }
}
