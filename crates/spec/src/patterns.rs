//! Failure-pattern files (SPEC §6): the built-in library and a project's
//! `.loopwright/failure-patterns.yml`, which adds patterns, overrides fields of built-ins by
//! id, or replaces the library with `extends: none`.

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::diag::{Diagnostic, Diagnostics, Position, SourceFile, yaml_error};

/// One signal: a literal substring (case-insensitive), or a regex written `/…/` or `{regex: …}`,
/// with an optional strength (0..1; how sure a match makes the pattern on its own).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum RawSignal {
    /// `"text"` or `"/regex/"`.
    Text(String),
    /// `{regex: "…", strength: 0.9}` or `{literal: "…", strength: 0.5}`.
    Spec {
        /// A regex.
        #[serde(default)]
        regex: Option<String>,
        /// A literal.
        #[serde(default)]
        literal: Option<String>,
        /// How sure a match makes the pattern on its own.
        #[serde(default)]
        strength: Option<f64>,
    },
}

/// A fact about the command (SPEC §6): an exit code (`127`), the signal that ended it
/// (`SIGKILL`), loopwright's own timeout (`timeout`), a tool (`cargo clippy`) or a check type
/// (`lint`) — alone, or with a strength: `{when: 137, strength: 0.6}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(
    untagged,
    expecting = "expected an exit code (127), a name (SIGKILL, timeout, a tool, a check type) or {when: …, strength: 0..1}"
)]
pub enum RawWhen {
    /// The fact alone.
    Plain(RawWhenValue),
    /// The fact with how sure it makes the pattern.
    Weighted {
        /// The exit code or name.
        when: RawWhenValue,
        /// 0..1; at 0.95 and over the fact decides whatever the text says.
        #[serde(default)]
        strength: Option<f64>,
    },
}

/// An exit code or a name, as a [`RawWhen`] writes it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum RawWhenValue {
    /// An exit code.
    Code(i64),
    /// A name: a signal, `timeout`, a tool, a check type.
    Name(String),
}

/// Linux's signal names by number.
const SIGNALS: [&str; 32] = [
    "",
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGILL",
    "SIGTRAP",
    "SIGABRT",
    "SIGBUS",
    "SIGFPE",
    "SIGKILL",
    "SIGUSR1",
    "SIGSEGV",
    "SIGUSR2",
    "SIGPIPE",
    "SIGALRM",
    "SIGTERM",
    "SIGSTKFLT",
    "SIGCHLD",
    "SIGCONT",
    "SIGSTOP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGVTALRM",
    "SIGPROF",
    "SIGWINCH",
    "SIGIO",
    "SIGPWR",
    "SIGSYS",
];

/// Every signal's name, `SIGHUP` to `SIGSYS`.
pub fn signal_names() -> &'static [&'static str] {
    &SIGNALS[1..]
}

/// The name of signal number `n` (9 → `SIGKILL`).
pub fn signal_of(n: i32) -> Option<&'static str> {
    SIGNALS.get(usize::try_from(n).ok()?).copied().filter(|s| !s.is_empty())
}

/// `SIGKILL`, `KILL`, `kill` or `9` → `SIGKILL`.
pub fn signal_name(name: &str) -> Option<&'static str> {
    let name = name.trim();
    if let Ok(n) = name.parse::<i32>() {
        return signal_of(n);
    }
    let upper = name.to_ascii_uppercase();
    let upper = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS.iter().copied().find(|s| !s.is_empty() && &s[3..] == upper)
}

/// What a context entry looks for, checked.
#[derive(Debug, Clone, PartialEq)]
pub enum Fact {
    /// The command exited with this code.
    Exit(i32),
    /// This signal ended it (a shell's 128 + n counts).
    Signal(&'static str),
    /// loopwright's own timeout ended it.
    Timeout,
    /// It runs this tool (`cargo clippy`), lower case.
    Command(String),
    /// It is a check of this type, lower case.
    CheckType(String),
}

/// The three lists of context entries a pattern may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenList {
    /// `commands`.
    Commands,
    /// `exit_codes`.
    ExitCodes,
    /// `check_types`.
    CheckTypes,
}

impl WhenList {
    /// Each list, with its field name.
    pub const ALL: [(WhenList, &'static str); 3] =
        [(WhenList::Commands, "commands"), (WhenList::ExitCodes, "exit_codes"), (WhenList::CheckTypes, "check_types")];

    /// The field name.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|(l, _)| *l == self).map_or("", |(_, n)| n)
    }
}

impl RawWhen {
    /// The entry checked as an entry of `list`: its fact and the strength given, if any.
    pub fn resolve(&self, list: WhenList) -> Result<(Fact, Option<f64>), String> {
        let (value, strength) = match self {
            RawWhen::Plain(value) => (value, None),
            RawWhen::Weighted { when, strength } => (when, *strength),
        };
        let text = match value {
            RawWhenValue::Code(c) => c.to_string(),
            RawWhenValue::Name(n) => n.trim().to_owned(),
        };
        let fact = match list {
            WhenList::ExitCodes => {
                if let Ok(code) = text.parse::<i32>() {
                    Fact::Exit(code)
                } else if text.eq_ignore_ascii_case("timeout") {
                    Fact::Timeout
                } else if let Some(s) = signal_name(&text) {
                    Fact::Signal(s)
                } else {
                    return Err(format!("`{text}` is not an exit code, a signal name (SIGKILL) or `timeout`"));
                }
            }
            _ if text.is_empty() => return Err("an empty entry".into()),
            WhenList::Commands => Fact::Command(text.to_lowercase()),
            WhenList::CheckTypes => Fact::CheckType(text.to_lowercase()),
        };
        match strength {
            Some(s) if !(0.0..=1.0).contains(&s) => Err(format!("strength {s} is not between 0 and 1")),
            strength => Ok((fact, strength)),
        }
    }
}

/// A pattern as written (every field but `id` optional, so a project can override a few).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawPattern {
    /// Stable id (`type-error`).
    pub id: String,
    /// What the failure is.
    pub description: Option<String>,
    /// What recognizes it.
    pub signals: Option<Vec<RawSignal>>,
    /// The first strategy to try.
    pub strategy: Option<String>,
    /// Strategies to try next.
    pub alternatives: Option<Vec<String>>,
    /// Automatic retries before escalation.
    pub max_auto_retries: Option<u32>,
    /// A fixer can repair it.
    pub auto_fixable: Option<bool>,
    /// The fixer (may use `{file}`).
    pub fix_command: Option<String>,
    /// The language or tool it belongs to.
    pub language: Option<String>,
    /// Worth retrying at all.
    pub retryable: Option<bool>,
    /// Tools whose output this pattern's signals speak for (`ruff`, `cargo clippy`): when the
    /// command runs one of them, its signals weigh more and a failure is evidence by itself.
    pub commands: Option<Vec<Spanned<RawWhen>>>,
    /// Exit codes, signals (`SIGKILL`) and `timeout` (loopwright's own) that are evidence.
    pub exit_codes: Option<Vec<Spanned<RawWhen>>>,
    /// Check types (`lint`, `format`, `type`, `test`, `build`, `syntax`) whose failure is
    /// evidence when nothing more specific is printed.
    pub check_types: Option<Vec<Spanned<RawWhen>>>,
    /// The pattern names the step that failed (a linter, the tests, the build) rather than
    /// why: any other pattern that matches with confidence 0.7 or more wins over it.
    pub generic: Option<bool>,
}

impl RawPattern {
    /// The pattern's context entries of `list`, as written.
    pub fn whens(&self, list: WhenList) -> &[Spanned<RawWhen>] {
        match list {
            WhenList::Commands => &self.commands,
            WhenList::ExitCodes => &self.exit_codes,
            WhenList::CheckTypes => &self.check_types,
        }
        .as_deref()
        .unwrap_or_default()
    }
}

/// A patterns file.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PatternFile {
    /// `none` to replace the built-in library instead of extending it.
    pub extends: Option<String>,
    /// The patterns.
    pub patterns: Vec<RawPattern>,
    /// Success criteria per task type (seed 000), kept as written.
    pub success_criteria: Option<serde_json::Value>,
    /// Strategy definitions (seed 000), kept as written.
    pub strategies: Option<serde_json::Value>,
    /// Pattern-learning settings (seed 000), kept as written.
    pub pattern_learning: Option<serde_json::Value>,
}

impl PatternFile {
    /// Parses a patterns file; every context entry that is not what its list takes is
    /// reported where it is written.
    pub fn parse(source: &SourceFile) -> Result<Self, Diagnostics> {
        if source.text.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut diags = Diagnostics::default();
        diags.add_source(source);
        let file: Self =
            serde_saphyr::from_str_with_options(&source.text, serde_saphyr::options! { with_snippet: false }).map_err(
                |e| {
                    let mut d = diags.clone();
                    d.push(yaml_error(source, &e, 0, 0));
                    d
                },
            )?;
        for (i, p) in file.patterns.iter().enumerate() {
            for (list, name) in WhenList::ALL {
                for entry in p.whens(list) {
                    if let Err(problem) = entry.value.resolve(list) {
                        let field = format!("patterns[{i}].{name}");
                        let d = Diagnostic::new(source, format!("pattern `{}`: {name}: {problem}", p.id))
                            .field(field)
                            .at(Position::from_location(&entry.referenced, source, 0, 0));
                        diags.push(d);
                    }
                }
            }
        }
        if diags.items.is_empty() { Ok(file) } else { Err(diags) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_entries_are_checked_where_they_are_written() {
        let text = "patterns:\n  - id: flaky-db\n    exit_codes: [75, SIGNOPE, {when: KILL, strength: 0.6}]\n    check_types: [{when: lint, strength: 1.5}]\n    commands: ['  ']\n";
        let diags = PatternFile::parse(&SourceFile::new("failure-patterns.yml", text)).expect_err("bad entries");
        assert_eq!(
            crate::diag::located(&diags),
            [
                "5:16: patterns[0].commands: pattern `flaky-db`: commands: an empty entry",
                "3:22: patterns[0].exit_codes: pattern `flaky-db`: exit_codes: `SIGNOPE` is not an exit code, a signal name (SIGKILL) or `timeout`",
                "4:19: patterns[0].check_types: pattern `flaky-db`: check_types: strength 1.5 is not between 0 and 1",
            ]
        );
        let good = "patterns:\n  - id: flaky-db\n    exit_codes: [75, {when: KILL, strength: 0.6}, timeout]\n";
        let file = PatternFile::parse(&SourceFile::new("f.yml", good)).expect("good");
        let facts: Vec<(Fact, Option<f64>)> = file.patterns[0]
            .whens(WhenList::ExitCodes)
            .iter()
            .map(|e| e.value.resolve(WhenList::ExitCodes).expect("fact"))
            .collect();
        assert_eq!(facts, [(Fact::Exit(75), None), (Fact::Signal("SIGKILL"), Some(0.6)), (Fact::Timeout, None)]);
        let odd = "patterns:\n  - id: x\n    exit_codes: [{code: 75}]\n";
        let diags = PatternFile::parse(&SourceFile::new("f.yml", odd)).expect_err("not an entry");
        assert!(diags.items[0].message.contains("expected an exit code (127), a name (SIGKILL, timeout, a tool, a check type) or {when: …, strength: 0..1}"), "{diags:?}");
    }

    #[test]
    fn signals_are_named_by_name_or_number() {
        assert_eq!(signal_name("KILL"), Some("SIGKILL"));
        assert_eq!(signal_name("sigsegv"), Some("SIGSEGV"));
        assert_eq!(signal_name("9"), Some("SIGKILL"));
        assert_eq!(signal_name("0"), None);
        assert_eq!(signal_name("SIGNOPE"), None);
        assert_eq!(signal_names().len(), 31);
    }
}
