//! The output of a stage in flight, written as it comes.
//!
//! An agent stage runs for minutes; the dashboard and `GET /api/runs/{run}/output` show what it
//! prints while it prints it. Each stream is appended to `outputs/STAGE-ATTEMPT.out` (`.err`)
//! in the run's folder, whole lines at a time and with secrets redacted, so a reader never sees
//! a secret that the stage's final output would hide. When the attempt ends the runner writes
//! the file again with the kept, redacted output (see `ProcessRunner::keep_output`), which is
//! what `logs --stage` and the attempts API read. Nothing of it is journaled.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::secrets::Redactor;

/// The files of an attempt's stdout and stderr in its run's folder `run_dir`:
/// `outputs/STAGE-ATTEMPT.out` and `.err`. The runner writes them; every reader finds them here.
pub fn output_files(run_dir: &Path, stage: &str, attempt: u32) -> (PathBuf, PathBuf) {
    let name = |ext: &str| run_dir.join("outputs").join(format!("{stage}-{attempt}.{ext}"));
    (name("out"), name("err"))
}

/// Bytes held back while no newline comes, before they are written anyway.
const LINE_LIMIT: usize = 64 * 1024;

/// One stream of an attempt, appended to its file as it is read.
#[derive(Debug)]
pub struct LiveSink<'r> {
    path: PathBuf,
    file: Option<std::fs::File>,
    /// Read but not yet written: the end of an unfinished line, or the start of what may be a
    /// secret.
    pending: Vec<u8>,
    written: usize,
    /// Bytes written at most (the stream's output cap); past it the file says so and stops.
    cap: usize,
    redactor: &'r Redactor,
    /// Set once writing failed or the cap was reached.
    stopped: bool,
}

impl<'r> LiveSink<'r> {
    /// A sink writing to `path` (created with the first bytes).
    pub fn new(path: PathBuf, cap: usize, redactor: &'r Redactor) -> Self {
        Self { path, file: None, pending: Vec::new(), written: 0, cap, redactor, stopped: false }
    }

    /// Takes bytes just read from the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.stopped || bytes.is_empty() {
            return;
        }
        self.pending.extend_from_slice(bytes);
        let mut cut = match self.pending.iter().rposition(|&b| b == b'\n') {
            Some(i) => i + 1,
            None if self.pending.len() >= LINE_LIMIT => self.pending.len(),
            None => return,
        };
        // Never cut inside something that may be a secret: the written part must not end with
        // the beginning of one.
        while cut > 0 {
            let held = self.redactor.held_back(&self.pending[..cut]);
            if held == 0 {
                break;
            }
            cut = self.pending[..cut - held].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        }
        if cut > 0 {
            let rest = self.pending.split_off(cut);
            let done = std::mem::replace(&mut self.pending, rest);
            self.write(&done);
        }
    }

    /// Writes what is still held (the stream ended).
    pub fn finish(&mut self) {
        let rest = std::mem::take(&mut self.pending);
        if !self.stopped && !rest.is_empty() {
            self.write(&rest);
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let text = self.redactor.redact(&text);
        let mut out = text.as_bytes();
        let room = self.cap.saturating_sub(self.written);
        let full = out.len() > room;
        if full {
            out = &out[..room];
        }
        if self.file.is_none() {
            let opened =
                self.path.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| {
                    std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(&self.path)
                });
            match opened {
                Ok(file) => self.file = Some(file),
                Err(_) => {
                    // Best effort: the final output is kept when the attempt ends.
                    self.stopped = true;
                    return;
                }
            }
        }
        let Some(file) = self.file.as_mut() else { return };
        let mut result = file.write_all(out);
        if full {
            result = result.and_then(|()| {
                file.write_all(b"\n[... live output stops at the output cap; the kept output is written when the attempt ends ...]\n")
            });
            self.stopped = true;
        }
        self.written += out.len();
        if result.is_err() {
            self.stopped = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink_in(dir: &std::path::Path, redactor: &Redactor) -> (PathBuf, LiveSink<'static>) {
        let path = dir.join("outputs").join("build-1.out");
        let redactor: &'static Redactor = Box::leak(Box::new(redactor.clone()));
        (path.clone(), LiveSink::new(path, 1 << 20, redactor))
    }

    fn read(path: &std::path::Path) -> String {
        std::fs::read_to_string(path).unwrap_or_default()
    }

    #[test]
    fn whole_lines_are_written_as_they_come_and_the_rest_at_the_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (path, mut sink) = sink_in(dir.path(), &Redactor::default());
        sink.feed(b"compiling");
        assert!(!path.exists(), "nothing is written before a line is whole");
        sink.feed(b" crate a\ncompiling crate b\nwarn");
        assert_eq!(read(&path), "compiling crate a\ncompiling crate b\n");
        sink.feed(b"ing: unused\n");
        assert_eq!(read(&path), "compiling crate a\ncompiling crate b\nwarning: unused\n");
        sink.feed(b"done");
        sink.finish();
        assert_eq!(read(&path), "compiling crate a\ncompiling crate b\nwarning: unused\ndone");
    }

    #[test]
    fn a_secret_split_across_reads_and_lines_is_never_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let secret = "first-half\nsecond-half-of-key";
        let redactor = Redactor::new([("MY_TOKEN".to_owned(), secret.to_owned())]);
        let (path, mut sink) = sink_in(dir.path(), &redactor);
        sink.feed(b"token: first-");
        sink.feed(b"half\n");
        // The line may be the start of the secret: it is held back.
        assert_eq!(read(&path), "");
        sink.feed(b"second-half-of-key and more\nnext line\n");
        assert_eq!(read(&path), "token: [REDACTED:MY_TOKEN] and more\nnext line\n");
        sink.finish();
        assert!(!read(&path).contains("half"), "{}", read(&path));
    }

    #[test]
    fn past_the_cap_the_file_says_so_and_stops_growing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("build-1.err");
        let redactor = Redactor::default();
        let mut sink = LiveSink::new(path.clone(), 10, &redactor);
        sink.feed(b"0123456789abcdef\n");
        sink.feed(b"more\n");
        sink.finish();
        assert_eq!(
            read(&path),
            "0123456789\n[... live output stops at the output cap; the kept output is written when the attempt ends ...]\n"
        );
    }
}
