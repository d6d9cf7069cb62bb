//! Fallback (SPEC §16): an attempt that failed in a way its agent cannot fix is given to the
//! stage's next agent, which starts with a retry budget of its own.

use loopwright_spec::{Pipeline, Stage};

use super::Step;
use crate::event::{Event, Unfixable};
use crate::state::StageState;

/// The fallback to record after attempt `attempt` of `stage` failed for `reason`, if the
/// failure is one its agent cannot fix and the stage has an agent after it.
pub(super) fn fall_back(
    pipeline: &Pipeline,
    stage: &Stage,
    st: &StageState,
    reason: Option<Unfixable>,
    attempt: u32,
) -> Option<Step> {
    let reason = reason?;
    let current = st.agent.as_deref();
    let to = pipeline.next_fallback(stage, current)?;
    let from = current.unwrap_or(stage.agent.name()).to_owned();
    Some(Step::Record(Event::AgentFellBack { stage: stage.id.clone(), attempt, from, to: to.to_owned(), reason }))
}
