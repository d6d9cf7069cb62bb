//! The closed loop of seed 000, for stages with `skill: closed-loop-execution`:
//!
//! ```text
//! GENERATE → VALIDATE → EXECUTE → EVALUATE → SUCCESS
//!               │ fail                │ fail
//!               └──────► ANALYZE ◄────┘
//!                           ├─► FIX ──► GENERATE (never VALIDATE)
//!                           ├─► ESCALATE (the run waits for `respond`)
//!                           └─► DEAD LETTER (the stage fails)
//! ```
//!
//! GENERATE and EXECUTE are one attempt of the stage's agent (it edits files itself); VALIDATE
//! and EVALUATE run gates and checks ([`checks`]); a failure is classified against the pattern
//! library when it is recorded, so ANALYZE ([`analyze`]) is a pure decision over the journal;
//! FIX runs a strategy ([`strategies`]) whose findings go into the next prompt's
//! `<retry_context>` ([`context`]).

pub mod checks;
pub mod context;
pub mod regression;
pub mod strategies;

use serde::{Deserialize, Serialize};

use crate::event::Outputs;
use crate::patterns::{Classification, Library};

/// The skill name that turns the closed loop on.
pub const SKILL: &str = "closed-loop-execution";
/// Retry budget when neither the stage nor the pattern gives one (seed 000).
pub const DEFAULT_BUDGET: u32 = 3;
/// Error outputs this similar are "the same error" (seed 000: >80% token overlap).
pub const SAME_ERROR_OVERLAP: f64 = 0.8;
/// Strategies every pattern may fall back to (seed 000 "Alternate Strategy Selection").
pub const UNIVERSAL_FALLBACKS: [&str; 2] = ["context_expand", "analyze_then_fix"];
/// Characters of a command's output kept in the journal (seed 000 EXECUTE).
pub const OUTPUT_CHARS: usize = 2000;

/// The closed loop's settings from the workspace's files.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `verification-gates.yml`.
    pub regression: regression::Settings,
    /// First `retry_with_backoff` wait (seed 000: 5 s; `strategies.retry_with_backoff.initial_delay_seconds`
    /// in failure-patterns.yml).
    pub backoff_initial: std::time::Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self { regression: regression::Settings::default(), backoff_initial: std::time::Duration::from_secs(5) }
    }
}

impl Settings {
    /// The backoff from a patterns file's `strategies` section, if it sets one.
    pub fn with_strategies(mut self, strategies: Option<&serde_json::Value>) -> Self {
        if let Some(secs) = strategies
            .and_then(|s| s.pointer("/retry_with_backoff/initial_delay_seconds"))
            .and_then(serde_json::Value::as_f64)
            .filter(|s| s.is_finite() && *s >= 0.0)
        {
            self.backoff_initial = std::time::Duration::from_secs_f64(secs);
        }
        self
    }
}

/// Lines that say what failed, whatever the tool: `FAIL x`, `FAILED tests/…`, `error[E…]`,
/// `AssertionError`, `panicked at`, `expected … got …`.
static FAILURE_LINE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(
        r"^(?:FAIL|FAILED|ERROR)\b|^--- FAIL|\berror(?:\[\w+\])?:|Error:|panicked at|AssertionError|assert(?:ion)? failed|\bexpected\b.*\b(?:got|but|found|received)\b|\bgot\b.*\bexpected\b",
    )
    .expect("valid failure-line regex")
});

/// An error line that names the error itself.
static HEADLINE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(
        r"^(?:E\s+)?[A-Za-z_.]*(?:Error|Exception)\b:?|error(?:\[\w+\])?:|error TS\d+|panicked at|^FAIL\b|^--- FAIL",
    )
    .expect("valid headline regex")
});

/// True when a stage runs through the closed loop.
pub fn is_closed_loop(stage: &loopwright_spec::Stage) -> bool {
    stage.skill.as_deref() == Some(SKILL)
}

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
    /// `lint`, `type`, `test`, `build`, `custom`, `syntax` or `command`.
    pub kind: String,
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

/// A VALIDATE gate's finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// The gate: `syntax`, `workspace_boundary` or `plan_mode`.
    pub gate: String,
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
    /// 0..1.
    pub confidence: f64,
    /// The matched signals.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
    /// The pattern's first strategy (`analyze_then_fix` when nothing matched).
    pub strategy: String,
    /// The pattern's alternatives.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alternatives: Vec<String>,
    /// The pattern's retry budget, when one matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_auto_retries: Option<u32>,
    /// The pattern allows automatic retries.
    pub retryable: bool,
}

impl Failure {
    /// Classifies `output` against the library. `full` is the whole output (classified);
    /// the journal keeps its tail.
    pub fn classify(library: &Library, source: &str, failure_type: FailureType, summary: String, full: &str) -> Self {
        let c: Classification = library.classify(full);
        let pattern = c.matched_pattern.as_deref().and_then(|id| library.get(id));
        // The lines that decided the pattern, with the lines that say what failed (a test's
        // name, an assertion), in output order; else the output's last lines.
        let text = crate::patterns::strip_ansi(full);
        let mut lines: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| c.lines.iter().any(|d| d == l) || FAILURE_LINE.is_match(l))
            .take(crate::patterns::MAX_DECISIVE_LINES)
            .map(|l| l.chars().take(300).collect())
            .collect();
        if lines.is_empty() {
            let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            lines = all[all.len().saturating_sub(8)..].iter().map(|l| (*l).to_owned()).collect();
        }
        Failure {
            source: source.to_owned(),
            failure_type,
            summary,
            output: tail_chars(full, OUTPUT_CHARS),
            lines,
            pattern: c.matched_pattern.clone(),
            confidence: c.confidence,
            signals: c.signals,
            strategy: c.strategy,
            alternatives: pattern.map(|p| p.alternatives.clone()).unwrap_or_default(),
            max_auto_retries: pattern.map(|p| p.max_auto_retries),
            retryable: pattern.is_none_or(|p| p.retryable),
        }
    }

    /// The line that best names the error: an exception or compiler error line when there is
    /// one (`ZeroDivisionError: division by zero`, `error[E0308]: …`), else the first decisive
    /// line, else the summary.
    pub fn headline(&self) -> &str {
        self.lines
            .iter()
            .find(|l| HEADLINE.is_match(l))
            .or_else(|| self.lines.iter().find(|l| !l.starts_with("Traceback")))
            .map_or(self.summary.as_str(), |l| l.trim())
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
    pub strategy: Option<String>,
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
}

/// What FIX did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixResult {
    /// The strategy.
    pub strategy: String,
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

/// One pass through the loop: GENERATE … FIX.
#[derive(Debug, Clone, PartialEq)]
pub struct Iteration {
    /// The attempt number.
    pub attempt: u32,
    /// When GENERATE ended.
    pub at: jiff::Timestamp,
    /// How long GENERATE + EXECUTE took.
    pub duration_ms: u64,
    /// The agent's outputs.
    pub outputs: Outputs,
    /// Files the attempt changed.
    pub files: FileChanges,
    /// VALIDATE ran: gates checked and what they found.
    pub validation: Option<(Vec<String>, Vec<Violation>)>,
    /// EVALUATE ran: each check.
    pub checks: Option<Vec<CheckResult>>,
    /// Regression re-check ran: dependents and regressions.
    pub regression: Option<(Vec<String>, Vec<Regression>)>,
    /// The first failure, classified.
    pub failure: Option<Failure>,
    /// ANALYZE's decision.
    pub analysis: Option<Analysis>,
    /// FIX's result.
    pub fix: Option<FixResult>,
    /// When FIX ended.
    pub fix_at: Option<jiff::Timestamp>,
}

/// A stage's closed loop, derived from the journal.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoopState {
    /// Every iteration, in order.
    pub iterations: Vec<Iteration>,
    /// Iterations before the current retry budget (a human's `retry` or `fix` resets it).
    pub base: usize,
    /// The open escalation's reason, while the run waits for an answer.
    pub escalation: Option<String>,
    /// The last escalation's reason (kept after it is answered, for the result).
    pub escalation_reason: Option<String>,
    /// The answer to the last escalation, until the next attempt starts.
    pub answer: Option<crate::event::Answer>,
    /// A human's `fix:` instruction for the attempts that follow.
    pub user_fix: Option<String>,
    /// The dead letter's reason, once written.
    pub dead_letter: Option<String>,
    /// Regression detection: None until the gate was evaluated; then the baseline when on.
    pub regression_gate: Option<Option<Baseline>>,
    /// The loop succeeded.
    pub succeeded: bool,
    /// Whole-loop passes the stage's `retry:` started after the first gave up.
    pub passes: u32,
}

impl LoopState {
    /// `success`, `failed`, `escalated`, or `running`.
    pub fn status(&self) -> &'static str {
        if self.succeeded {
            "success"
        } else if self.dead_letter.is_some() {
            "failed"
        } else if self.escalation.is_some()
            || matches!(self.answer, Some(crate::event::Answer::Skip | crate::event::Answer::Abort))
        {
            "escalated"
        } else {
            "running"
        }
    }

    /// The last pattern matched, if any.
    pub fn last_pattern(&self) -> Option<&str> {
        self.iterations.iter().rev().find_map(|i| i.failure.as_ref()).and_then(|f| f.pattern.as_deref())
    }

    /// Strategies used, in order, without repeats.
    pub fn strategies(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in self.iterations.iter().filter_map(|i| i.fix.as_ref()).map(|f| &f.strategy) {
            if !out.contains(s) {
                out.push(s.clone());
            }
        }
        out
    }

    /// Patterns matched, in order, without repeats.
    pub fn patterns(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in self.iterations.iter().filter_map(|i| i.failure.as_ref()).map(|f| f.key().to_owned()) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    /// Every file changed by any attempt.
    pub fn files(&self) -> FileChanges {
        let mut all = FileChanges::default();
        for i in &self.iterations {
            all.merge(&i.files);
        }
        all
    }
}

/// The retry budget for a failure: the stage's `closed_loop.max_retries`, else the pattern's
/// `max_auto_retries`, else 3 (seed 000).
pub fn budget(stage: &loopwright_spec::Stage, failure: &Failure) -> u32 {
    stage.closed_loop.as_ref().and_then(|c| c.max_retries).or(failure.max_auto_retries).unwrap_or(DEFAULT_BUDGET).max(1)
}

/// ANALYZE (seed 000): given the loop with its last iteration failed and classified, decide
/// between FIX (with which strategy), ESCALATE and DEAD LETTER.
///
/// In order: a non-retryable pattern (or a plan-mode violation) escalates at once; an
/// exhausted budget goes to the dead letter; the same pattern failing again with the same
/// strategy and a substantially similar output (>80% token overlap) must switch to an
/// alternative strategy not yet tried for that pattern, or escalate when none is left;
/// otherwise the pattern's strategy runs.
pub fn analyze(stage: &loopwright_spec::Stage, state: &LoopState) -> Analysis {
    let current = state.iterations.last().expect("ANALYZE follows a failed iteration");
    let failure = current.failure.as_ref().expect("ANALYZE follows a failure");
    let window = &state.iterations[state.base.min(state.iterations.len() - 1)..];
    let earlier = &window[..window.len() - 1];
    let same: Vec<&Iteration> =
        earlier.iter().filter(|i| i.failure.as_ref().is_some_and(|f| f.key() == failure.key())).collect();
    let same_pattern_count = u32::try_from(same.len()).unwrap_or(u32::MAX);
    let budget = budget(stage, failure);
    let used = u32::try_from(window.len()).unwrap_or(u32::MAX);
    let remaining = budget.saturating_sub(used);
    let decision = |next, strategy: Option<String>, reason: String| Analysis {
        strategy,
        same_pattern_count,
        budget,
        budget_remaining: remaining,
        next,
        reason,
    };
    if failure.failure_type == FailureType::SecurityViolation {
        return decision(
            NextAction::Escalate,
            None,
            format!("{} (a security violation is never retried automatically)", failure.summary),
        );
    }
    if !failure.retryable || failure.strategy == "escalate" {
        return decision(
            NextAction::Escalate,
            None,
            format!("{} is not retryable: it needs a human (pattern strategy `{}`)", failure.key(), failure.strategy),
        );
    }
    if used >= budget {
        return decision(
            NextAction::DeadLetter,
            None,
            format!("retry budget exhausted: {used} of {budget} attempts failed (last: {})", failure.key()),
        );
    }
    let primary = failure.strategy.clone();
    let repeated = same.iter().find(|i| {
        i.analysis.as_ref().and_then(|a| a.strategy.as_deref()) == Some(primary.as_str())
            && token_overlap(&i.failure.as_ref().expect("filtered").output, &failure.output) > SAME_ERROR_OVERLAP
    });
    let Some(repeated) = repeated else {
        return decision(
            NextAction::Fix,
            Some(primary.clone()),
            match failure.pattern.as_deref() {
                Some(p) => format!("{p} (confidence {:.2}): strategy {primary}", failure.confidence),
                None => format!("no pattern matched with confidence >= 0.3: generic {primary}"),
            },
        );
    };
    let tried: Vec<&str> = same.iter().filter_map(|i| i.analysis.as_ref()?.strategy.as_deref()).collect();
    let mut options: Vec<String> = Vec::new();
    for s in std::iter::once(primary.as_str())
        .chain(failure.alternatives.iter().map(String::as_str))
        .chain(UNIVERSAL_FALLBACKS)
    {
        if s != "escalate" && !tried.contains(&s) && !options.iter().any(|o| o == s) {
            options.push(s.to_owned());
        }
    }
    match options.into_iter().next() {
        Some(alternate) => decision(
            NextAction::Fix,
            Some(alternate.clone()),
            format!(
                "same {} failure as attempt {} after {primary}: identical retries are forbidden, trying {alternate}",
                failure.key(),
                repeated.attempt
            ),
        ),
        None => decision(
            NextAction::Escalate,
            None,
            format!(
                "Same {} pattern with {primary} strategy failed twice. No alternate strategies available.",
                failure.key()
            ),
        ),
    }
}

/// Word tokens of an error output, for the same-error rule: lowercase words, without pure
/// numbers (line numbers, durations and addresses change between runs of the same error).
fn tokens(text: &str) -> std::collections::HashSet<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty() && !w.chars().all(|c| c.is_ascii_digit()))
        .map(str::to_lowercase)
        .collect()
}

/// Shared tokens over the larger token set (0..1): 1 for the same words, 0 for none shared.
pub fn token_overlap(a: &str, b: &str) -> f64 {
    let (a, b) = (tokens(a), tokens(b));
    let larger = a.len().max(b.len());
    if larger == 0 {
        return 1.0;
    }
    a.intersection(&b).count() as f64 / larger as f64
}

/// The last `max` characters of a text, cut at a line start.
pub fn tail_chars(text: &str, max: usize) -> String {
    let text = text.trim_end();
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let start = text.char_indices().nth(count - max).map_or(0, |(i, _)| i);
    let cut = text[start..].find('\n').map_or(start, |n| start + n + 1);
    text[cut..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(pattern: Option<&str>, strategy: &str, output: &str) -> Failure {
        Failure {
            source: "tests_pass".into(),
            failure_type: FailureType::VerificationFailed,
            summary: "tests failed".into(),
            output: output.into(),
            lines: vec![],
            pattern: pattern.map(str::to_owned),
            confidence: 0.9,
            signals: vec![],
            strategy: strategy.into(),
            alternatives: vec!["context_expand".into()],
            max_auto_retries: Some(3),
            retryable: true,
        }
    }

    fn iteration(attempt: u32, f: Failure, strategy: Option<&str>) -> Iteration {
        Iteration {
            attempt,
            at: jiff::Timestamp::UNIX_EPOCH,
            duration_ms: 1,
            outputs: Outputs::new(),
            files: FileChanges::default(),
            validation: None,
            checks: None,
            regression: None,
            failure: Some(f),
            analysis: strategy.map(|s| Analysis {
                strategy: Some(s.into()),
                same_pattern_count: 0,
                budget: 3,
                budget_remaining: 2,
                next: NextAction::Fix,
                reason: String::new(),
            }),
            fix: None,
            fix_at: None,
        }
    }

    fn stage(max_retries: Option<u32>) -> loopwright_spec::Stage {
        let yaml = format!(
            "name: p\ndescription: d\nversion: 1\nstages:\n  - id: fix\n    description: d\n    agent: shell\n    mode: agent\n    run: 'true'\n    skill: closed-loop-execution\n{}",
            max_retries.map_or(String::new(), |m| format!("    closed_loop:\n      max_retries: {m}\n"))
        );
        let source = loopwright_spec::SourceFile::new("p.yml", yaml);
        let agents = std::collections::BTreeMap::new();
        let cx = loopwright_spec::CompileContext { agents: &agents, extra_inputs: &[], default_timeout_minutes: 1.0 };
        let pipeline = loopwright_spec::compile(&source, &cx).expect("valid");
        pipeline.stages[0].clone()
    }

    #[test]
    fn a_first_failure_uses_the_pattern_strategy() {
        let state = LoopState {
            iterations: vec![iteration(1, failure(Some("test-failure"), "analyze_then_fix", "assert 1 == 2"), None)],
            ..LoopState::default()
        };
        let a = analyze(&stage(None), &state);
        assert_eq!((a.next, a.strategy.as_deref(), a.budget_remaining), (NextAction::Fix, Some("analyze_then_fix"), 2));
    }

    #[test]
    fn the_same_error_twice_switches_strategy_then_escalates() {
        let out = "FAILED tests/test_a.py::test_x - assert 1 == 2";
        let f = || failure(Some("test-failure"), "analyze_then_fix", out);
        let mut state = LoopState {
            iterations: vec![iteration(1, f(), Some("analyze_then_fix")), iteration(2, f(), None)],
            ..LoopState::default()
        };
        let a = analyze(&stage(Some(9)), &state);
        assert_eq!((a.next, a.strategy.as_deref(), a.same_pattern_count), (NextAction::Fix, Some("context_expand"), 1));
        state.iterations[1].analysis = Some(a);
        state.iterations.push(iteration(3, f(), None));
        let a = analyze(&stage(Some(9)), &state);
        assert_eq!(a.next, NextAction::Escalate);
        assert_eq!(
            a.reason,
            "Same test-failure pattern with analyze_then_fix strategy failed twice. No alternate strategies available."
        );
    }

    #[test]
    fn a_different_error_of_the_same_pattern_may_use_the_same_strategy() {
        let state = LoopState {
            iterations: vec![
                iteration(
                    1,
                    failure(Some("test-failure"), "analyze_then_fix", "alpha beta gamma"),
                    Some("analyze_then_fix"),
                ),
                iteration(2, failure(Some("test-failure"), "analyze_then_fix", "delta epsilon zeta"), None),
            ],
            ..LoopState::default()
        };
        assert_eq!(analyze(&stage(None), &state).strategy.as_deref(), Some("analyze_then_fix"));
    }

    #[test]
    fn the_budget_ends_in_a_dead_letter_and_non_retryable_escalates() {
        let f = |o: &str| failure(Some("test-failure"), "analyze_then_fix", o);
        let state = LoopState {
            iterations: vec![iteration(1, f("a"), Some("analyze_then_fix")), iteration(2, f("b"), None)],
            ..LoopState::default()
        };
        assert_eq!(analyze(&stage(Some(2)), &state).next, NextAction::DeadLetter);
        let mut perm = failure(Some("permission-error"), "escalate", "EACCES");
        perm.retryable = false;
        let state = LoopState { iterations: vec![iteration(1, perm, None)], ..LoopState::default() };
        assert_eq!(analyze(&stage(None), &state).next, NextAction::Escalate);
    }

    #[test]
    fn overlap_ignores_numbers() {
        assert!(token_overlap("error at line 12 col 3", "error at line 14 col 9") > 0.99);
        assert!(token_overlap("cannot find value x", "mismatched types y") < 0.2);
    }
}
