//! What the closed loop tells agents and humans: the `<retry_context>` block of seed 001, the
//! escalation message of seed 001, and the dead letter of seed 000.

use std::fmt::Write as _;

use super::{Failure, LoopState, Strategy};
use crate::tokens::cap_tokens;

pub use super::dead_letter::{DeadLetter, DeadLetterSummary, error_signature, suggested_steps};

/// Token cap of one failure's details (seed 000: previous error context < 200 tokens).
pub const DETAIL_TOKENS: usize = 200;
/// Token cap of an unclassified failure's last lines (SPEC §6: the last 40 lines).
pub const UNCLASSIFIED_TOKENS: usize = 1000;
/// Failures shown in a retry context, most recent last.
pub const MAX_FAILURES_SHOWN: usize = 5;

/// One earlier failure, as a retry context shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct PriorFailure {
    /// Its attempt.
    pub attempt: u32,
    /// The agent that made it, named when the stage has fallen back from one agent to another.
    pub agent: Option<String>,
    /// Seed 001 failure type.
    pub failure_type: String,
    /// When.
    pub timestamp: jiff::Timestamp,
    /// One line.
    pub summary: String,
    /// The decisive lines.
    pub details: String,
    /// Files the attempt changed.
    pub files: Vec<String>,
    /// What the strategy did or suggests.
    pub suggested_fix: Option<String>,
    /// The strategy's findings (code around the error, dependency report).
    pub context: Option<(Strategy, String)>,
    /// Pattern and strategy, for the learnings.
    pub pattern: Option<(String, f64, Option<Strategy>)>,
}

/// The earlier failures of a closed loop.
pub fn loop_failures(state: &LoopState) -> Vec<PriorFailure> {
    state
        .iterations
        .iter()
        .filter_map(|it| {
            let f = it.failure.as_ref()?;
            Some(PriorFailure {
                attempt: it.attempt,
                agent: None,
                failure_type: f.failure_type.as_str().to_owned(),
                timestamp: it.at,
                summary: f.summary.clone(),
                details: details(f),
                files: it.files.described(),
                suggested_fix: it
                    .fix
                    .as_ref()
                    .map(|x| x.applied.clone())
                    .or_else(|| it.analysis.as_ref().and_then(|a| a.strategy.as_ref()).map(|s| format!("strategy {s}")))
                    .map(|fix| match it.analysis.as_ref().and_then(|a| a.measured.as_deref()) {
                        Some(measured) => format!("{fix}\nchosen by measured success ({measured})"),
                        None => fix,
                    }),
                context: it.fix.as_ref().and_then(|x| x.context.clone().map(|c| (x.strategy, c))),
                pattern: Some((f.key().to_owned(), f.confidence, it.analysis.as_ref().and_then(|a| a.strategy))),
            })
        })
        .collect()
}

/// The decisive lines of a failure, capped; an unclassified failure's last lines, capped
/// more loosely (nothing sure chose them, so there are more).
pub fn details(f: &Failure) -> String {
    let cap = if f.classified_by() == super::ClassifiedBy::None { UNCLASSIFIED_TOKENS } else { DETAIL_TOKENS };
    cap_tokens(f.lines.join("\n").trim(), cap).0
}

fn indent(text: &str, by: &str) -> String {
    text.lines().map(|l| if l.is_empty() { String::new() } else { format!("{by}{l}") }).collect::<Vec<_>>().join("\n")
}

/// The `<retry_context>` block (seed 001 "Feedback Injection Format"), placed before the task.
pub fn retry_context(
    attempt: u32,
    max: u32,
    user_fix: Option<&str>,
    failures: &[PriorFailure],
    fell_back: &[crate::state::FellBack],
) -> String {
    let mut p = String::new();
    let _ = writeln!(p, "<retry_context attempt=\"{attempt}\" max_attempts=\"{max}\">");
    if let Some(text) = user_fix {
        let _ = writeln!(
            p,
            "  <user_intervention>\n    <instruction priority=\"high\">\n      User provided fix: {}\n    </instruction>\n    <context>\n      This instruction comes from the user after automated recovery failed.\n      Treat this as authoritative guidance.\n    </context>\n  </user_intervention>\n",
            text.trim()
        );
    }
    p.push_str("  <previous_failures>\n");
    for f in &failures[failures.len().saturating_sub(MAX_FAILURES_SHOWN)..] {
        match &f.agent {
            Some(agent) => {
                let _ = writeln!(p, "    <failure attempt=\"{}\" agent=\"{agent}\">", f.attempt);
            }
            None => {
                let _ = writeln!(p, "    <failure attempt=\"{}\">", f.attempt);
            }
        }
        let _ = writeln!(p, "      <type>{}</type>", f.failure_type);
        let _ = writeln!(p, "      <timestamp>{}</timestamp>", f.timestamp.strftime("%Y-%m-%dT%H:%M:%SZ"));
        let _ = writeln!(p, "      <error_summary>\n{}\n      </error_summary>", indent(&f.summary, "        "));
        if !f.details.is_empty() {
            let _ = writeln!(p, "      <error_details>\n{}\n      </error_details>", indent(&f.details, "        "));
        }
        if !f.files.is_empty() {
            let list: Vec<String> = f.files.iter().map(|x| format!("- {x}")).collect();
            let _ = writeln!(
                p,
                "      <files_affected>\n{}\n      </files_affected>",
                indent(&list.join("\n"), "        ")
            );
        }
        if let Some(fix) = &f.suggested_fix {
            let _ = writeln!(p, "      <suggested_fix>\n{}\n      </suggested_fix>", indent(fix, "        "));
        }
        if let Some((strategy, context)) = &f.context {
            let _ = writeln!(
                p,
                "      <expanded_context strategy=\"{strategy}\">\n{}\n      </expanded_context>",
                indent(context, "        ")
            );
        }
        p.push_str("    </failure>\n");
    }
    p.push_str("  </previous_failures>\n\n");
    p.push_str(&agent_fallback(fell_back));
    let learnings = learnings(failures);
    if !learnings.is_empty() {
        let _ = writeln!(
            p,
            "  <accumulated_learnings>\n{}\n  </accumulated_learnings>\n",
            indent(&learnings.join("\n"), "    ")
        );
    }
    let _ = writeln!(
        p,
        "  <instruction>\n    This is retry attempt {attempt} of {max}.\n    Review the previous failure(s) above.\n    Address the specific issues before re-executing.\n    If you believe the task is impossible, report status: blocked.\n  </instruction>\n</retry_context>"
    );
    p
}

/// The `<agent_fallback>` block: each agent that could not go on and who took over (empty
/// when none fell back).
fn agent_fallback(fell_back: &[crate::state::FellBack]) -> String {
    if fell_back.is_empty() {
        return String::new();
    }
    let mut p = String::from("  <agent_fallback>\n");
    for f in fell_back {
        let _ = writeln!(
            p,
            "    Attempt {}: agent `{}` could not go on ({}: {}); agent `{}` took over.",
            f.attempt,
            f.from,
            f.reason,
            f.reason.describe(),
            f.to
        );
    }
    p.push_str("  </agent_fallback>\n\n");
    p
}

/// What the failures so far teach: patterns seen, strategies tried, repeats.
fn learnings(failures: &[PriorFailure]) -> Vec<String> {
    let mut out = Vec::new();
    for f in failures {
        if let Some((pattern, confidence, strategy)) = &f.pattern {
            let line = match strategy {
                Some(s) => format!(
                    "- attempt {} failed as {pattern} (confidence {confidence:.2}); strategy {s} was applied",
                    f.attempt
                ),
                None => format!("- attempt {} failed as {pattern} (confidence {confidence:.2})", f.attempt),
            };
            out.push(line);
        }
    }
    let mut seen: Vec<&str> = Vec::new();
    for f in failures {
        if let Some((p, _, _)) = &f.pattern {
            if seen.contains(&p.as_str()) {
                out.push(format!(
                    "- {p} happened more than once: the approach of the earlier attempts does not work, change it"
                ));
                break;
            }
            seen.push(p);
        }
    }
    out
}

/// Seed 001's escalation message for a closed-loop stage.
pub fn escalation_message(
    run: &str,
    task: &str,
    task_id: &str,
    stage: &str,
    state: &LoopState,
    reason: &str,
) -> String {
    let window = &state.iterations[state.base.min(state.iterations.len())..];
    let budget = state.iterations.last().and_then(|i| i.analysis.as_ref()).map_or(window.len() as u32, |a| a.budget);
    let mut m = String::new();
    let _ = writeln!(m, "## Task Escalation Required\n");
    let _ = writeln!(m, "**Task:** {task_id}: {}", task.lines().next().unwrap_or("").trim());
    let _ = writeln!(m, "**Stage:** {stage}");
    let _ = writeln!(m, "**Attempts:** {} of {budget}\n", window.len());
    let _ = writeln!(m, "### Failure Summary\n");
    let _ = writeln!(
        m,
        "This stage has failed {} time{}. {reason}\n",
        window.len(),
        if window.len() == 1 { "" } else { "s" }
    );
    let _ = writeln!(m, "### Attempt History\n");
    m.push_str(&history_table(state));
    if let Some(f) = state.iterations.last().and_then(|i| i.failure.as_ref()) {
        let _ = writeln!(m, "\n### Last Error Details\n\n```\n{}\n```", details(f));
    }
    let files = state.files();
    if !files.is_empty() {
        let _ = writeln!(m, "\n### Files Modified (Partial State)\n");
        for f in files.described() {
            let _ = writeln!(m, "- `{f}`");
        }
    }
    let _ = writeln!(m, "\n### Suggested Actions\n");
    for (i, s) in suggested_steps(state.iterations.last().and_then(|i| i.failure.as_ref())).iter().enumerate() {
        let _ = writeln!(m, "{}. {s}", i + 1);
    }
    let _ = writeln!(
        m,
        "\n---\n\n**Your options:**\n- `loopwright respond {run} retry` - Try one more time (resets counter)\n- `loopwright respond {run} skip` - Skip this stage, continue with the next\n- `loopwright respond {run} abort` - Stop the run, keep the partial state\n- `loopwright respond {run} fix \"<instruction>\"` - Provide a specific fix instruction"
    );
    m
}

/// The attempt table of the escalation message and dead letters.
pub fn history_table(state: &LoopState) -> String {
    let mut m = String::from(
        "| Attempt | Timestamp | Failure Type | Pattern | Strategy | Error |\n|---|---|---|---|---|---|\n",
    );
    for it in &state.iterations {
        let Some(f) = &it.failure else { continue };
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {} |",
            it.attempt,
            it.at.strftime("%Y-%m-%d %H:%M"),
            f.failure_type,
            f.key(),
            it.analysis.as_ref().and_then(|a| a.strategy).map_or("-", Strategy::as_str),
            f.summary.replace('|', "\\|")
        );
    }
    m
}

/// Seed 000's `[closed-loop]` log lines for an event, as the run's state stands after it.
pub fn log_lines(event: &crate::event::Event, state: &crate::state::RunState) -> Vec<String> {
    use crate::event::Event;
    let task = state.started.as_ref().map_or_else(String::new, |s| s.task_id.to_string());
    let Some(stage) = event.stage() else { return Vec::new() };
    let st = state.stage(stage.as_str());
    let Some(lp) = st.and_then(|s| s.closed.as_deref()) else { return Vec::new() };
    let t = format!("[closed-loop] task={task}:{stage}");
    let total = |status: &str| {
        let ms: u64 = st.map_or(0, |s| s.duration_ms);
        format!("{t} status={status} total_attempts={} duration_ms={ms}", lp.iterations.len())
    };
    match event {
        Event::Validated { violations, gates, .. } => vec![format!(
            "{t} validation={} gates={} violations={}",
            if violations.is_empty() { "passed" } else { "failed" },
            gates.len(),
            violations.len()
        )],
        Event::RegressionGate { complexity, baseline, .. } => vec![format!(
            "{t} regression_check={} complexity={}",
            if baseline.is_some() { "enabled" } else { "skipped" },
            complexity.as_deref().unwrap_or("none")
        )],
        Event::RegressionChecked { regressions, dependents, .. } => {
            let c =
                state.started.as_ref().and_then(|s| s.vars.get("complexity").cloned()).unwrap_or_else(|| "none".into());
            if regressions.is_empty() {
                vec![format!("{t} regression_check=passed dependents={} complexity={c}", dependents.len())]
            } else {
                vec![
                    format!("{t} regressions_detected={}", regressions.len()),
                    format!("{t} regression_check=failed complexity={c}"),
                ]
            }
        }
        Event::Analyzed { attempt, analysis, .. } => {
            let f = lp.iterations.iter().find(|i| i.attempt == *attempt).and_then(|i| i.failure.as_ref());
            vec![format!(
                "{t} attempt={attempt} pattern={} strategy={} result=failed next={}",
                f.map_or("unclassified", Failure::key),
                analysis.strategy.map_or("-", Strategy::as_str),
                analysis.next.as_str()
            )]
        }
        Event::AttemptSucceeded { attempt, .. } => {
            vec![format!("{t} attempt={attempt} pattern=- strategy=- result=success"), total("success")]
        }
        Event::LoopEscalated { .. } => vec![total("escalated")],
        Event::DeadLettered { reason, .. } => vec![format!("{t} dead_letter reason={reason}"), total("failed")],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_context_has_the_seed_001_shape() {
        let failures = vec![PriorFailure {
            attempt: 1,
            agent: None,
            failure_type: "verification_failed".into(),
            timestamp: "2026-01-26T14:30:00Z".parse().expect("ts"),
            summary: "check `tests_pass` (`npm test`) returned exit code 1".into(),
            details: "FAIL tests/PlannerId.test.ts\n- InvalidPlannerIdError not thrown for empty string".into(),
            files: vec!["src/domain/PlannerId.ts (modified)".into()],
            suggested_fix: Some("analyze_then_fix: located the failure in src/domain/PlannerId.ts".into()),
            context: None,
            pattern: Some(("test-failure".into(), 0.95, Some(Strategy::AnalyzeThenFix))),
        }];
        assert_eq!(
            retry_context(2, 3, Some("check for whitespace with .trim()"), &failures, &[]),
            r#"<retry_context attempt="2" max_attempts="3">
  <user_intervention>
    <instruction priority="high">
      User provided fix: check for whitespace with .trim()
    </instruction>
    <context>
      This instruction comes from the user after automated recovery failed.
      Treat this as authoritative guidance.
    </context>
  </user_intervention>

  <previous_failures>
    <failure attempt="1">
      <type>verification_failed</type>
      <timestamp>2026-01-26T14:30:00Z</timestamp>
      <error_summary>
        check `tests_pass` (`npm test`) returned exit code 1
      </error_summary>
      <error_details>
        FAIL tests/PlannerId.test.ts
        - InvalidPlannerIdError not thrown for empty string
      </error_details>
      <files_affected>
        - src/domain/PlannerId.ts (modified)
      </files_affected>
      <suggested_fix>
        analyze_then_fix: located the failure in src/domain/PlannerId.ts
      </suggested_fix>
    </failure>
  </previous_failures>

  <accumulated_learnings>
    - attempt 1 failed as test-failure (confidence 0.95); strategy analyze_then_fix was applied
  </accumulated_learnings>

  <instruction>
    This is retry attempt 2 of 3.
    Review the previous failure(s) above.
    Address the specific issues before re-executing.
    If you believe the task is impossible, report status: blocked.
  </instruction>
</retry_context>
"#
        );
    }

    #[test]
    fn dead_letters_are_similar_by_pattern_extension_and_error() {
        let s = |sig: &str, line: &str| DeadLetterSummary {
            task_id: "t".into(),
            error_signature: sig.into(),
            final_pattern: sig.split(':').next().unwrap_or_default().into(),
            error_line: line.into(),
            blocked_at: String::new(),
            strategies: vec![],
            files: vec![],
            confident: true,
            ..DeadLetterSummary::default()
        };
        let a = s("type-error:ts:ts2322", "error TS2322: Type 'string' is not assignable to type 'number'.");
        assert!(a.similar_to(&s("type-error:ts:ts2322", "error TS2322: something else")));
        assert!(!a.similar_to(&s("type-error:py:ts2322", "error TS2322: x")), "another extension");
        assert!(!a.similar_to(&s("lint-error:ts:ts2322", "error TS2322: x")), "another pattern");
        assert!(
            a.similar_to(&s("type-error:ts:other", "error TS2322: Type 'string' is not assignable to type 'numbe!"))
        );
    }
}
