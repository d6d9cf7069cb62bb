//! `dead-letters`: the tasks the closed loop gave up on (seed 000 "Dead Letter Format"),
//! written to `.loopwright/state/dead-letters/TASK.md` as runs go.

use loopwright_engine::closed_loop::context::DeadLetterSummary;
use serde::Serialize;

use crate::error::Error;
use crate::workspace::Workspace;

/// One dead letter in the list.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The task.
    pub task_id: String,
    /// The stage that was given up on.
    pub stage: String,
    /// The run.
    pub run_id: String,
    /// The last failure's pattern.
    pub final_pattern: String,
    /// Attempts made.
    pub total_attempts: u64,
    /// When.
    pub blocked_at: String,
    /// Why.
    pub blocked_reason: String,
    /// The failure's signature (similar failures share it).
    pub error_signature: String,
    /// Earlier dead letters with the same signature.
    pub similar_failures: u64,
}

/// One dead letter, whole.
#[derive(Debug, Clone, Serialize)]
pub struct Letter {
    /// The task.
    pub task_id: Option<String>,
    /// The failure's signature.
    pub error_signature: Option<String>,
    /// The last failure's pattern.
    pub final_pattern: Option<String>,
    /// The markdown text, with its smart suggestions.
    pub text: String,
}

/// The dead letters, newest first.
pub fn list(ws: &Workspace) -> Vec<Row> {
    let mut letters = crate::files::read_dead_letters(&ws.state_dir().join("dead-letters"));
    letters.sort_by(|a, b| b.0.blocked_at.cmp(&a.0.blocked_at));
    letters
        .into_iter()
        .map(|(s, _)| Row {
            task_id: s.task_id,
            stage: s.stage,
            run_id: s.run_id,
            final_pattern: s.final_pattern,
            total_attempts: s.total_attempts,
            blocked_at: s.blocked_at,
            blocked_reason: s.blocked_reason,
            error_signature: s.error_signature,
            similar_failures: s.similar_failures,
        })
        .collect()
}

/// One dead letter by task id (or file name).
pub fn show(ws: &Workspace, id: &str) -> Result<Letter, Error> {
    let name = if id.ends_with(".md") { id.to_owned() } else { format!("{id}.md") };
    if name.contains('/') || name.starts_with('.') || name.contains('\0') {
        return Err(Error::not_found(format!(
            "no dead letter `{id}`: its id is a task id, as `dead-letters list` shows"
        )));
    }
    let path = ws.state_dir().join("dead-letters").join(&name);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Error::not_found(format!(
            "no dead letter `{id}` ({}: {e}); `loopwright dead-letters list` shows them",
            ws.shown(&path)
        ))
    })?;
    let summary = DeadLetterSummary::parse(&text);
    Ok(Letter {
        task_id: summary.as_ref().map(|s| s.task_id.clone()),
        error_signature: summary.as_ref().map(|s| s.error_signature.clone()),
        final_pattern: summary.as_ref().map(|s| s.final_pattern.clone()),
        text,
    })
}
