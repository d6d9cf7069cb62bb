//! Failure-pattern files (SPEC §6): the built-in library and a project's
//! `.loopwright/failure-patterns.yml`, which adds patterns, overrides fields of built-ins by
//! id, or replaces the library with `extends: none`.

use serde::Deserialize;

use crate::diag::{Diagnostics, SourceFile, yaml_error};

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
#[serde(untagged)]
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

impl RawWhen {
    /// The exit code or name as text (`127`, `SIGKILL`), and the strength when one is given.
    pub fn parts(&self) -> (String, Option<f64>) {
        let (value, strength) = match self {
            RawWhen::Plain(value) => (value, None),
            RawWhen::Weighted { when, strength } => (when, *strength),
        };
        let text = match value {
            RawWhenValue::Code(c) => c.to_string(),
            RawWhenValue::Name(n) => n.clone(),
        };
        (text, strength)
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
    pub commands: Option<Vec<RawWhen>>,
    /// Exit codes, signals (`SIGKILL`) and `timeout` (loopwright's own) that are evidence.
    pub exit_codes: Option<Vec<RawWhen>>,
    /// Check types (`lint`, `format`, `type`, `test`, `build`, `syntax`) whose failure is
    /// evidence when nothing more specific is printed.
    pub check_types: Option<Vec<RawWhen>>,
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
    /// Parses a patterns file.
    pub fn parse(source: &SourceFile) -> Result<Self, Diagnostics> {
        if source.text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_saphyr::from_str_with_options(&source.text, serde_saphyr::options! { with_snippet: false }).map_err(|e| {
            let mut d = Diagnostics::default();
            d.add_source(source);
            d.push(yaml_error(source, &e, 0, 0));
            d
        })
    }
}
