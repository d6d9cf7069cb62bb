//! What the closed loop (seed 000) records of each iteration: the files an attempt changed,
//! the checks it ran, the failure classified, ANALYZE's decision and FIX's result — the facts
//! the journal's closed-loop events carry and the state they fold into. The loop's behaviour
//! (classifying, deciding, the strategies) lives in the engine.

pub use loopwright_spec::patterns::Strategy;
use serde::{Deserialize, Serialize};

/// Characters of a command's output kept in the journal (seed 000 EXECUTE).
pub const OUTPUT_CHARS: usize = 2000;

/// An error line that names the error itself.
static HEADLINE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(
        r"^(?:E\s+)?[A-Za-z_.]*(?:Error|Exception)\b:?|error(?:\[\w+\])?:|error TS\d+|panicked at|^FAIL\b|^--- FAIL",
    )
    .expect("valid headline regex")
});

/// Files an attempt changed, relative to the workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChanges {
    /// Changed in place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modified: Vec<String>,
    /// New.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created: Vec<String>,
    /// Removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<String>,
    /// Commits made on the branch meanwhile, by someone else (`SHA subject`): what they account
    /// for is not among the changes above, and they are kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commits_kept: Vec<String>,
}

impl FileChanges {
    /// No file changed.
    pub fn is_empty(&self) -> bool {
        self.modified.is_empty() && self.created.is_empty() && self.deleted.is_empty()
    }

    /// Every changed path, sorted.
    pub fn paths(&self) -> Vec<&str> {
        let mut all: Vec<&str> =
            self.modified.iter().chain(&self.created).chain(&self.deleted).map(String::as_str).collect();
        all.sort_unstable();
        all
    }

    /// `path (created)`-style lines, sorted by path.
    pub fn described(&self) -> Vec<String> {
        let mut all: Vec<(String, &str)> = self
            .modified
            .iter()
            .map(|p| (p.clone(), "modified"))
            .chain(self.created.iter().map(|p| (p.clone(), "created")))
            .chain(self.deleted.iter().map(|p| (p.clone(), "deleted")))
            .collect();
        all.sort();
        all.into_iter().map(|(p, how)| format!("{p} ({how})")).collect()
    }

    /// Adds another attempt's changes (a file created then modified stays created).
    pub fn merge(&mut self, other: &FileChanges) {
        for p in &other.created {
            if !self.created.contains(p) {
                self.modified.retain(|m| m != p);
                self.deleted.retain(|m| m != p);
                self.created.push(p.clone());
            }
        }
        for p in &other.modified {
            if !self.created.contains(p) && !self.modified.contains(p) {
                self.modified.push(p.clone());
            }
        }
        for p in &other.deleted {
            let was_created = self.created.contains(p);
            self.created.retain(|m| m != p);
            self.modified.retain(|m| m != p);
            if !was_created && !self.deleted.contains(p) {
                self.deleted.push(p.clone());
            }
        }
    }
}

/// One check of EVALUATE, as it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// Its name (`tests_pass`).
    pub name: String,
    /// What kind of check it is.
    pub kind: loopwright_spec::pipeline::CheckKind,
    /// The command run.
    pub command: String,
    /// It passed.
    pub passed: bool,
    /// Exit code, when the command exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// What it printed (stdout then stderr), the last [`OUTPUT_CHARS`] characters.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output: String,
    /// How long it ran.
    pub duration_ms: u64,
}

/// A VALIDATE gate (seed 000's pre-execution gates).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    /// Changed YAML, JSON and TOML files parse.
    Syntax,
    /// Nothing changed points outside the workspace.
    WorkspaceBoundary,
    /// A plan-mode stage changed nothing.
    PlanMode,
}

impl Gate {
    /// Every gate, in the order VALIDATE runs them.
    pub const ALL: [Gate; 3] = [Gate::Syntax, Gate::WorkspaceBoundary, Gate::PlanMode];

    /// Its name in the journal and in reports (`workspace_boundary`).
    pub fn as_str(self) -> &'static str {
        match self {
            Gate::Syntax => "syntax",
            Gate::WorkspaceBoundary => "workspace_boundary",
            Gate::PlanMode => "plan_mode",
        }
    }
}

impl std::fmt::Display for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, so a width (`{:<18}`) lines it up.
        f.pad(self.as_str())
    }
}

/// A VALIDATE gate's finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// The gate that found it.
    pub gate: Gate,
    /// The file concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// The kind of a closed-loop failure (seed 001 failure types, plus VALIDATE's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureType {
    /// The agent itself failed (non-zero exit, missing outputs).
    ExecutionError,
    /// A check failed.
    VerificationFailed,
    /// A VALIDATE gate failed.
    ValidationFailed,
    /// The agent or a check ran out of time.
    Timeout,
    /// A plan-mode stage changed files: never retried automatically.
    SecurityViolation,
    /// Dependents' tests regressed.
    Regression,
}

impl FailureType {
    /// As written in prompts and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureType::ExecutionError => "execution_error",
            FailureType::VerificationFailed => "verification_failed",
            FailureType::ValidationFailed => "validation_failed",
            FailureType::Timeout => "timeout",
            FailureType::SecurityViolation => "security_violation",
            FailureType::Regression => "regression",
        }
    }
}

impl std::fmt::Display for FailureType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a piece of evidence is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceKind {
    /// A text signal of the pattern, as written.
    Signal,
    /// The exit code the command returned.
    ExitCode,
    /// The signal that ended the command (`SIGKILL`).
    ExitSignal,
    /// loopwright's own timeout ended it.
    Timeout,
    /// A tool the command runs.
    Command,
    /// The check's type.
    CheckType,
    /// A pattern that matched without deciding.
    UnsurePattern,
    /// The statistical classifier's category, sure enough to be used.
    Statistical,
    /// The statistical classifier's proposal, not sure enough.
    UnsureStatistical,
    /// The category the stage's agent named, used.
    Agent,
    /// The category the stage's agent named, not used (or `unknown`).
    UnsureAgent,
    /// Why nothing of the agent's answer could be used.
    AgentUnusable,
    /// The phrase of the output the agent quoted.
    AgentSignal,
    /// The agent's reason for its label.
    AgentReason,
    /// A kind this version does not know (a journal written by a newer one).
    #[serde(other)]
    Other,
}

impl EvidenceKind {
    /// Its name in the journal (`exit_code`).
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceKind::Signal => "signal",
            EvidenceKind::ExitCode => "exit_code",
            EvidenceKind::ExitSignal => "exit_signal",
            EvidenceKind::Timeout => "timeout",
            EvidenceKind::Command => "command",
            EvidenceKind::CheckType => "check_type",
            EvidenceKind::UnsurePattern => "unsure_pattern",
            EvidenceKind::Statistical => "statistical",
            EvidenceKind::UnsureStatistical => "unsure_statistical",
            EvidenceKind::Agent => "agent",
            EvidenceKind::UnsureAgent => "unsure_agent",
            EvidenceKind::AgentUnusable => "agent_unusable",
            EvidenceKind::AgentSignal => "agent_signal",
            EvidenceKind::AgentReason => "agent_reason",
            EvidenceKind::Other => "other",
        }
    }
}

impl std::fmt::Display for EvidenceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, so a width (`{:<18}`) lines it up.
        f.pad(self.as_str())
    }
}

/// One piece of evidence that counted for a classification (SPEC §6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// What it is.
    pub kind: EvidenceKind,
    /// What matched: the signal as written, `127`, `SIGKILL`, the tool, the check type.
    pub value: String,
    /// How sure it made the pattern on its own, as it counted (0..1).
    pub strength: f64,
}

/// What classified a failure (SPEC §6): a pattern sure of it (or a universal fact), the
/// built-in statistical classifier when no pattern was sure, the stage's own agent when
/// neither was, or nothing (unclassified).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClassifiedBy {
    /// A pattern with confidence 0.7 or more, or a fact that decides.
    Pattern,
    /// The learned classifier, at or above its threshold.
    Statistical,
    /// The stage's agent, asked in one short request.
    Agent,
    /// Nothing was sure: the failure is unclassified.
    #[default]
    None,
}

impl ClassifiedBy {
    /// As written in the journal and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            ClassifiedBy::Pattern => "pattern",
            ClassifiedBy::Statistical => "statistical",
            ClassifiedBy::Agent => "agent",
            ClassifiedBy::None => "none",
        }
    }
}

impl std::fmt::Display for ClassifiedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A classified failure of one iteration: where it came from and what pattern it matched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// `generate`, `pre_validation`, `regression_check`, or the name of the failed check.
    pub source: String,
    /// What kind of failure.
    pub failure_type: FailureType,
    /// One line: what failed and how.
    pub summary: String,
    /// The failure's output, the last [`OUTPUT_CHARS`] characters.
    pub output: String,
    /// The lines that decided the classification (or the output's last lines).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<String>,
    /// The pattern matched, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// What decided the pattern (absent in journals written before it was recorded: see
    /// [`Failure::classified_by`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classified_by: Option<ClassifiedBy>,
    /// 0..1.
    pub confidence: f64,
    /// The matched signals.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
    /// Everything that decided the pattern: the signals and the command's context.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<Evidence>,
    /// The pattern's first strategy (`analyze_then_fix` when nothing matched).
    pub strategy: Strategy,
    /// The pattern's alternatives.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alternatives: Vec<Strategy>,
    /// The pattern's retry budget, when one matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_auto_retries: Option<u32>,
    /// The pattern allows automatic retries.
    pub retryable: bool,
    /// Why the agent cannot fix it, when GENERATE failed that way (SPEC §16 "Fallback").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unfixable: Option<Unfixable>,
}

impl Failure {
    /// The line that best names the error: the line holding the phrase the stage's agent quoted
    /// when it labelled the failure, else an exception or compiler error line when there is one
    /// (`ZeroDivisionError: division by zero`, `error[E0308]: …`), else the first decisive
    /// line (an unclassified failure's lines are its last: the last of them), else the summary.
    pub fn headline(&self) -> &str {
        let quoted = self
            .evidence
            .iter()
            .find(|e| e.kind == EvidenceKind::AgentSignal)
            .and_then(|e| self.lines.iter().find(|l| l.contains(e.value.as_str())));
        let plain = || match self.classified_by() {
            ClassifiedBy::None => self.lines.iter().rev().find(|l| !l.trim().is_empty()),
            _ => self.lines.iter().find(|l| !l.starts_with("Traceback")),
        };
        quoted
            .or_else(|| self.lines.iter().find(|l| HEADLINE.is_match(l)))
            .or_else(plain)
            .map_or(self.summary.as_str(), |l| l.trim())
    }

    /// What decided its pattern: as journaled, else (an older journal) a pattern when one
    /// matched.
    pub fn classified_by(&self) -> ClassifiedBy {
        self.classified_by.unwrap_or(if self.pattern.is_some() { ClassifiedBy::Pattern } else { ClassifiedBy::None })
    }

    /// How it was classified, in words: `pattern test-failure (0.95, strategy analyze_then_fix,
    /// classified by pattern)`, or `unclassified (strategy analyze_then_fix)`; with what the
    /// stage's agent answered when it was asked and its answer was not used.
    pub fn classification(&self) -> String {
        let by = self.classified_by();
        let words = match &self.pattern {
            Some(p) => format!("pattern {p} ({:.2}, strategy {}, classified by {by})", self.confidence, self.strategy),
            None => format!("unclassified (strategy {})", self.strategy),
        };
        std::iter::once(words)
            .chain(self.agent_notes().into_iter().map(|n| format!("the {n}")))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// What the stage's agent answered when it was asked and its answer was not used, each in
    /// words after its subject (each surface names the agent its own way): `agent could not
    /// tell`, `agent said disk-full, not used: …`, `agent's answer was not used: no answer
    /// within 60 s`.
    pub fn agent_notes(&self) -> Vec<String> {
        self.evidence
            .iter()
            .filter_map(|e| match e.kind {
                EvidenceKind::UnsureAgent if e.value == "unknown" => Some("agent could not tell".to_owned()),
                EvidenceKind::UnsureAgent => {
                    Some(format!("agent said {}, not used: only a sure pattern may stop the run for a person", e.value))
                }
                EvidenceKind::AgentUnusable => Some(format!("agent's answer was not used: {}", e.value)),
                _ => None,
            })
            .collect()
    }

    /// The pattern id, or `unclassified`.
    pub fn key(&self) -> &str {
        self.pattern.as_deref().unwrap_or("unclassified")
    }
}

/// What ANALYZE chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NextAction {
    /// Run a strategy, then generate again.
    Fix,
    /// Ask a human.
    Escalate,
    /// Give up: write a dead letter, fail the stage.
    DeadLetter,
}

impl NextAction {
    /// As written in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            NextAction::Fix => "fix",
            NextAction::Escalate => "escalate",
            NextAction::DeadLetter => "dead_letter",
        }
    }
}

/// ANALYZE's result (seed 000 `analysis_result`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    /// The strategy to run (for `fix`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    /// Earlier failures of this budget with the same pattern.
    pub same_pattern_count: u32,
    /// The retry budget.
    pub budget: u32,
    /// Retries left after this one.
    pub budget_remaining: u32,
    /// What happens next.
    pub next: NextAction,
    /// Why, in a sentence.
    pub reason: String,
    /// When the strategy was chosen by measured success across runs rather than the
    /// pattern's fixed order: the figures that decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<String>,
}

/// What FIX did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixResult {
    /// The strategy.
    pub strategy: Strategy,
    /// What was done, in a sentence (seed 000 `fix_applied`).
    pub applied: String,
    /// Findings for the next prompt (expanded context, dependency report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// A fixer ran and the failed check passed afterwards.
    #[serde(default)]
    pub resolved: bool,
    /// Wait this long before generating again (`retry_with_backoff`).
    #[serde(default)]
    pub wait_ms: u64,
}

/// Per-file test counts (regression baseline and re-check).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestCounts {
    /// Tests that passed.
    pub pass: u32,
    /// Tests that failed.
    pub fail: u32,
    /// Names of the failing tests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<String>,
    /// Names of the passing tests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passing: Vec<String>,
}

/// The regression baseline of a stage (seed 000), taken before its first attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Baseline {
    /// The test command run.
    pub command: String,
    /// Test counts by file.
    pub results: std::collections::BTreeMap<String, TestCounts>,
}

/// One file's regression (seed 000 regression report row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Regression {
    /// The dependent file.
    pub file: String,
    /// Baseline passes / total.
    pub baseline_pass: u32,
    /// Baseline total.
    pub baseline_total: u32,
    /// Passes now.
    pub current_pass: u32,
    /// Total now.
    pub current_total: u32,
    /// New failures.
    pub new_failures: u32,
    /// Tests that passed before and fail now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tests: Vec<String>,
}

/// A failure an agent cannot fix by trying again (SPEC §16 "Fallback"): another agent may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unfixable {
    /// Its provider kept refusing for too many requests, past the wait allowed.
    RateLimit,
    /// Its account's quota or credit is spent.
    Quota,
    /// Its credentials were refused or are missing.
    Authentication,
    /// The model it names does not exist or is not available to it.
    ModelMissing,
    /// Its program is not installed.
    CliMissing,
    /// What it was given does not fit its model's context.
    ContextLength,
}

impl Unfixable {
    /// Its name in the journal.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RateLimit => "rate_limit",
            Self::Quota => "quota",
            Self::Authentication => "authentication",
            Self::ModelMissing => "model_missing",
            Self::CliMissing => "cli_missing",
            Self::ContextLength => "context_length",
        }
    }

    /// In words, for people: "its provider kept rate-limiting it past its wait".
    pub fn describe(self) -> &'static str {
        match self {
            Self::RateLimit => "its provider kept rate-limiting it past its wait",
            Self::Quota => "its quota is spent",
            Self::Authentication => "its credentials were refused",
            Self::ModelMissing => "its model is not available",
            Self::CliMissing => "its program is not installed",
            Self::ContextLength => "the prompt does not fit its model's context",
        }
    }
}

impl std::fmt::Display for Unfixable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_words_line_up_in_columns() {
        assert_eq!(format!("{:<12}|{:>6}|", EvidenceKind::ExitSignal, Gate::Syntax), "exit_signal |syntax|");
        assert_eq!(format!("{:<13}|", Gate::PlanMode), "plan_mode    |");
    }
}
