//! The workspace: its root, `.loopwright/` layout, config, agents and pipelines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use loopwright_spec::{Agent, CompileContext, Config, Diagnostics, Pipeline, SourceFile};

use crate::error::Error;

/// Folders agents are read from, in order of precedence (an earlier one wins a name clash).
pub const AGENT_DIRS: [&str; 3] = [".loopwright/agents", ".claude/agents", ".cursor/agents"];
/// Folders pipelines are looked up in by name.
pub const PIPELINE_DIRS: [&str; 2] = [".loopwright/pipelines", "configurations/pipelines"];

/// A located workspace.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The root (the folder holding `.loopwright/`).
    pub root: PathBuf,
    /// Its config (defaults when there is no config file).
    pub config: Config,
}

impl Workspace {
    /// The workspace at `dir` (`-C`), else the nearest ancestor of the current directory
    /// holding `.loopwright/`, else the current directory.
    pub fn locate(dir: Option<&Path>) -> Result<Self, Error> {
        let root = match dir {
            Some(d) => {
                if !d.is_dir() {
                    return Err(Error::usage(format!("-C {}: no such directory", d.display())));
                }
                d.canonicalize().map_err(|e| Error::usage(format!("-C {}: {e}", d.display())))?
            }
            None => {
                let cwd = std::env::current_dir()
                    .map_err(|e| Error::usage(format!("cannot read the current directory: {e}")))?;
                cwd.ancestors().find(|a| a.join(".loopwright").is_dir()).map_or(cwd.clone(), Path::to_path_buf)
            }
        };
        let config_path = root.join(".loopwright/config.toml");
        let mut config = match std::fs::read_to_string(&config_path) {
            Ok(text) => Config::parse(&SourceFile::new(".loopwright/config.toml", text)).map_err(Error::Invalid)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Config::default(),
            Err(e) => return Err(Error::usage(format!("cannot read {}: {e}", config_path.display()))),
        };
        if let Some(url) = std::env::var("LOOPWRIGHT_STORE").ok().filter(|u| !u.is_empty()) {
            config.store.url = Some(store_url("LOOPWRIGHT_STORE", url)?);
        }
        Ok(Self { root, config })
    }

    /// The workspace with its journal kept in the PostgreSQL database `url` (`--store`), over
    /// what config.toml and `LOOPWRIGHT_STORE` say.
    pub fn with_store(mut self, url: Option<String>) -> Result<Self, Error> {
        if let Some(url) = url {
            self.config.store.url = Some(store_url("--store", url)?);
        }
        Ok(self)
    }

    /// `.loopwright/state/`.
    pub fn state_dir(&self) -> PathBuf {
        Self::state_dir_of(&self.root)
    }

    /// `.loopwright/state/` of the workspace at `root`.
    pub fn state_dir_of(root: &Path) -> PathBuf {
        root.join(".loopwright/state")
    }

    /// `.loopwright/state/runs/`.
    pub fn runs_dir(&self) -> PathBuf {
        self.state_dir().join("runs")
    }

    /// The SQLite file.
    pub fn db_path(&self) -> PathBuf {
        self.root.join(".loopwright").join(&self.config.store.path)
    }

    /// A path relative to the root, for messages.
    pub fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.root).unwrap_or(path).display().to_string()
    }

    /// Reads every agent file. Invalid files are returned as diagnostics, valid ones by name.
    pub fn agents(&self) -> (BTreeMap<String, Agent>, Diagnostics) {
        let mut agents = BTreeMap::new();
        let mut diags = Diagnostics::default();
        for dir in AGENT_DIRS {
            for path in files_with_ext(&self.root.join(dir), &["md"]) {
                let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
                let text = match std::fs::read_to_string(&path) {
                    Ok(t) => t,
                    Err(e) => {
                        let source = SourceFile::new(self.shown(&path), "");
                        diags.push(loopwright_spec::Diagnostic::new(&source, format!("cannot read agent file: {e}")));
                        continue;
                    }
                };
                let source = SourceFile::new(self.shown(&path), text);
                match loopwright_spec::parse_agent(&source, &stem, self.config.default_runner()) {
                    Ok(agent) => {
                        agents.entry(agent.name.clone()).or_insert(agent);
                    }
                    Err(d) => diags.extend(d),
                }
            }
        }
        (agents, diags)
    }

    /// Every pipeline file, by name then path.
    pub fn pipeline_files(&self) -> Vec<PathBuf> {
        PIPELINE_DIRS.iter().flat_map(|d| files_with_ext(&self.root.join(d), &["yml", "yaml"])).collect()
    }

    /// Finds a pipeline by name (`.loopwright/pipelines/NAME.yml`, then
    /// `configurations/pipelines/NAME.yml`) or by path.
    pub fn find_pipeline(&self, name: &str) -> Result<PathBuf, Error> {
        let as_path = Path::new(name);
        let is_path = name.ends_with(".yml") || name.ends_with(".yaml") || name.contains('/');
        if is_path {
            let p = if as_path.is_absolute() {
                as_path.to_path_buf()
            } else {
                std::env::current_dir().unwrap_or_default().join(as_path)
            };
            if p.is_file() {
                return Ok(p);
            }
            let in_root = self.root.join(as_path);
            if in_root.is_file() {
                return Ok(in_root);
            }
            return Err(Error::not_found(format!("Pipeline '{name}' not found: no file {}", p.display())));
        }
        for dir in PIPELINE_DIRS {
            for ext in ["yml", "yaml"] {
                let p = self.root.join(dir).join(format!("{name}.{ext}"));
                if p.is_file() {
                    return Ok(p);
                }
            }
        }
        let known: Vec<String> = self
            .pipeline_files()
            .iter()
            .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .collect();
        Err(Error::not_found(format!(
            "Pipeline '{name}' not found in {} (looked for {name}.yml in {}){}",
            self.root.display(),
            PIPELINE_DIRS.join(" and "),
            if known.is_empty() {
                "; run `loopwright init` to create one".to_owned()
            } else {
                format!("; available: {}", known.join(", "))
            }
        )))
    }

    /// Finds a pipeline by name only (a request from the network names no paths): letters,
    /// digits, `-`, `_` and `.`, not starting with a dot.
    pub fn find_pipeline_named(&self, name: &str) -> Result<PathBuf, Error> {
        let plain = !name.is_empty()
            && name.len() <= 100
            && !name.starts_with('.')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if plain && (name.ends_with(".yml") || name.ends_with(".yaml")) {
            return Err(Error::not_found(format!("no pipeline `{name}`: name it without `.yml`")));
        }
        if !plain {
            return Err(Error::usage(format!(
                "`{name}` is not a pipeline name: use the name of a file in {} (letters, digits, `-`, `_`, `.`; no path)",
                PIPELINE_DIRS.join(" or ")
            )));
        }
        self.find_pipeline(name)
    }

    /// Reads and compiles a pipeline file; `extra_inputs` are `--input` keys.
    pub fn load_pipeline(&self, path: &Path, extra_inputs: &[String]) -> Result<Pipeline, Error> {
        let text =
            std::fs::read_to_string(path).map_err(|e| Error::usage(format!("cannot read {}: {e}", path.display())))?;
        self.compile_text(path, text, extra_inputs)
    }

    /// Compiles a pipeline's text (a file's, or a run's snapshot of it).
    pub fn compile_text(&self, path: &Path, text: String, extra_inputs: &[String]) -> Result<Pipeline, Error> {
        let (agents, agent_diags) = self.agents();
        let source = SourceFile::new(self.shown(path), text);
        let cx = CompileContext {
            agents: &agents,
            extra_inputs,
            default_timeout_minutes: self.config.defaults.timeout_minutes,
        };
        match loopwright_spec::compile(&source, &cx) {
            Ok(p) => Ok(p),
            Err(mut diags) => {
                // Broken agent files explain "agent not found" errors: show them too.
                diags.extend(agent_diags);
                Err(Error::Invalid(diags))
            }
        }
    }
}

/// Files directly in `dir` with one of `exts`, sorted by name.
fn files_with_ext(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| exts.iter().any(|x| e == *x)))
        .collect();
    files.sort();
    files
}

/// Writes a file atomically: a temporary file next to it, then a rename.
pub fn write_atomic(path: &Path, contents: &str) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("{}.tmp", path.extension().and_then(|e| e.to_str()).unwrap_or("")));
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}

/// [`write_atomic`] for loopwright's own state: the file is the owner's only (0600).
pub fn write_atomic_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("{}.tmp", path.extension().and_then(|e| e.to_str()).unwrap_or("")));
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
    file.write_all(contents.as_bytes())?;
    std::fs::rename(&tmp, path)
}

/// True when `path` (as a run journals its pipeline's) names a file inside the repository: a
/// relative path of plain names, no `..`, no root.
pub fn repository_file(path: &str) -> bool {
    let path = Path::new(path);
    path.is_relative() && path.components().all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// `url` as the journal's PostgreSQL database, named by `what`.
fn store_url(what: &str, url: String) -> Result<String, Error> {
    if loopwright_spec::config::is_postgres_url(&url) {
        Ok(url)
    } else {
        Err(Error::usage(format!(
            "{what}: `{}` is not a PostgreSQL URL: expected postgres://user@host[:port]/database (without one, the journal is this workspace's SQLite file)",
            loopwright_store::pg::shown_url(&url)
        )))
    }
}
