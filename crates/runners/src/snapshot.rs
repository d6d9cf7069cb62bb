//! Snapshots of a workspace's files, so a stage's file changes can be undone byte for byte:
//! modified files restored, deleted files recreated, created files removed.
//!
//! A snapshot is a manifest (path -> size, mtime, inode, mode, object) plus copies of the
//! files' contents in the workspace's object store (`state/objects/`), each kept once per
//! content under its SHA-256 (`sha256-HEX`), so runs over an unchanged workspace share them.
//! A file whose size, mtime and inode are unchanged since the run's previous snapshot reuses
//! its copy without being read. Snapshots written before the store kept their copies under
//! `runs/RUN/snapshots/objects/` by name; they are still read from there.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use loopwright_engine::hash::Fnv;
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

/// The most a snapshot copies (bytes). Past it, the files that would need copying are
/// recorded by their stat only: changes to them are still seen (plan mode stays enforced),
/// but cannot be undone.
pub const MAX_COPY_BYTES: u64 = 512 * 1024 * 1024;

/// Folders that plan mode compares by a fingerprint of every entry's stat (they are not
/// copied: build output and dependencies are large). A plan-mode stage that changes one fails;
/// what it changed there is reported, not undone. Tool caches (`.pytest_cache`, …) are not
/// compared: read-only runs of tests and linters write them.
pub const FINGERPRINTED_DIRS: [&str; 4] = ["target", "node_modules", ".venv", ".hg"];

/// What a snapshot watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The workspace's files (an agent-mode stage: what it changed is committed or undone).
    Files,
    /// Everything a read-only stage must leave alone: the files, and also git's own files
    /// (config, hooks, refs, HEAD, the index's staged content), loopwright's (pipelines,
    /// agents, config, patterns), and the fingerprints of [`FINGERPRINTED_DIRS`].
    PlanMode,
}

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatKey {
    /// Size in bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i128,
    /// Inode number.
    pub ino: u64,
    /// Status-change time, nanoseconds since the epoch: any write or `chmod` moves it, and
    /// unlike the modification time no process can set it back.
    #[serde(default)]
    pub ctime_ns: i128,
}

/// One file in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Identity of the content when the snapshot was taken.
    pub key: StatKey,
    /// Permission bits.
    pub mode: u32,
    /// The copy's name under `objects/`, `git:COMMIT` for a file git gives back, or empty for
    /// a file recorded by its stat only (a symbolic link, or past [`MAX_COPY_BYTES`]).
    pub object: String,
    /// Where a symbolic link points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// Plan mode, git's and loopwright's own files: a hash of the content, so a file that git
    /// rewrote with the same content (another run's `git branch -D` rewrites the shared config)
    /// is not taken for a change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<u64>,
}

/// A snapshot's manifest: relative path -> entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The files.
    pub files: BTreeMap<String, Entry>,
    /// Plan mode: git's and loopwright's own files, by absolute path.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub control: BTreeMap<String, Entry>,
    /// Plan mode: the folders whose control files were walked (absolute), to see new files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub control_dirs: Vec<String>,
    /// Plan mode: the index's staged content (a hash of `git ls-files -s`), and its copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<(u64, String)>,
    /// Plan mode: fingerprints of the folders in [`FINGERPRINTED_DIRS`] (relative path ->
    /// fingerprint).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fingerprints: BTreeMap<String, u64>,
    /// Plan mode: the commit `HEAD` was at, to tell commits made meanwhile from the stage's
    /// writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
}

impl Manifest {
    /// The names of the copies it keeps (in the object store or the run's folder).
    pub fn objects(&self) -> impl Iterator<Item = &str> {
        self.files
            .values()
            .chain(self.control.values())
            .map(|e| e.object.as_str())
            .chain(self.index.iter().map(|(_, o)| o.as_str()))
            .filter(|o| !o.is_empty() && !o.starts_with("git:"))
    }
}

/// What a restore did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreReport {
    /// Files whose content was put back.
    pub restored: usize,
    /// Files that had been deleted and were recreated.
    pub recreated: usize,
    /// Files that had been created and were removed.
    pub removed: usize,
    /// Changes that could not be undone (recorded by stat or fingerprint only).
    pub unrestorable: Vec<String>,
    /// Commits a branch pointed to before it was put back, kept under
    /// `refs/loopwright/undone/` (`REF was COMMIT`).
    pub kept: Vec<String>,
}

impl RestoreReport {
    /// Files touched in all.
    pub fn total(&self) -> usize {
        self.restored + self.recreated + self.removed
    }
}

/// What differs from a snapshot now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diff {
    /// Workspace files changed in place (content, mode or link target).
    pub modified: Vec<String>,
    /// Workspace files removed.
    pub deleted: Vec<String>,
    /// Workspace files new.
    pub created: Vec<String>,
    /// Control files (absolute paths) changed in place.
    pub control_modified: Vec<String>,
    /// Control files removed.
    pub control_deleted: Vec<String>,
    /// Control files new.
    pub control_created: Vec<String>,
    /// The index's staged content changed.
    pub index: bool,
    /// Fingerprinted folders that changed.
    pub dirs: Vec<String>,
    /// Plan mode: commits made on the work tree's branch meanwhile (`SHA subject`), which the
    /// changes they account for are left to (they are not the stage's to revert).
    pub outside: Vec<String>,
}

impl Diff {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self == &Diff::default()
    }

    /// True when nothing a restore would put back changed (commits made meanwhile aside).
    pub fn nothing_to_restore(&self) -> bool {
        Diff { outside: Vec::new(), ..self.clone() }.is_empty()
    }
}

fn nanos(secs: i64, nsec: i64) -> i128 {
    i128::from(secs) * 1_000_000_000 + i128::from(nsec)
}

fn key_of(meta: &fs::Metadata) -> StatKey {
    StatKey {
        size: meta.len(),
        mtime_ns: nanos(meta.mtime(), meta.mtime_nsec()),
        ino: meta.ino(),
        ctime_ns: nanos(meta.ctime(), meta.ctime_nsec()),
    }
}

/// A file found by [`walk`].
#[derive(Debug, Clone)]
pub struct Found {
    /// Its metadata (of the link itself, for a link).
    pub meta: fs::Metadata,
    /// Where it points, when it is a symbolic link.
    pub link: Option<String>,
}

impl Found {
    /// Its manifest entry, with its content kept as `object`.
    fn entry(&self, object: String) -> Entry {
        Entry {
            key: key_of(&self.meta),
            mode: self.meta.permissions().mode(),
            object,
            link: self.link.clone(),
            content: None,
        }
    }

    fn same(&self, entry: &Entry) -> bool {
        key_of(&self.meta) == entry.key && self.meta.permissions().mode() == entry.mode && self.link == entry.link
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

/// Every regular file and symbolic link under `root` (relative paths, `/`-separated; links
/// are not followed), skipping excluded folders and the files loopwright's own output goes to.
pub fn walk(root: &Path) -> io::Result<BTreeMap<String, Found>> {
    walk_noting(root, &mut Vec::new())
}

/// [`walk`], noting the fingerprinted folders it passed by.
fn walk_noting(root: &Path, skipped: &mut Vec<String>) -> io::Result<BTreeMap<String, Found>> {
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
                } else if FINGERPRINTED_DIRS.iter().any(|x| name == *x) {
                    skipped.push(child.to_string_lossy().into_owned());
                }
            } else if ty.is_file() {
                let meta = entry.metadata()?;
                if !own.contains(&(meta.dev(), meta.ino())) {
                    files.insert(child.to_string_lossy().into_owned(), Found { meta, link: None });
                }
            } else if ty.is_symlink() {
                let meta = fs::symlink_metadata(entry.path())?;
                let link = fs::read_link(entry.path())?.to_string_lossy().into_owned();
                files.insert(child.to_string_lossy().into_owned(), Found { meta, link: Some(link) });
            }
        }
    }
    Ok(files)
}

/// A fingerprint of every entry's stat under `dir` (not following links), the same across
/// builds of loopwright (a run resumed by a newer one compares alike).
fn fingerprint(dir: &Path) -> io::Result<u64> {
    let mut hash = Fnv::default();
    let mut feed = |bytes: &[u8]| hash.feed(bytes);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut entries: Vec<fs::DirEntry> = fs::read_dir(&d)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(fs::DirEntry::file_name);
        for entry in entries {
            let meta = fs::symlink_metadata(entry.path())?;
            let key = key_of(&meta);
            feed(entry.path().as_os_str().as_encoded_bytes());
            feed(&key.size.to_le_bytes());
            feed(&key.mtime_ns.to_le_bytes());
            feed(&key.ctime_ns.to_le_bytes());
            feed(&key.ino.to_le_bytes());
            feed(&meta.permissions().mode().to_le_bytes());
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Ok(hash.finish())
}

/// What a plan-mode stage may not change besides the workspace's files: the git directory and
/// `.loopwright/` (its state excepted). In a linked worktree, only what is the worktree's own:
/// its git directory (HEAD, the index), its branch, and the shared config, hooks and `info/`
/// that run code for it — never the other branches or the main checkout's HEAD, which other
/// people and other runs move while the stage reads (a commit in the main checkout, another
/// run's merge), and which a restore must not write back. Each entry is a folder or a file.
fn control_dirs(root: &Path) -> Vec<PathBuf> {
    let canonical = |arg: &str| {
        let dir = crate::git::git(root, &["rev-parse", arg]).ok()?;
        root.join(dir.trim()).canonicalize().ok()
    };
    let mut dirs = Vec::new();
    match (canonical("--absolute-git-dir"), canonical("--git-common-dir")) {
        (Some(own), Some(common)) if own != common => {
            dirs.push(own);
            for shared in ["config", "config.worktree", "hooks", "info"] {
                let path = common.join(shared);
                if path.exists() {
                    dirs.push(path);
                }
            }
            if let Ok(branch) = crate::git::git(root, &["symbolic-ref", "-q", "HEAD"]) {
                let path = common.join(branch.trim());
                if branch.trim().starts_with("refs/heads/") && path.is_file() {
                    dirs.push(path);
                }
            }
        }
        (Some(own), _) => dirs.push(own),
        (None, _) => {}
    }
    if root.join(".loopwright").is_dir() {
        dirs.push(root.join(".loopwright"));
    }
    dirs
}

/// Control files under `dir`: everything but what git and loopwright change themselves while a
/// stage only reads (objects, logs, the index — compared by its staged content instead —,
/// locks, loopwright's state), or what other runs change meanwhile (their worktrees and
/// `loopwright/*` branches).
fn control_files(dir: &Path, into: &mut BTreeMap<String, Found>) -> io::Result<()> {
    const SKIP: [&str; 10] =
        ["objects", "logs", "index", "state", "lfs", "FETCH_HEAD", "ORIG_HEAD", "worktrees", "modules", "loopwright"];
    let top = fs::symlink_metadata(dir)?;
    if !top.is_dir() {
        // A single file of the scope (a worktree's own branch, the shared config).
        let link = top.file_type().is_symlink().then(|| fs::read_link(dir).map(|l| l.to_string_lossy().into_owned()));
        into.insert(dir.to_string_lossy().into_owned(), Found { meta: top, link: link.transpose()? });
        return Ok(());
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d)? {
            let entry = entry?;
            let name = entry.file_name();
            let name_str = name.to_string_lossy();
            if SKIP.contains(&name_str.as_ref()) || name_str.ends_with(".lock") {
                continue;
            }
            let ty = entry.file_type()?;
            if ty.is_dir() {
                stack.push(entry.path());
            } else {
                let meta = fs::symlink_metadata(entry.path())?;
                let link = ty
                    .is_symlink()
                    .then(|| fs::read_link(entry.path()).map(|l| l.to_string_lossy().into_owned()))
                    .transpose()?;
                into.insert(entry.path().to_string_lossy().into_owned(), Found { meta, link });
            }
        }
    }
    Ok(())
}

/// A hash of a regular control file's content (those of up to 1 MiB; git's and loopwright's
/// own files are small).
fn content_hash(path: &Path, meta: &fs::Metadata) -> Option<u64> {
    if !meta.is_file() || meta.len() > 1 << 20 {
        return None;
    }
    let bytes = fs::read(path).ok()?;
    let mut hash = Fnv::default();
    hash.feed(&bytes);
    Some(hash.finish())
}

/// The staged content of the index (`git ls-files -s`), hashed; `None` outside git.
fn index_hash(root: &Path) -> Option<u64> {
    let staged = crate::git::git_bytes(root, &["ls-files", "-s", "-z"]).ok()?;
    let mut hash = Fnv::default();
    hash.feed(&staged);
    Some(hash.finish())
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
/// The prefix of a content-addressed object's name.
const CONTENT: &str = "sha256-";

/// Where a snapshot's copies are: the workspace's object store, or (snapshots written before
/// it) the run's own folder.
pub struct Objects<'a> {
    /// The workspace's object store (`state/objects/`).
    pub shared: &'a Path,
    /// The run's snapshot folder (`runs/RUN/snapshots/`).
    pub own: &'a Path,
}

impl Objects<'_> {
    /// The file of copy `object`.
    fn path(&self, object: &str) -> io::Result<PathBuf> {
        if object.is_empty() || object.contains(['/', '\\']) || object.starts_with('.') {
            return Err(io::Error::other(format!("bad object name `{object}` in the snapshot")));
        }
        Ok(if object.starts_with(CONTENT) { self.shared.join(object) } else { self.own.join("objects").join(object) })
    }
}

/// Copies `source` into the object store `objects` once per content, and names the copy:
/// `sha256-` and the content's SHA-256. The copy is written whole (a temporary file renamed
/// over nothing), so a reader never finds a part of one.
pub fn keep(objects: &Path, source: &Path) -> io::Result<String> {
    use std::io::{Read, Write};
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = objects.join(format!(".tmp-{}-{n}", std::process::id()));
    let mut from = fs::File::open(source)?;
    let mut to = fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buffer = vec![0u8; 64 * 1024];
    let written = (|| -> io::Result<()> {
        loop {
            let read = from.read(&mut buffer)?;
            if read == 0 {
                return Ok(());
            }
            digest.update(&buffer[..read]);
            to.write_all(&buffer[..read])?;
        }
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    drop(to);
    let hex: String = digest.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let name = format!("{CONTENT}{hex}");
    let path = objects.join(&name);
    if path.exists() {
        fs::remove_file(&tmp)?;
    } else {
        fs::rename(&tmp, &path)?;
    }
    Ok(name)
}

/// Takes snapshot `name` of the workspace at `root`: its manifest written under `store`, the
/// copies kept in the object store `shared`.
pub fn take(
    root: &Path,
    store: &Path,
    shared: &Path,
    name: &str,
    previous: Option<&Manifest>,
    git: Option<&GitBase>,
    scope: Scope,
) -> io::Result<Manifest> {
    let objects = shared;
    fs::create_dir_all(objects)?;
    fs::create_dir_all(store)?;
    let mut skipped = Vec::new();
    let files = walk_noting(root, &mut skipped)?;
    let in_git = |p: &str| git.is_some_and(|g| g.clean.contains(p));
    let reusable =
        |p: &str, f: &Found| previous.and_then(|prev| prev.files.get(p)).filter(|e| f.same(e) && !e.object.is_empty());
    // What must be copied, smallest first, within the budget; past it, files are recorded by
    // their stat only (their changes are still seen, but cannot be undone).
    let mut wanted: Vec<(&String, u64)> = files
        .iter()
        .filter(|(p, f)| f.link.is_none() && reusable(p, f).is_none() && !in_git(p))
        .map(|(p, f)| (p, f.meta.len()))
        .collect();
    wanted.sort_by_key(|(_, size)| *size);
    let mut budget = MAX_COPY_BYTES;
    let copied: BTreeSet<&String> = wanted
        .into_iter()
        .take_while(|(_, size)| budget.checked_sub(*size).inspect(|left| budget = *left).is_some())
        .map(|(p, _)| p)
        .collect();
    let mut manifest = Manifest::default();
    for (path, found) in &files {
        let object = match (found.link.is_some(), reusable(path, found), git) {
            (true, _, _) => String::new(),
            (false, Some(e), _) => e.object.clone(),
            (false, None, Some(g)) if g.clean.contains(path) => format!("git:{}", g.commit),
            (false, None, _) if !copied.contains(path) => String::new(),
            (false, None, _) => keep(objects, &root.join(path))?,
        };
        let entry = found.entry(object);
        manifest.files.insert(path.clone(), entry);
    }
    if scope == Scope::PlanMode {
        let dirs = control_dirs(root);
        let mut control = BTreeMap::new();
        for dir in &dirs {
            control_files(dir, &mut control)?;
        }
        for (path, found) in &control {
            let object = match previous.and_then(|p| p.control.get(path)).filter(|e| found.same(e)) {
                Some(e) => e.object.clone(),
                None if found.link.is_some() => String::new(),
                None => keep(objects, Path::new(path))?,
            };
            let mut entry = found.entry(object);
            entry.content = content_hash(Path::new(path), &found.meta);
            manifest.control.insert(path.clone(), entry);
        }
        manifest.control_dirs = dirs.iter().map(|d| d.to_string_lossy().into_owned()).collect();
        manifest.head =
            crate::git::git(root, &["rev-parse", "--verify", "--quiet", "HEAD"]).ok().map(|h| h.trim().to_owned());
        if let Some(hash) = index_hash(root) {
            let index = crate::git::git(root, &["rev-parse", "--git-path", "index"]).map_err(io::Error::other)?;
            match keep(objects, &root.join(index.trim())) {
                Ok(object) => manifest.index = Some((hash, object)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => manifest.index = Some((hash, String::new())),
                Err(e) => return Err(e),
            }
        }
        for dir in skipped {
            let print = fingerprint(&root.join(&dir))?;
            manifest.fingerprints.insert(dir, print);
        }
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

/// The (modified, deleted, created) entries of `now` against `then`.
fn compare(then: &BTreeMap<String, Entry>, now: &BTreeMap<String, Found>) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut modified = Vec::new();
    let mut deleted = Vec::new();
    for (path, entry) in then {
        match now.get(path) {
            Some(found) if found.same(entry) => {}
            Some(_) => modified.push(path.clone()),
            None => deleted.push(path.clone()),
        }
    }
    let created = now.keys().filter(|p| !then.contains_key(*p)).cloned().collect();
    (modified, deleted, created)
}

/// What differs from the snapshot now.
pub fn changes(root: &Path, manifest: &Manifest) -> io::Result<Diff> {
    let mut skipped = Vec::new();
    let now = walk_noting(root, &mut skipped)?;
    let (modified, deleted, created) = compare(&manifest.files, &now);
    let mut diff = Diff { modified, deleted, created, ..Diff::default() };
    if !manifest.control_dirs.is_empty() {
        let mut control = BTreeMap::new();
        for dir in &manifest.control_dirs {
            if fs::symlink_metadata(dir).is_ok() {
                control_files(Path::new(dir), &mut control)?;
            }
        }
        (diff.control_modified, diff.control_deleted, diff.control_created) = compare(&manifest.control, &control);
        // Rewritten with the same content and mode: not a change.
        diff.control_modified.retain(|path| {
            let (Some(then), Some(now)) = (manifest.control.get(path), control.get(path)) else { return true };
            then.content.is_none()
                || then.content != content_hash(Path::new(path), &now.meta)
                || then.mode != now.meta.permissions().mode()
                || then.link != now.link
        });
        diff.index = manifest.index.as_ref().is_some_and(|(hash, _)| index_hash(root) != Some(*hash));
        for dir in skipped.iter().filter(|d| !manifest.fingerprints.contains_key(*d)) {
            diff.dirs.push(format!("{dir}/ (created)"));
        }
        for (dir, print) in &manifest.fingerprints {
            match fingerprint(&root.join(dir)) {
                Ok(now) if now == *print => {}
                Ok(_) => diff.dirs.push(format!("{dir}/")),
                Err(_) => diff.dirs.push(format!("{dir}/ (deleted)")),
            }
        }
        if let Some(head) = &manifest.head {
            leave_to_commits(root, head, &mut diff);
        }
    }
    Ok(diff)
}

/// What the processes of a stage have as `GIT_REFLOG_ACTION`: the reflog entries of what git
/// does for them begin with it, so their commits are told from a person's.
pub const STAGE_REFLOG_ACTION: &str = "loopwright stage";

/// Leaves out of `diff` what commits made on the work tree's branch since `head` account for:
/// the branch moved forward (never back: `head` is an ancestor of the branch now), its ref and
/// git's bookkeeping of a commit, an index that is the new commit's, and each file the commits
/// changed whose content is the new commit's. A person who commits in the checkout while a
/// plan-mode stage reads is not the stage: their commit is named (`diff.outside`), kept, and
/// not taken for the stage's write; whatever else changed still is.
fn leave_to_commits(root: &Path, head: &str, diff: &mut Diff) {
    let git = |args: &[&str]| crate::git::git(root, args).ok();
    let Some(now) = git(&["rev-parse", "--verify", "--quiet", "HEAD"]).map(|h| h.trim().to_owned()) else { return };
    if now == head || git(&["merge-base", "--is-ancestor", head, &now]).is_none() {
        return;
    }
    let range = format!("{head}..{now}");
    // A commit the stage's own processes made says so in the reflog (`GIT_REFLOG_ACTION`, which
    // loopwright sets for them): that is the stage's write, not a person's.
    let made: BTreeSet<String> = git(&["rev-list", &range]).unwrap_or_default().lines().map(str::to_owned).collect();
    let reflog = git(&["reflog", "show", "--format=%H %gs", "-n", "200", "HEAD"]).unwrap_or_default();
    if reflog
        .lines()
        .filter_map(|l| l.split_once(' '))
        .any(|(sha, subject)| made.contains(sha) && subject.starts_with(STAGE_REFLOG_ACTION))
    {
        return;
    }
    diff.outside = git(&["log", "--format=%h %s", &range]).unwrap_or_default().lines().map(str::to_owned).collect();
    let listed = |args: &[&str]| -> BTreeSet<String> {
        git(args).unwrap_or_default().split('\0').filter(|p| !p.is_empty()).map(str::to_owned).collect()
    };
    let committed = listed(&["diff", "--name-only", "-z", head, &now]);
    let in_commit = listed(&["ls-tree", "-r", "-z", "--name-only", &now]);
    let unlike_commit = listed(&["diff", "--name-only", "-z", &now, "--"]);
    let accounted = |p: &String, present: bool| {
        committed.contains(p) && in_commit.contains(p) == present && !unlike_commit.contains(p)
    };
    diff.modified.retain(|p| !accounted(p, true));
    diff.created.retain(|p| !accounted(p, true));
    diff.deleted.retain(|p| !accounted(p, false));
    if diff.index && git(&["diff", "--cached", "--quiet", &now]).is_some() {
        diff.index = false;
    }
    // The branch's ref and what `git commit` writes beside it.
    let branch = git(&["symbolic-ref", "-q", "HEAD"]).map(|b| b.trim().to_owned()).unwrap_or_default();
    let bookkeeping = |path: &String| {
        let path = Path::new(path);
        (!branch.is_empty() && path.ends_with(&branch))
            || path.file_name().is_some_and(|n| n == "packed-refs" || n == "COMMIT_EDITMSG" || n == "AUTO_MERGE")
    };
    diff.control_modified.retain(|p| !bookkeeping(p));
    diff.control_created.retain(|p| !bookkeeping(p));
}

/// Writes an entry's content (or link) at `target`: a new file renamed over the old, so a
/// reader never sees half a file.
fn put_back(root: &Path, objects: &Objects<'_>, target: &Path, path: &str, entry: &Entry) -> io::Result<bool> {
    if let Some(link) = &entry.link {
        let _ = fs::remove_file(target);
        std::os::unix::fs::symlink(link, target)?;
        return Ok(true);
    }
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
        None if entry.object.is_empty() => return Ok(false),
        None => {
            fs::copy(objects.path(&entry.object)?, &tmp)?;
        }
    }
    fs::set_permissions(&tmp, fs::Permissions::from_mode(entry.mode))?;
    fs::rename(&tmp, target)?;
    Ok(true)
}

/// Puts the workspace's files back as the snapshot found them (and, for a plan-mode snapshot,
/// git's and loopwright's files and the index). What was recorded by stat or fingerprint only
/// cannot be put back: the report lists it.
pub fn restore(root: &Path, store: &Path, shared: &Path, manifest: &Manifest) -> io::Result<RestoreReport> {
    let diff = changes(root, manifest)?;
    let objects = Objects { shared, own: store };
    let mut report = RestoreReport::default();
    for (path, recreate) in diff.modified.iter().map(|p| (p, false)).chain(diff.deleted.iter().map(|p| (p, true))) {
        let entry = &manifest.files[path];
        // A folder the stage turned into a link (out of the workspace, or into `.git/`) is a
        // folder again before anything is written into it.
        let target = crate::guard::reclaim(root, path)?;
        if !put_back(root, &objects, &target, path, entry)? {
            report.unrestorable.push(format!("{path} (recorded by its stat only)"));
        } else if recreate {
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
    for path in &diff.created {
        fs::remove_file(root.join(path))?;
        report.removed += 1;
        // Remove folders the stage created, once empty.
        for dir in Path::new(path).ancestors().skip(1) {
            if dir.as_os_str().is_empty() || kept_dirs.contains(dir) || fs::remove_dir(root.join(dir)).is_err() {
                break;
            }
        }
    }
    // A branch put back never loses the commit it pointed to: it is kept under
    // refs/loopwright/undone/ first, and named.
    for path in diff.control_modified.iter().chain(&diff.control_deleted) {
        let Some((_, name)) = path.split_once("/refs/heads/") else { continue };
        let Ok(now) = fs::read_to_string(path) else { continue };
        let now = now.trim();
        if now.len() == 40 && now.chars().all(|c| c.is_ascii_hexdigit()) {
            let stamp = jiff::Timestamp::now().as_second();
            let keep = format!("refs/loopwright/undone/{stamp}/{name}");
            if crate::git::git(root, &["update-ref", &keep, now]).is_ok() {
                report.kept.push(format!("refs/heads/{name} was {now}, kept as {keep}"));
            }
        }
    }
    // Git's and loopwright's own files, by the absolute paths loopwright recorded.
    for (path, recreate) in
        diff.control_modified.iter().map(|p| (p, false)).chain(diff.control_deleted.iter().map(|p| (p, true)))
    {
        let target = Path::new(path);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)?;
        }
        if fs::symlink_metadata(target).is_ok_and(|m| m.is_dir()) {
            fs::remove_dir_all(target)?;
        }
        put_back(root, &objects, target, path, &manifest.control[path])?;
        if recreate {
            report.recreated += 1;
        } else {
            report.restored += 1;
        }
    }
    for path in &diff.control_created {
        fs::remove_file(path)?;
        report.removed += 1;
    }
    if diff.index
        && let Some((_, object)) = manifest.index.as_ref().filter(|(_, o)| !o.is_empty())
    {
        let index = crate::git::git(root, &["rev-parse", "--git-path", "index"]).map_err(io::Error::other)?;
        let tmp = root.join(format!("{}.loopwright-restore", index.trim()));
        fs::copy(objects.path(object)?, &tmp)?;
        fs::rename(&tmp, root.join(index.trim()))?;
        report.restored += 1;
    }
    report.unrestorable.extend(diff.dirs.iter().map(|d| format!("{d} (compared by fingerprint only)")));
    Ok(report)
}
