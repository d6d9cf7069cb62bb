//! Task modules: the directory an auto loop works in, its files, and seed 002's two routing
//! tables (where a loop enters by the module's status, where it goes after each step).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What the module must achieve.
pub const TARGET: &str = ".target.md";
/// The module's frontmatter (status, phase, progress) and plan index.
pub const INDEX: &str = ".index.md";
/// Condensed context, rewritten after every step.
pub const SUMMARY: &str = ".summary.md";
/// The agent's progress report after each step (transient).
pub const SIGNAL: &str = ".auto-signal";
/// The supervisor's stop request (transient).
pub const STOP: &str = ".auto-stop";
/// The protocol the agent follows, kept on disk beside the module so a compaction of the
/// agent's context cannot lose it (rewritten at every start of the agent).
pub const PROTOCOL: &str = ".protocol.md";

/// The template `.target.md` starts from; a target that still equals it (or has only
/// headings, comments and placeholders) has no substance.
const TARGET_TEMPLATE: &str = "# Target\n\n<!-- What this task module must achieve, and how to tell it is done. -->\n";

/// A module's lifecycle status (`.index.md` frontmatter `status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModuleStatus {
    /// Created; the target may still be empty.
    Draft,
    /// A plan exists and waits for its check.
    Planning,
    /// The plan passed its check.
    Review,
    /// Steps of the plan are being carried out.
    Executing,
    /// The plan is being revised (see `phase`).
    RePlanning,
    /// Done and verified.
    Complete,
    /// Cannot continue (see `blocked_reason`).
    Blocked,
    /// Given up by a person.
    Cancelled,
}

impl ModuleStatus {
    /// The name in `.index.md`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Draft => "draft",
            Self::Planning => "planning",
            Self::Review => "review",
            Self::Executing => "executing",
            Self::RePlanning => "re-planning",
            Self::Complete => "complete",
            Self::Blocked => "blocked",
            Self::Cancelled => "cancelled",
        }
    }
}

/// `.index.md`'s frontmatter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Index {
    /// The lifecycle status.
    pub status: ModuleStatus,
    /// `needs-plan`, `needs-check` or empty (only read in `re-planning`).
    #[serde(default)]
    pub phase: String,
    /// Commands that verify the module is done (run by the supervisor before it marks the
    /// module complete); empty means the project's defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<String>,
    /// The module's own fields (`completed_steps`, `total_steps`, `blocked_reason`, …).
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// Where a loop starts, by the module's status (seed 002's entry table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Run this step first (with this checkpoint or mode).
    Step {
        /// `plan`, `check`, `exec`, `merge` or `report`.
        step: &'static str,
        /// The checkpoint or mode the step runs with (`generate`, `post-plan`, `post-exec`).
        with: &'static str,
    },
    /// Run the report, then stop (`complete`).
    ReportThenStop,
    /// Do not start: say why.
    Stop(String),
}

/// A module's files could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// `.index.md` has no frontmatter or it does not parse.
    #[error("{path}: {message}")]
    Index {
        /// The file.
        path: String,
        /// What is wrong, with the line where the parser knows it.
        message: String,
    },
    /// `auto init` on a directory that already is a module.
    #[error("{0} already holds a task module ({INDEX} exists)")]
    Exists(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ModuleError + '_ {
    move |source| ModuleError::Io { path: path.display().to_string(), source }
}

/// Creates a task module in `dir` (made if missing) in status `draft`, with `target` as its
/// `.target.md` (or the template when `target` is empty), and the transient files git-ignored.
pub fn init(dir: &Path, target: &str) -> Result<(), ModuleError> {
    if dir.join(INDEX).exists() {
        return Err(ModuleError::Exists(dir.display().to_string()));
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let target =
        if target.trim().is_empty() { TARGET_TEMPLATE.to_owned() } else { format!("# Target\n\n{}\n", target.trim()) };
    write(&dir.join(TARGET), &target)?;
    let index = Index { status: ModuleStatus::Draft, phase: String::new(), checks: vec![], extra: BTreeMap::new() };
    write_index(dir, &index, "# Plan\n\n(no plan yet)\n")?;
    write(&dir.join(SUMMARY), "# Summary\n\n(nothing done yet)\n")?;
    write(&dir.join(".gitignore"), &format!("{SIGNAL}\n{STOP}\n{PROTOCOL}\n"))?;
    Ok(())
}

/// Writes a file whole (a temporary file renamed over it), so a reader never sees half. The
/// agent may write the same folder: the folder must be a real one (not a link it planted), the
/// temporary file is created exclusively under a name nobody can guess (a link or file waiting
/// at that name makes the write fail instead of being followed), and the rename replaces
/// whatever is at `path` itself — a link there is replaced, not followed.
pub fn write(path: &Path, contents: &str) -> Result<(), ModuleError> {
    write_mode(path, contents, 0o644)
}

/// [`write`] for loopwright's own state (the holder's files): readable by the owner only.
pub fn write_private(path: &Path, contents: &str) -> Result<(), ModuleError> {
    write_mode(path, contents, 0o600)
}

fn write_mode(path: &Path, contents: &str, mode: u32) -> Result<(), ModuleError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let meta = std::fs::symlink_metadata(parent).map_err(io(parent))?;
    if !meta.is_dir() {
        let why = std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a real folder (a symbolic link?)");
        return Err(io(parent)(why));
    }
    let name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let tmp = parent.join(format!(".{name}.{}.{:016x}.tmp", std::process::id(), u64::from_le_bytes(random_bytes())));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .mode(mode)
        .open(&tmp)
        .map_err(io(&tmp))?;
    if let Err(e) = file.write_all(contents.as_bytes()).and_then(|()| file.sync_data()) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(&tmp)(e));
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(path)(e)
    })
}

/// `N` random bytes from the kernel (the clock's nanoseconds where it has none to give): for
/// names nobody can guess and the agent's session ids.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b)).is_err() {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        for (byte, from) in b.iter_mut().zip(t.as_nanos().to_le_bytes().iter().cycle()) {
            *byte = *from;
        }
    }
    b
}

/// The most of a module file that is read.
pub const FILE_BYTES: u64 = 1024 * 1024;

/// Reads a file of the module, which the agent may have replaced by anything: opened without
/// blocking (a FIFO or a device answers at once) and without following a link, taken only when
/// it is a regular file, and at most `cap` bytes of it.
pub fn read_file(path: &Path, cap: u64) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let flags = nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOFOLLOW;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags.bits()).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    let mut text = String::new();
    file.take(cap).read_to_string(&mut text)?;
    Ok(text)
}

/// Writes `.index.md`: the frontmatter, then `body`.
pub fn write_index(dir: &Path, index: &Index, body: &str) -> Result<(), ModuleError> {
    let path = dir.join(INDEX);
    let yaml = serde_saphyr::to_string(index)
        .map_err(|e| ModuleError::Index { path: path.display().to_string(), message: e.to_string() })?;
    write(&path, &format!("---\n{yaml}---\n\n{body}"))
}

/// Reads `.index.md`'s frontmatter and the text after it.
pub fn read_index(dir: &Path) -> Result<(Index, String), ModuleError> {
    let path = dir.join(INDEX);
    let text = read_file(&path, FILE_BYTES).map_err(io(&path))?;
    let shown = path.display().to_string();
    let bad = |message: String| ModuleError::Index { path: shown.clone(), message };
    let rest =
        text.strip_prefix("---\n").ok_or_else(|| bad("line 1: expected `---` opening the frontmatter".into()))?;
    let end = rest.find("\n---").ok_or_else(|| bad("no `---` closing the frontmatter".into()))?;
    let (yaml, body) = (&rest[..=end], &rest[end + 4..]);
    let index: Index = serde_saphyr::from_str(yaml).map_err(|e| bad(format!("frontmatter: {e}")))?;
    Ok((index, body.trim_start_matches('\n').to_owned()))
}

/// True when `.target.md` says something beyond the template: a line that is not a heading,
/// an HTML comment, a placeholder (`TODO`, `TBD`, `<…>`) or blank.
pub fn has_substance(target: &str) -> bool {
    static COMMENT: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"(?s)<!--.*?(-->|$)").expect("a valid regex"));
    COMMENT.replace_all(target, "").lines().map(str::trim).any(|l| {
        let bare = l.trim_matches(|c: char| !c.is_alphanumeric()).to_ascii_uppercase();
        !(l.is_empty()
            || l.starts_with('#')
            || matches!(bare.as_str(), "TODO" | "TBD" | "FIXME" | "")
            || (l.starts_with('<') && l.ends_with('>')))
    })
}

/// Where the loop enters a module (seed 002's status-based routing).
pub fn entry(dir: &Path) -> Result<Entry, ModuleError> {
    let (index, _) = read_index(dir)?;
    Ok(match index.status {
        ModuleStatus::Draft => {
            let path = dir.join(TARGET);
            let target = read_file(&path, FILE_BYTES).unwrap_or_default();
            if has_substance(&target) {
                Entry::Step { step: "plan", with: "generate" }
            } else {
                Entry::Stop("fill .target.md first".into())
            }
        }
        ModuleStatus::Planning => Entry::Step { step: "check", with: "post-plan" },
        ModuleStatus::Review => Entry::Step { step: "exec", with: "" },
        ModuleStatus::Executing => Entry::Step { step: "check", with: "post-exec" },
        ModuleStatus::RePlanning => match index.phase.as_str() {
            "needs-check" => Entry::Step { step: "check", with: "post-plan" },
            _ => Entry::Step { step: "plan", with: "generate" },
        },
        ModuleStatus::Complete => Entry::ReportThenStop,
        ModuleStatus::Blocked => Entry::Stop(format!(
            "blocked: {}",
            index.extra.get("blocked_reason").and_then(|v| v.as_str()).unwrap_or("(no reason given)")
        )),
        ModuleStatus::Cancelled => Entry::Stop("cancelled".into()),
    })
}

/// The module directory as the supervisor keys it: absolute, with symlinks resolved.
pub fn canonical(dir: &Path) -> Result<PathBuf, ModuleError> {
    std::fs::canonicalize(dir).map_err(io(dir))
}
