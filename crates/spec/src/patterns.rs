//! Failure-pattern files (SPEC §6): the built-in library and a project's
//! `.loopwright/failure-patterns.yml`, which adds patterns, overrides fields of built-ins by
//! id, or replaces the library with `extends: none`.

use serde::{Deserialize, Serialize};
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

/// A fix strategy of the closed loop (seed 000): what FIX does before the next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Run the project's fixer (the pattern's `fix_command`, else one found for the project).
    AutoFix,
    /// Show the agent the code around the error and the definitions it names.
    ContextExpand,
    /// Show the agent the failing lines and where they point.
    AnalyzeThenFix,
    /// Check the manifests for what the error names.
    DependencyCheck,
    /// Wait, longer each time, then try again unchanged.
    RetryWithBackoff,
    /// Stop and ask a person.
    Escalate,
}

impl Strategy {
    /// Every strategy, by its name in files and the journal.
    pub const ALL: [(&'static str, Strategy); 6] = [
        ("auto_fix", Strategy::AutoFix),
        ("context_expand", Strategy::ContextExpand),
        ("analyze_then_fix", Strategy::AnalyzeThenFix),
        ("dependency_check", Strategy::DependencyCheck),
        ("retry_with_backoff", Strategy::RetryWithBackoff),
        ("escalate", Strategy::Escalate),
    ];

    /// Its name (`analyze_then_fix`).
    pub fn as_str(self) -> &'static str {
        Self::ALL.iter().find(|(_, s)| *s == self).map_or("", |(n, _)| n)
    }

    /// The strategy of that name.
    pub fn named(name: &str) -> Option<Strategy> {
        Self::ALL.iter().find(|(n, _)| *n == name.trim()).map(|(_, s)| *s)
    }

    /// Why `name` is not a strategy, with the closest name when one is near.
    pub fn unknown(name: &str) -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
        let hint =
            crate::diag::closest(name.trim(), &names).map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default();
        format!("unknown strategy `{name}`{hint}, expected one of {}", names.join(", "))
    }
}

/// Strategies sort by name, as lists of them always have.
impl Ord for Strategy {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for Strategy {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        Self::named(name).ok_or_else(|| Self::unknown(name))
    }
}

/// A journal written before strategies were checked at load may name one that does not exist:
/// the engine of that day ran `analyze_then_fix` for it, so that is what it reads as.
impl<'de> Deserialize<'de> for Strategy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Ok(Self::named(&name).unwrap_or(Strategy::AnalyzeThenFix))
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
    /// The first strategy to try (a name of [`Strategy::ALL`], checked by [`PatternFile::parse`]).
    pub strategy: Option<Spanned<String>>,
    /// Strategies to try next.
    pub alternatives: Option<Vec<Spanned<String>>>,
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
    /// Strategy definitions (seed 000), by strategy name, kept as written.
    #[serde(deserialize_with = "entries")]
    pub strategies: Option<Vec<StrategyEntry>>,
    /// Pattern-learning settings (seed 000), kept as written.
    pub pattern_learning: Option<serde_json::Value>,
}

/// One entry of `strategies`: a strategy's name, where it is written, and its settings.
pub type StrategyEntry = (Spanned<String>, serde_json::Value);

/// A map read as its entries in order, each key with where it is written.
fn entries<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<StrategyEntry>>, D::Error> {
    struct Entries;
    impl<'de> serde::de::Visitor<'de> for Entries {
        type Value = Vec<StrategyEntry>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of strategy names to their settings")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(entry) = map.next_entry()? {
                out.push(entry);
            }
            Ok(out)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
    }
    d.deserialize_any(Entries).map(Some)
}

impl PatternFile {
    /// The `strategies` section as one JSON object (the settings of each strategy by name).
    pub fn strategy_settings(&self) -> Option<serde_json::Value> {
        self.strategies.as_ref().map(|entries| {
            serde_json::Value::Object(entries.iter().map(|(k, v)| (k.value.clone(), v.clone())).collect())
        })
    }

    /// Every strategy name the file writes, with its field: each pattern's `strategy` and
    /// `alternatives`, and the keys of `strategies`.
    fn strategy_names(&self) -> Vec<(String, &Spanned<String>)> {
        let mut names = Vec::new();
        for (i, p) in self.patterns.iter().enumerate() {
            names.extend(p.strategy.iter().map(|s| (format!("patterns[{i}].strategy"), s)));
            for (j, s) in p.alternatives.iter().flatten().enumerate() {
                names.push((format!("patterns[{i}].alternatives[{j}]"), s));
            }
        }
        for (k, _) in self.strategies.iter().flatten() {
            names.push((format!("strategies.{}", k.value), k));
        }
        names
    }

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
        for (field, name) in file.strategy_names() {
            if Strategy::named(&name.value).is_none() {
                let d = Diagnostic::new(source, Strategy::unknown(&name.value))
                    .field(field)
                    .at(Position::from_location(&name.referenced, source, 0, 0));
                diags.push(d);
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
    fn unknown_strategy_names_are_errors_where_they_are_written() {
        let text = "patterns:\n  - id: flaky-db\n    strategy: retry_with_backof\n    alternatives: [context_expand, fix_it]\nstrategies:\n  auto_fixx:\n    steps: [run]\n  retry_with_backoff:\n    initial_delay_seconds: 2\n";
        let diags = PatternFile::parse(&SourceFile::new("failure-patterns.yml", text)).expect_err("bad names");
        assert_eq!(
            crate::diag::located(&diags),
            [
                "3:15: patterns[0].strategy: unknown strategy `retry_with_backof` (did you mean `retry_with_backoff`?), expected one of auto_fix, context_expand, analyze_then_fix, dependency_check, retry_with_backoff, escalate",
                "4:36: patterns[0].alternatives[1]: unknown strategy `fix_it`, expected one of auto_fix, context_expand, analyze_then_fix, dependency_check, retry_with_backoff, escalate",
                "6:3: strategies.auto_fixx: unknown strategy `auto_fixx` (did you mean `auto_fix`?), expected one of auto_fix, context_expand, analyze_then_fix, dependency_check, retry_with_backoff, escalate",
            ]
        );
        let good = text
            .replace("retry_with_backof\n", "retry_with_backoff\n")
            .replace("fix_it", "escalate")
            .replace("auto_fixx", "auto_fix");
        let file = PatternFile::parse(&SourceFile::new("f.yml", good.as_str())).expect("good");
        assert_eq!(
            file.strategy_settings(),
            Some(
                serde_json::json!({"auto_fix": {"steps": ["run"]}, "retry_with_backoff": {"initial_delay_seconds": 2}})
            )
        );
        // An old journal's misspelt name reads as what ran for it.
        assert_eq!(serde_json::from_str::<Strategy>("\"fix_it\"").expect("read"), Strategy::AnalyzeThenFix);
        assert_eq!(serde_json::to_string(&Strategy::RetryWithBackoff).expect("json"), "\"retry_with_backoff\"");
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
