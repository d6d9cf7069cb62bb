//! `loopwright init`: scaffold `.loopwright/`.

use std::path::Path;

use super::Global;
use crate::error::CliError;
use crate::examples::{CONFIG_TEMPLATE, PATTERNS_TEMPLATE, PIPELINES, SEED_AGENTS};
use crate::workspace::Workspace;

/// Arguments of `init`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The example pipeline to start from: example, bug-fix or full-feature.
    #[arg(long, default_value = "example", value_parser = ["example", "bug-fix", "full-feature"])]
    pub example: String,
}

/// Writes `path` unless it exists; says which.
fn write_new(root: &Path, rel: &str, contents: &str, quiet: bool) -> Result<bool, CliError> {
    let path = root.join(rel);
    if path.exists() {
        if !quiet {
            eprintln!("  kept     {rel} (exists)");
        }
        return Ok(false);
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| CliError::usage(format!("cannot create {}: {e}", parent.display())))?;
    }
    std::fs::write(&path, contents).map_err(|e| CliError::usage(format!("cannot write {}: {e}", path.display())))?;
    if !quiet {
        eprintln!("  created  {rel}");
    }
    Ok(true)
}

/// Adds `.loopwright/state/` to the workspace's `.gitignore` unless it is there.
fn ignore_state(root: &Path) -> Result<(), CliError> {
    let path = root.join(".gitignore");
    let existing = std::fs::read_to_string(&path).unwrap_or_default();
    if existing.lines().any(|l| matches!(l.trim(), ".loopwright/state/" | ".loopwright/state" | "/.loopwright/state/"))
    {
        return Ok(());
    }
    let mut text = existing;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str("# loopwright's journal and run files\n.loopwright/state/\n");
    std::fs::write(&path, text).map_err(|e| CliError::usage(format!("cannot write {}: {e}", path.display())))?;
    eprintln!("  updated  .gitignore (ignores .loopwright/state/)");
    Ok(())
}

/// `loopwright init`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let root = match &global.dir {
        Some(d) => d.clone(),
        None => {
            std::env::current_dir().map_err(|e| CliError::usage(format!("cannot read the current directory: {e}")))?
        }
    };
    std::fs::create_dir_all(&root).map_err(|e| CliError::usage(format!("cannot create {}: {e}", root.display())))?;
    let (_, pipeline) = PIPELINES.iter().find(|(n, _)| *n == args.example).copied().unwrap_or(PIPELINES[0]);
    eprintln!("loopwright: initialising {}", root.display());
    write_new(&root, ".loopwright/config.toml", CONFIG_TEMPLATE, false)?;
    write_new(&root, ".loopwright/failure-patterns.yml", PATTERNS_TEMPLATE, false)?;
    write_new(&root, &format!(".loopwright/pipelines/{}.yml", args.example), pipeline, false)?;
    for (rel, text) in SEED_AGENTS {
        write_new(&root, rel, text, false)?;
    }
    ignore_state(&root)?;
    let ws = Workspace::locate(Some(&root))?;
    // The scaffold must be valid as written.
    let path = ws.find_pipeline(&args.example)?;
    ws.load_pipeline(&path, &[])?;
    eprintln!(
        "\nNext: `loopwright validate`, then `loopwright run {} --task \"...\"`.\n\
         The agents are scripted stand-ins (.loopwright/agents/*.md): set `runner: claude` (or codex, gemini, …) to use a real one.",
        args.example
    );
    Ok(0)
}
