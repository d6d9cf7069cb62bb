//! GitHub Actions (`GITHUB_ACTIONS=true`): a `::group::` per stage in the log, `::error`
//! annotations at the file and line of each failure the run classified (and one for the run's
//! headline), the Markdown summary appended to `$GITHUB_STEP_SUMMARY`, and `run_id` and
//! `status` appended to `$GITHUB_OUTPUT`.
//!
//! Workflow commands are lines that start with `::`. What agents print reaches the same log,
//! so every line loopwright prints that holds others' text goes through [`inert`] first: an
//! agent cannot set an output, mask a value or stop the commands of the job.

use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

use loopwright_engine::{RunState, RunStatus};
use loopwright_spec::Pipeline;

/// True when running as a step of a GitHub Actions job.
pub fn enabled() -> bool {
    std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true")
}

/// `text` with no line a runner would read as a workflow command: a line that starts (after
/// blanks) with `::` is quoted with `│ `.
pub fn inert(text: &str) -> Cow<'_, str> {
    if !text.lines().any(|l| l.trim_start().starts_with("::")) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if line.trim_start().starts_with("::") {
            out.push_str("│ ");
        }
        out.push_str(line);
    }
    Cow::Owned(out)
}

/// A command's message, escaped as the runner reads it.
fn data(text: &str) -> String {
    text.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

/// A command's property value, escaped as the runner reads it.
fn property(text: &str) -> String {
    data(text).replace(':', "%3A").replace(',', "%2C")
}

/// The line opening a stage's group.
pub fn group(title: &str) -> String {
    format!("::group::{}", data(title))
}

/// The line closing the open group.
pub const END_GROUP: &str = "::endgroup::";

/// The annotations of a run: one for its headline when it failed (`error`), waits or was
/// cancelled (`warning`), then — unless it succeeded — one at each `path:line` its classified
/// failures name among `files` (the repository's), titled with the failure's category.
pub fn annotations(state: &RunState, pipeline: &Pipeline, files: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let level = match state.status {
        RunStatus::Failed => Some("error"),
        RunStatus::Waiting | RunStatus::Cancelled | RunStatus::Rejected => Some("warning"),
        _ => None,
    };
    let summary = super::Summary::of(state, pipeline);
    if let (Some(level), Some(h)) = (level, &summary.headline) {
        let plain = |t: &str| loopwright_engine::patterns::strip_ansi(t).into_owned();
        let mut message = plain(&h.title);
        for line in &h.lines {
            message.push('\n');
            message.push_str(&plain(line));
        }
        message.push('\n');
        message.push_str(&h.next);
        out.push(format!("::{level} title={}::{}", property("loopwright"), data(&message)));
    }
    // A run that succeeded has nothing to fix where its earlier attempts failed.
    let located = if state.status == RunStatus::Success { Vec::new() } else { crate::forge::annotations(state, files) };
    for a in located {
        out.push(format!(
            "::error file={},line={},title={}::{}",
            property(&a.path),
            a.line,
            property(&loopwright_engine::patterns::strip_ansi(&a.title)),
            data(&loopwright_engine::patterns::strip_ansi(&a.message))
        ));
    }
    out
}

/// What `$GITHUB_OUTPUT` is given: the run's id and status.
pub fn outputs(state: &RunState) -> String {
    format!("run_id={}\nstatus={}\n", state.run_id, state.status.as_str())
}

/// Appends the summary to `$GITHUB_STEP_SUMMARY` and the outputs to `$GITHUB_OUTPUT`, when
/// the runner names them.
pub fn write_files(state: &RunState, pipeline: &Pipeline) -> Result<(), crate::error::Error> {
    let append = |var: &str, text: &str| -> Result<(), crate::error::Error> {
        let Some(path) = std::env::var_os(var).filter(|p| !p.is_empty()) else { return Ok(()) };
        let path = Path::new(&path);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()).map(|()| f));
        match &mut file {
            Ok(_) => Ok(()),
            Err(e) => {
                Err(crate::error::Error::Internal(anyhow::anyhow!("cannot append to ${var} ({}): {e}", path.display())))
            }
        }
    };
    append("GITHUB_STEP_SUMMARY", &super::markdown::render(&super::Summary::of(state, pipeline)))?;
    append("GITHUB_OUTPUT", &outputs(state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others_lines_cannot_be_workflow_commands() {
        let cases = [
            ("plain text", "plain text"),
            ("::set-output name=status::success", "│ ::set-output name=status::success"),
            ("ok\n   ::add-mask::x\nend ::error::no", "ok\n│    ::add-mask::x\nend ::error::no"),
        ];
        for (given, expected) in cases {
            assert_eq!(inert(given), expected);
        }
        assert_eq!(data("50%\r\nnext"), "50%25%0D%0Anext");
        assert_eq!(property("src/a,b.rs:3"), "src/a%2Cb.rs%3A3");
    }
}
