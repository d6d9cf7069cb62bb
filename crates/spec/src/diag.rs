//! Diagnostics: what is wrong in a file, where, and what was expected.
//!
//! Every check of a pipeline or agent file adds a [`Diagnostic`] instead of stopping, so a
//! user sees every problem of a file at once. Rendering (carets, colours) is the binary's job.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde_saphyr::Location;

/// A file's name and text, shared by all diagnostics about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// The path as the user should see it (relative to the workspace where possible).
    pub name: String,
    /// The whole text of the file.
    pub text: Arc<str>,
}

impl SourceFile {
    /// A source file from its display name and text.
    pub fn new(name: impl Into<String>, text: impl Into<Arc<str>>) -> Self {
        Self { name: name.into(), text: text.into() }
    }

    /// The byte offset of the start of a 1-based line, if the file has that line.
    pub fn line_start(&self, line: usize) -> Option<usize> {
        if line <= 1 {
            return Some(0);
        }
        self.text.match_indices('\n').nth(line - 2).map(|(i, _)| i + 1)
    }
}

/// A place in a source file: 1-based line and column, and the byte range it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Position {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// Byte offset of the start.
    pub offset: usize,
    /// Length in bytes (0 for a point).
    pub len: usize,
}

impl Position {
    /// The position of a YAML node, shifted by `line_offset` lines and `byte_offset` bytes
    /// (non-zero for YAML embedded in a larger file, such as frontmatter).
    pub fn from_location(loc: &Location, source: &SourceFile, line_offset: usize, byte_offset: usize) -> Self {
        if loc.line() == 0 {
            // An unknown location: the start of the document.
            return Self { line: 1 + line_offset, column: 1, offset: byte_offset, len: 0 };
        }
        let line = loc.line() as usize;
        let column = loc.column() as usize;
        let span = loc.span();
        let (offset, len) = match (span.byte_offset(), span.byte_len()) {
            (Some(o), Some(l)) => (o as usize + byte_offset, l as usize),
            _ => {
                // No byte info: derive the offset from line and column.
                let start = source.line_start(line + line_offset).unwrap_or(0);
                let col_bytes: usize =
                    source.text[start..].chars().take(column.saturating_sub(1)).map(char::len_utf8).sum();
                (start + col_bytes, 0)
            }
        };
        Self { line: line + line_offset, column, offset, len }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// One problem in a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// The file's display name.
    pub file: String,
    /// Where in the file; `None` when the problem is the file as a whole.
    pub position: Option<Position>,
    /// The stage the problem is in, when it is in one.
    pub stage: Option<String>,
    /// The field (dotted path inside the stage or file) the problem is in.
    pub field: Option<String>,
    /// What is wrong, including what was expected.
    pub message: String,
    /// A short label for the underlined span.
    pub label: Option<String>,
    /// How to fix it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A problem about the whole file.
    pub fn new(file: &SourceFile, message: impl Into<String>) -> Self {
        Self {
            file: file.name.clone(),
            position: None,
            stage: None,
            field: None,
            message: message.into(),
            label: None,
            help: None,
        }
    }

    /// Sets where the problem is.
    #[must_use]
    pub fn at(mut self, position: Position) -> Self {
        self.position = Some(position);
        self
    }

    /// Sets the stage the problem is in.
    #[must_use]
    pub fn stage(mut self, stage: Option<&str>) -> Self {
        self.stage = stage.map(str::to_owned);
        self
    }

    /// Sets the field the problem is in.
    #[must_use]
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// Sets the label under the span.
    #[must_use]
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Sets a hint on how to fix it.
    #[must_use]
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// `file:line:column` (or just the file).
    pub fn location(&self) -> String {
        match &self.position {
            Some(p) => format!("{}:{}:{}", self.file, p.line, p.column),
            None => self.file.clone(),
        }
    }

    /// `stage `x`, field `y`: ` — the context prefix used in one-line renderings.
    pub fn context(&self) -> String {
        match (&self.stage, &self.field) {
            (Some(s), Some(f)) => format!("stage `{s}`, field `{f}`: "),
            (Some(s), None) => format!("stage `{s}`: "),
            (None, Some(f)) => format!("field `{f}`: "),
            (None, None) => String::new(),
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: error: {}{}", self.location(), self.context(), self.message)?;
        if let Some(help) = &self.help {
            write!(f, " (help: {help})")?;
        }
        Ok(())
    }
}

/// Diagnostics about one or more files, with the files' text for rendering.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics {
    /// The problems, in the order found (file order, then position).
    pub items: Vec<Diagnostic>,
    /// The text of every file named by an item.
    pub sources: Vec<SourceFile>,
}

impl Diagnostics {
    /// True when no problem was found.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Adds a problem.
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.items.push(diagnostic);
    }

    /// Records a source file so renderers can show its text.
    pub fn add_source(&mut self, source: &SourceFile) {
        if !self.sources.iter().any(|s| s.name == source.name) {
            self.sources.push(source.clone());
        }
    }

    /// Moves all of `other` into `self`.
    pub fn extend(&mut self, other: Diagnostics) {
        for source in &other.sources {
            self.add_source(source);
        }
        self.items.extend(other.items);
    }

    /// The text of the file a diagnostic is about.
    pub fn source_of(&self, diagnostic: &Diagnostic) -> Option<&SourceFile> {
        self.sources.iter().find(|s| s.name == diagnostic.file)
    }

    /// Sorts the problems by file, then position, keeping the order of equal ones.
    pub fn sort(&mut self) {
        self.items.sort_by_key(|d| (d.file.clone(), d.position.map(|p| (p.line, p.column))));
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.items {
            writeln!(f, "{d}")?;
        }
        Ok(())
    }
}

/// Each diagnostic as `line:column: field: message`, for tests that compare them whole.
#[cfg(test)]
pub(crate) fn located(diags: &Diagnostics) -> Vec<String> {
    diags
        .items
        .iter()
        .map(|d| {
            let p = d.position.expect("position");
            format!("{}:{}: {}: {}", p.line, p.column, d.field.as_deref().unwrap_or("?"), d.message)
        })
        .collect()
}

/// Turns a YAML (serde-saphyr) error into a diagnostic: message without the trailing
/// location (the diagnostic carries it), position and a label.
pub fn yaml_error(
    source: &SourceFile,
    err: &serde_saphyr::Error,
    line_offset: usize,
    byte_offset: usize,
) -> Diagnostic {
    let text = err.without_snippet().to_string();
    let message = strip_location_suffix(&text);
    let mut d = Diagnostic::new(source, message.to_owned());
    if let Some(loc) = err.location() {
        d = d.at(Position::from_location(&loc, source, line_offset, byte_offset));
    }
    if let Some(hint) = unknown_field_hint(message) {
        d = d.help(hint);
    }
    d
}

fn strip_location_suffix(text: &str) -> &str {
    let first_line = text.lines().next().unwrap_or(text);
    match first_line.rfind(" at line ") {
        Some(i) if first_line[i..].contains(", column ") => &first_line[..i],
        _ => first_line,
    }
}

fn unknown_field_hint(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (found, rest) = rest.split_once('`')?;
    let expected =
        rest.split_once("expected one of ").map(|(_, e)| e).or_else(|| rest.split_once("expected ").map(|(_, e)| e))?;
    let fields: Vec<&str> = expected.split(',').map(|f| f.trim().trim_matches('`')).collect();
    match closest(found, &fields) {
        Some(best) => Some(format!("did you mean `{best}`?")),
        None => Some(format!("allowed fields: {}", fields.join(", "))),
    }
}

/// The candidate closest to `word` by edit distance, when it is close enough to be a typo.
pub fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (edit_distance(word, c), *c))
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_location_suffix() {
        assert_eq!(strip_location_suffix("invalid floating point at line 4, column 22"), "invalid floating point");
        assert_eq!(strip_location_suffix("plain message"), "plain message");
    }

    #[test]
    fn suggests_close_field_names() {
        assert_eq!(
            unknown_field_hint("unknown field `timout_minutes`, expected one of id, timeout_minutes, run"),
            Some("did you mean `timeout_minutes`?".to_owned())
        );
        assert_eq!(closest("zzz", &["id", "mode"]), None);
    }

    #[test]
    fn line_start_counts_lines() {
        let s = SourceFile::new("f", "a\nbc\nd");
        assert_eq!(s.line_start(1), Some(0));
        assert_eq!(s.line_start(2), Some(2));
        assert_eq!(s.line_start(3), Some(5));
        assert_eq!(s.line_start(4), None);
    }
}
