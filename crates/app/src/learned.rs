//! What the stages' agents taught: each failure an agent labelled (SPEC §6, `[classify]
//! ask_agent`) kept as a labelled sample with a candidate pattern, one JSON file per distinct
//! output under `.loopwright/state/learned/`. `loopwright patterns learned` lists them, and
//! `--export` writes them as samples of the failure corpus (`corpus/`'s layout) to grow the
//! statistical classifier's training set. Nothing here is used to classify: a candidate pattern
//! is for a person to read and, if it is right, to copy into `failure-patterns.yml`.

use std::path::{Path, PathBuf};

use loopwright_engine::closed_loop::ask;
use loopwright_engine::closed_loop::{CheckResult, EvidenceKind, Failure};
use loopwright_engine::patterns::{Library, Strategy};
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// One failure an agent labelled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The category the agent named.
    pub category: String,
    /// Whether its label was used (a category that does not stop the run for a person).
    pub used: bool,
    /// Why, in the agent's words (one line, capped).
    #[serde(default)]
    pub reason: String,
    /// What the command printed (the failure's kept tail).
    pub output: String,
    /// The command that printed it.
    #[serde(default)]
    pub command: Option<String>,
    /// Its exit code.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The check's type.
    #[serde(default)]
    pub check_type: Option<String>,
    /// The program that printed it (the first the command runs).
    #[serde(default)]
    pub tool: Option<String>,
    /// Where it was seen.
    pub run: String,
    /// The stage.
    pub stage: String,
    /// The attempt.
    pub attempt: u32,
    /// When.
    pub at: jiff::Timestamp,
    /// A pattern that would recognise it, for a person to review.
    pub candidate: Candidate,
}

/// A candidate pattern, in `failure-patterns.yml`'s own fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// `learned-CATEGORY-HASH`.
    pub id: String,
    /// What it recognises.
    pub description: String,
    /// The phrase the agent quoted from the output, when the output holds it.
    pub signals: Vec<String>,
    /// The tool it was seen from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<String>,
    /// The category's strategy.
    pub strategy: Strategy,
    /// The category's.
    pub retryable: bool,
}

impl Sample {
    /// The sample of a check failure the agent labelled; `None` when it was not asked or named
    /// no category.
    pub fn of(
        library: &Library,
        failure: &Failure,
        check: Option<&CheckResult>,
        place: (&str, &str, u32),
        at: jiff::Timestamp,
    ) -> Option<Self> {
        let (category, used) = ask::answered(failure)?;
        let pattern = library.get(category)?;
        let evidence = |kind: EvidenceKind| failure.evidence.iter().find(|e| e.kind == kind).map(|e| e.value.clone());
        let command = check.map(|c| c.command.clone());
        let tool = command
            .as_deref()
            .and_then(|c| loopwright_engine::patterns::command::tools(c).into_iter().next())
            .and_then(|t| t.into_iter().next());
        let reason = evidence(EvidenceKind::AgentReason).unwrap_or_default();
        let hash = hash_of(&failure.output);
        Some(Self {
            category: category.to_owned(),
            used,
            candidate: Candidate {
                id: format!("learned-{category}-{}", &hash[..8]),
                description: if reason.is_empty() { pattern.description.clone() } else { reason.clone() },
                signals: evidence(EvidenceKind::AgentSignal).into_iter().collect(),
                commands: tool.iter().cloned().collect(),
                strategy: pattern.strategy,
                retryable: pattern.retryable,
            },
            reason,
            output: failure.output.clone(),
            command,
            exit_code: check.and_then(|c| c.exit_code),
            check_type: check.map(|c| c.kind.as_str().to_owned()),
            tool,
            run: place.0.to_owned(),
            stage: place.1.to_owned(),
            attempt: place.2,
            at,
        })
    }

    /// Its file name: the category and a hash of the output (the same output seen again is
    /// one sample).
    pub fn file_name(&self) -> String {
        format!("{}-{}.json", self.category, &hash_of(&self.output)[..16])
    }
}

/// FNV-1a of a text, in hex (a name, not a secret).
fn hash_of(text: &str) -> String {
    format!("{:016x}", loopwright_engine::hash::fnv1a(text.as_bytes()))
}

/// `.loopwright/state/learned/`, beside `runs/`.
pub fn dir(runs_dir: &Path) -> PathBuf {
    runs_dir.parent().map_or_else(|| runs_dir.join("learned"), |p| p.join("learned"))
}

/// Keeps a sample (written whole or not at all).
pub fn save(runs_dir: &Path, sample: &Sample) -> std::io::Result<PathBuf> {
    let dir = dir(runs_dir);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(sample.file_name());
    let json = serde_json::to_string_pretty(sample).map_err(std::io::Error::other)?;
    // A temporary file of this process's own: two runs keeping the same output at once each
    // write theirs whole, and the last rename wins.
    let tmp = dir.join(format!(".{}.{}.tmp", sample.file_name(), std::process::id()));
    std::fs::write(&tmp, json)?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// Every sample kept, oldest first; files that are not samples are said in `skipped`.
pub fn list(runs_dir: &Path) -> Result<Listing, Error> {
    let dir = dir(runs_dir);
    let mut listing = Listing::default();
    let library = Library::builtin();
    let offered = ask::categories(&library);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(listing),
        Err(e) => return Err(Error::Internal(anyhow::anyhow!("cannot read {}: {e}", dir.display()))),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        // The files are the workspace's, so anyone's: a category names a folder on export, and
        // only the library's own ids are categories.
        let known = |s: &Sample| offered.iter().any(|p| p.id == s.category);
        // Opened without blocking, a regular file of at most 16 MiB: the folder is the
        // workspace's, and a FIFO planted there must not hang the listing.
        match loopwright_runners::at::read_small(&path, 16 * 1024 * 1024)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<Sample>(&t).map_err(|e| e.to_string()))
        {
            Ok(sample) if !known(&sample) => {
                listing.skipped.push(format!("{}: `{}` is not a failure category", path.display(), sample.category));
            }
            Ok(sample) => listing.samples.push(sample),
            Err(why) => listing.skipped.push(format!("{}: {why}", path.display())),
        }
    }
    listing.samples.sort_by_key(|s| (s.at, s.file_name()));
    Ok(listing)
}

/// The samples kept, and the files that could not be read as samples.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct Listing {
    /// Oldest first.
    pub samples: Vec<Sample>,
    /// `path: why`.
    pub skipped: Vec<String>,
}

/// The corpus's table header (`corpus/samples.tsv`).
pub const CORPUS_HEADER: &str = "file\ttool\tecosystem\tcheck_type\texit\tcommand";

/// Writes samples into a corpus folder: `DIR/CATEGORY/NAME.txt` with the output, and a row
/// each in `DIR/samples.tsv` (made with its header when missing; a sample already listed is
/// not listed again). Returns the files written.
pub fn export(samples: &[Sample], dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let io = |what: &Path, e: std::io::Error| Error::usage(format!("cannot write {}: {e}", what.display()));
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let table = dir.join("samples.tsv");
    let mut text = match std::fs::read_to_string(&table) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => format!("{CORPUS_HEADER}\n"),
        Err(e) => return Err(io(&table, e)),
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let listed: std::collections::BTreeSet<String> =
        text.lines().filter_map(|l| l.split('\t').next()).map(str::to_owned).collect();
    let mut written = Vec::new();
    for s in samples {
        let name = format!("{}/learned-{}", s.category, &hash_of(&s.output)[..16]);
        let path = dir.join(format!("{name}.txt"));
        std::fs::create_dir_all(dir.join(&s.category)).map_err(|e| io(dir, e))?;
        let mut output = s.output.clone();
        if !output.ends_with('\n') {
            output.push('\n');
        }
        crate::workspace::write_atomic(&path, &output).map_err(|e| io(&path, e))?;
        written.push(path);
        if !listed.contains(&name) {
            let clean = |t: &str| t.replace(['\t', '\n', '\r'], " ");
            text.push_str(&format!(
                "{name}\t{}\tlearned\t{}\t{}\t{}\n",
                clean(s.tool.as_deref().unwrap_or("unknown")),
                clean(s.check_type.as_deref().unwrap_or("command")),
                s.exit_code.unwrap_or(1),
                clean(s.command.as_deref().unwrap_or_default()),
            ));
        }
    }
    crate::workspace::write_atomic(&table, &text).map_err(|e| io(&table, e))?;
    Ok(written)
}
