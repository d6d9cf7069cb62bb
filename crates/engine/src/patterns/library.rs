//! The library made: the built-in patterns, a project's merged over them, every signal
//! compiled once.

use regex::Regex;

use loopwright_spec::patterns::{PatternFile, RawPattern, RawSignal, WhenList};

use super::{BUILTIN, CHECK_TYPE_STRENGTH, COMMAND_STRENGTH, EXIT_STRENGTH, Library, Pattern, Strategy, When, shown};

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
        let (raw, checked) = merged(builtin.patterns, project)?;
        let mut library = Self {
            patterns: Vec::new(),
            sources: Vec::new(),
            statistical: true,
            propose: true,
            set: std::sync::OnceLock::new(),
            owners: Vec::new(),
            whens: Vec::new(),
        };
        for p in raw {
            // A project's signals are compiled now to report a bad regex; the built-ins are
            // checked by tests.
            let check = checked.contains(&p.id) || !builtin_ids.contains(&p.id);
            let pattern = library.compile(p, check)?;
            library.patterns.push(pattern);
        }
        Ok(library)
    }

    /// Pattern `p`, the next of the library: its context entries and signals added to the
    /// library's, its strategies read.
    fn compile(&mut self, p: RawPattern, check: bool) -> Result<Pattern, LibraryError> {
        let i = self.patterns.len();
        // The context entries, compiled, and as `patterns list` shows them.
        let mut context: [Vec<String>; 3] = Default::default();
        for (n, (list, name)) in WhenList::ALL.into_iter().enumerate() {
            for entry in p.whens(list) {
                // A project's file was checked where it was read; the built-ins by tests.
                let (fact, strength) =
                    entry.value.resolve(list).map_err(|e| LibraryError::in_pattern(&p.id, format!("{name}: {e}")))?;
                let default = match list {
                    WhenList::ExitCodes => EXIT_STRENGTH,
                    WhenList::Commands => COMMAND_STRENGTH,
                    WhenList::CheckTypes => CHECK_TYPE_STRENGTH,
                };
                context[n].push(shown(&fact).1);
                self.whens.push(When { pattern: i, fact, strength: strength.unwrap_or(default) });
            }
        }
        let [commands, exit_codes, check_types] = context;
        let mut signals = Vec::new();
        for signal in p.signals.iter().flatten() {
            let (source, strength, as_written) =
                compile_signal(signal, check).map_err(|e| LibraryError::in_pattern(&p.id, e.to_string()))?;
            self.sources.push(source);
            self.owners.push((i, strength, as_written.clone()));
            signals.push(as_written);
        }
        // A project's file was checked where it was read; the built-ins by tests.
        let strategy =
            |name: &str| name.parse::<Strategy>().map_err(|e| LibraryError::in_pattern(&p.id, e.to_string()));
        let alternatives =
            p.alternatives.iter().flatten().map(|s| strategy(&s.value)).collect::<Result<Vec<_>, _>>()?;
        Ok(Pattern {
            description: p.description.unwrap_or_default(),
            strategy: p.strategy.as_ref().map_or(Ok(Strategy::AnalyzeThenFix), |s| strategy(&s.value))?,
            alternatives,
            max_auto_retries: p.max_auto_retries.unwrap_or(3),
            auto_fixable: p.auto_fixable.unwrap_or(false),
            fix_command: p.fix_command,
            language: p.language,
            retryable: p.retryable.unwrap_or(true),
            signals,
            commands,
            exit_codes,
            check_types,
            generic: p.generic.unwrap_or(false),
            id: p.id,
        })
    }
}

/// The patterns in library order: a project's own first (they win ties with the built-ins),
/// then the built-ins with the project's changes merged in by id (none of them when the
/// project says `extends: none`); and the ids whose signals the project gave.
fn merged(
    builtin: Vec<RawPattern>,
    project: Option<PatternFile>,
) -> Result<(Vec<RawPattern>, Vec<String>), LibraryError> {
    let mut raw = builtin;
    let mut checked: Vec<String> = Vec::new();
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
    Ok((own, checked))
}
