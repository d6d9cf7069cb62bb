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
    /// The failure's line (the check's words).
    pub error_line: String,
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
            error_line: s.error_line,
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

/// Dead letters that failed the same way: one error signature and pattern.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// What they share (`pattern:extension:error`).
    pub error_signature: String,
    /// Their last failure's pattern.
    pub final_pattern: String,
    /// How many.
    pub count: u64,
    /// What the newest says: its failure's line, else why the loop gave up.
    pub headline: String,
    /// When the newest was written.
    pub newest: String,
    /// The newest's task.
    pub newest_task: String,
}

/// `rows` (newest first, as [`list`] gives them) grouped by signature and pattern: the
/// largest group first, then the one with the newest letter.
pub fn groups(rows: &[Row]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut at: std::collections::HashMap<(&str, &str), usize> = std::collections::HashMap::new();
    for row in rows {
        let key = (row.error_signature.as_str(), row.final_pattern.as_str());
        match at.get(&key) {
            Some(&i) => groups[i].count += 1,
            None => {
                at.insert(key, groups.len());
                groups.push(Group {
                    error_signature: row.error_signature.clone(),
                    final_pattern: row.final_pattern.clone(),
                    count: 1,
                    headline: if row.error_line.trim().is_empty() {
                        row.blocked_reason.clone()
                    } else {
                        row.error_line.trim().to_owned()
                    },
                    newest: row.blocked_at.clone(),
                    newest_task: row.task_id.clone(),
                });
            }
        }
    }
    // Stable: among groups of one size, the order of their newest letters stays.
    groups.sort_by_key(|g| std::cmp::Reverse(g.count));
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(task: &str, signature: &str, pattern: &str, at: &str, line: &str) -> Row {
        Row {
            task_id: task.into(),
            stage: "implement".into(),
            run_id: "20261130-040000-0001".into(),
            final_pattern: pattern.into(),
            total_attempts: 3,
            blocked_at: at.into(),
            blocked_reason: "retry_budget_exhausted".into(),
            error_signature: signature.into(),
            error_line: line.into(),
            similar_failures: 0,
        }
    }

    #[test]
    fn letters_are_grouped_by_signature_and_pattern_largest_first() {
        let rows = [
            row("t5", "coverage:py:floor", "coverage_gate", "2026-11-30T05:00:00Z", "total 50% is under 80%"),
            row("t4", "lint:py:E501", "lint_error", "2026-11-30T04:00:00Z", "line too long"),
            row("t3", "coverage:py:floor", "coverage_gate", "2026-11-30T03:00:00Z", "total 40% is under 80%"),
            row("t2", "coverage:py:floor", "test_failure", "2026-11-30T02:00:00Z", "a test failed"),
            row("t1", "coverage:py:floor", "coverage_gate", "2026-11-30T01:00:00Z", "total 30% is under 80%"),
        ];
        let group = |sig: &str, pattern: &str, count, headline: &str, newest: &str, task: &str| Group {
            error_signature: sig.into(),
            final_pattern: pattern.into(),
            count,
            headline: headline.into(),
            newest: newest.into(),
            newest_task: task.into(),
        };
        assert_eq!(
            groups(&rows),
            vec![
                group("coverage:py:floor", "coverage_gate", 3, "total 50% is under 80%", "2026-11-30T05:00:00Z", "t5"),
                group("lint:py:E501", "lint_error", 1, "line too long", "2026-11-30T04:00:00Z", "t4"),
                group("coverage:py:floor", "test_failure", 1, "a test failed", "2026-11-30T02:00:00Z", "t2"),
            ]
        );
    }
}
