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

pub mod ask;
pub mod checks;
pub mod context;
mod dead_letter;
pub mod effectiveness;
pub mod regression;
pub mod strategies;

use crate::patterns::{Classification, Context, Library};
pub use loopwright_journal::closed_loop::*;
pub use loopwright_journal::state::{Iteration, LoopState};

/// The skill name that turns the closed loop on.
pub const SKILL: &str = "closed-loop-execution";
/// Retry budget when neither the stage nor the pattern gives one (seed 000).
pub const DEFAULT_BUDGET: u32 = 3;
/// Error outputs this similar are "the same error" (seed 000: >80% token overlap).
pub const SAME_ERROR_OVERLAP: f64 = 0.8;
/// Lines of output an unclassified failure's next attempt is shown (SPEC §6).
pub const UNCLASSIFIED_LINES: usize = 40;
/// Strategies every pattern may fall back to (seed 000 "Alternate Strategy Selection").
pub const UNIVERSAL_FALLBACKS: [Strategy; 2] = [Strategy::ContextExpand, Strategy::AnalyzeThenFix];

/// The closed loop's settings from the workspace's files.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `verification-gates.yml`.
    pub regression: regression::Settings,
    /// First `retry_with_backoff` wait (seed 000: 5 s; `strategies.retry_with_backoff.initial_delay_seconds`
    /// in failure-patterns.yml).
    pub backoff_initial: std::time::Duration,
    /// How well each (pattern, strategy) pair has done in earlier runs: measured from the
    /// journal when a failure is first analyzed (a run whose stages pass never reads it).
    pub effectiveness: std::cell::OnceCell<effectiveness::Effectiveness>,
    /// Which stages run in a sandbox, as the app resolved it.
    pub sandbox: loopwright_spec::SandboxPlan,
    /// Asking the stage's agent about a failure nothing sure classified (`[classify]`).
    pub classify: loopwright_spec::config::ClassifyConfig,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            regression: regression::Settings::default(),
            backoff_initial: std::time::Duration::from_secs(5),
            effectiveness: std::cell::OnceCell::new(),
            sandbox: loopwright_spec::SandboxPlan::default(),
            classify: loopwright_spec::config::ClassifyConfig::default(),
        }
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

/// True when a stage runs through the closed loop.
pub fn is_closed_loop(stage: &loopwright_spec::Stage) -> bool {
    stage.skill.as_deref() == Some(SKILL)
}

/// Classifies `output` against the library, with what is known of the command that printed
/// it. `full` is the whole output (classified); the journal keeps its tail.
pub fn classify(
    library: &Library,
    source: &str,
    failure_type: FailureType,
    summary: String,
    full: &str,
    context: &Context,
) -> Failure {
    let c: Classification = library.classify_in(full, context);
    let pattern = c.matched_pattern.as_deref().and_then(|id| library.get(id));
    // The lines that decided the pattern, with the lines that say what failed (a test's
    // name, an assertion), in output order; else the output's last lines. An unclassified
    // failure gets its last UNCLASSIFIED_LINES lines: nothing sure picked its excerpt.
    let text = crate::patterns::strip_ansi(full);
    let last = |n: usize| -> Vec<String> {
        let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        all[all.len().saturating_sub(n)..].iter().map(|l| l.chars().take(300).collect()).collect()
    };
    let mut lines: Vec<String> = if c.classified_by == ClassifiedBy::None {
        last(UNCLASSIFIED_LINES)
    } else {
        text.lines()
            .map(str::trim)
            .filter(|l| c.lines.iter().any(|d| d == l) || FAILURE_LINE.is_match(l))
            .take(crate::patterns::MAX_DECISIVE_LINES)
            .map(|l| l.chars().take(300).collect())
            .collect()
    };
    if lines.is_empty() {
        lines = last(8);
    }
    Failure {
        source: source.to_owned(),
        failure_type,
        summary,
        output: tail_chars(full, OUTPUT_CHARS),
        lines,
        pattern: c.matched_pattern.clone(),
        classified_by: Some(c.classified_by),
        confidence: c.confidence,
        signals: c.signals,
        evidence: c.evidence,
        strategy: c.strategy,
        alternatives: pattern.map(|p| p.alternatives.clone()).unwrap_or_default(),
        max_auto_retries: pattern.map(|p| p.max_auto_retries),
        retryable: pattern.is_none_or(|p| p.retryable),
        unfixable: None,
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
/// otherwise the pattern's strategy runs. Once a strategy of the pattern has enough measured
/// outcomes across runs, the strategies are tried in order of measured success instead of the
/// fixed order ([`effectiveness`]), and the reason says so.
pub fn analyze(stage: &loopwright_spec::Stage, state: &LoopState, measured: &effectiveness::Effectiveness) -> Analysis {
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
    let decision = |next, strategy: Option<Strategy>, reason: String| Analysis {
        strategy,
        same_pattern_count,
        budget,
        budget_remaining: remaining,
        next,
        reason,
        measured: None,
    };
    if let Some((next, reason)) = no_fix(failure, used, budget) {
        return decision(next, None, reason);
    }
    // The pattern's strategies in the order they are tried: its own, its alternatives, the
    // universal fallbacks — by measured success once some of them have enough outcomes.
    let order = measured.order(failure.key(), &strategies_of(failure));
    let why_order = order.because.as_ref().map(|b| format!(" ({b})")).unwrap_or_default();
    let primary = order.strategies.first().copied().unwrap_or(failure.strategy);
    let repeated = same.iter().find(|i| {
        i.analysis.as_ref().and_then(|a| a.strategy) == Some(primary)
            && token_overlap(&i.failure.as_ref().expect("filtered").output, &failure.output) > SAME_ERROR_OVERLAP
    });
    let measured_fix = |strategy: Strategy, reason: String| Analysis {
        measured: order.because.clone(),
        ..decision(NextAction::Fix, Some(strategy), reason)
    };
    let Some(repeated) = repeated else {
        return measured_fix(
            primary,
            match failure.pattern.as_deref() {
                Some(p) => format!("{p} (confidence {:.2}): strategy {primary}{why_order}", failure.confidence),
                None => format!("no pattern matched with confidence >= 0.3: generic {primary}{why_order}"),
            },
        );
    };
    let tried: Vec<Strategy> = same.iter().filter_map(|i| i.analysis.as_ref()?.strategy).collect();
    match order.strategies.iter().copied().find(|s| !tried.contains(s)) {
        Some(alternate) => measured_fix(
            alternate,
            format!(
                "same {} failure as attempt {} after {primary}: identical retries are forbidden, trying {alternate}{why_order}",
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

/// A failure no strategy is tried for: a security violation or one that needs a person
/// (escalated), or a spent budget (dead-lettered).
fn no_fix(failure: &Failure, used: u32, budget: u32) -> Option<(NextAction, String)> {
    if failure.failure_type == FailureType::SecurityViolation {
        let reason = format!("{} (a security violation is never retried automatically)", failure.summary);
        return Some((NextAction::Escalate, reason));
    }
    if !failure.retryable || failure.strategy == Strategy::Escalate {
        let reason =
            format!("{} is not retryable: it needs a human (pattern strategy `{}`)", failure.key(), failure.strategy);
        return Some((NextAction::Escalate, reason));
    }
    if used >= budget {
        let reason = format!("retry budget exhausted: {used} of {budget} attempts failed (last: {})", failure.key());
        return Some((NextAction::DeadLetter, reason));
    }
    None
}

/// A failure's strategies, each once: its pattern's own, its alternatives, the universal
/// fallbacks; never `escalate`.
fn strategies_of(failure: &Failure) -> Vec<Strategy> {
    let mut fixed: Vec<Strategy> = Vec::new();
    for s in std::iter::once(failure.strategy).chain(failure.alternatives.iter().copied()).chain(UNIVERSAL_FALLBACKS) {
        if s != Strategy::Escalate && !fixed.contains(&s) {
            fixed.push(s);
        }
    }
    fixed
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
            classified_by: None,
            unfixable: None,
            confidence: 0.9,
            signals: vec![],
            evidence: vec![],
            strategy: strategy.parse().expect("a strategy"),
            alternatives: vec![Strategy::ContextExpand],
            max_auto_retries: Some(3),
            retryable: true,
        }
    }

    fn iteration(attempt: u32, f: Failure, strategy: Option<&str>) -> Iteration {
        Iteration {
            attempt,
            at: jiff::Timestamp::UNIX_EPOCH,
            duration_ms: 1,
            outputs: crate::event::Outputs::new(),
            files: FileChanges::default(),
            validation: None,
            checks: None,
            regression: None,
            failure: Some(f),
            analysis: strategy.map(|s| Analysis {
                strategy: Some(s.parse().expect("a strategy")),
                same_pattern_count: 0,
                budget: 3,
                budget_remaining: 2,
                next: NextAction::Fix,
                reason: String::new(),
                measured: None,
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
    fn an_unclassified_failure_keeps_its_last_forty_lines_and_a_classified_one_its_decisive_lines() {
        // Patterns alone: what the learned classifier would propose for the noise is not the point.
        let lib = Library::builtin().patterns_only();
        let noise: String = (1..=60).map(|i| format!("step {i}: frobnicating the quux\n")).collect();
        let f = classify(
            &lib,
            "tests",
            FailureType::VerificationFailed,
            "tests failed".into(),
            &noise,
            &Context::default(),
        );
        assert_eq!((f.pattern.as_deref(), f.classified_by()), (None, ClassifiedBy::None));
        let want: Vec<String> = (21..=60).map(|i| format!("step {i}: frobnicating the quux")).collect();
        assert_eq!(f.lines, want);
        assert!(
            context::details(&f).starts_with("step 21:")
                && context::details(&f).ends_with("step 60: frobnicating the quux")
        );
        let decisive = format!("{noise}error[E0425]: cannot find value `total` in this scope\n");
        let f = classify(
            &lib,
            "tests",
            FailureType::VerificationFailed,
            "tests failed".into(),
            &decisive,
            &Context::default(),
        );
        assert_eq!((f.pattern.as_deref(), f.classified_by()), (Some("undefined-name"), ClassifiedBy::Pattern));
        assert_eq!(f.lines, ["error[E0425]: cannot find value `total` in this scope"]);
    }

    #[test]
    fn a_first_failure_uses_the_pattern_strategy() {
        let state = LoopState {
            iterations: vec![iteration(1, failure(Some("test-failure"), "analyze_then_fix", "assert 1 == 2"), None)],
            ..LoopState::default()
        };
        let a = analyze(&stage(None), &state, &Default::default());
        assert_eq!(
            (a.next, a.strategy.map(Strategy::as_str), a.budget_remaining),
            (NextAction::Fix, Some("analyze_then_fix"), 2)
        );
    }

    #[test]
    fn the_same_error_twice_switches_strategy_then_escalates() {
        let out = "FAILED tests/test_a.py::test_x - assert 1 == 2";
        let f = || failure(Some("test-failure"), "analyze_then_fix", out);
        let mut state = LoopState {
            iterations: vec![iteration(1, f(), Some("analyze_then_fix")), iteration(2, f(), None)],
            ..LoopState::default()
        };
        let a = analyze(&stage(Some(9)), &state, &Default::default());
        assert_eq!(
            (a.next, a.strategy.map(Strategy::as_str), a.same_pattern_count),
            (NextAction::Fix, Some("context_expand"), 1)
        );
        state.iterations[1].analysis = Some(a);
        state.iterations.push(iteration(3, f(), None));
        let a = analyze(&stage(Some(9)), &state, &Default::default());
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
        assert_eq!(
            analyze(&stage(None), &state, &Default::default()).strategy.map(Strategy::as_str),
            Some("analyze_then_fix")
        );
    }

    #[test]
    fn the_budget_ends_in_a_dead_letter_and_non_retryable_escalates() {
        let f = |o: &str| failure(Some("test-failure"), "analyze_then_fix", o);
        let state = LoopState {
            iterations: vec![iteration(1, f("a"), Some("analyze_then_fix")), iteration(2, f("b"), None)],
            ..LoopState::default()
        };
        assert_eq!(analyze(&stage(Some(2)), &state, &Default::default()).next, NextAction::DeadLetter);
        let mut perm = failure(Some("permission-error"), "escalate", "EACCES");
        perm.retryable = false;
        let state = LoopState { iterations: vec![iteration(1, perm, None)], ..LoopState::default() };
        assert_eq!(analyze(&stage(None), &state, &Default::default()).next, NextAction::Escalate);
    }

    #[test]
    fn overlap_ignores_numbers() {
        assert!(token_overlap("error at line 12 col 3", "error at line 14 col 9") > 0.99);
        assert!(token_overlap("cannot find value x", "mismatched types y") < 0.2);
    }
}
