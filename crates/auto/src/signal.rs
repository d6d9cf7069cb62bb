//! `.auto-signal` and `.auto-stop`: the two files the agent and the supervisor talk through.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::module::{self, ModuleError};

/// Steps a signal may name.
pub const STEPS: &[&str] = &["plan", "check", "exec", "merge", "report"];
/// Results a signal may carry (besides `(step-N)`).
pub const RESULTS: &[&str] = &[
    "PASS",
    "NEEDS_REVISION",
    "ACCEPT",
    "NEEDS_FIX",
    "REPLAN",
    "BLOCKED",
    "CONTINUE",
    "(generated)",
    "(annotations)",
    "(done)",
    "(mid-exec)",
    "(blocked)",
    "success",
    "conflict",
];
/// What may come next.
pub const NEXTS: &[&str] = &["plan", "check", "exec", "merge", "report", "(stop)"];
/// Checkpoints.
pub const CHECKPOINTS: &[&str] = &["", "post-plan", "mid-exec", "post-exec"];

/// A progress report the agent wrote after a step, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signal {
    /// The step that just completed.
    pub step: String,
    /// Its outcome.
    pub result: String,
    /// What the agent runs next, or `(stop)`.
    pub next: String,
    /// A context hint.
    pub checkpoint: String,
    /// The iteration just completed (absent when a step was run by hand).
    pub iteration: Option<u64>,
    /// When the agent wrote it (ISO 8601).
    pub timestamp: String,
}

impl Signal {
    /// True when the loop says it is over.
    pub fn is_stop(&self) -> bool {
        self.next == "(stop)"
    }
}

/// Parses and validates a signal file's text against seed 002's whitelists. Every problem is
/// reported, not only the first.
pub fn parse(text: &str) -> Result<Signal, Vec<String>> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| vec![format!("not JSON: {e}")])?;
    let Some(obj) = value.as_object() else { return Err(vec!["not a JSON object".into()]) };
    let mut problems = Vec::new();
    let mut text_field = |name: &str, allowed: &dyn Fn(&str) -> bool, shown: &str| -> String {
        match obj.get(name) {
            Some(serde_json::Value::String(s)) if allowed(s) => s.clone(),
            Some(serde_json::Value::String(s)) => {
                problems.push(format!("{name}: {s:?} is not one of {shown}"));
                s.clone()
            }
            None if name == "checkpoint" => String::new(),
            Some(other) => {
                problems.push(format!("{name}: expected a string, found {other}"));
                String::new()
            }
            None => {
                problems.push(format!("{name}: missing"));
                String::new()
            }
        }
    };
    let step = text_field("step", &|s| STEPS.contains(&s), &STEPS.join(", "));
    let result = text_field("result", &valid_result, &format!("{}, (step-N)", RESULTS.join(", ")));
    let next = text_field("next", &|s| NEXTS.contains(&s), &NEXTS.join(", "));
    let checkpoint = text_field("checkpoint", &|s| CHECKPOINTS.contains(&s), "\"\", post-plan, mid-exec, post-exec");
    let timestamp = text_field("timestamp", &|s| s.parse::<jiff::Timestamp>().is_ok(), "an ISO 8601 timestamp");
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
    if problems.is_empty() {
        Ok(Signal { step, result, next, checkpoint, iteration, timestamp })
    } else {
        Err(problems)
    }
}

fn valid_result(s: &str) -> bool {
    RESULTS.contains(&s)
        || s.strip_prefix("(step-")
            .and_then(|r| r.strip_suffix(')'))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
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
