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
//! workspace and pass [`crate::guard`]: never outside it, never into `.git/` or `.loopwright/`,
//! never through a symbolic link. Edits are checked first and applied only when all of them
//! can be, so an answer is applied whole or not at all.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::guard;

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

/// Why an answer's edits were not applied (none of them was).
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// An edit block comes before any `FILE:` line.
    #[error("line {0}: an edit block without a `FILE: path` line before it")]
    NoFile(usize),
    /// A block is never closed.
    #[error("line {line}: `<<<<<<< {block}` is never closed")]
    Unclosed {
        /// The block's first line.
        line: usize,
        /// `SEARCH` or `WHOLE`.
        block: &'static str,
    },
    /// A SEARCH block has no `=======`.
    #[error("line {0}: `<<<<<<< SEARCH` has no `=======`")]
    NoSeparator(usize),
    /// The path may not be written (see [`guard::writable`]).
    #[error(transparent)]
    Refused(#[from] guard::Refused),
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A SEARCH block edits a file that does not exist.
    #[error("{0}: no such file to edit (use a WHOLE block to create it)")]
    NoSuchFile(String),
    /// A SEARCH block edits a file that is not text.
    #[error("{0}: not a text file (UTF-8); use a WHOLE block to replace it")]
    NotText(String),
    /// The SEARCH text is not in the file.
    #[error("{path}: the SEARCH text was not found:\n{search}")]
    NotFound {
        /// The file.
        path: String,
        /// The text looked for.
        search: String,
    },
    /// The SEARCH text is in the file more than once.
    #[error("{path}: the SEARCH text occurs {times} times; include more lines to make it unique")]
    Ambiguous {
        /// The file.
        path: String,
        /// How many times.
        times: usize,
    },
    /// A file could not be written (what was written is undone).
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Reads the edit blocks of an answer.
pub fn parse(answer: &str) -> Result<Vec<Edit>, EditError> {
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
                return Err(EditError::NoFile(i + 1));
            };
            if line == "<<<<<<< WHOLE" {
                let end = until(i + 1, ">>>>>>> WHOLE").ok_or(EditError::Unclosed { line: i + 1, block: "WHOLE" })?;
                edits.push(Edit::Whole { path: p, content: join(&lines[i + 1..end]) });
                i = end;
            } else {
                let mid = until(i + 1, "=======").ok_or(EditError::NoSeparator(i + 1))?;
                let end =
                    until(mid + 1, ">>>>>>> REPLACE").ok_or(EditError::Unclosed { line: i + 1, block: "SEARCH" })?;
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

/// A file an answer changes: its path, where it is, what it held and what it will hold.
struct Planned {
    path: String,
    full: PathBuf,
    before: Option<(Vec<u8>, u32)>,
    after: String,
}

/// Applies an answer's edits to the workspace: all of them, or none (and why). Returns one
/// line per file changed.
///
/// Every path goes through [`guard::writable`] (no `.git/`, no `.loopwright/`, no symbolic
/// links, nothing outside). The new contents are written to temporary files beside their
/// targets first and renamed over them only when every one was written; a rename that fails
/// puts back the files already renamed. A file keeps its permission bits (never set-id ones);
/// a new file gets `0644`, whatever the answer says.
pub fn apply(answer: &str, workspace: &Path) -> Result<Vec<String>, EditError> {
    let edits = parse(answer)?;
    let mut planned: Vec<Planned> = Vec::new();
    for edit in &edits {
        let path = match edit {
            Edit::Replace { path, .. } | Edit::Whole { path, .. } => path,
        };
        let index = match planned.iter().position(|p| &p.path == path) {
            Some(i) => i,
            None => {
                let full = guard::writable(workspace, path)?;
                let before = match std::fs::read(&full) {
                    Ok(bytes) => {
                        let mode = std::fs::metadata(&full).map(|m| m.permissions().mode()).unwrap_or(0o644);
                        Some((bytes, mode))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(source) => return Err(EditError::Read { path: path.clone(), source }),
                };
                let after = before.as_ref().map(|(b, _)| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
                planned.push(Planned { path: path.clone(), full, before, after });
                planned.len() - 1
            }
        };
        let file = &mut planned[index];
        match edit {
            Edit::Whole { content, .. } => file.after = content.clone(),
            Edit::Replace { search, replace, .. } => {
                match &file.before {
                    None => return Err(EditError::NoSuchFile(path.clone())),
                    Some((bytes, _)) if std::str::from_utf8(bytes).is_err() => {
                        return Err(EditError::NotText(path.clone()));
                    }
                    Some(_) => {}
                }
                match file.after.matches(search.as_str()).count() {
                    1 => file.after = file.after.replacen(search.as_str(), replace, 1),
                    0 => return Err(EditError::NotFound { path: path.clone(), search: search.clone() }),
                    times => return Err(EditError::Ambiguous { path: path.clone(), times }),
                }
            }
        }
    }
    write_all(&planned)?;
    Ok(planned.iter().map(|p| format!("applied edits to {}", p.path)).collect())
}

/// Writes every planned file, or none: stage each into a temporary file beside it, then rename
/// them over their targets; on any failure undo what was done.
fn write_all(planned: &[Planned]) -> Result<(), EditError> {
    let mut created_dirs: Vec<PathBuf> = Vec::new();
    let mut staged: Vec<PathBuf> = Vec::new();
    let undo = |staged: &[PathBuf], created_dirs: &[PathBuf]| {
        for tmp in staged {
            let _ = std::fs::remove_file(tmp);
        }
        for dir in created_dirs.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    };
    for file in planned {
        let tmp = staging_path(&file.full);
        let result = (|| -> std::io::Result<()> {
            if let Some(dir) = file.full.parent() {
                let missing: Vec<PathBuf> =
                    dir.ancestors().take_while(|d| !d.exists()).map(Path::to_path_buf).collect();
                std::fs::create_dir_all(dir)?;
                created_dirs.extend(missing.into_iter().rev());
            }
            let mode = file.before.as_ref().map_or(0o644, |(_, m)| m & 0o777);
            let mut out = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
            staged.push(tmp.clone());
            out.write_all(file.after.as_bytes())?;
            out.set_permissions(std::fs::Permissions::from_mode(mode))?;
            Ok(())
        })();
        if let Err(source) = result {
            undo(&staged, &created_dirs);
            return Err(EditError::Write { path: file.path.clone(), source });
        }
    }
    for (i, file) in planned.iter().enumerate() {
        if let Err(source) = std::fs::rename(&staged[i], &file.full) {
            // Put back the files already replaced, then drop the rest.
            for done in &planned[..i] {
                let _ = match &done.before {
                    Some((bytes, mode)) => std::fs::write(&done.full, bytes)
                        .and_then(|()| std::fs::set_permissions(&done.full, std::fs::Permissions::from_mode(*mode))),
                    None => std::fs::remove_file(&done.full),
                };
            }
            undo(&staged[i..], &created_dirs);
            return Err(EditError::Write { path: file.path.clone(), source });
        }
    }
    Ok(())
}

/// The temporary file a new content is staged in, beside its target.
fn staging_path(full: &Path) -> PathBuf {
    let name = full.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    full.with_file_name(format!(".{name}.loopwright-edit-{}", std::process::id()))
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
        assert_eq!(
            apply(bad, dir.path()).map_err(|e| e.to_string()),
            Err("calc.py: the SEARCH text was not found:\nnot there\n".to_owned())
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("calc.py")).expect("read"),
            "def add(a, b):\n    return a + b\n"
        );
        assert_eq!(
            apply("FILE: ../etc/passwd\n<<<<<<< WHOLE\nx\n>>>>>>> WHOLE\n", dir.path()).map_err(|e| e.to_string()),
            Err("`../etc/passwd` is not a path inside the workspace".to_owned())
        );
        assert_eq!(
            apply("FILE: /etc/passwd\n<<<<<<< WHOLE\nx\n>>>>>>> WHOLE\n", dir.path()).map_err(|e| e.to_string()),
            Err("`/etc/passwd` is not a path inside the workspace".to_owned())
        );
    }

    fn whole(path: &str, content: &str) -> String {
        format!("FILE: {path}\n<<<<<<< WHOLE\n{content}\n>>>>>>> WHOLE\n")
    }

    /// Every file under `dir`, with its content (links shown as `-> target`).
    fn tree(dir: &Path) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                let meta = std::fs::symlink_metadata(&p).unwrap();
                if meta.file_type().is_symlink() {
                    out.push((rel, format!("-> {}", std::fs::read_link(&p).unwrap().display())));
                } else if meta.is_dir() {
                    stack.push(p);
                } else {
                    out.push((rel, std::fs::read_to_string(&p).unwrap_or_default()));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn attacks_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
        std::fs::create_dir_all(ws.join(".loopwright/agents")).unwrap();
        std::fs::write(ws.join("ok.txt"), "before\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.join("out")).unwrap();
        std::os::unix::fs::symlink(ws.join(".git"), ws.join("g")).unwrap();
        let before = tree(ws);
        for (answer, error) in [
            (
                whole(".git/config", "[core]\n\tfsmonitor = touch /tmp/pwned"),
                "`.git/config` is inside `.git/`, which only git and loopwright may change",
            ),
            (
                whole(".git/hooks/post-commit", "#!/bin/sh\ntouch /tmp/pwned"),
                "`.git/hooks/post-commit` is inside `.git/`, which only git and loopwright may change",
            ),
            (
                whole("sub/.git/config", "x"),
                "`sub/.git/config` is inside `.git/`, which only git and loopwright may change",
            ),
            (
                whole(".loopwright/agents/evil.md", "x"),
                "`.loopwright/agents/evil.md` is inside `.loopwright/`, which only git and loopwright may change",
            ),
            (
                whole("out/escaped.txt", "x"),
                "`out/escaped.txt` goes through the symbolic link `out`; edits are written to real files only",
            ),
            (
                whole("g/hooks/pre-push", "x"),
                "`g/hooks/pre-push` goes through the symbolic link `g`; edits are written to real files only",
            ),
            // A good block, then a bad one: neither is applied.
            (
                format!("{}{}", whole("ok.txt", "after"), whole(".git/config", "x")),
                "`.git/config` is inside `.git/`, which only git and loopwright may change",
            ),
            (
                format!(
                    "{}{}",
                    whole("new/deep/file.txt", "x"),
                    "FILE: ok.txt\n<<<<<<< SEARCH\nmissing\n=======\ny\n>>>>>>> REPLACE\n"
                ),
                "ok.txt: the SEARCH text was not found:\nmissing\n",
            ),
        ] {
            assert_eq!(apply(&answer, ws).map_err(|e| e.to_string()), Err(error.to_owned()), "{answer}");
            assert_eq!(tree(ws), before, "{answer}");
        }
        assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
    }

    #[test]
    fn a_failed_rename_puts_back_the_files_already_written() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::write(ws.join("a.txt"), "a\n").unwrap();
        std::fs::create_dir(ws.join("b")).unwrap();
        std::fs::write(ws.join("b/b.txt"), "b\n").unwrap();
        let before = tree(ws);
        // The staged file of b/b.txt cannot be renamed over it once the folder is read-only...
        // but root ignores permissions, so make the rename fail by a folder at the target.
        let planned = vec![
            Planned {
                path: "a.txt".into(),
                full: ws.join("a.txt"),
                before: Some((b"a\n".to_vec(), 0o644)),
                after: "A\n".into(),
            },
            Planned { path: "b".into(), full: ws.join("b"), before: None, after: "B\n".into() },
        ];
        assert!(write_all(&planned).unwrap_err().to_string().starts_with("cannot write b: "));
        assert_eq!(tree(ws), before);
    }

    #[test]
    fn modes_are_kept_and_new_files_are_not_executable() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::write(ws.join("run.sh"), "echo a\n").unwrap();
        std::fs::set_permissions(ws.join("run.sh"), std::fs::Permissions::from_mode(0o4755)).unwrap();
        apply(&format!("{}{}", whole("run.sh", "echo b"), whole("new.sh", "echo c")), ws).unwrap();
        let mode = |p: &str| std::fs::metadata(ws.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!((mode("run.sh"), mode("new.sh")), (0o755, 0o644));
        assert_eq!(std::fs::read_to_string(ws.join("run.sh")).unwrap(), "echo b\n");
    }
}
