//! The ids of a run's trace (SPEC §15 "Traces"): its trace id is journaled when the run starts
//! (`run_started.trace_id`; a run started without one has a trace id derived from its run id),
//! and every span's id is derived from the trace id and the span's place in the run — so any
//! process that takes the run up (a resume, a worker after a takeover) continues the same
//! trace, under the same parents, and an agent process given `TRACEPARENT` joins its attempt.

use crate::hash::fnv1a;

/// The trace id of a run: the one its start journaled, else one derived from its id (32 hex).
pub fn trace_id(journaled: Option<&str>, run_id: &str) -> String {
    if let Some(id) = journaled.filter(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())) {
        return id.to_ascii_lowercase();
    }
    let (a, b) = (fnv1a(format!("trace/{run_id}/a").as_bytes()), fnv1a(format!("trace/{run_id}/b").as_bytes()));
    format!("{a:016x}{b:016x}")
}

/// Where a span is in a run: what its id is derived from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Place {
    /// The run (the trace's root).
    Run,
    /// A stage.
    Stage(String),
    /// An attempt of a stage.
    Attempt(String, u32),
    /// The agent's invocation in an attempt.
    Agent(String, u32),
    /// Check `index` (from 0) of an attempt's evaluation.
    Check(String, u32, usize),
    /// The fix strategy run after an attempt's failure.
    Fix(String, u32),
    /// A wait for a person at a stage (its journal position when it began).
    WaitPerson(String, u64),
    /// An attempt's wait for its provider.
    WaitProvider(String, u32),
}

impl Place {
    fn path(&self) -> String {
        match self {
            Place::Run => "run".to_owned(),
            Place::Stage(s) => format!("stage/{s}"),
            Place::Attempt(s, a) => format!("attempt/{s}/{a}"),
            Place::Agent(s, a) => format!("agent/{s}/{a}"),
            Place::Check(s, a, i) => format!("check/{s}/{a}/{i}"),
            Place::Fix(s, a) => format!("fix/{s}/{a}"),
            Place::WaitPerson(s, seq) => format!("wait-person/{s}/{seq}"),
            Place::WaitProvider(s, a) => format!("wait-provider/{s}/{a}"),
        }
    }

    /// The span's id in the trace `trace_id` (never zero).
    pub fn span_id(&self, trace_id: &str) -> u64 {
        fnv1a(format!("{trace_id}/{}", self.path()).as_bytes()).max(1)
    }
}

/// The W3C `traceparent` of the span at `place` (sampled).
pub fn traceparent(trace_id: &str, place: &Place) -> String {
    format!("00-{trace_id}-{:016x}-01", place.span_id(trace_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_the_journaled_trace_and_stable_places_under_it() {
        let journaled = "4bf92f3577b34da6a3ce929d0e0e4736";
        assert_eq!(trace_id(Some(journaled), "r"), journaled);
        // Without one (or a malformed one), every process derives the same from the run id.
        assert_eq!(trace_id(None, "20261130-000000-abcdef"), trace_id(Some("nonsense"), "20261130-000000-abcdef"));
        assert_eq!(trace_id(None, "20261130-000000-abcdef").len(), 32);
        let attempt = Place::Attempt("build".into(), 2);
        assert_eq!(attempt.span_id(journaled), Place::Attempt("build".into(), 2).span_id(journaled));
        assert_ne!(attempt.span_id(journaled), Place::Attempt("build".into(), 1).span_id(journaled));
        let parent = traceparent(journaled, &Place::Agent("build".into(), 2));
        assert!(parent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && parent.ends_with("-01"), "{parent}");
        assert_eq!(parent.len(), 55);
    }
}
