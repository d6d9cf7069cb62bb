//! `loopwright validate`: check pipelines and agent files, reporting every problem.

use loopwright_spec::Diagnostics;
use serde_json::json;

use super::Global;
use crate::error::CliError;
use crate::render;
use crate::workspace::Workspace;

/// Arguments of `validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Pipelines to check (names or paths); all pipelines of the workspace when none are given.
    pub pipelines: Vec<String>,
}

/// `loopwright validate`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = Workspace::locate(global.dir.as_deref())?;
    let paths = if args.pipelines.is_empty() {
        let all = ws.pipeline_files();
        if all.is_empty() {
            return Err(CliError::usage(format!(
                "no pipelines in {} (looked in .loopwright/pipelines/ and configurations/pipelines/); run `loopwright init`",
                ws.root.display()
            )));
        }
        all
    } else {
        args.pipelines.iter().map(|p| ws.find_pipeline(p)).collect::<Result<Vec<_>, _>>()?
    };
    let (_, mut all_diags) = ws.agents();
    let mut checked = Vec::new();
    for path in &paths {
        match ws.load_pipeline(path, &[]) {
            Ok(p) => {
                checked.push(json!({"file": ws.shown(path), "name": p.name, "stages": p.stages.len(), "valid": true}))
            }
            Err(CliError::Invalid(diags)) => {
                checked.push(json!({"file": ws.shown(path), "valid": false}));
                // Agent-file problems are reported once, below.
                let own: Vec<_> = diags.items.iter().filter(|d| d.file == ws.shown(path)).cloned().collect();
                let mut d = Diagnostics { items: own, sources: diags.sources.clone() };
                d.sort();
                all_diags.extend(d);
            }
            Err(e) => return Err(e),
        }
    }
    let valid = all_diags.is_empty();
    if global.json {
        let out = json!({"valid": valid, "pipelines": checked, "diagnostics": all_diags.items});
        println!("{}", serde_json::to_string_pretty(&out).map_err(|e| CliError::Internal(e.into()))?);
    } else {
        for c in &checked {
            if c["valid"] == true {
                println!(
                    "✓ {}: pipeline `{}`, {} stages",
                    c["file"].as_str().unwrap_or(""),
                    c["name"].as_str().unwrap_or(""),
                    c["stages"]
                );
            }
        }
        if !valid {
            eprint!("{}", render::diagnostics(&all_diags, render::stderr_color()));
        }
    }
    Ok(if valid { 0 } else { 2 })
}
