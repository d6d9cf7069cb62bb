//! Failure patterns (SPEC §6): recognising what went wrong in a tool's output.
//!
//! Every signal of every pattern is compiled into one `RegexSet`, and a log is matched line by
//! line in a single pass, so the cost grows with the log, not with the number of signals.
//! Each signal has a strength (how sure one match makes its pattern); a pattern's confidence
//! combines its matched signals as `1 - Π(1 - strength)`, so more signals never lower it and a
//! weak signal alone stays weak. Signals on warning lines count for less. Below 0.3 nothing
//! matches (seed 000) and the strategy is `analyze_then_fix`.
//!
//! The text is not all loopwright knows: a [`Context`] carries the command that ran, its exit
//! code or the signal that ended it, the check's type and whether loopwright's own timeout
//! fired. A pattern's `exit_codes`, `commands` and `check_types` turn those into evidence
//! combined with its signals the same way; a fact declared at 0.95 or more (exit 127 for
//! command-not-found) decides whatever the text says, and a tool the pattern names makes its
//! signals weigh more. Every piece of evidence that counted is reported.

mod builtin;
pub mod command;
pub mod learned;
mod library;
mod text;

pub use loopwright_journal::closed_loop::{ClassifiedBy, Evidence, EvidenceKind};
use loopwright_spec::patterns::Fact;
pub use loopwright_spec::patterns::Strategy;
pub use loopwright_spec::patterns::{signal_name, signal_names, signal_of};
use regex::{Regex, RegexSet};
use serde::{Deserialize, Serialize};

/// Confidence below which nothing matches (seed 000).
pub const MIN_CONFIDENCE: f64 = 0.3;
/// Lines longer than this are only read up to it.
const MAX_LINE: usize = 4096;

const BUILTIN: &str = include_str!("builtin.yml");

/// A compiled pattern.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pattern {
    /// Stable id.
    pub id: String,
    /// What the failure is.
    pub description: String,
    /// The first strategy.
    pub strategy: Strategy,
    /// Strategies to try next.
    pub alternatives: Vec<Strategy>,
    /// Automatic retries before escalation.
    pub max_auto_retries: u32,
    /// A fixer can repair it.
    pub auto_fixable: bool,
    /// The fixer.
    pub fix_command: Option<String>,
    /// The language or tool.
    pub language: Option<String>,
    /// Worth retrying.
    pub retryable: bool,
    /// The signals, as written.
    pub signals: Vec<String>,
    /// The tools whose output it speaks for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    /// Exit codes, signals and `timeout` that are evidence for it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exit_codes: Vec<String>,
    /// Check types whose failure is evidence for it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub check_types: Vec<String>,
    /// It names the step that failed (lint, tests, build) rather than why: a specific pattern
    /// matched with at least [`SPECIFIC`] confidence wins over it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub generic: bool,
}

/// What loopwright knows of the command whose output is classified, besides the text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    /// The command as run (`cargo clippy -- -D warnings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended it (`SIGKILL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The check's type (`lint`, `format`, `type`, `test`, `build`, `syntax`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_type: Option<String>,
    /// loopwright's own timeout ended it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
}

impl Context {
    /// The tool may have reported a failure of its own: it did not exit 0, and nothing (a
    /// signal, a timeout) ended it from outside. Only then do its name and the check's type
    /// say what usually went wrong.
    fn tool_failed(&self) -> bool {
        self.exit_code != Some(0) && self.ending_signal().is_none() && !self.timed_out
    }

    /// The signal that ended the command: the one given, or the one a shell reports as exit
    /// code 128 + n.
    fn ending_signal(&self) -> Option<&'static str> {
        self.signal.as_deref().and_then(signal_name).or_else(|| match self.exit_code {
            Some(c @ 129..=159) => signal_of(c - 128),
            _ => None,
        })
    }
}

/// A fact at least this sure decides whatever the text says (SPEC §6).
pub const DECISIVE: f64 = 0.95;
/// A specific pattern (one that says why: a syntax error, an undefined name, a refused
/// connection) this sure wins over a generic one (which says which step failed: the linter,
/// the tests, the build), however sure that is: a test run that failed on a `NameError` is an
/// undefined name, a linter's parse error a syntax error.
pub const SPECIFIC: f64 = 0.7;
/// Default strengths of context evidence a pattern declares without one: an exit code or a
/// signal is a fact (decisive); a tool or a check type only says what usually goes wrong.
const EXIT_STRENGTH: f64 = 0.95;
const COMMAND_STRENGTH: f64 = 0.4;
const CHECK_TYPE_STRENGTH: f64 = 0.4;

/// How evidence of a fact is named (`exit_code`) and what it shows (`127`).
fn shown(fact: &Fact) -> (EvidenceKind, String) {
    match fact {
        Fact::Exit(c) => (EvidenceKind::ExitCode, c.to_string()),
        Fact::Signal(s) => (EvidenceKind::ExitSignal, (*s).to_owned()),
        Fact::Timeout => (EvidenceKind::Timeout, "timeout".to_owned()),
        Fact::Command(c) => (EvidenceKind::Command, c.clone()),
        Fact::CheckType(c) => (EvidenceKind::CheckType, c.clone()),
    }
}

/// A pattern's context entry, compiled.
#[derive(Debug, Clone)]
struct When {
    pattern: usize,
    fact: Fact,
    strength: f64,
}

impl When {
    /// Whether this entry holds for the command. A tool or a check type is evidence only of a
    /// failure the tool reported itself ([`Context::tool_failed`]).
    fn holds(&self, context: &Context, tools: &[Vec<String>]) -> bool {
        match &self.fact {
            Fact::Exit(code) => context.exit_code == Some(*code),
            Fact::Signal(name) => context.ending_signal() == Some(*name),
            Fact::Timeout => context.timed_out,
            Fact::Command(entry) => context.tool_failed() && command::names(entry, tools),
            Fact::CheckType(t) => {
                context.tool_failed() && context.check_type.as_deref().is_some_and(|c| c.eq_ignore_ascii_case(t))
            }
        }
    }
}

/// What a program not found is called, in any tool's words.
static NOT_FOUND: std::sync::LazyLock<Regex> = std::sync::LazyLock::new(|| {
    Regex::new(r"(?i)not found|no such file|not recognized|\bENOENT\b|no such (sub)?command|unknown (sub)?command|(cannot|can't|could not|couldn't|unable to) (find|execute|exec)|not installed")
        .expect("valid not-found regex")
});

/// Exit code 127 is the shell's "command not found"; other programs use it for errors of their
/// own (an interpreter's uncaught error, make passing on a child's 127).
const NOT_FOUND_EXIT: i32 = 127;

impl When {
    /// How much this entry counts for `text` (0: not at all): exit 127 counts only when the
    /// output says something was not found or says nothing.
    fn strength_for(&self, text: &str) -> f64 {
        match self.fact {
            Fact::Exit(NOT_FOUND_EXIT) if !text.trim().is_empty() && !NOT_FOUND.is_match(text) => 0.0,
            _ => self.strength,
        }
    }
}

/// What `classify` found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Classification {
    /// The pattern, when one matched with enough confidence.
    pub matched_pattern: Option<String>,
    /// 0..1.
    pub confidence: f64,
    /// The strategy to use.
    pub strategy: Strategy,
    /// The signals of that pattern that matched.
    pub signals: Vec<String>,
    /// What decided: the text signals, exit code, signal, timeout, tool and check type that
    /// counted for the matched pattern, strongest first.
    pub evidence: Vec<Evidence>,
    /// The lines where they matched (at most [`MAX_DECISIVE_LINES`]), for feedback prompts.
    #[serde(skip)]
    pub lines: Vec<String>,
    /// What decided: a sure pattern, the statistical classifier, the agent, or nothing.
    pub classified_by: ClassifiedBy,
}

/// A pattern this sure decides (SPEC §6); below it its answer is only a proposal.
pub const SURE: f64 = 0.7;

impl Pattern {
    /// Its strategy stops the run for a person: escalating, or not retryable. Only a sure
    /// pattern (or a fact that decides) may do that.
    pub fn stops_for_a_person(&self) -> bool {
        self.strategy == Strategy::Escalate || !self.retryable
    }
}

/// Decisive lines kept by `classify`.
pub const MAX_DECISIVE_LINES: usize = 8;

/// A pattern library ready to classify logs. The one-pass matcher is built on first use, so a
/// run whose stages all succeed never pays for it.
#[derive(Debug, Clone)]
pub struct Library {
    patterns: Vec<Pattern>,
    sources: Vec<String>,
    /// False: patterns alone decide at any confidence of [`MIN_CONFIDENCE`] or more (the rule
    /// before sure and unsure).
    statistical: bool,
    /// Whether the built-in statistical classifier is asked when no pattern is sure.
    propose: bool,
    set: std::sync::OnceLock<RegexSet>,
    /// For each regex of the set: (pattern index, strength, signal as written).
    owners: Vec<(usize, f64, String)>,
    /// The patterns' context entries.
    whens: Vec<When>,
}

impl Library {
    /// The patterns, in library order.
    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    /// A pattern by id.
    pub fn get(&self, id: &str) -> Option<&Pattern> {
        self.patterns.iter().find(|p| p.id == id)
    }

    fn set(&self) -> &RegexSet {
        self.set
            .get_or_init(|| RegexSet::new(&self.sources).expect("every signal was checked when the library was made"))
    }

    /// Classifies one error output, knowing nothing but the text.
    pub fn classify(&self, output: &str) -> Classification {
        self.classify_in(output, &Context::default())
    }

    /// The library without the statistical classifier: patterns alone decide, at any
    /// confidence of [`MIN_CONFIDENCE`] or more.
    pub fn patterns_only(mut self) -> Self {
        self.statistical = false;
        self
    }

    /// The library whose unsure answers get no statistical proposal (`[classify] statistical =
    /// false`): a sure pattern decides, else the failure is unclassified (and the stage's agent
    /// may be asked).
    pub fn without_statistical(mut self) -> Self {
        self.propose = false;
        self
    }

    /// Classifies one error output with what is known of the command that printed it (SPEC §6
    /// "Sure, unsure, unclassified"): a pattern decides when it is sure ([`SURE`], or a fact
    /// decided); else the statistical classifier's proposal is taken when it reaches its
    /// threshold and does not stop the run for a person; else the failure is unclassified.
    /// What was proposed and not taken is listed in `evidence` (`unsure_pattern`,
    /// `unsure_statistical`).
    pub fn classify_in(&self, output: &str, context: &Context) -> Classification {
        let matched = self.match_patterns(output, context);
        if !self.statistical || is_sure(&matched) {
            return matched;
        }
        let proposal = if self.propose {
            learned::builtin().propose(output, context)
        } else {
            learned::Proposal { class: learned::NONE.to_owned(), probability: 0.0, threshold: 1.0 }
        };
        self.decide(matched, proposal)
    }

    /// The rule of SPEC §6 once the patterns were not sure: the statistical proposal is taken
    /// when it reaches its threshold and names a category that does not stop the run for a
    /// person; else the failure is unclassified, what was proposed kept as evidence. Pure: the
    /// proposal is given.
    pub fn decide(&self, matched: Classification, proposal: learned::Proposal) -> Classification {
        if is_sure(&matched) {
            return matched;
        }
        let mut unsure: Vec<Evidence> = matched
            .matched_pattern
            .iter()
            .map(|id| Evidence { kind: EvidenceKind::UnsurePattern, value: id.clone(), strength: matched.confidence })
            .collect();
        let strength = round(proposal.probability);
        match self.get(&proposal.class) {
            Some(pattern) if proposal.probability >= proposal.threshold && !pattern.stops_for_a_person() => {
                Classification {
                    matched_pattern: Some(pattern.id.clone()),
                    confidence: strength,
                    strategy: pattern.strategy,
                    signals: Vec::new(),
                    evidence: std::iter::once(Evidence {
                        kind: EvidenceKind::Statistical,
                        value: pattern.id.clone(),
                        strength,
                    })
                    .chain(unsure)
                    .collect(),
                    lines: Vec::new(),
                    classified_by: ClassifiedBy::Statistical,
                }
            }
            _ => {
                if proposal.class != learned::NONE {
                    unsure.push(Evidence { kind: EvidenceKind::UnsureStatistical, value: proposal.class, strength });
                }
                Classification::unclassified(unsure)
            }
        }
    }

    /// What the patterns alone say, sure or not.
    pub fn match_patterns(&self, output: &str, context: &Context) -> Classification {
        let text = strip_ansi(output);
        let tools = context.command.as_deref().map(command::tools).unwrap_or_default();
        // Context evidence per pattern, with how much it counts for this output.
        let facts: Vec<When> = self
            .whens
            .iter()
            .filter(|w| w.holds(context, &tools))
            .map(|w| When { strength: w.strength_for(&text), ..w.clone() })
            .filter(|w| w.strength > 0.0)
            .collect();
        let (best, hits) = self.signal_strengths(&text, context, &facts);
        let mut miss = vec![1.0f64; self.patterns.len()];
        let mut decided = vec![false; self.patterns.len()];
        for (i, s) in best.iter().enumerate().filter(|(_, s)| **s > 0.0) {
            miss[self.owners[i].0] *= 1.0 - s;
        }
        for w in &facts {
            miss[w.pattern] *= 1.0 - w.strength;
            decided[w.pattern] |= w.strength >= DECISIVE;
        }
        // A decisive fact beats any text, then a specific pattern sure enough beats a generic
        // one; among equals the surest, then library order.
        let rank = |p: usize, c: f64| (decided[p], !self.patterns[p].generic && c >= SPECIFIC, c);
        let winner =
            miss.iter().enumerate().map(|(p, m)| (p, 1.0 - m)).fold(None::<(usize, f64)>, |acc, (p, c)| match acc {
                Some((b, best_c)) if rank(b, best_c) >= rank(p, c) => acc,
                _ => Some((p, c)),
            });
        match winner {
            Some((p, confidence)) if confidence >= MIN_CONFIDENCE => self.matched(p, confidence, &best, &facts, &hits),
            other => Classification {
                confidence: other.map_or(0.0, |(_, c)| round(c)),
                ..Classification::unclassified(Vec::new())
            },
        }
    }

    /// How strongly each signal matched `text` (muted lines counting less, the tool that ran
    /// amplifying its own vocabulary), and the lines that matched with their signals.
    fn signal_strengths<'t>(
        &self,
        text: &'t str,
        context: &Context,
        facts: &[When],
    ) -> (Vec<f64>, Vec<(&'t str, Vec<usize>)>) {
        let set = self.set();
        let amplified = |p: usize| facts.iter().any(|w| w.pattern == p && matches!(w.fact, Fact::Command(_)));
        let mut best = vec![0.0f64; self.owners.len()];
        // Signals on a warning line or a skipped test's line: they say less about why the
        // command failed.
        let mut muted = vec![0.0f64; self.owners.len()];
        // Lines with matches and their signals, for the winner's decisive lines.
        let mut hits: Vec<(&str, Vec<usize>)> = Vec::new();
        for line in text.lines() {
            let line = truncate(line, MAX_LINE);
            if !set.is_match(line) {
                continue;
            }
            let matched: Vec<usize> = set.matches(line).into_iter().collect();
            let into = if is_muted(line) { &mut muted } else { &mut best };
            for &i in &matched {
                into[i] = into[i].max(self.owners[i].1);
            }
            if hits.len() < 256 {
                hits.push((line, matched));
            }
        }
        // A command known to have failed whose only matches are on such lines (`merge:
        // warning: conflicts during merge`, exit 1): they are all it said. Otherwise they
        // count for 0.3 of their strength.
        let only_muted = best.iter().all(|s| *s == 0.0) && context.exit_code.is_some_and(|c| c != 0);
        let weight = if only_muted { 1.0 } else { MUTED };
        for (b, m) in best.iter_mut().zip(&muted) {
            *b = b.max(m * weight);
        }
        // The tool a pattern speaks for makes its own vocabulary surer: 1 - (1 - s)².
        for (i, s) in best.iter_mut().enumerate() {
            if *s > 0.0 && amplified(self.owners[i].0) {
                *s = 1.0 - (1.0 - *s) * (1.0 - *s);
            }
        }
        (best, hits)
    }

    /// Pattern `p`'s classification, with the signals and facts that made it and its lines.
    fn matched(
        &self,
        p: usize,
        confidence: f64,
        best: &[f64],
        facts: &[When],
        hits: &[(&str, Vec<usize>)],
    ) -> Classification {
        // The winner's signals that matched, with how much each counted.
        let signals: Vec<(&String, f64)> = best
            .iter()
            .enumerate()
            .filter(|(i, s)| **s > 0.0 && self.owners[*i].0 == p)
            .map(|(i, s)| (&self.owners[i].2, *s))
            .collect();
        let mut evidence: Vec<Evidence> = signals
            .iter()
            .map(|(signal, s)| Evidence { kind: EvidenceKind::Signal, value: (*signal).clone(), strength: round(*s) })
            .chain(facts.iter().filter(|w| w.pattern == p).map(|w| {
                let (kind, value) = shown(&w.fact);
                Evidence { kind, value, strength: round(w.strength) }
            }))
            .collect();
        evidence.sort_by(|a, b| b.strength.total_cmp(&a.strength));
        Classification {
            matched_pattern: Some(self.patterns[p].id.clone()),
            confidence: round(confidence),
            strategy: self.patterns[p].strategy,
            signals: signals.into_iter().map(|(signal, _)| signal.clone()).collect(),
            evidence,
            lines: hits
                .iter()
                .filter(|(_, m)| m.iter().any(|i| self.owners[*i].0 == p))
                .map(|(l, _)| truncate(l.trim(), 300).to_owned())
                .take(MAX_DECISIVE_LINES)
                .collect(),
            classified_by: ClassifiedBy::Pattern,
        }
    }
}

/// A pattern's answer that decides: sure, or a universal fact.
fn is_sure(c: &Classification) -> bool {
    c.confidence >= SURE || c.evidence.iter().any(is_universal)
}

/// A fact that decides whatever its strength: a signal ended the command, or loopwright's own
/// timeout did (SPEC §6's universal facts; the text ones are signals of 0.95 and more).
fn is_universal(e: &Evidence) -> bool {
    matches!(e.kind, EvidenceKind::ExitSignal | EvidenceKind::Timeout)
        || (e.kind != EvidenceKind::Signal && e.strength >= DECISIVE)
}

impl Classification {
    /// Nothing decided: no pattern, the generic strategy, what was proposed as evidence.
    pub fn unclassified(evidence: Vec<Evidence>) -> Self {
        Self {
            matched_pattern: None,
            confidence: 0.0,
            strategy: Strategy::AnalyzeThenFix,
            signals: Vec::new(),
            evidence,
            lines: Vec::new(),
            classified_by: ClassifiedBy::None,
        }
    }
}

pub use builtin::Builtin;
pub use library::LibraryError;
pub use text::strip_ansi;
use text::{MUTED, is_muted, round, truncate};

#[cfg(test)]
mod tests;
