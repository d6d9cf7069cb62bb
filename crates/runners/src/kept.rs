//! A layer kept as a commit, for a fleet: what a candidate's layer changes is written as a
//! commit over the workspace's commit, pushed where every worker can fetch it, and made into a
//! layer again on the machine that takes the run over, so that a takeover repeats no candidate
//! whose end is journaled.
//!
//! The commit holds what a stage's commit of the layer would: its files and links, its
//! deletions (a deleted or replaced folder: every file git has under it); files git ignores,
//! `.git/` and loopwright's configuration are left out, as the copy into the workspace and the
//! commit after it leave them out.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io;
use std::path::Path;

use crate::at::{Folder, Walk};
use crate::git;
use crate::sandbox::{Entry, Layer, configuration, list};

/// A git failure, as the layer's errors carry it.
fn failed(e: git::GitError) -> io::Error {
    io::Error::other(e.to_string())
}

/// Paths joined for a git command's `-z --stdin`.
fn nul_joined<'a>(paths: impl IntoIterator<Item = &'a String>) -> Vec<u8> {
    let mut out = Vec::new();
    for p in paths {
        out.extend_from_slice(p.as_bytes());
        out.push(0);
    }
    out
}

/// Git's NUL-separated output, as paths.
fn nul_split(bytes: &[u8]) -> Vec<String> {
    bytes.split(|b| *b == 0).filter(|p| !p.is_empty()).map(|p| String::from_utf8_lossy(p).into_owned()).collect()
}

impl Layer {
    /// What it changes in `workspace` (a repository at `parent`), as a commit over `parent`
    /// with `message`; returns the commit. Objects are written into the workspace's repository;
    /// neither its index nor its files are touched.
    pub fn to_commit(&self, workspace: &Path, parent: &str, message: &str) -> io::Result<String> {
        let upper = self.upper();
        let mut entries = Vec::new();
        list(&upper, &upper, self.marks(), &mut entries)?;
        let (mut written, mut gone) = (Vec::new(), Vec::new());
        for (rel, what) in entries {
            let replaces = matches!(what, Entry::Whiteout | Entry::File | Entry::Dir { opaque: true });
            if crate::guard::components(&rel).is_err() || configuration(&rel, replaces).is_some() {
                continue;
            }
            match what {
                Entry::File => {
                    let kind = std::fs::symlink_metadata(upper.join(&rel)).map(|m| m.file_type());
                    // Sockets, pipes and devices are not carried, as the copy-back does not.
                    if kind.is_ok_and(|t| t.is_file() || t.is_symlink()) {
                        written.push(rel);
                    }
                }
                Entry::Whiteout | Entry::Dir { opaque: true } => gone.push(rel),
                Entry::Dir { opaque: false } | Entry::Mark => {}
            }
        }
        // Files git ignores are not committed (git answers for files it does not track only).
        // (`check-ignore` reads paths, and refuses the literal-pathspec setting of loopwright's
        // git commands.)
        let no_magic = [("GIT_LITERAL_PATHSPECS", Path::new("0"))];
        let ignored = git::git_with(workspace, &["check-ignore", "-z", "--stdin"], &no_magic, &nul_joined(&written))
            .map_err(failed)?;
        if ignored.status.code().is_none_or(|c| c > 1) {
            let stderr = String::from_utf8_lossy(&ignored.stderr).trim().to_owned();
            return Err(failed(git::GitError::Failed { command: "check-ignore".into(), stderr }));
        }
        let ignored: BTreeSet<String> = nul_split(&ignored.stdout).into_iter().collect();
        written.retain(|p| !ignored.contains(p));
        let git_dir = git::git(workspace, &["rev-parse", "--absolute-git-dir"]).map_err(failed)?;
        let scratch = tempfile::tempdir()?;
        let index = scratch.path().join("index");
        let env = [
            ("GIT_INDEX_FILE", index.as_path()),
            ("GIT_DIR", Path::new(git_dir.trim())),
            ("GIT_WORK_TREE", upper.as_path()),
        ];
        let run = |args: &[&str], stdin: &[u8]| git::git_ok(&upper, args, &env, stdin).map_err(failed);
        run(&["read-tree", parent], b"")?;
        if !gone.is_empty() {
            // Every file git has at or under a deleted path, unless the layer writes it again.
            let mut args = vec!["ls-files", "-z", "--"];
            args.extend(gone.iter().map(String::as_str));
            let again: BTreeSet<&String> = written.iter().collect();
            let removed: Vec<String> =
                nul_split(&run(&args, b"")?).into_iter().filter(|p| !again.contains(p)).collect();
            if !removed.is_empty() {
                run(&["update-index", "-z", "--force-remove", "--stdin"], &nul_joined(&removed))?;
            }
        }
        if !written.is_empty() {
            // Read from the layer as git reads a work tree: a link as a link, the mode's x bit.
            run(&["update-index", "-z", "--add", "--replace", "--stdin"], &nul_joined(&written))?;
        }
        let tree = String::from_utf8_lossy(&run(&["write-tree"], b"")?).trim().to_owned();
        let id = git::identity(workspace);
        let mut args: Vec<&str> = id.iter().map(String::as_str).collect();
        args.extend(["commit-tree", tree.as_str(), "-p", parent, "-m", message]);
        Ok(git::git(workspace, &args).map_err(failed)?.trim().to_owned())
    }

    /// Fills it (just made empty, [`Layer::make`]) from `commit`, a commit [`Layer::to_commit`]
    /// made in `workspace`'s repository: what the commit changes over its parent written into
    /// its upper folder, a deletion marked as the overlay marks one. Nothing is written through
    /// a link.
    pub fn from_commit(&self, workspace: &Path, commit: &str) -> io::Result<()> {
        let parent = format!("{commit}^");
        let args = ["diff-tree", "-r", "-z", "--no-renames", parent.as_str(), commit];
        let raw = git::git_bytes(workspace, &args).map_err(failed)?;
        let upper = Folder::open(&self.upper())?;
        let mut fuse_marks = false;
        for change in raw_changes(&raw) {
            let Ok(parts) = crate::guard::components(&change.path) else { continue };
            let (name, folders) = parts.split_last().expect("components gives at least one");
            let name = OsStr::new(name);
            let Walk::Found(folder) = upper.walk(folders, true)? else { continue };
            if change.deleted {
                fuse_marks |= !whiteout(&folder, name)?;
                continue;
            }
            let blob = git::git_bytes(workspace, &["cat-file", "blob", &change.blob]).map_err(failed)?;
            match change.mode.as_str() {
                "120000" => folder.write_link(name, Path::new(&*String::from_utf8_lossy(&blob)))?,
                "100755" | "100644" => {
                    let mode = if change.mode == "100755" { 0o755 } else { 0o644 };
                    folder.write_copy(name, &holding(&blob)?, mode)?;
                }
                // A submodule's commit is not a file of the layer.
                _ => {}
            }
        }
        if fuse_marks {
            std::fs::write(self.dir.join("kind"), "fuse")?;
        }
        Ok(())
    }
}

/// A temporary file holding `bytes`, read from its start.
fn holding(bytes: &[u8]) -> io::Result<std::fs::File> {
    use std::io::{Seek, Write};
    let mut file = tempfile::tempfile()?;
    file.write_all(bytes)?;
    file.seek(io::SeekFrom::Start(0))?;
    Ok(file)
}

/// Marks `name` in `folder` deleted as the kernel's overlay does (a character device 0/0,
/// which Linux lets any user make); where that is refused, as fuse-overlayfs does (`.wh.NAME`),
/// and false.
fn whiteout(folder: &Folder, name: &OsStr) -> io::Result<bool> {
    use rustix::fs::{FileType, Mode};
    if rustix::fs::mknodat(folder, name, FileType::CharacterDevice, Mode::empty(), 0).is_ok() {
        return Ok(true);
    }
    let mut mark = std::ffi::OsString::from(".wh.");
    mark.push(name);
    folder.write_copy(&mark, &holding(b"")?, 0o600)?;
    Ok(false)
}

/// One path a commit changes, as `git diff-tree -r -z` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RawChange {
    /// The new mode (`100644`, `100755`, `120000`, `160000`), `000000` when deleted.
    mode: String,
    /// The new blob.
    blob: String,
    /// True when the path is deleted.
    deleted: bool,
    /// The path.
    path: String,
}

/// The changes of `git diff-tree -r -z --no-renames` output: `:OLD NEW OLDSHA NEWSHA S\0PATH\0`
/// each.
fn raw_changes(raw: &[u8]) -> Vec<RawChange> {
    let fields = nul_split(raw);
    let mut out = Vec::new();
    for pair in fields.chunks(2) {
        let [meta, path] = pair else { break };
        let parts: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        let [_, mode, _, blob, status] = parts[..] else { continue };
        out.push(RawChange {
            mode: mode.to_owned(),
            blob: blob.to_owned(),
            deleted: status.starts_with('D'),
            path: path.clone(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        crate::git::git(dir, args).unwrap()
    }

    /// A layer kept as a commit and made again from it changes the workspace as the first did,
    /// less what a commit never holds (ignored files, `.git/`, loopwright's configuration).
    #[test]
    fn a_layer_made_again_from_its_commit_changes_what_the_first_did() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("dir")).unwrap();
        for (path, text) in [("a.txt", "a\n"), ("old.txt", "old\n"), ("dir/x.txt", "x\n"), ("dir/y.txt", "y\n")] {
            std::fs::write(ws.join(path), text).unwrap();
        }
        std::fs::write(ws.join(".gitignore"), "target/\n").unwrap();
        git(&ws, &["init", "-q"]);
        git(&ws, &["add", "-A"]);
        git(&ws, &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]);
        let head = git(&ws, &["rev-parse", "HEAD"]).trim().to_owned();
        let state = dir.path().join("state");
        let first = Layer::of(&state, "run", "s-1-c0");
        first.make(&crate::sandbox::Overlay::Kernel).unwrap();
        let upper = first.upper();
        for folder in ["bin", "target", ".git", ".loopwright/pipelines"] {
            std::fs::create_dir_all(upper.join(folder)).unwrap();
        }
        std::fs::write(upper.join("a.txt"), "a changed\n").unwrap();
        std::fs::write(upper.join("bin/run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(upper.join("bin/run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("a.txt", upper.join("link")).unwrap();
        std::fs::write(upper.join("target/out.bin"), "built").unwrap();
        std::fs::write(upper.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(upper.join(".loopwright/pipelines/p.yaml"), "stages: []\n").unwrap();
        let top = Folder::open(&upper).unwrap();
        let kernel_marks = whiteout(&top, OsStr::new("old.txt")).unwrap();
        whiteout(&top, OsStr::new("dir")).unwrap();

        let commit = first.to_commit(&ws, &head, "kept").unwrap();
        assert_eq!(
            git(&ws, &["diff-tree", "-r", "--name-status", "--no-renames", &head, &commit]),
            "M\ta.txt\nA\tbin/run.sh\nD\tdir/x.txt\nD\tdir/y.txt\nA\tlink\nD\told.txt\n"
        );
        assert_eq!(git(&ws, &["status", "--porcelain"]), "", "the workspace and its index are untouched");

        let again = Layer::of(&state, "run", "s-1-c1");
        again.make(&crate::sandbox::Overlay::Kernel).unwrap();
        again.from_commit(&ws, &commit).unwrap();
        let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            again.changes(&ws).unwrap(),
            (strings(&["a.txt"]), strings(&["bin/run.sh", "link"]), strings(&["dir/x.txt", "dir/y.txt", "old.txt"]))
        );
        assert_eq!(std::fs::read_to_string(again.upper().join("a.txt")).unwrap(), "a changed\n");
        let mode = std::fs::metadata(again.upper().join("bin/run.sh")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(std::fs::read_link(again.upper().join("link")).unwrap(), Path::new("a.txt"));
        let kind = std::fs::read_to_string(again.dir.join("kind")).unwrap();
        assert_eq!(kind, if kernel_marks { "kernel" } else { "fuse" });

        // Copied into the workspace, it leaves what the first layer's copy leaves there.
        let copied = again.copy_into(&ws, Some(&head), u64::MAX).unwrap();
        assert_eq!(copied.written, strings(&["a.txt", "bin/run.sh", "link"]));
        assert_eq!(copied.deleted, strings(&["dir/x.txt", "dir/y.txt", "old.txt"]));
        assert!(copied.refused.is_empty(), "{:?}", copied.refused);
    }

    #[test]
    fn raw_changes_are_read_whole() {
        let raw = b":100644 100755 aaaa bbbb M\0bin/run.sh\0:000000 120000 0000 cccc A\0link\0:100644 000000 dddd 0000 D\0old.txt\0";
        let changes = raw_changes(raw);
        let expected = [
            ("100755", "bbbb", false, "bin/run.sh"),
            ("120000", "cccc", false, "link"),
            ("000000", "0000", true, "old.txt"),
        ]
        .map(|(mode, blob, deleted, path)| RawChange {
            mode: mode.into(),
            blob: blob.into(),
            deleted,
            path: path.into(),
        });
        assert_eq!(changes, expected);
    }
}
