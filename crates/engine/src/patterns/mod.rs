//! Failure patterns (SPEC §6): recognising what went wrong in a tool's output.
//!
//! Every signal of every pattern is compiled into one `RegexSet`, and a log is matched line by
//! line in a single pass, so the cost grows with the log, not with the number of signals.
//! Each signal has a strength (how sure one match makes its pattern); a pattern's confidence
//! combines its matched signals as `1 - Π(1 - strength)`, so more signals never lower it and a
//! weak signal alone stays weak. Signals on warning lines count for less. Below 0.3 nothing
//! matches (seed 000) and the strategy is `analyze_then_fix`.

use loopwright_spec::patterns::{PatternFile, RawPattern, RawSignal};
use regex::{Regex, RegexSet};
use serde::Serialize;

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
    pub strategy: String,
    /// Strategies to try next.
    pub alternatives: Vec<String>,
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
}

/// What `classify` found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Classification {
    /// The pattern, when one matched with enough confidence.
    pub matched_pattern: Option<String>,
    /// 0..1.
    pub confidence: f64,
    /// The strategy to use.
    pub strategy: String,
    /// The signals of that pattern that matched.
    pub signals: Vec<String>,
    /// The lines where they matched (at most [`MAX_DECISIVE_LINES`]), for feedback prompts.
    #[serde(skip)]
    pub lines: Vec<String>,
}

/// Decisive lines kept by `classify`.
pub const MAX_DECISIVE_LINES: usize = 8;

/// A pattern library ready to classify logs. The one-pass matcher is built on first use, so a
/// run whose stages all succeed never pays for it.
#[derive(Debug, Clone)]
pub struct Library {
    patterns: Vec<Pattern>,
    sources: Vec<String>,
    set: std::sync::OnceLock<RegexSet>,
    /// For each regex of the set: (pattern index, strength, signal as written).
    owners: Vec<(usize, f64, String)>,
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
fn compile_signal(signal: &RawSignal, check: bool) -> Result<(String, f64, String), String> {
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
        RawSignal::Spec { .. } => return Err("a signal needs `regex` or `literal`".into()),
    };
    if check {
        Regex::new(&source).map_err(|e| format!("signal {shown}: {e}"))?;
    }
    Ok((source, strength, shown))
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
        retryable
    );
}

impl Library {
    /// The built-in library.
    pub fn builtin() -> Self {
        Self::new(None).expect("the built-in library compiles")
    }

    /// The built-in library with a project's file merged over it (by id), or replaced by it
    /// when the file says `extends: none`.
    pub fn new(project: Option<PatternFile>) -> Result<Self, String> {
        let builtin: PatternFile = serde_saphyr::from_str(BUILTIN).map_err(|e| format!("built-in patterns: {e}"))?;
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
                    return Err("a pattern without an `id`".into());
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
        for (i, p) in raw.into_iter().enumerate() {
            let mut shown = Vec::new();
            for signal in p.signals.iter().flatten() {
                let check = checked.contains(&p.id) || !builtin_ids.contains(&p.id);
                let (source, strength, as_written) =
                    compile_signal(signal, check).map_err(|e| format!("pattern `{}`: {e}", p.id))?;
                sources.push(source);
                owners.push((i, strength, as_written.clone()));
                shown.push(as_written);
            }
            patterns.push(Pattern {
                description: p.description.unwrap_or_default(),
                strategy: p.strategy.unwrap_or_else(|| "analyze_then_fix".into()),
                alternatives: p.alternatives.unwrap_or_default(),
                max_auto_retries: p.max_auto_retries.unwrap_or(3),
                auto_fixable: p.auto_fixable.unwrap_or(false),
                fix_command: p.fix_command,
                language: p.language,
                retryable: p.retryable.unwrap_or(true),
                signals: shown,
                id: p.id,
            });
        }
        Ok(Self { patterns, sources, set: std::sync::OnceLock::new(), owners })
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

    /// Classifies one error output.
    pub fn classify(&self, output: &str) -> Classification {
        let set = self.set();
        let text = strip_ansi(output);
        let mut best = vec![0.0f64; self.owners.len()];
        // Lines with matches and their signals, for the winner's decisive lines.
        let mut hits: Vec<(&str, Vec<usize>)> = Vec::new();
        for line in text.lines() {
            let line = truncate(line, MAX_LINE);
            if !set.is_match(line) {
                continue;
            }
            let lower = line.to_ascii_lowercase();
            // A signal on a warning line says less about why the command failed.
            let weight = if lower.contains("warning") && !lower.contains("error") { 0.3 } else { 1.0 };
            let matched: Vec<usize> = set.matches(line).into_iter().collect();
            for &i in &matched {
                best[i] = best[i].max(self.owners[i].1 * weight);
            }
            if hits.len() < 256 {
                hits.push((line, matched));
            }
        }
        let mut miss = vec![1.0f64; self.patterns.len()];
        for (i, s) in best.iter().enumerate().filter(|(_, s)| **s > 0.0) {
            miss[self.owners[i].0] *= 1.0 - s;
        }
        let winner =
            miss.iter().enumerate().map(|(p, m)| (p, 1.0 - m)).fold(None::<(usize, f64)>, |acc, (p, c)| match acc {
                Some((_, best_c)) if best_c >= c => acc,
                _ => Some((p, c)),
            });
        match winner {
            Some((p, confidence)) if confidence >= MIN_CONFIDENCE => Classification {
                matched_pattern: Some(self.patterns[p].id.clone()),
                confidence: (confidence * 1000.0).round() / 1000.0,
                strategy: self.patterns[p].strategy.clone(),
                signals: best
                    .iter()
                    .enumerate()
                    .filter(|(i, s)| **s > 0.0 && self.owners[*i].0 == p)
                    .map(|(i, _)| self.owners[i].2.clone())
                    .collect(),
                lines: hits
                    .iter()
                    .filter(|(_, m)| m.iter().any(|i| self.owners[*i].0 == p))
                    .map(|(l, _)| truncate(l.trim(), 300).to_owned())
                    .take(MAX_DECISIVE_LINES)
                    .collect(),
            },
            other => Classification {
                matched_pattern: None,
                confidence: other.map_or(0.0, |(_, c)| (c * 1000.0).round() / 1000.0),
                strategy: "analyze_then_fix".into(),
                signals: Vec::new(),
                lines: Vec::new(),
            },
        }
    }
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
        let err = Library::new(Some(file)).expect_err("invalid regex");
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
        assert_eq!(lib.get("disk-full").map(|p| p.signals.len()), Some(2), "signals kept from the built-in");
        let c = lib.classify("GET https://staging.example.com/v1 timed out after 30s\n");
        assert_eq!(c.matched_pattern.as_deref(), Some("flaky-api"));
        assert_eq!(lib.patterns()[0].id, "flaky-api");
        let only = Library::new(Some(PatternFile { extends: Some("none".into()), ..file })).expect("library");
        assert_eq!(only.patterns().len(), 2);
    }

    #[test]
    fn ansi_colours_are_removed() {
        assert_eq!(strip_ansi("\x1b[31m-fn main\x1b(B\x1b[m x"), "-fn main x");
    }
}
