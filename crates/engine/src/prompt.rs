//! The prompt an agent receives (SPEC §5): persona, task, stage, and the stage's inputs,
//! token-capped as seed 004 says (500 tokens per artifact, 1500 per stage).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use loopwright_spec::{Mode, Pipeline, Stage};

use crate::state::RunState;
pub use crate::tokens::{cap_tokens, count_tokens};

/// Tokens one artifact may take in a prompt.
pub const ARTIFACT_TOKEN_CAP: usize = 500;
/// Tokens all of a stage's inputs may take in a prompt.
pub const STAGE_TOKEN_CAP: usize = 1500;

/// One input of a stage, resolved to where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedInput {
    /// The input key.
    pub key: String,
    /// The stage that produced it, or `None` for an initial input.
    pub from: Option<String>,
    /// Its text, or `None` when it is not available (its stage was skipped, or it was not given).
    pub text: Option<String>,
}

/// Finds the text of each of a stage's inputs.
pub fn resolve_inputs(pipeline: &Pipeline, stage: &Stage, state: &RunState) -> Vec<ResolvedInput> {
    let index = pipeline.index_of(stage.id.as_str()).unwrap_or(0);
    let started = state.started.as_ref();
    stage
        .inputs
        .iter()
        .map(|key| match pipeline.producer_of(key, index) {
            Some(producer) => ResolvedInput {
                key: key.clone(),
                from: Some(producer.id.to_string()),
                text: state.outputs_of(producer.id.as_str()).and_then(|o| o.get(key)).cloned(),
            },
            None => {
                ResolvedInput { key: key.clone(), from: None, text: started.and_then(|s| s.inputs.get(key)).cloned() }
            }
        })
        .collect()
}

/// The `<retry_context>` block (seed 001) for a retry of `stage`: the closed loop's failures
/// and strategies, or a plain stage retry's earlier errors. `None` on a first attempt.
fn retry_block(stage: &Stage, state: &RunState) -> Option<String> {
    use crate::closed_loop::context::{PriorFailure, loop_failures, retry_context};
    let st = state.stage(stage.id.as_str())?;
    if let Some(lp) = st.closed.as_ref().filter(|l| !l.iterations.is_empty()) {
        let mut failures = loop_failures(lp);
        name_agents(stage, st, &mut failures);
        let budget = lp
            .iterations
            .last()
            .and_then(|i| i.failure.as_ref())
            .map_or(crate::closed_loop::DEFAULT_BUDGET, |f| crate::closed_loop::budget(stage, f));
        let max = u32::try_from(lp.base).unwrap_or(u32::MAX).saturating_add(budget).max(st.attempts);
        return Some(retry_context(st.attempts, max, lp.user_fix.as_deref(), &failures, &st.fell_back));
    }
    let failed: Vec<&crate::state::AttemptRecord> = st
        .attempt_log
        .iter()
        .filter(|a| a.status == crate::state::AttemptStatus::Failed && a.attempt > st.pass_base)
        .collect();
    if failed.is_empty() {
        return None;
    }
    let last_error = st.last_error.as_ref();
    let mut failures: Vec<PriorFailure> = failed
        .iter()
        .map(|a| {
            let is_last = failed.last().is_some_and(|l| l.attempt == a.attempt);
            PriorFailure {
                attempt: a.attempt,
                agent: None,
                failure_type: a.error.clone().unwrap_or_else(|| "execution_error".into()),
                timestamp: a.timestamp,
                summary: a.message.clone().unwrap_or_default(),
                details: if is_last {
                    last_error.map(|e| cap_tokens(e.output_tail.trim(), 200).0).unwrap_or_default()
                } else {
                    String::new()
                },
                files: Vec::new(),
                suggested_fix: None,
                context: None,
                pattern: if is_last {
                    last_error.and_then(|e| e.pattern.clone()).map(|p| (p, 1.0, None))
                } else {
                    None
                },
            }
        })
        .collect();
    name_agents(stage, st, &mut failures);
    let base = st.pass_base.max(st.agent_since);
    let max = stage.retry.as_ref().map_or(st.attempts, |r| base + r.max_attempts);
    Some(retry_context(st.attempts, max.max(st.attempts), None, &failures, &st.fell_back))
}

/// Names the agent of each earlier failure once the stage has fallen back from one agent to
/// another (before that, every attempt was its own agent's).
fn name_agents(
    stage: &Stage,
    st: &crate::state::StageState,
    failures: &mut [crate::closed_loop::context::PriorFailure],
) {
    if st.fell_back.is_empty() {
        return;
    }
    for f in failures.iter_mut() {
        let made_by = st.attempt_log.iter().find(|a| a.attempt == f.attempt).and_then(|a| a.agent.clone());
        f.agent = Some(made_by.unwrap_or_else(|| stage.agent.name().to_owned()));
    }
}

/// Builds the prompt for an attempt of `stage`.
pub fn build_prompt(pipeline: &Pipeline, stage: &Stage, state: &RunState) -> String {
    let mut p = String::new();
    let fell_back_to = state.stage(stage.id.as_str()).and_then(|s| s.agent.as_deref());
    if let Some(agent) = pipeline.agent_now(stage, fell_back_to)
        && !agent.persona.is_empty()
    {
        p.push_str(agent.persona.trim());
        p.push_str("\n\n");
    }
    if let Some(block) = retry_block(stage, state) {
        p.push_str(&block);
        p.push('\n');
    }
    let task = state.started.as_ref().map_or("", |s| s.task.as_str());
    let _ =
        writeln!(p, "# Task\n{}\n", if task.trim().is_empty() { "(no task description given)" } else { task.trim() });
    let _ = writeln!(p, "# Stage `{}` ({} mode)\n{}\n", stage.id, stage.mode, stage.description.trim());
    match stage.mode {
        Mode::Plan => p.push_str("This is a read-only stage: read and analyse, do not change any file.\n\n"),
        Mode::Agent => p.push_str("You may change files in the workspace to do this stage's work.\n\n"),
    }
    let inputs = resolve_inputs(pipeline, stage, state);
    if !inputs.is_empty() {
        p.push_str("# Inputs\n");
        // Group inputs by the artifact (stage) they come from; each artifact gets an equal
        // share of the stage cap, never more than the per-artifact cap.
        let mut artifacts: BTreeMap<Option<String>, Vec<&ResolvedInput>> = BTreeMap::new();
        for input in &inputs {
            artifacts.entry(input.from.clone()).or_default().push(input);
        }
        let share = (STAGE_TOKEN_CAP / artifacts.len().max(1)).min(ARTIFACT_TOKEN_CAP);
        for input in &inputs {
            let group = &artifacts[&input.from];
            if !std::ptr::eq(group[0], input) {
                continue;
            }
            let mut body = String::new();
            for i in group {
                let from =
                    i.from.as_deref().map_or_else(|| "initial input".to_owned(), |s| format!("from stage `{s}`"));
                let text = i
                    .text
                    .as_deref()
                    .map_or_else(|| format!("(not available: {})", unavailable_reason(i, state)), str::to_owned);
                let _ = writeln!(body, "## {} ({from})\n{}\n", i.key, text.trim());
            }
            p.push_str(&cap_tokens(body.trim_end(), share).0);
            p.push_str("\n\n");
        }
    }
    if let Some(brief) = state.stage(stage.id.as_str()).and_then(|s| s.feedback_brief.as_ref()) {
        p.push_str("# Feedback to address\n");
        p.push_str(brief.trim_end());
        p.push_str("\n\n");
    }
    if !stage.outputs.is_empty() {
        p.push_str("# Outputs\nEnd your answer with one section per output, each starting with its heading line:\n");
        for o in &stage.outputs {
            let _ = writeln!(p, "## {o}");
        }
    }
    p
}

fn unavailable_reason(input: &ResolvedInput, state: &RunState) -> String {
    match &input.from {
        Some(stage) => match state.stage(stage) {
            Some(s) if s.status == crate::state::StageStatus::Skipped => format!("stage `{stage}` was skipped"),
            _ => format!("stage `{stage}` did not run"),
        },
        None => format!("not given; pass --input {}=...", input.key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept() {
        assert_eq!(cap_tokens("hello world", 500), ("hello world".to_owned(), 2));
    }

    #[test]
    fn long_text_is_cut_in_the_middle_with_marker() {
        let text: String = (0..2000).map(|i| format!("line {i}\n")).collect();
        let (capped, count) = cap_tokens(&text, 500);
        assert!(count <= 500, "{count}");
        assert!(capped.starts_with("line 0\nline 1\n"));
        assert!(capped.trim_end().ends_with("line 1999"));
        let marker = capped.lines().find(|l| l.starts_with("[truncated - ")).expect("marker");
        let omitted: usize =
            marker.trim_start_matches("[truncated - ").trim_end_matches(" tokens omitted]").parse().expect("number");
        assert!(omitted > count_tokens(&text) - 500, "{omitted}");
    }
}
