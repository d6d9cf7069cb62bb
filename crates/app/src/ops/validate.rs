//! `validate` and the daemon's pipeline list: every pipeline and agent file, and the project's
//! `failure-patterns.yml`, checked, every problem reported.

use std::path::PathBuf;

use loopwright_spec::{Diagnostic, Diagnostics};
use serde::Serialize;

use crate::error::Error;
use crate::workspace::Workspace;

/// One pipeline file, checked.
#[derive(Debug, Clone, Serialize)]
pub struct Checked {
    /// The file, relative to the workspace.
    pub file: String,
    /// The pipeline's name (the file's stem when it does not compile).
    pub name: String,
    /// Its description.
    pub description: String,
    /// Its stage ids, in order (empty when it does not compile).
    pub stages: Vec<String>,
    /// True when it compiles.
    pub valid: bool,
    /// Its own problems (agent-file problems are reported once, in [`Report::diagnostics`]).
    pub diagnostics: Vec<Diagnostic>,
}

/// What `validate` found.
#[derive(Debug)]
pub struct Report {
    /// Each pipeline checked.
    pub pipelines: Vec<Checked>,
    /// Every problem: the pipelines', then the agent files', then the pattern file's.
    pub diagnostics: Diagnostics,
}

impl Report {
    /// True when nothing is wrong.
    pub fn valid(&self) -> bool {
        self.diagnostics.is_empty()
    }
}

/// Checks the named pipelines (names or paths), or all of the workspace's when `names` is
/// empty, the agent files and `failure-patterns.yml`.
pub fn validate(ws: &Workspace, names: &[String]) -> Result<Report, Error> {
    let paths: Vec<PathBuf> = if names.is_empty() {
        let all = ws.pipeline_files();
        if all.is_empty() {
            return Err(Error::usage(format!(
                "no pipelines in {} (looked in .loopwright/pipelines/ and configurations/pipelines/); run `loopwright init`",
                ws.root.display()
            )));
        }
        all
    } else {
        names.iter().map(|p| ws.find_pipeline(p)).collect::<Result<Vec<_>, _>>()?
    };
    let mut report = check(ws, &paths)?;
    report.diagnostics.extend(crate::assemble::library_problems(ws)?);
    Ok(report)
}

/// Every pipeline of the workspace, checked (none is no error).
pub fn pipelines(ws: &Workspace) -> Result<Vec<Checked>, Error> {
    Ok(check(ws, &ws.pipeline_files())?.pipelines)
}

fn check(ws: &Workspace, paths: &[PathBuf]) -> Result<Report, Error> {
    let (_, mut all) = ws.agents();
    let mut checked = Vec::new();
    for path in paths {
        let file = ws.shown(path);
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        match ws.load_pipeline(path, &[]) {
            Ok(p) => checked.push(Checked {
                file,
                name: p.name.clone(),
                description: p.description.clone(),
                stages: p.stages.iter().map(|s| s.id.to_string()).collect(),
                valid: true,
                diagnostics: Vec::new(),
            }),
            Err(Error::Invalid(diags)) => {
                // Agent-file problems are reported once, below.
                let own: Vec<_> = diags.items.iter().filter(|d| d.file == file).cloned().collect();
                let mut d = Diagnostics { items: own, sources: diags.sources.clone() };
                d.sort();
                checked.push(Checked {
                    file,
                    name: stem,
                    description: String::new(),
                    stages: Vec::new(),
                    valid: false,
                    diagnostics: d.items.clone(),
                });
                all.extend(d);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Report { pipelines: checked, diagnostics: all })
}
