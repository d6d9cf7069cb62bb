//! The one guard for paths that an agent or a model chooses and loopwright writes: a model's
//! edit blocks, and the restores and rollbacks that put a workspace back.
//!
//! A path is accepted when it is relative, stays inside the workspace (no root, no `..`), names
//! nothing under `.git/` (at any depth: a nested repository's config and hooks run code too) or
//! `.loopwright/` (pipelines, agents, patterns and the journal), and reaches its file through
//! real folders only: every existing component is checked with `lstat`, so a symbolic link
//! inside the workspace cannot carry a write outside it (or into `.git/`).
//!
//! The checks are made just before the write. An agent's processes are not running then (a
//! model's edits are applied after its answer; restores follow the end of the stage's process
//! group), so nothing swaps a folder for a link between the check and the write.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// An empty path.
    #[error("an empty path")]
    Empty,
    /// An absolute path, or one with `..`.
    #[error("`{0}` is not a path inside the workspace")]
    Outside(String),
    /// A path into git's or loopwright's own files.
    #[error("`{path}` is inside `{dir}/`, which only git and loopwright may change")]
    Control {
        /// The path.
        path: String,
        /// `.git` or `.loopwright`.
        dir: String,
    },
    /// A component is a symbolic link.
    #[error("`{path}` goes through the symbolic link `{link}`; edits are written to real files only")]
    Link {
        /// The path.
        path: String,
        /// The component that is a link.
        link: String,
    },
    /// A component that should be a folder is a file (or the file is a folder).
    #[error("`{path}`: `{at}` is not a {expected}")]
    Kind {
        /// The path.
        path: String,
        /// The component.
        at: String,
        /// "folder" or "file".
        expected: &'static str,
    },
    /// The file system could not be read.
    #[error("`{path}`: {why}")]
    Io {
        /// The path.
        path: String,
        /// The error.
        why: String,
    },
}

/// True for a component naming one of the folders no agent or model may write: `.git` anywhere
/// (compared without case, as git itself refuses `.GIT` on case-folding systems), and
/// `.loopwright` at the top.
fn control_dir(component: &str, depth: usize) -> Option<&'static str> {
    if component.eq_ignore_ascii_case(".git") {
        Some(".git")
    } else if depth == 0 && component.eq_ignore_ascii_case(".loopwright") {
        Some(".loopwright")
    } else {
        None
    }
}

/// The components of a relative workspace path, or why it is not one (absolute, `..`, empty,
/// or inside `.git/` / `.loopwright/`).
pub fn components(path: &str) -> Result<Vec<String>, Refused> {
    if path.is_empty() {
        return Err(Refused::Empty);
    }
    let mut parts = Vec::new();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(name) => {
                let name = name.to_string_lossy().into_owned();
                if let Some(dir) = control_dir(&name, parts.len()) {
                    return Err(Refused::Control { path: path.to_owned(), dir: dir.to_owned() });
                }
                parts.push(name);
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) | Component::ParentDir => {
                return Err(Refused::Outside(path.to_owned()));
            }
        }
    }
    if parts.is_empty() {
        return Err(Refused::Empty);
    }
    Ok(parts)
}

/// Checks that every existing one of the first `n` components of `parts` is a real folder
/// (not a link, not a file). `Ok(false)` when one does not exist yet: the rest is created by
/// the writer.
fn folders_on_the_way(workspace: &Path, path: &str, parts: &[String], n: usize) -> Result<bool, Refused> {
    let mut full = workspace.to_path_buf();
    for (i, part) in parts[..n].iter().enumerate() {
        full.push(part);
        let meta = match fs::symlink_metadata(&full) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Refused::Io { path: path.to_owned(), why: e.to_string() }),
        };
        let shown = || parts[..=i].join("/");
        if meta.file_type().is_symlink() {
            return Err(Refused::Link { path: path.to_owned(), link: shown() });
        }
        if !meta.is_dir() {
            return Err(Refused::Kind { path: path.to_owned(), at: shown(), expected: "folder" });
        }
    }
    Ok(true)
}

/// Where loopwright may write the file `path` of `workspace`: the full path, once every
/// existing component has been checked to be a real folder (and the file, if it exists, a
/// real file). Folders that do not exist yet are fine: the writer creates them.
pub fn writable(workspace: &Path, path: &str) -> Result<PathBuf, Refused> {
    let parts = components(path)?;
    let full = workspace.join(parts.join("/"));
    if !folders_on_the_way(workspace, path, &parts, parts.len() - 1)? {
        return Ok(full);
    }
    match fs::symlink_metadata(&full) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(full),
        Err(e) => Err(Refused::Io { path: path.to_owned(), why: e.to_string() }),
        Ok(meta) if meta.file_type().is_symlink() => {
            Err(Refused::Link { path: path.to_owned(), link: parts.join("/") })
        }
        Ok(meta) if !meta.is_file() => {
            Err(Refused::Kind { path: path.to_owned(), at: parts.join("/"), expected: "file" })
        }
        Ok(_) => Ok(full),
    }
}

/// Where loopwright may replace whatever is at `path` of `workspace` (a file, a link or a
/// folder, never followed): the full path, once every existing folder on the way has been
/// checked to be a real folder. For copying an attempt's layer back, where the layer decides
/// what the last component becomes.
pub fn replaceable(workspace: &Path, path: &str) -> Result<PathBuf, Refused> {
    let parts = components(path)?;
    folders_on_the_way(workspace, path, &parts, parts.len() - 1)?;
    Ok(workspace.join(parts.join("/")))
}

/// Makes the folders of `path` (relative to `root`) real folders again before a restore writes
/// the file: a component that a stage turned into a symbolic link or a file is removed (the
/// link itself, never what it points to) and a folder made in its place. Returns the file's
/// full path. Only for paths loopwright recorded itself (a snapshot's manifest).
pub fn reclaim(root: &Path, path: &str) -> io::Result<PathBuf> {
    let parts = components(path).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut full = root.to_path_buf();
    let last = parts.len() - 1;
    for (i, part) in parts.iter().enumerate() {
        full.push(part);
        match fs::symlink_metadata(&full) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if i < last {
                    fs::create_dir(&full)?;
                }
            }
            Err(e) => return Err(e),
            Ok(meta) if i < last && !meta.is_dir() => {
                fs::remove_file(&full)?;
                fs::create_dir(&full)?;
            }
            Ok(meta) if i == last && meta.file_type().is_symlink() => fs::remove_file(&full)?,
            Ok(meta) if i == last && meta.is_dir() => fs::remove_dir_all(&full)?,
            Ok(_) => {}
        }
    }
    Ok(full)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_folders_links_and_escapes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        fs::create_dir_all(ws.join("src")).unwrap();
        fs::write(ws.join("src/a.py"), "x").unwrap();
        std::os::unix::fs::symlink("/tmp", ws.join("out")).unwrap();
        std::os::unix::fs::symlink("a.py", ws.join("src/link.py")).unwrap();
        assert_eq!(writable(ws, "src/a.py"), Ok(ws.join("src/a.py")));
        assert_eq!(writable(ws, "./src/new/b.py"), Ok(ws.join("src/new/b.py")));
        assert_eq!(writable(ws, ""), Err(Refused::Empty));
        assert_eq!(writable(ws, "../x"), Err(Refused::Outside("../x".into())));
        assert_eq!(writable(ws, "/etc/passwd"), Err(Refused::Outside("/etc/passwd".into())));
        for (path, dir) in [
            (".git/config", ".git"),
            (".git/hooks/post-commit", ".git"),
            ("vendor/lib/.GIT/hooks/x", ".git"),
            (".loopwright/agents/a.md", ".loopwright"),
            ("./.Loopwright/state/state.db", ".loopwright"),
        ] {
            assert_eq!(writable(ws, path), Err(Refused::Control { path: path.into(), dir: dir.into() }), "{path}");
        }
        // A nested `.loopwright` is an ordinary folder (a fixture, say).
        assert_eq!(writable(ws, "tests/.loopwright/x"), Ok(ws.join("tests/.loopwright/x")));
        assert_eq!(writable(ws, "out/evil"), Err(Refused::Link { path: "out/evil".into(), link: "out".into() }));
        assert_eq!(
            writable(ws, "src/link.py"),
            Err(Refused::Link { path: "src/link.py".into(), link: "src/link.py".into() })
        );
        assert_eq!(
            writable(ws, "src/a.py/b"),
            Err(Refused::Kind { path: "src/a.py/b".into(), at: "src/a.py".into(), expected: "folder" })
        );
        assert_eq!(writable(ws, "src"), Err(Refused::Kind { path: "src".into(), at: "src".into(), expected: "file" }));
    }

    #[test]
    fn reclaim_replaces_links_by_folders_and_never_touches_their_targets() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("keep.txt"), "outside").unwrap();
        let ws = dir.path();
        std::os::unix::fs::symlink(outside.path(), ws.join("src")).unwrap();
        let full = reclaim(ws, "src/keep.txt").unwrap();
        assert_eq!(full, ws.join("src/keep.txt"));
        assert!(fs::symlink_metadata(ws.join("src")).unwrap().is_dir());
        assert!(!full.exists());
        assert_eq!(fs::read_to_string(outside.path().join("keep.txt")).unwrap(), "outside");
    }
}
