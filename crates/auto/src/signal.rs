//! `.auto-signal` and `.auto-stop`: the two files the agent and the supervisor talk through.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::module::{self, ModuleError};

/// An enum of the words an agent writes in `.auto-signal`, each spelt as seed 002 spells it,
/// read and written as that word.
macro_rules! words {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $word:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// Every word, as seed 002 lists them.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The value spelt `s`.
            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }

            /// As the agent writes it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }

            /// Every word, for a message that lists them.
            fn listed() -> String {
                Self::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let word = String::deserialize(deserializer)?;
                Self::parse(&word).ok_or_else(|| {
                    serde::de::Error::custom(format!("{word:?} is not one of {}", Self::listed()))
                })
            }
        }
    };
}

words! {
    /// A step of the loop a signal names.
    Step {
        /// Plan the work.
        Plan = "plan",
        /// Check the plan or the work.
        Check = "check",
        /// Carry the plan out.
        Exec = "exec",
        /// Merge the work.
        Merge = "merge",
        /// Report on it.
        Report = "report",
    }
}

words! {
    /// What a signal says runs next: a step, or the end of the loop.
    Next {
        /// Plan.
        Plan = "plan",
        /// Check.
        Check = "check",
        /// Execute.
        Exec = "exec",
        /// Merge.
        Merge = "merge",
        /// Report.
        Report = "report",
        /// The loop is over.
        Stop = "(stop)",
    }
}

words! {
    /// Where in the loop a check runs.
    Checkpoint {
        /// Nowhere in particular.
        None = "",
        /// After planning.
        PostPlan = "post-plan",
        /// In the middle of executing.
        MidExec = "mid-exec",
        /// After executing.
        PostExec = "post-exec",
    }
}

words! {
    /// A step's outcome, as a word.
    Word {
        /// A check passed.
        Pass = "PASS",
        /// The plan needs revising.
        NeedsRevision = "NEEDS_REVISION",
        /// The work is accepted.
        Accept = "ACCEPT",
        /// The work needs fixing.
        NeedsFix = "NEEDS_FIX",
        /// Plan again.
        Replan = "REPLAN",
        /// A check found the loop blocked.
        Blocked = "BLOCKED",
        /// Go on executing.
        Continue = "CONTINUE",
        /// A plan was written.
        Generated = "(generated)",
        /// Annotations were written.
        Annotations = "(annotations)",
        /// The step is done.
        Done = "(done)",
        /// Execution paused for a check.
        MidExec = "(mid-exec)",
        /// Execution is blocked.
        BlockedExec = "(blocked)",
        /// The merge succeeded.
        Success = "success",
        /// The merge conflicted.
        Conflict = "conflict",
    }
}

/// A step's outcome: a word, or `(step-N)` (the step of a plan just carried out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// One of seed 002's words.
    Said(Word),
    /// `(step-N)`.
    PlanStep(u64),
}

impl Outcome {
    /// The outcome spelt `s`.
    pub fn parse(s: &str) -> Option<Self> {
        let step = s.strip_prefix("(step-").and_then(|r| r.strip_suffix(')'));
        match step {
            Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => n.parse().ok().map(Self::PlanStep),
            _ => Word::parse(s).map(Self::Said),
        }
    }

    /// True when the loop cannot go on without a person (`BLOCKED`, `(blocked)`, `conflict`).
    pub fn is_blocked(self) -> bool {
        matches!(self, Self::Said(Word::Blocked | Word::BlockedExec | Word::Conflict))
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Said(word) => f.pad(word.as_str()),
            Self::PlanStep(n) => f.pad(&format!("(step-{n})")),
        }
    }
}

impl Serialize for Outcome {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Outcome {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let word = String::deserialize(deserializer)?;
        Self::parse(&word).ok_or_else(|| serde::de::Error::custom(format!("{word:?} is not a step's outcome")))
    }
}

/// A progress report the agent wrote after a step, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signal {
    /// The step that just completed.
    pub step: Step,
    /// Its outcome.
    pub result: Outcome,
    /// What the agent runs next, or `(stop)`.
    pub next: Next,
    /// A context hint.
    #[serde(default = "no_checkpoint")]
    pub checkpoint: Checkpoint,
    /// The iteration just completed (absent when a step was run by hand).
    pub iteration: Option<u64>,
    /// When the agent wrote it (ISO 8601).
    pub timestamp: String,
}

fn no_checkpoint() -> Checkpoint {
    Checkpoint::None
}

impl Signal {
    /// True when the loop says it is over.
    pub fn is_stop(&self) -> bool {
        self.next == Next::Stop
    }
}

/// Where the loop goes after `step` ended with `result` (seed 002's result-based routing):
/// `(next, checkpoint)`, or `None` when the table has no row for the pair. `checkpoint` is
/// the checkpoint the finished check ran at (`mid-exec` selects the mid-execution rows).
pub fn route(step: Step, result: Outcome, checkpoint: Checkpoint) -> Option<(Next, Checkpoint)> {
    use Checkpoint as C;
    let said = match result {
        Outcome::Said(word) => Some(word),
        Outcome::PlanStep(_) => None,
    };
    Some(match (step, said) {
        (Step::Plan, _) => (Next::Check, C::PostPlan),
        (Step::Check, Some(Word::Pass)) => (Next::Exec, C::None),
        (Step::Check, Some(Word::NeedsRevision)) => (Next::Plan, C::None),
        (Step::Check, Some(Word::Accept)) => (Next::Merge, C::None),
        (Step::Check, Some(Word::NeedsFix)) if checkpoint == C::MidExec => (Next::Exec, C::MidExec),
        (Step::Check, Some(Word::NeedsFix)) => (Next::Exec, C::PostExec),
        (Step::Check, Some(Word::Replan)) => (Next::Plan, C::None),
        (Step::Check, Some(Word::Blocked)) => (Next::Stop, C::None),
        (Step::Check, Some(Word::Continue)) if checkpoint == C::MidExec => (Next::Exec, C::None),
        (Step::Exec, Some(Word::Done)) => (Next::Check, C::PostExec),
        (Step::Exec, Some(Word::MidExec)) => (Next::Check, C::MidExec),
        (Step::Exec, Some(Word::BlockedExec)) => (Next::Stop, C::None),
        (Step::Merge, Some(Word::Success)) => (Next::Report, C::None),
        (Step::Merge, Some(Word::Conflict)) => (Next::Stop, C::None),
        (Step::Report, _) => (Next::Stop, C::None),
        _ => return None,
    })
}

/// Parses and validates a signal file's text against seed 002's whitelists. Every problem is
/// reported, not only the first.
pub fn parse(text: &str) -> Result<Signal, Vec<String>> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| vec![format!("not JSON: {e}")])?;
    let Some(obj) = value.as_object() else { return Err(vec!["not a JSON object".into()]) };
    let mut problems = Vec::new();
    let mut text_field = |name: &str, shown: &str, read: &dyn Fn(&str) -> bool| -> Option<String> {
        match obj.get(name) {
            Some(serde_json::Value::String(s)) if read(s) => Some(s.clone()),
            Some(serde_json::Value::String(s)) => {
                problems.push(format!("{name}: {s:?} is not one of {shown}"));
                None
            }
            None if name == "checkpoint" => Some(String::new()),
            Some(other) => {
                problems.push(format!("{name}: expected a string, found {other}"));
                None
            }
            None => {
                problems.push(format!("{name}: missing"));
                None
            }
        }
    };
    let step = text_field("step", &Step::listed(), &|s| Step::parse(s).is_some()).and_then(|s| Step::parse(&s));
    let result = text_field("result", &format!("{}, (step-N)", Word::listed()), &|s| Outcome::parse(s).is_some())
        .and_then(|s| Outcome::parse(&s));
    let next = text_field("next", &Next::listed(), &|s| Next::parse(s).is_some()).and_then(|s| Next::parse(&s));
    let checkpoint =
        text_field("checkpoint", "\"\", post-plan, mid-exec, post-exec", &|s| Checkpoint::parse(s).is_some())
            .and_then(|s| Checkpoint::parse(&s));
    let timestamp =
        text_field("timestamp", "an ISO 8601 timestamp", &|s| s.parse::<jiff::Timestamp>().is_ok()).unwrap_or_default();
    let iteration = match obj.get("iteration") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) => Some(n),
            None => {
                problems.push(format!("iteration: expected an integer ≥ 0, found {v}"));
                None
            }
        },
    };
    match (step, result, next, checkpoint) {
        (Some(step), Some(result), Some(next), Some(checkpoint)) if problems.is_empty() => {
            Ok(Signal { step, result, next, checkpoint, iteration, timestamp })
        }
        _ => Err(problems),
    }
}

/// Why the supervisor asks the loop to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The wall-clock limit (quota waits excluded) passed.
    Timeout,
    /// The loop reached `maxIterations`.
    MaxIterations,
    /// A person asked.
    UserStop,
    /// Recovery or restart limits were exhausted.
    StallLimit,
}

impl StopReason {
    /// The reason spelt `s`.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Timeout, Self::MaxIterations, Self::UserStop, Self::StallLimit].into_iter().find(|r| r.as_str() == s)
    }

    /// The reason as `.auto-stop` and the status object spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::MaxIterations => "max_iterations",
            Self::UserStop => "user_stop",
            Self::StallLimit => "stall_limit",
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Writes `.auto-stop` with `reason`, saying who asked (the supervisor journals it when it
/// reads the file).
pub fn request_stop(dir: &Path, reason: StopReason, now: jiff::Timestamp, by: &str) -> Result<(), ModuleError> {
    let body = serde_json::json!({ "reason": reason.as_str(), "timestamp": now.to_string(), "by": by });
    module::write(&dir.join(module::STOP), &format!("{body}\n"))
}

/// Removes a transient file if it is there.
pub fn remove(dir: &Path, name: &str) {
    let _ = std::fs::remove_file(dir.join(name));
}
