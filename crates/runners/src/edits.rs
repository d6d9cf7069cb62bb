//! File edits carried in a model's answer, for HTTP runners in agent mode: a plain model, with
//! no agent CLI, changes code by writing them, and loopwright applies them.
//!
//! The format (also told to the model, [`INSTRUCTIONS`]):
//!
//! ```text
//! FILE: src/calc.py
//! <<<<<<< SEARCH
//! def add(a, b):
//!     return a - b
//! =======
//! def add(a, b):
//!     return a + b
//! >>>>>>> REPLACE
//!
//! FILE: src/new_module.py
//! <<<<<<< WHOLE
//! ...the whole new content...
//! >>>>>>> WHOLE
//! ```
//!
//! A SEARCH text must occur exactly once in the file (its first occurrence is replaced when
//! it occurs more than once is ambiguous, so that is an error). Paths are relative to the
//! workspace and may not leave it. Edits are checked first and applied only when all of them
//! can be, so an answer is applied whole or not at all.

use std::collections::BTreeMap;
use std::path::Path;

/// What the model is told about changing files.
pub const INSTRUCTIONS: &str = "# How to change files\nYou cannot run commands or touch files yourself. To change a file, write an edit block in your answer, for each change:\n\nFILE: relative/path/to/file\n<<<<<<< SEARCH\nthe exact existing lines to replace (enough to be unique)\n=======\nthe new lines\n>>>>>>> REPLACE\n\nTo create a file or replace all of it:\n\nFILE: relative/path/to/file\n<<<<<<< WHOLE\nthe whole content\n>>>>>>> WHOLE\n\nPaths are relative to the workspace root. Edits are applied in order, all or none.";

/// One edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// Replace the one occurrence of `search` with `replace`.
    Replace {
        /// The file.
        path: String,
        /// The text to find.
        search: String,
        /// What replaces it.
        replace: String,
    },
    /// Write the whole file.
    Whole {
        /// The file.
        path: String,
        /// Its content.
        content: String,
    },
}

/// Reads the edit blocks of an answer.
pub fn parse(answer: &str) -> Result<Vec<Edit>, String> {
    let lines: Vec<&str> = answer.lines().collect();
    let mut edits = Vec::new();
    let mut path: Option<String> = None;
    let mut i = 0;
    let until = |from: usize, marker: &str| (from..lines.len()).find(|&j| lines[j].trim_end() == marker);
    while i < lines.len() {
        let line = lines[i].trim_end();
        if let Some(p) = line.strip_prefix("FILE:") {
            path = Some(p.trim().trim_matches('`').to_owned());
        } else if line == "<<<<<<< SEARCH" || line == "<<<<<<< WHOLE" {
            let Some(p) = path.clone() else {
                return Err(format!("line {}: an edit block without a `FILE: path` line before it", i + 1));
            };
            if line == "<<<<<<< WHOLE" {
                let end =
                    until(i + 1, ">>>>>>> WHOLE").ok_or(format!("line {}: `<<<<<<< WHOLE` is never closed", i + 1))?;
                edits.push(Edit::Whole { path: p, content: join(&lines[i + 1..end]) });
                i = end;
            } else {
                let mid =
                    until(i + 1, "=======").ok_or(format!("line {}: `<<<<<<< SEARCH` has no `=======`", i + 1))?;
                let end = until(mid + 1, ">>>>>>> REPLACE")
                    .ok_or(format!("line {}: `<<<<<<< SEARCH` is never closed", i + 1))?;
                edits.push(Edit::Replace {
                    path: p,
                    search: join(&lines[i + 1..mid]),
                    replace: join(&lines[mid + 1..end]),
                });
                i = end;
            }
        }
        i += 1;
    }
    Ok(edits)
}

fn join(lines: &[&str]) -> String {
    let mut s = lines.join("\n");
    if !lines.is_empty() {
        s.push('\n');
    }
    s
}

/// A path inside the workspace, or why not.
fn checked(path: &str) -> Result<&Path, String> {
    crate::workspace_relative(path).ok_or_else(|| format!("`{path}` is not a path inside the workspace"))
}

/// Applies an answer's edits to the workspace: all of them, or none (and why). Returns one
/// line per file changed.
pub fn apply(answer: &str, workspace: &Path) -> Result<Vec<String>, String> {
    let edits = parse(answer)?;
    // Work on copies first: an answer is applied whole or not at all.
    let mut files: BTreeMap<String, Option<String>> = BTreeMap::new();
    for edit in &edits {
        let path = match edit {
            Edit::Replace { path, .. } | Edit::Whole { path, .. } => path,
        };
        let rel = checked(path)?;
        if !files.contains_key(path) {
            files.insert(path.clone(), std::fs::read_to_string(workspace.join(rel)).ok());
        }
        let current = files.get_mut(path).expect("inserted");
        match edit {
            Edit::Whole { content, .. } => *current = Some(content.clone()),
            Edit::Replace { search, replace, .. } => {
                let Some(text) = current.as_mut() else {
                    return Err(format!("{path}: no such file to edit (use a WHOLE block to create it)"));
                };
                match text.matches(search.as_str()).count() {
                    1 => *text = text.replacen(search.as_str(), replace, 1),
                    0 => return Err(format!("{path}: the SEARCH text was not found:\n{search}")),
                    n => {
                        return Err(format!(
                            "{path}: the SEARCH text occurs {n} times; include more lines to make it unique"
                        ));
                    }
                }
            }
        }
    }
    let mut report = Vec::new();
    for (path, content) in files {
        let Some(content) = content else { continue };
        let full = workspace.join(&path);
        if let Some(dir) = full.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        std::fs::write(&full, content).map_err(|e| format!("cannot write {path}: {e}"))?;
        report.push(format!("applied edits to {path}"));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_replace_and_whole_files_are_applied_all_or_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("calc.py"), "def add(a, b):\n    return a - b\n").expect("write");
        let answer = "Fixing it.\n\nFILE: calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n\nFILE: notes/new.txt\n<<<<<<< WHOLE\nhello\n>>>>>>> WHOLE\n";
        assert_eq!(
            apply(answer, dir.path()).expect("applied"),
            vec!["applied edits to calc.py".to_owned(), "applied edits to notes/new.txt".to_owned()]
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("calc.py")).expect("read"),
            "def add(a, b):\n    return a + b\n"
        );
        assert_eq!(std::fs::read_to_string(dir.path().join("notes/new.txt")).expect("read"), "hello\n");
        // A failing block leaves every file as it was.
        let bad = "FILE: calc.py\n<<<<<<< SEARCH\n    return a + b\n=======\n    return b + a\n>>>>>>> REPLACE\nFILE: calc.py\n<<<<<<< SEARCH\nnot there\n=======\nx\n>>>>>>> REPLACE\n";
        assert_eq!(apply(bad, dir.path()), Err("calc.py: the SEARCH text was not found:\nnot there\n".to_owned()));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("calc.py")).expect("read"),
            "def add(a, b):\n    return a + b\n"
        );
        assert!(apply("FILE: ../etc/passwd\n<<<<<<< WHOLE\nx\n>>>>>>> WHOLE\n", dir.path()).is_err());
        assert!(apply("FILE: /etc/passwd\n<<<<<<< WHOLE\nx\n>>>>>>> WHOLE\n", dir.path()).is_err());
    }
}
