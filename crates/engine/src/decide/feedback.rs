//! A review stage's feedback loop (seed 004): its items read from the stage's output, and
//! whether the stage it reviews runs again.

use loopwright_spec::{Pipeline, Stage};

use super::Step;
use crate::event::{Answer, Event, FeedbackAction};
use crate::state::RunState;

/// One item of a review's `feedback_items` (seed 004).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(default)]
pub struct FeedbackItem {
    /// `blocking`, `advisory` or `informational`.
    pub severity: String,
    /// The file concerned.
    pub file: Option<String>,
    /// The line concerned.
    pub line: Option<u64>,
    /// What is wrong.
    pub description: String,
    /// How to fix it.
    pub suggested_fix: Option<String>,
    /// Who said so.
    pub source_agent: Option<String>,
    /// The quality gate, if any.
    pub gate_id: Option<String>,
}

/// Reads `feedback_items` from a stage output: a fenced ```yaml / ```json block, or the text
/// itself as YAML. Text that is not a list of items gives no items.
pub fn parse_feedback_items(text: &str) -> Vec<FeedbackItem> {
    let body = loopwright_spec::outputs::fenced_block(text).unwrap_or(text);
    serde_saphyr::from_str::<Vec<FeedbackItem>>(body).unwrap_or_default()
}

/// After a review stage with a `feedback_loop` succeeded: loop, escalate or go on.
pub(super) fn feedback_step(pipeline: &Pipeline, state: &RunState, stage: &Stage) -> Option<Step> {
    let st = state.stage(stage.id.as_str())?;
    let feedback = stage.feedback_loop.as_ref()?;
    let iteration = st.feedback_iterations;
    let check = |items: usize, blocking: usize, iteration: u32, action: FeedbackAction| {
        Some(Step::Record(Event::FeedbackChecked { stage: stage.id.clone(), items, blocking, iteration, action }))
    };
    let items = parse_feedback_items(st.outputs.get("feedback_items").map_or("", String::as_str));
    let blocking: Vec<&FeedbackItem> = items.iter().filter(|i| i.severity == "blocking").collect();
    let re_implement = |extra: Option<&str>| {
        let target = pipeline.index_of(feedback.target_stage.as_str()).unwrap_or(0);
        let source = pipeline.index_of(stage.id.as_str()).unwrap_or(target);
        let reset = pipeline.stages[target..=source].iter().map(|s| s.id.clone()).collect();
        let mut brief = format!(
            "Review `{}` found {} blocking item{} (feedback iteration {} of {}). Fix them:\n",
            stage.id,
            blocking.len(),
            if blocking.len() == 1 { "" } else { "s" },
            iteration + 1,
            feedback.max_iterations
        );
        for item in &blocking {
            let place = match (&item.file, item.line) {
                (Some(f), Some(l)) => format!("{f}:{l}: "),
                (Some(f), None) => format!("{f}: "),
                _ => String::new(),
            };
            brief.push_str(&format!("- {place}{}", item.description.trim()));
            if let Some(fix) = &item.suggested_fix {
                brief.push_str(&format!(" (suggested fix: {})", fix.trim()));
            }
            brief.push('\n');
        }
        if let Some(text) = extra {
            brief.push_str(&format!("Instruction from a human (high priority): {text}\n"));
        }
        FeedbackAction::ReImplement { target: feedback.target_stage.clone(), reset, brief }
    };
    match (&st.feedback, &st.escalation_answer) {
        (None, _) if blocking.is_empty() => check(items.len(), 0, iteration, FeedbackAction::Continue),
        (None, _) if iteration < feedback.max_iterations => {
            check(items.len(), blocking.len(), iteration + 1, re_implement(None))
        }
        (None, _) => check(items.len(), blocking.len(), iteration, FeedbackAction::Escalate),
        (Some(FeedbackAction::Escalate), Some(Answer::Retry)) => {
            check(items.len(), blocking.len(), iteration + 1, re_implement(None))
        }
        (Some(FeedbackAction::Escalate), Some(Answer::Fix { text })) => {
            check(items.len(), blocking.len(), iteration + 1, re_implement(Some(text)))
        }
        (Some(FeedbackAction::Escalate), Some(Answer::Skip)) => {
            check(items.len(), blocking.len(), iteration, FeedbackAction::Accepted)
        }
        _ => None,
    }
}
