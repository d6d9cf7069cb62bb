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

pub mod command;
pub mod learned;

pub use loopwright_journal::closed_loop::{ClassifiedBy, Evidence, EvidenceKind};
pub use loopwright_spec::patterns::Strategy;
use loopwright_spec::patterns::{Fact, PatternFile, RawPattern, RawSignal, WhenList};
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

/// A broad word that must not decide between patterns on its own.
fn is_broad(literal: &str) -> bool {
    let l = literal.trim().to_lowercase();
    !l.contains(' ') && l.len() < 10
}

/// How sure a signal without an explicit strength makes its pattern: a regex (written to
/// recognise one thing) 0.9, a literal by its length, a broad word 0.1.
fn default_strength(signal: &RawSignal) -> f64 {
    match signal {
        RawSignal::Text(t) if t.starts_with('/') && t.ends_with('/') && t.len() > 2 => 0.9,
        RawSignal::Text(t) if is_broad(t) => 0.1,
        RawSignal::Text(t) => 0.3 + 0.6 * (t.len().min(40) as f64 / 40.0),
        RawSignal::Spec { regex: Some(_), .. } => 0.9,
        RawSignal::Spec { literal: Some(l), .. } if is_broad(l) => 0.1,
        RawSignal::Spec { literal: Some(l), .. } => 0.3 + 0.6 * (l.len().min(40) as f64 / 40.0),
        RawSignal::Spec { .. } => 0.0,
    }
}

/// (regex source, strength, as written) of a signal; `check` compiles it to report a bad regex
/// now (a project's signals; the built-ins are checked by tests).
fn compile_signal(signal: &RawSignal, check: bool) -> Result<(String, f64, String), LibraryError> {
    let strength = match signal {
        RawSignal::Spec { strength: Some(s), .. } => s.clamp(0.0, 1.0),
        _ => default_strength(signal),
    };
    let (source, shown) = match signal {
        RawSignal::Text(t) if t.starts_with('/') && t.ends_with('/') && t.len() > 2 => {
            (t[1..t.len() - 1].to_owned(), t.clone())
        }
        RawSignal::Text(t) => (format!("(?i){}", regex::escape(t)), t.clone()),
        RawSignal::Spec { regex: Some(r), .. } => (r.clone(), format!("/{r}/")),
        RawSignal::Spec { literal: Some(l), .. } => (format!("(?i){}", regex::escape(l)), l.clone()),
        RawSignal::Spec { .. } => return Err(LibraryError::EmptySignal),
    };
    if check {
        Regex::new(&source).map_err(|e| LibraryError::Regex { signal: shown.clone(), reason: e.to_string() })?;
    }
    Ok((source, strength, shown))
}

/// Why a library of failure patterns cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LibraryError {
    /// The built-in file does not parse (a defect of this build).
    #[error("built-in patterns: {0}")]
    Builtin(String),
    /// A project's pattern has no id.
    #[error("a pattern without an `id`")]
    NoId,
    /// A signal names neither a regex nor a literal.
    #[error("a signal needs `regex` or `literal`")]
    EmptySignal,
    /// A signal's regex does not compile.
    #[error("signal {signal}: {reason}")]
    Regex {
        /// The signal as written.
        signal: String,
        /// The regex engine's words.
        reason: String,
    },
    /// Something in pattern `id` is wrong.
    #[error("pattern `{id}`: {reason}")]
    Pattern {
        /// The pattern.
        id: String,
        /// What is wrong.
        reason: String,
    },
}

impl LibraryError {
    fn in_pattern(id: &str, reason: String) -> Self {
        Self::Pattern { id: id.to_owned(), reason }
    }
}

fn merge(base: &mut RawPattern, over: RawPattern) {
    macro_rules! take {
        ($($f:ident),*) => { $( if over.$f.is_some() { base.$f = over.$f; } )* };
    }
    take!(
        description,
        signals,
        strategy,
        alternatives,
        max_auto_retries,
        auto_fixable,
        fix_command,
        language,
        retryable,
        commands,
        exit_codes,
        check_types,
        generic
    );
}

impl Library {
    /// The built-in library.
    pub fn builtin() -> Self {
        Self::new(None).expect("the built-in library compiles")
    }

    /// The built-in library with a project's file merged over it (by id), or replaced by it
    /// when the file says `extends: none`.
    pub fn new(project: Option<PatternFile>) -> Result<Self, LibraryError> {
        let builtin: PatternFile = serde_saphyr::from_str(BUILTIN).map_err(|e| LibraryError::Builtin(e.to_string()))?;
        let builtin_ids: Vec<String> = builtin.patterns.iter().map(|p| p.id.clone()).collect();
        let mut raw: Vec<RawPattern> = builtin.patterns;
        let mut checked: Vec<String> = Vec::new();
        // A project's own patterns come first: they win ties with the built-ins.
        let mut own: Vec<RawPattern> = Vec::new();
        if let Some(project) = project {
            if project.extends.as_deref() == Some("none") {
                raw.clear();
            }
            for p in project.patterns {
                if p.id.trim().is_empty() {
                    return Err(LibraryError::NoId);
                }
                if p.signals.is_some() {
                    checked.push(p.id.clone());
                }
                match raw.iter_mut().chain(own.iter_mut()).find(|b| b.id == p.id) {
                    Some(b) => merge(b, p),
                    None => own.push(p),
                }
            }
        }
        own.append(&mut raw);
        let raw = own;
        let mut patterns = Vec::new();
        let mut sources = Vec::new();
        let mut owners = Vec::new();
        let mut whens = Vec::new();
        for (i, p) in raw.into_iter().enumerate() {
            // The context entries, compiled, and as `patterns list` shows them.
            let mut context: [Vec<String>; 3] = Default::default();
            for (n, (list, name)) in WhenList::ALL.into_iter().enumerate() {
                for entry in p.whens(list) {
                    // A project's file was checked where it was read; the built-ins by tests.
                    let (fact, strength) = entry
                        .value
                        .resolve(list)
                        .map_err(|e| LibraryError::in_pattern(&p.id, format!("{name}: {e}")))?;
                    let default = match list {
                        WhenList::ExitCodes => EXIT_STRENGTH,
                        WhenList::Commands => COMMAND_STRENGTH,
                        WhenList::CheckTypes => CHECK_TYPE_STRENGTH,
                    };
                    context[n].push(shown(&fact).1);
                    whens.push(When { pattern: i, fact, strength: strength.unwrap_or(default) });
                }
            }
            let [commands, exit_codes, check_types] = context;
            let mut shown = Vec::new();
            for signal in p.signals.iter().flatten() {
                let check = checked.contains(&p.id) || !builtin_ids.contains(&p.id);
                let (source, strength, as_written) =
                    compile_signal(signal, check).map_err(|e| LibraryError::in_pattern(&p.id, e.to_string()))?;
                sources.push(source);
                owners.push((i, strength, as_written.clone()));
                shown.push(as_written);
            }
            // A project's file was checked where it was read; the built-ins by tests.
            let strategy =
                |name: &str| name.parse::<Strategy>().map_err(|e| LibraryError::in_pattern(&p.id, e.to_string()));
            let alternatives =
                p.alternatives.iter().flatten().map(|s| strategy(&s.value)).collect::<Result<Vec<_>, _>>()?;
            patterns.push(Pattern {
                description: p.description.unwrap_or_default(),
                strategy: p.strategy.as_ref().map_or(Ok(Strategy::AnalyzeThenFix), |s| strategy(&s.value))?,
                alternatives,
                max_auto_retries: p.max_auto_retries.unwrap_or(3),
                auto_fixable: p.auto_fixable.unwrap_or(false),
                fix_command: p.fix_command,
                language: p.language,
                retryable: p.retryable.unwrap_or(true),
                signals: shown,
                commands,
                exit_codes,
                check_types,
                generic: p.generic.unwrap_or(false),
                id: p.id,
            });
        }
        Ok(Self { patterns, sources, statistical: true, propose: true, set: std::sync::OnceLock::new(), owners, whens })
    }

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
        let set = self.set();
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
            Some((p, confidence)) if confidence >= MIN_CONFIDENCE => {
                // The winner's signals that matched, with how much each counted.
                let signals: Vec<(&String, f64)> = best
                    .iter()
                    .enumerate()
                    .filter(|(i, s)| **s > 0.0 && self.owners[*i].0 == p)
                    .map(|(i, s)| (&self.owners[i].2, *s))
                    .collect();
                let mut evidence: Vec<Evidence> = signals
                    .iter()
                    .map(|(signal, s)| Evidence {
                        kind: EvidenceKind::Signal,
                        value: (*signal).clone(),
                        strength: round(*s),
                    })
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
            other => Classification {
                confidence: other.map_or(0.0, |(_, c)| round(c)),
                ..Classification::unclassified(Vec::new())
            },
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

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// How much a signal counts on a warning line or a skipped test's line, beside others.
const MUTED: f64 = 0.3;

/// A count of no errors (`0 errors`, `0 error(s)`, `no errors`): a summary of warnings.
static NO_ERRORS: std::sync::LazyLock<Regex> =
    std::sync::LazyLock::new(|| Regex::new(r"\b(0|no|zero) errors?\b|\b0 error\(s\)").expect("valid regex"));

/// A warning (that does not also say error, or counts no errors: `✖ 3 problems (0 errors, 3
/// warnings)`), or a test skipped or expected to fail: the line reports something other than
/// why the command failed.
fn is_muted(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    (lower.contains("warning") && (!lower.contains("error") || NO_ERRORS.is_match(&lower)))
        || line.contains(" SKIPPED")
        || line.contains(" XFAIL")
        || lower.contains("# skip")
}

fn truncate(line: &str, max: usize) -> &str {
    if line.len() <= max {
        return line;
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

/// Removes ANSI escape sequences (colours, cursor moves) from tool output.
pub fn strip_ansi(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('\x1b') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('[') => {
                chars.next();
                // CSI: parameters, then one final byte in @..~
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some('(' | ')') => {
                chars.next();
                chars.next();
            }
            Some(']') => {
                // OSC: up to BEL or ESC \
                for c in chars.by_ref() {
                    if c == '\x07' || c == '\\' {
                        break;
                    }
                }
            }
            _ => {
                chars.next();
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_library_has_every_spec_id_with_its_strategy() {
        let lib = Library::builtin();
        let got: Vec<(&str, &str, bool)> =
            lib.patterns().iter().map(|p| (p.id.as_str(), p.strategy.as_str(), p.retryable)).collect();
        assert_eq!(
            got,
            vec![
                ("lint-error", "auto_fix", true),
                ("format-error", "auto_fix", true),
                ("type-error", "context_expand", true),
                ("syntax-error", "analyze_then_fix", true),
                ("import-not-found", "dependency_check", true),
                ("undefined-name", "context_expand", true),
                ("test-failure", "analyze_then_fix", true),
                ("build-error", "analyze_then_fix", true),
                ("dependency-conflict", "dependency_check", true),
                ("command-not-found", "dependency_check", true),
                ("config-error", "analyze_then_fix", true),
                ("runtime-error", "analyze_then_fix", true),
                ("timeout", "retry_with_backoff", true),
                ("network-error", "retry_with_backoff", true),
                ("rate-limit", "retry_with_backoff", true),
                ("out-of-memory", "analyze_then_fix", true),
                ("disk-full", "escalate", false),
                ("permission-error", "escalate", false),
                ("merge-conflict", "escalate", false),
                ("git-error", "escalate", false),
                ("regression-detected", "context_expand", true),
            ]
        );
    }

    #[test]
    fn a_bad_project_regex_is_reported_when_the_library_is_made() {
        let file: PatternFile =
            serde_saphyr::from_str("patterns:\n  - id: broken\n    signals: ['/unclosed(/']\n").expect("file");
        let err = Library::new(Some(file)).expect_err("invalid regex").to_string();
        assert!(err.starts_with("pattern `broken`: signal /unclosed(/: regex parse error"), "{err}");
    }

    #[test]
    fn broad_words_alone_do_not_match() {
        let lib = Library::new(Some(PatternFile {
            patterns: vec![RawPattern {
                id: "vague".into(),
                signals: Some(vec![RawSignal::Text("error".into()), RawSignal::Text("failed".into())]),
                ..RawPattern::default()
            }],
            ..PatternFile::default()
        }))
        .expect("library");
        let c = lib.classify("error: something failed\n");
        assert_eq!(c.matched_pattern, None);
        assert!(c.confidence < MIN_CONFIDENCE);
    }

    #[test]
    fn project_patterns_add_override_and_replace() {
        let file: PatternFile = serde_saphyr::from_str(
            "patterns:\n  - id: flaky-api\n    signals: ['/staging\\.example\\.com.*timed out/']\n    strategy: retry_with_backoff\n  - id: disk-full\n    strategy: analyze_then_fix\n",
        )
        .expect("file");
        let lib = Library::new(Some(file.clone())).expect("library");
        assert_eq!(lib.get("disk-full").map(|p| p.strategy.as_str()), Some("analyze_then_fix"));
        assert_eq!(lib.get("disk-full").map(|p| p.signals.len()), Some(3), "signals kept from the built-in");
        let c = lib.classify("GET https://staging.example.com/v1 timed out after 30s\n");
        assert_eq!(c.matched_pattern.as_deref(), Some("flaky-api"));
        assert_eq!(lib.patterns()[0].id, "flaky-api");
        let only = Library::new(Some(PatternFile { extends: Some("none".into()), ..file })).expect("library");
        assert_eq!(only.patterns().len(), 2);
    }

    fn context(command: Option<&str>, exit_code: Option<i32>, check_type: Option<&str>) -> Context {
        Context {
            command: command.map(str::to_owned),
            exit_code,
            check_type: check_type.map(str::to_owned),
            ..Context::default()
        }
    }

    fn kinds(c: &Classification) -> Vec<(&str, &str)> {
        c.evidence.iter().map(|e| (e.kind.as_str(), e.value.as_str())).collect()
    }

    #[test]
    fn exit_127_decides_when_the_output_says_not_found_or_nothing_and_126_decides_always() {
        let lib = Library::builtin();
        // A wrapper's own words for the missing program, and nothing at all: 127 decides.
        for text in ["sh: 1: pytset: not found\n", "", "  \n", "run.sh: line 3: frob: No such file or directory\n"] {
            let c = lib.classify_in(text, &context(Some("sh -c 'pytset -q'"), Some(127), Some("test")));
            assert_eq!(c.matched_pattern.as_deref(), Some("command-not-found"), "{text:?}: {c:?}");
            assert_eq!(c.strategy, Strategy::DependencyCheck);
            assert!(
                c.evidence
                    .iter()
                    .any(|e| (e.kind.as_str(), e.value.as_str(), e.strength) == ("exit_code", "127", 0.95)),
                "{c:?}"
            );
        }
        // A program that exits 127 for its own error (escript's uncaught error) and make passing
        // on a child's 127 next to why: 127 is a hint, the text decides.
        let escript = "escript: exception error: bad argument in an arithmetic expression\n  in operator  +/2\n     called as 1 + a\n";
        let c = lib.classify_in(escript, &context(Some("escript bad.erl"), Some(127), None));
        assert_ne!(c.matched_pattern.as_deref(), Some("command-not-found"), "{c:?}");
        let make = "/bin/sh: 1: ./tools/gen.sh: Permission denied\nmake: *** [Makefile:3: all] Error 127\n";
        let c = lib.classify_in(make, &context(Some("make"), Some(2), Some("build")));
        assert_eq!(c.matched_pattern.as_deref(), Some("permission-error"), "{c:?}");
        let c = lib.classify_in("", &context(Some("./run-checks.sh"), Some(126), None));
        assert_eq!((c.matched_pattern.as_deref(), c.confidence), (Some("permission-error"), 0.95));
    }

    #[test]
    fn only_a_sure_pattern_or_a_universal_fact_decides_then_the_statistical_proposal_then_nothing() {
        let lib = Library::builtin();
        let lint = context(Some("npm run check"), Some(1), Some("lint"));
        let killed = Context { signal: Some("SIGKILL".into()), ..Context::default() };
        let build = context(Some("cargo build"), Some(101), Some("build"));
        let plain_lint = "src/app.js\n  3 problems found in 1 file\n";
        type Row<'a> = (&'a str, &'a Context, Option<&'a str>, ClassifiedBy, &'a [(&'a str, &'a str)]);
        let table: [Row<'_>; 3] = [
            // Sure: a pattern at 0.7 and more.
            (
                "error[E0425]: cannot find value `total` in this scope\n",
                &build,
                Some("undefined-name"),
                ClassifiedBy::Pattern,
                &[
                    ("signal", "/error\\[E0425\\]/"),
                    ("signal", "/cannot find (value|function|type|struct|macro) `.+` in this scope/"),
                ],
            ),
            // A universal fact decides at any strength: the kill.
            (
                "running 12 tests\n",
                &killed,
                Some("out-of-memory"),
                ClassifiedBy::Pattern,
                &[("exit_signal", "SIGKILL")],
            ),
            // Unsure (the check's type alone, 0.4): the learned classifier's proposal, above its
            // threshold, is taken; the pattern's is kept as evidence.
            (
                plain_lint,
                &lint,
                Some("lint-error"),
                ClassifiedBy::Statistical,
                &[("statistical", "lint-error"), ("unsure_pattern", "lint-error")],
            ),
        ];
        for (text, cx, want, by, evidence) in table {
            let c = lib.classify_in(text, cx);
            assert_eq!(
                (c.matched_pattern.as_deref(), c.classified_by, kinds(&c).as_slice()),
                (want, by, evidence),
                "{text:?}"
            );
            if by == ClassifiedBy::None {
                assert_eq!((c.strategy, c.confidence), (Strategy::AnalyzeThenFix, 0.0));
            }
        }
        // The rule over given proposals, whatever the model would say.
        let unsure = lib.match_patterns(plain_lint, &lint);
        let proposal = |class: &str, p: f64| learned::Proposal { class: class.into(), probability: p, threshold: 0.65 };
        type Case<'a> = (learned::Proposal, Option<&'a str>, ClassifiedBy, &'a [(&'a str, &'a str)]);
        let cases: [Case<'_>; 6] = [
            (
                proposal("lint-error", 0.9),
                Some("lint-error"),
                ClassifiedBy::Statistical,
                &[("statistical", "lint-error"), ("unsure_pattern", "lint-error")],
            ),
            // Below its threshold: unclassified, the proposal kept.
            (
                proposal("lint-error", 0.5),
                None,
                ClassifiedBy::None,
                &[("unsure_pattern", "lint-error"), ("unsure_statistical", "lint-error")],
            ),
            // Categories that stop the run for a person need a sure pattern, however likely.
            (
                proposal("disk-full", 0.99),
                None,
                ClassifiedBy::None,
                &[("unsure_pattern", "lint-error"), ("unsure_statistical", "disk-full")],
            ),
            (
                proposal("git-error", 0.95),
                None,
                ClassifiedBy::None,
                &[("unsure_pattern", "lint-error"), ("unsure_statistical", "git-error")],
            ),
            // "No failure" is not a category to take; one the library does not have is not either.
            (proposal(learned::NONE, 0.9), None, ClassifiedBy::None, &[("unsure_pattern", "lint-error")]),
            (
                proposal("made-up", 0.9),
                None,
                ClassifiedBy::None,
                &[("unsure_pattern", "lint-error"), ("unsure_statistical", "made-up")],
            ),
        ];
        for (p, want, by, evidence) in cases {
            let c = lib.decide(unsure.clone(), p.clone());
            assert_eq!(
                (c.matched_pattern.as_deref(), c.classified_by, kinds(&c).as_slice()),
                (want, by, evidence),
                "{p:?}"
            );
        }
        // A sure answer is kept whatever is proposed.
        let sure = lib.match_patterns("error[E0425]: cannot find value `total` in this scope\n", &build);
        assert_eq!(lib.decide(sure.clone(), proposal("disk-full", 0.99)), sure);
        // The patterns alone take any answer of 0.3 and more.
        let c = lib.clone().patterns_only().classify_in(plain_lint, &lint);
        assert_eq!(
            (c.matched_pattern.as_deref(), c.confidence, c.classified_by),
            (Some("lint-error"), 0.4, ClassifiedBy::Pattern)
        );
        let json = serde_json::to_value(lib.classify_in(plain_lint, &lint)).expect("json");
        assert_eq!(json["classified_by"], "statistical");
    }

    #[test]
    fn a_summary_of_warnings_with_no_errors_is_not_a_failure_of_a_run_that_passed() {
        let lib = Library::builtin();
        let eslint = "/work/src/a.js\n  3:7  warning  'x' is assigned a value but never used  no-unused-vars\n\n✖ 1 problem (0 errors, 1 warning)\n";
        let c = lib.classify_in(eslint, &context(Some("npx eslint src"), Some(0), Some("lint")));
        assert_eq!(c.matched_pattern, None, "{c:?}");
        // The same summary is what a run failed on when it exited 1 (`--max-warnings 0`).
        let c = lib.classify_in(eslint, &context(Some("npx eslint --max-warnings 0 src"), Some(1), Some("lint")));
        assert_eq!(c.matched_pattern.as_deref(), Some("lint-error"), "{c:?}");
    }

    #[test]
    fn a_test_runners_header_naming_its_config_file_is_not_a_config_error() {
        let lib = Library::builtin();
        let text = "============================= test session starts ==============================\nrootdir: /work\nconfigfile: pytest.ini\ncollected 1 item\n\ntests/test_a.py F\n";
        let c = lib.classify_in(text, &context(Some("pytest -q"), Some(1), Some("test")));
        assert_eq!(c.matched_pattern.as_deref(), Some("test-failure"), "{c:?}");
    }

    #[test]
    fn a_kill_is_out_of_memory_unless_loopwright_timed_it_out() {
        let lib = Library::builtin();
        for how in [
            Context { exit_code: Some(137), ..Context::default() },
            Context { signal: Some("SIGKILL".into()), ..Context::default() },
        ] {
            let c = lib.classify_in("running 12 tests\n", &how);
            assert_eq!(c.matched_pattern.as_deref(), Some("out-of-memory"), "{how:?}");
            assert_eq!(kinds(&c), [("exit_signal", "SIGKILL")]);
        }
        let ours = Context { signal: Some("SIGKILL".into()), timed_out: true, ..Context::default() };
        let c = lib.classify_in("running 12 tests\n", &ours);
        assert_eq!(c.matched_pattern.as_deref(), Some("timeout"));
        assert_eq!(kinds(&c), [("timeout", "timeout")]);
        let c = lib.classify_in("", &context(Some("timeout 60 make check"), Some(124), Some("test")));
        assert_eq!(c.matched_pattern.as_deref(), Some("timeout"));
        let c = lib.classify_in("", &Context { exit_code: Some(139), ..Context::default() });
        assert_eq!(
            (c.matched_pattern.as_deref(), kinds(&c)),
            (Some("runtime-error"), vec![("exit_signal", "SIGSEGV")])
        );
    }

    #[test]
    fn a_failing_checks_type_decides_only_when_nothing_more_specific_is_printed() {
        let lib = Library::builtin();
        let plain = "src/app.js\n  3 problems found in 1 file\n";
        assert_eq!(lib.match_patterns(plain, &Context::default()).matched_pattern, None);
        let c = lib.match_patterns(plain, &context(Some("npm run check"), Some(1), Some("lint")));
        assert_eq!((c.matched_pattern.as_deref(), kinds(&c)), (Some("lint-error"), vec![("check_type", "lint")]));
        // The same output from a command that succeeded is not a failure of any kind.
        assert_eq!(
            lib.match_patterns(plain, &context(Some("npm run check"), Some(0), Some("lint"))).matched_pattern,
            None
        );
        let specific = "E   ModuleNotFoundError: No module named 'yaml'\n";
        let c = lib.match_patterns(specific, &context(Some("pytest -q"), Some(2), Some("test")));
        assert_eq!(c.matched_pattern.as_deref(), Some("import-not-found"), "{c:?}");
    }

    #[test]
    fn the_tool_that_ran_weighs_its_own_vocabulary() {
        let lib = Library::builtin();
        let out = "In deploy.sh line 3:\necho $1\n     ^-- SC2086 (info): Double quote to prevent globbing and word splitting.\n";
        let c = lib.match_patterns(out, &context(Some("shellcheck deploy.sh"), Some(1), None));
        assert_eq!(c.matched_pattern.as_deref(), Some("lint-error"), "{c:?}");
        assert!(kinds(&c).contains(&("command", "shellcheck")), "{c:?}");
        // Nothing said which tool ran and nothing in the text is strong enough.
        assert_eq!(lib.match_patterns(out, &context(Some("./check.sh"), Some(1), None)).matched_pattern, None);
    }

    #[test]
    fn warning_and_skipped_lines_count_for_little_unless_they_are_all_a_failed_command_said() {
        let lib = Library::builtin();
        // rcs merge's only line is a warning; it exited 1: the warning is why.
        let merge = "merge: warning: conflicts during merge\n";
        let c = lib.match_patterns(merge, &context(Some("merge a.txt base.txt b.txt"), Some(1), None));
        assert_eq!((c.matched_pattern.as_deref(), c.confidence), (Some("merge-conflict"), 0.95), "{c:?}");
        // The same line from a command that succeeded, or said nothing of its exit: 0.3 of it.
        for exit in [Some(0), None] {
            let c = lib.match_patterns(merge, &context(None, exit, None));
            assert_eq!((c.matched_pattern, c.confidence), (None, 0.285), "exit {exit:?}");
        }
        // A skipped test's reason is not a failure, even in words that would be one.
        let pytest =
            "test_errors.py::test_ok PASSED\ntest_errors.py::test_remote SKIPPED (flaky on CI: connection refused)\n";
        let c = lib.match_patterns(pytest, &context(Some("pytest -v"), Some(0), Some("test")));
        assert_eq!(c.matched_pattern, None, "{c:?}");
        // Beside a line that says error, a warning's match counts for 0.3: the error decides.
        let mixed = "warning: request timed out, retrying\nerror: cannot find value `total` in this scope\n";
        let c = lib.match_patterns(mixed, &context(Some("cargo build"), Some(101), Some("build")));
        assert_eq!(c.matched_pattern.as_deref(), Some("undefined-name"), "{c:?}");
    }

    #[test]
    fn a_specific_cause_wins_over_the_step_that_reported_it() {
        let lib = Library::builtin();
        // eslint's own summary is a strong lint-error signal; the rule says why it failed.
        let eslint =
            "/work/undef.js\n  1:28  error  'itemz' is not defined  no-undef\n\n✖ 1 problem (1 error, 0 warnings)\n";
        let c = lib.classify_in(eslint, &context(Some("npx eslint ."), Some(1), Some("lint")));
        assert_eq!(c.matched_pattern.as_deref(), Some("undefined-name"), "{c:?}");
        let pytest = "=================================== FAILURES ===================================\nE       MemoryError\nFAILED test_mem.py::test_big - MemoryError\n1 failed in 0.02s\n";
        let c = lib.classify_in(pytest, &context(Some("pytest -q"), Some(1), Some("test")));
        assert_eq!(c.matched_pattern.as_deref(), Some("out-of-memory"), "{c:?}");
        // A weak word of a specific pattern does not: the tests failed.
        let weak = "=================================== FAILURES ===================================\nE   assert 'syntax error' == 'ok'\n1 failed in 0.02s\n";
        let c = lib.classify_in(weak, &context(Some("pytest -q"), Some(1), Some("test")));
        assert_eq!(c.matched_pattern.as_deref(), Some("test-failure"), "{c:?}");
        // Two generic patterns are compared by confidence: a build script that panicked is a
        // failed build, not a crash.
        let cargo =
            "error: failed to run custom build command for `app v0.1.0`\n  thread 'main' panicked at build.rs:2:5:\n";
        let c = lib.classify_in(cargo, &context(Some("cargo build"), Some(101), Some("build")));
        assert_eq!(c.matched_pattern.as_deref(), Some("build-error"), "{c:?}");
        assert!(
            lib.get("build-error").is_some_and(|p| p.generic) && lib.get("undefined-name").is_some_and(|p| !p.generic)
        );
        // A project's own pattern may be generic too; without `generic` it is specific.
        let text = "deploy step failed\nError: connect ECONNREFUSED 10.0.0.7:5432\n";
        for (generic, want) in [("true", "network-error"), ("false", "deploy-failed")] {
            let file: PatternFile = serde_saphyr::from_str(&format!(
                "patterns:\n  - id: deploy-failed\n    generic: {generic}\n    signals: [{{literal: deploy step failed, strength: 0.99}}]\n"
            ))
            .expect("file");
            let c = Library::new(Some(file)).expect("library").classify(text);
            assert_eq!(c.matched_pattern.as_deref(), Some(want), "generic: {generic}");
        }
    }

    #[test]
    fn a_project_patterns_context_entries_are_checked_and_used() {
        let file: PatternFile = serde_saphyr::from_str(
            "patterns:\n  - id: flaky-db\n    exit_codes: [{when: 75, strength: 0.97}]\n    commands: [dbtool]\n    strategy: retry_with_backoff\n",
        )
        .expect("file");
        let lib = Library::new(Some(file)).expect("library");
        let c = lib.classify_in("error: something failed\n", &context(Some("dbtool migrate"), Some(75), None));
        assert_eq!(c.matched_pattern.as_deref(), Some("flaky-db"));
        assert_eq!(kinds(&c), [("exit_code", "75"), ("command", "dbtool")]);
        let bad: PatternFile =
            serde_saphyr::from_str("patterns:\n  - id: odd\n    exit_codes: [SIGNOPE]\n").expect("file");
        let err = Library::new(Some(bad)).expect_err("bad entry");
        assert_eq!(
            err.to_string(),
            "pattern `odd`: exit_codes: `SIGNOPE` is not an exit code, a signal name (SIGKILL) or `timeout`"
        );
        let bad: PatternFile =
            serde_saphyr::from_str("patterns:\n  - id: odd\n    check_types: [{when: lint, strength: 2}]\n")
                .expect("file");
        assert_eq!(
            Library::new(Some(bad)).expect_err("bad").to_string(),
            "pattern `odd`: check_types: strength 2 is not between 0 and 1"
        );
    }

    #[test]
    fn ansi_colours_are_removed() {
        assert_eq!(strip_ansi("\x1b[31m-fn main\x1b(B\x1b[m x"), "-fn main x");
    }
}
