//! `loopwright validate`: check pipelines and agent files, reporting every problem.

use serde_json::json;

use super::Global;
use crate::error::CliError;
use crate::render;

/// Arguments of `validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Pipelines to check (names or paths); all pipelines of the workspace when none are given.
    pub pipelines: Vec<String>,
}

/// `loopwright validate`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = global.workspace()?;
    let report = loopwright_app::ops::validate::validate(&ws, &args.pipelines)?;
    let valid = report.valid();
    if global.json {
        let checked: Vec<serde_json::Value> = report
            .pipelines
            .iter()
            .map(|c| {
                if c.valid {
                    json!({"file": c.file, "name": c.name, "stages": c.stages.len(), "valid": true})
                } else {
                    json!({"file": c.file, "valid": false})
                }
            })
            .collect();
        let out = json!({"valid": valid, "pipelines": checked, "diagnostics": report.diagnostics.items});
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for c in report.pipelines.iter().filter(|c| c.valid) {
            println!("✓ {}: pipeline `{}`, {} stages", c.file, c.name, c.stages.len());
        }
        if !valid {
            eprint!("{}", render::diagnostics(&report.diagnostics, render::stderr_color()));
        }
    }
    Ok(if valid { 0 } else { 2 })
}
