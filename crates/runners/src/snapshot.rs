//! Snapshots of a workspace's files, so a stage's file changes can be undone byte for byte:
//! modified files restored, deleted files recreated, created files removed.
//!
//! A snapshot is a manifest (path -> size, mtime, inode, mode, object) plus copies of the
//! files' contents under `runs/RUN/snapshots/objects/`. Copies are shared between the
//! snapshots of a run: a file whose size, mtime and inode are unchanged since the previous
//! snapshot reuses its copy, so only the first snapshot of a run copies the whole workspace.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Folders never snapshotted (version control, build output, dependencies, tool caches,
/// loopwright's own files).
pub const EXCLUDED_DIRS: [&str; 14] = [
    ".git",
    ".loopwright",
    "target",
    "node_modules",
    ".venv",
    "__pycache__",
    ".hg",
    // Tool caches a read-only run of tests or linters writes.
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".tox",
    ".nox",
    ".gradle",
    ".turbo",
];

/// The most a snapshot copies (bytes); a larger workspace is not snapshotted.
pub const MAX_COPY_BYTES: u64 = 512 * 1024 * 1024;

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatKey {
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Inode number.
    pub ino: u64,
}

/// One file in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Identity of the content when the snapshot was taken.
    pub key: StatKey,
    /// Permission bits.
    pub mode: u32,
    /// The copy's name under `objects/`.
    pub object: String,
}

/// A snapshot's manifest: relative path -> entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The files.
    pub files: BTreeMap<String, Entry>,
}

/// What a restore did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreReport {
    /// Files whose content was put back.
    pub restored: usize,
    /// Files that had been deleted and were recreated.
    pub recreated: usize,
    /// Files that had been created and were removed.
    pub removed: usize,
}

impl RestoreReport {
    /// Files touched in all.
    pub fn total(&self) -> usize {
        self.restored + self.recreated + self.removed
    }
}

fn key_of(meta: &fs::Metadata) -> StatKey {
    StatKey {
        size: meta.len(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        ino: meta.ino(),
    }
}

/// The files this process's standard output and error are redirected to (`loopwright run p
/// 2> run.log`), as (device, inode): they change while a stage runs, but not because of it,
/// and are never a stage's change.
fn own_output_files() -> &'static [(u64, u64)] {
    static FILES: std::sync::OnceLock<Vec<(u64, u64)>> = std::sync::OnceLock::new();
    FILES.get_or_init(|| {
        ["/proc/self/fd/1", "/proc/self/fd/2"]
            .iter()
            .filter_map(|fd| fs::metadata(fd).ok())
            .filter(fs::Metadata::is_file)
            .map(|m| (m.dev(), m.ino()))
            .collect()
    })
}

/// Every regular file under `root` (relative paths, `/`-separated), skipping excluded folders,
/// symbolic links and the files loopwright's own output goes to.
pub fn walk(root: &Path) -> io::Result<BTreeMap<String, fs::Metadata>> {
    let own = own_output_files();
    let mut files = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let ty = entry.file_type()?;
            let child = rel.join(&name);
            if ty.is_dir() {
                if !EXCLUDED_DIRS.iter().any(|x| name == *x) {
                    stack.push(child);
                }
            } else if ty.is_file() {
                let meta = entry.metadata()?;
                if !own.contains(&(meta.dev(), meta.ino())) {
                    files.insert(child.to_string_lossy().into_owned(), meta);
                }
            }
        }
    }
    Ok(files)
}

/// Where unchanged tracked files of a git work tree can be read back from, so a snapshot need
/// not copy them: the commit, and the files whose content equals that commit's.
#[derive(Debug, Clone, Default)]
pub struct GitBase {
    /// The commit (`HEAD` when the snapshot was taken).
    pub commit: String,
    /// Tracked files with no change against it.
    pub clean: BTreeSet<String>,
}

/// The git base of a work tree, if it is one with a commit.
pub fn git_base(root: &Path) -> Option<GitBase> {
    let commit = crate::git::git(root, &["rev-parse", "--verify", "--quiet", "HEAD"]).ok()?.trim().to_owned();
    let tracked = crate::git::git(root, &["ls-files", "-z"]).ok()?;
    let status = crate::git::git(root, &["status", "--porcelain", "-z", "--untracked-files=no"]).ok()?;
    let mut dirty = BTreeSet::new();
    let mut entries = status.split('\0').filter(|e| !e.is_empty());
    while let Some(entry) = entries.next() {
        let (code, path) = entry.split_at(entry.len().min(3));
        dirty.insert(path.to_owned());
        if code.starts_with('R') || code.starts_with('C') {
            // A rename or copy names its source next.
            if let Some(from) = entries.next() {
                dirty.insert(from.to_owned());
            }
        }
    }
    let clean = tracked.split('\0').filter(|p| !p.is_empty() && !dirty.contains(*p)).map(str::to_owned).collect();
    Some(GitBase { commit, clean })
}

/// Takes a snapshot of `root` into `store` (the run's snapshot folder) under `name`, reusing
/// copies from `previous` for unchanged files, and not copying files `git` can give back.
pub fn take(
    root: &Path,
    store: &Path,
    name: &str,
    previous: Option<&Manifest>,
    git: Option<&GitBase>,
) -> io::Result<Manifest> {
    let objects = store.join("objects");
    fs::create_dir_all(&objects)?;
    let files = walk(root)?;
    let in_git = |p: &str| git.is_some_and(|g| g.clean.contains(p));
    let to_copy: u64 = files
        .iter()
        .filter(|(p, m)| previous.and_then(|prev| prev.files.get(*p)).is_none_or(|e| e.key != key_of(m)))
        .filter(|(p, _)| !in_git(p))
        .map(|(_, m)| m.len())
        .sum();
    if to_copy > MAX_COPY_BYTES {
        return Err(io::Error::other(format!(
            "the workspace has {} MB to copy, more than the {} MB a snapshot takes",
            to_copy / (1024 * 1024),
            MAX_COPY_BYTES / (1024 * 1024)
        )));
    }
    let mut manifest = Manifest::default();
    for (i, (path, meta)) in files.iter().enumerate() {
        let key = key_of(meta);
        let reused = previous.and_then(|prev| prev.files.get(path)).filter(|e| e.key == key);
        let object = match (reused, git) {
            (Some(e), _) => e.object.clone(),
            (None, Some(g)) if g.clean.contains(path) => format!("git:{}", g.commit),
            (None, _) => {
                let object = format!("{name}-{i}");
                fs::copy(root.join(path), objects.join(&object))?;
                object
            }
        };
        manifest.files.insert(path.clone(), Entry { key, mode: meta.permissions().mode(), object });
    }
    let text = serde_json::to_string(&manifest).map_err(io::Error::other)?;
    fs::write(store.join(format!("{name}.json")), text)?;
    Ok(manifest)
}

/// Reads a snapshot's manifest.
pub fn load(store: &Path, name: &str) -> io::Result<Manifest> {
    let text = fs::read_to_string(store.join(format!("{name}.json")))?;
    serde_json::from_str(&text).map_err(io::Error::other)
}

/// The files that differ from the snapshot now: (modified, deleted, created).
pub fn changes(root: &Path, manifest: &Manifest) -> io::Result<(Vec<String>, Vec<String>, Vec<String>)> {
    let now = walk(root)?;
    let mut modified = Vec::new();
    let mut deleted = Vec::new();
    for (path, entry) in &manifest.files {
        match now.get(path) {
            Some(meta) if key_of(meta) == entry.key => {}
            Some(_) => modified.push(path.clone()),
            None => deleted.push(path.clone()),
        }
    }
    let created = now.keys().filter(|p| !manifest.files.contains_key(*p)).cloned().collect();
    Ok((modified, deleted, created))
}

/// Puts the workspace's files back as the snapshot found them.
pub fn restore(root: &Path, store: &Path, manifest: &Manifest) -> io::Result<RestoreReport> {
    let (modified, deleted, created) = changes(root, manifest)?;
    let objects = store.join("objects");
    let mut report = RestoreReport::default();
    for (path, recreate) in modified.iter().map(|p| (p, false)).chain(deleted.iter().map(|p| (p, true))) {
        let entry = &manifest.files[path];
        // A folder the stage turned into a link (out of the workspace, or into `.git/`) is a
        // folder again before anything is written into it.
        let target = crate::guard::reclaim(root, path)?;
        // Write a new file and rename it over, so a reader never sees half a file.
        let tmp = target.with_file_name(format!(
            ".{}.loopwright-restore",
            target.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()
        ));
        match entry.object.strip_prefix("git:") {
            Some(commit) => {
                let bytes =
                    crate::git::git_bytes(root, &["show", &format!("{commit}:{path}")]).map_err(io::Error::other)?;
                fs::write(&tmp, bytes)?;
            }
            None => {
                if entry.object.contains(['/', '\\']) || entry.object.starts_with('.') {
                    return Err(io::Error::other(format!("bad object name `{}` in the snapshot", entry.object)));
                }
                fs::copy(objects.join(&entry.object), &tmp)?;
            }
        }
        fs::set_permissions(&tmp, fs::Permissions::from_mode(entry.mode))?;
        fs::rename(&tmp, &target)?;
        if recreate {
            report.recreated += 1;
        } else {
            report.restored += 1;
        }
    }
    let kept_dirs: BTreeSet<PathBuf> = manifest
        .files
        .keys()
        .flat_map(|p| Path::new(p).ancestors().skip(1).map(Path::to_path_buf).collect::<Vec<_>>())
        .collect();
    for path in &created {
        fs::remove_file(root.join(path))?;
        report.removed += 1;
        // Remove folders the stage created, once empty.
        for dir in Path::new(path).ancestors().skip(1) {
            if dir.as_os_str().is_empty() || kept_dirs.contains(dir) || fs::remove_dir(root.join(dir)).is_err() {
                break;
            }
        }
    }
    Ok(report)
}
