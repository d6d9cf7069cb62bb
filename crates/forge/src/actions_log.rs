//! A GitHub Actions job's log, read as GitHub writes it (SPEC §14): each line starts with a
//! timestamp, each step's output follows a `##[group]Run …` header (its command, `shell:` and
//! `env:`) closed by `##[endgroup]`, and the runner ends a failed step with
//! `##[error]Process completed with exit code N.`. What is classified is the failed step's
//! output alone, with its command and exit code as the context: earlier steps' warnings,
//! cache misses and deprecation notices are not the failure.

/// A job's log, split into its steps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobLog {
    /// The steps in the order they ran.
    pub steps: Vec<Step>,
}

/// One step of a job.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Step {
    /// What its header says after `Run ` (`actions/checkout@v4`, `cargo test --locked`).
    pub name: String,
    /// Its script, when it is a `run:` step: the header's lines before `shell:`.
    pub command: Option<String>,
    /// Its output, timestamps and markers removed.
    pub output: String,
    /// The exit code the runner reported for it.
    pub exit_code: Option<i32>,
    /// Whether the runner marked an error in it.
    pub failed: bool,
}

impl JobLog {
    /// Reads a job's log. Never fails: a text that is no Actions log is one step of output.
    pub fn read(text: &str) -> JobLog {
        let mut steps: Vec<Step> = Vec::new();
        let mut current = Step::default();
        let mut header: Option<Header> = None;
        for raw in text.trim_start_matches('\u{feff}').lines() {
            let line = without_timestamp(raw.trim_end_matches('\r'));
            if let Some(name) = line.strip_prefix("##[group]Run ") {
                if !current.is_empty() {
                    steps.push(std::mem::take(&mut current));
                }
                current.name = plain(name).trim().to_owned();
                header = Some(Header::Script(Vec::new()));
                continue;
            }
            if let Some(h) = &mut header {
                if line.starts_with("##[endgroup]") {
                    if let Header::Script(lines) = std::mem::replace(h, Header::Settings) {
                        current.command = (!lines.is_empty()).then(|| lines.join("\n"));
                    }
                    header = None;
                    continue;
                }
                if let Header::Script(lines) = h {
                    let text = plain(line);
                    if text.starts_with("shell: ") || text == "with:" || text == "env:" {
                        current.command = (!lines.is_empty()).then(|| lines.join("\n"));
                        *h = Header::Settings;
                    } else {
                        lines.push(text);
                    }
                }
                continue;
            }
            if line == "Post job cleanup." || line == "Cleaning up orphan processes" {
                if !current.is_empty() {
                    steps.push(std::mem::take(&mut current));
                }
                current.name = line.trim_end_matches('.').to_owned();
                continue;
            }
            current.take(line);
        }
        if !current.is_empty() {
            steps.push(current);
        }
        JobLog { steps }
    }

    /// The step that failed: the last one whose exit code the runner reported as not 0, else
    /// the last one with an error marked.
    pub fn failed_step(&self) -> Option<&Step> {
        self.steps
            .iter()
            .rev()
            .find(|s| s.exit_code.is_some_and(|c| c != 0))
            .or_else(|| self.steps.iter().rev().find(|s| s.failed))
    }

    /// What is classified: the failed step's output (the whole log's when no step failed).
    pub fn failure_text(&self) -> String {
        match self.failed_step() {
            Some(step) => step.output.clone(),
            None => self.steps.iter().map(|s| s.output.as_str()).collect::<Vec<_>>().join(""),
        }
    }
}

/// Where the reader is inside a step's header group.
enum Header {
    /// The script's lines.
    Script(Vec<String>),
    /// `shell:`, `with:`, `env:` and what follows them.
    Settings,
}

impl Step {
    fn is_empty(&self) -> bool {
        self.name.is_empty() && self.output.is_empty() && self.exit_code.is_none() && !self.failed
    }

    /// One line of the step's output, its marker read and removed.
    fn take(&mut self, line: &str) {
        if line.starts_with("##[debug]") || line.starts_with("##[endgroup]") {
            return;
        }
        if let Some(rest) = line.strip_prefix("##[error]") {
            self.failed = true;
            if let Some(code) = exit_code(rest) {
                self.exit_code = Some(code);
                return;
            }
            self.push(rest);
            return;
        }
        let text = ["##[warning]", "##[notice]", "##[group]", "##[command]"]
            .iter()
            .find_map(|marker| line.strip_prefix(marker))
            .unwrap_or(line);
        self.push(text);
    }

    fn push(&mut self, text: &str) {
        self.output.push_str(text);
        self.output.push('\n');
    }
}

/// `Process completed with exit code N.`: N.
fn exit_code(text: &str) -> Option<i32> {
    text.strip_prefix("Process completed with exit code ")?.strip_suffix('.')?.parse().ok()
}

/// The line without the `2024-05-01T10:00:00.1234567Z ` GitHub starts it with.
fn without_timestamp(line: &str) -> &str {
    let Some((stamp, rest)) = line.split_once(' ') else {
        return if is_timestamp(line) { "" } else { line };
    };
    if is_timestamp(stamp) { rest } else { line }
}

fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b.last() == Some(&b'Z')
        && s[..4].bytes().all(|c| c.is_ascii_digit())
        && s[11..13].bytes().all(|c| c.is_ascii_digit())
}

/// A header line without the colour GitHub prints a script in.
fn plain(line: &str) -> String {
    strip_ansi_escapes::strip_str(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\u{feff}2026-11-20T10:00:00.0000000Z Current runner version: '2.321.0'
2026-11-20T10:00:00.1000000Z ##[group]Operating System
2026-11-20T10:00:00.1000000Z Ubuntu
2026-11-20T10:00:00.1000000Z ##[endgroup]
2026-11-20T10:00:01.0000000Z ##[group]Run actions/checkout@v4
2026-11-20T10:00:01.0000000Z with:
2026-11-20T10:00:01.0000000Z   repository: acme/shop
2026-11-20T10:00:01.0000000Z ##[endgroup]
2026-11-20T10:00:01.5000000Z ##[warning]Node.js 16 actions are deprecated. Please update the following actions to use Node.js 20: actions/cache@v3.
2026-11-20T10:00:01.6000000Z hint: Using 'master' as the name for the initial branch.
2026-11-20T10:00:02.0000000Z ##[group]Run cargo test --locked
2026-11-20T10:00:02.0000000Z \u{1b}[36;1mcargo test --locked\u{1b}[0m
2026-11-20T10:00:02.0000000Z \u{1b}[36;1m  --all\u{1b}[0m
2026-11-20T10:00:02.0000000Z shell: /usr/bin/bash -e {0}
2026-11-20T10:00:02.0000000Z env:
2026-11-20T10:00:02.0000000Z   CARGO_TERM_COLOR: always
2026-11-20T10:00:02.0000000Z ##[endgroup]
2026-11-20T10:00:09.0000000Z test tests::adds ... FAILED
2026-11-20T10:00:09.0000000Z ##[error]test failed, to rerun pass `--lib`
2026-11-20T10:00:09.1000000Z ##[error]Process completed with exit code 101.
2026-11-20T10:00:09.2000000Z Post job cleanup.
2026-11-20T10:00:09.3000000Z [command]/usr/bin/git version
";

    #[test]
    fn the_failed_step_is_read_with_its_command_and_exit_code() {
        let log = JobLog::read(LOG);
        assert_eq!(
            log.steps.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["", "actions/checkout@v4", "cargo test --locked", "Post job cleanup"]
        );
        assert_eq!(log.steps[0].output, "Current runner version: '2.321.0'\nOperating System\nUbuntu\n");
        assert_eq!(
            log.steps[1],
            Step {
                name: "actions/checkout@v4".into(),
                command: None,
                output: "Node.js 16 actions are deprecated. Please update the following actions to use Node.js 20: actions/cache@v3.\nhint: Using 'master' as the name for the initial branch.\n".into(),
                exit_code: None,
                failed: false,
            }
        );
        let failed = log.failed_step().expect("a failed step");
        assert_eq!(
            failed,
            &Step {
                name: "cargo test --locked".into(),
                command: Some("cargo test --locked\n  --all".into()),
                output: "test tests::adds ... FAILED\ntest failed, to rerun pass `--lib`\n".into(),
                exit_code: Some(101),
                failed: true,
            }
        );
        assert_eq!(log.failure_text(), failed.output);
    }

    #[test]
    fn a_text_that_is_no_actions_log_is_one_step_of_output() {
        let log = JobLog::read("error[E0425]: cannot find value `x`\n");
        assert_eq!(log.steps.len(), 1);
        assert_eq!(log.failed_step(), None);
        assert_eq!(log.failure_text(), "error[E0425]: cannot find value `x`\n");
    }

    #[test]
    fn an_error_marked_without_an_exit_code_names_its_step() {
        let log = JobLog::read(
            "##[group]Run lint\n##[endgroup]\n##[error]src/a.rs:3: bad\n##[group]Run later\n##[endgroup]\nok\n",
        );
        assert_eq!(
            log.failed_step().map(|s| (s.name.as_str(), s.output.as_str())),
            Some(("lint", "src/a.rs:3: bad\n"))
        );
    }
}
