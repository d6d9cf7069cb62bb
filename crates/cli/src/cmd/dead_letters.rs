//! `loopwright dead-letters [list|show ID]`: the tasks the closed loop gave up on (seed 000
//! "Dead Letter Format"), written to `.loopwright/state/dead-letters/TASK.md`.

use loopwright_engine::closed_loop::context::DeadLetterSummary;

use super::Global;
use crate::error::CliError;
use crate::workspace::Workspace;

/// Arguments of `dead-letters`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// `dead-letters` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List the dead letters, newest first (the default).
    List,
    /// Print one dead letter: its task id (or file name).
    Show {
        /// The task id.
        id: String,
    },
}

/// `loopwright dead-letters`.
pub fn run(global: &Global, args: Args) -> Result<u8, CliError> {
    let ws = Workspace::locate(global.dir.as_deref())?;
    let dir = ws.state_dir().join("dead-letters");
    match args.command.unwrap_or(Command::List) {
        Command::List => {
            let mut letters = read_all(&dir);
            letters.sort_by(|a, b| b.0.blocked_at.cmp(&a.0.blocked_at));
            if global.json {
                let list: Vec<serde_json::Value> = letters
                    .iter()
                    .map(|(s, _)| {
                        serde_json::json!({
                            "task_id": s.task_id,
                            "stage": s.stage,
                            "run_id": s.run_id,
                            "final_pattern": s.final_pattern,
                            "total_attempts": s.total_attempts,
                            "blocked_at": s.blocked_at,
                            "blocked_reason": s.blocked_reason,
                            "error_signature": s.error_signature,
                            "similar_failures": s.similar_failures,
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list).map_err(|e| CliError::Internal(e.into()))?);
                return Ok(0);
            }
            if letters.is_empty() {
                println!("no dead letters in {}", ws.shown(&dir));
                return Ok(0);
            }
            println!(
                "{:<40} {:<14} {:<20} {:>8}  {:<20}  similar",
                "task", "stage", "final pattern", "attempts", "blocked at"
            );
            for (s, _) in &letters {
                println!(
                    "{:<40} {:<14} {:<20} {:>8}  {:<20}  {}",
                    s.task_id,
                    s.stage,
                    s.final_pattern,
                    s.total_attempts,
                    s.blocked_at.get(..19).unwrap_or(&s.blocked_at),
                    s.similar_failures
                );
            }
            Ok(0)
        }
        Command::Show { id } => {
            let name = if id.ends_with(".md") { id.clone() } else { format!("{id}.md") };
            if name.contains('/') {
                return Err(CliError::usage(format!(
                    "`{id}` is not a dead letter id (a task id, as `dead-letters list` shows)"
                )));
            }
            let path = dir.join(&name);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                CliError::usage(format!(
                    "no dead letter `{id}` ({}: {e}); `loopwright dead-letters list` shows them",
                    ws.shown(&path)
                ))
            })?;
            if global.json {
                let summary = DeadLetterSummary::parse(&text);
                let value = serde_json::json!({
                    "task_id": summary.as_ref().map(|s| s.task_id.clone()),
                    "error_signature": summary.as_ref().map(|s| s.error_signature.clone()),
                    "final_pattern": summary.as_ref().map(|s| s.final_pattern.clone()),
                    "text": text,
                });
                println!("{}", serde_json::to_string_pretty(&value).map_err(|e| CliError::Internal(e.into()))?);
            } else {
                print!("{text}");
            }
            Ok(0)
        }
    }
}

/// Every dead letter in `dir` (not the candidate patterns), read, with its text.
pub fn read_all(dir: &std::path::Path) -> Vec<(DeadLetterSummary, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(".md") && !name.starts_with("candidate-pattern-")
        })
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|t| DeadLetterSummary::parse(&t).map(|s| (s, t)))
        .collect()
}
