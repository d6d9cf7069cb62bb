//! Markdown projections of a run for humans and agents, in the documents' formats (YAML
//! frontmatter + body): the task file, one artifact file per stage, and the metrics file.
//! They are views of the journal; deleting them loses nothing.

use std::fmt::Write as _;

use loopwright_spec::Pipeline;

use crate::state::{RunState, StageState, StageStatus};
use crate::tokens::count_tokens;

/// A YAML scalar for any text (a JSON string is a valid YAML double-quoted scalar).
fn q(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| "\"\"".to_owned())
}

fn ts(t: Option<jiff::Timestamp>) -> String {
    t.map(|t| t.to_string()).unwrap_or_default()
}

/// `artifact-STAGE.md` (seed 004 "Artifact Format").
pub fn artifact_markdown(pipeline: &Pipeline, state: &RunState, stage: &StageState) -> String {
    let task_id = state.started.as_ref().map(|s| s.task_id.to_string()).unwrap_or_default();
    let agent = pipeline.stage(stage.id.as_str()).map_or("", |s| s.agent.name());
    let body: String = stage.outputs.iter().map(|(k, v)| format!("## {k}\n{}\n\n", v.trim_end())).collect();
    let summary = stage.outputs.values().flat_map(|v| v.lines()).map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let summary: String = summary.chars().take(120).collect();
    let keys: Vec<&str> = stage.outputs.keys().map(String::as_str).collect();
    let mut md = String::from("---\n");
    let _ = writeln!(md, "entity_name: {}", q(&format!("session.current.artifact.{task_id}.{}", stage.id)));
    md.push_str("namespace: session.current\ncategory: artifact\n");
    let _ = writeln!(md, "task_id: {}", q(&task_id));
    let _ = writeln!(md, "stage_id: {}", stage.id);
    let _ = writeln!(md, "agent: {}", q(agent));
    let _ = writeln!(md, "status: {}", stage.status.as_str());
    let _ = writeln!(md, "summary: {}", q(&summary));
    let _ = writeln!(md, "output_keys: [{}]", keys.join(", "));
    let _ = writeln!(md, "token_count: {}", count_tokens(&body));
    let _ = writeln!(md, "created_at: {}", ts(state.updated_at));
    let _ = writeln!(md, "tags: [artifact, {}, {}]", stage.id, q(agent));
    md.push_str("---\n");
    md.push_str(body.trim_end());
    md.push('\n');
    md
}

/// `task.md`: the task's state.
pub fn task_markdown(pipeline: &Pipeline, state: &RunState) -> String {
    let Some(started) = &state.started else {
        return String::new();
    };
    let done: Vec<&str> = state.stages.iter().filter(|s| s.status.is_done()).map(|s| s.id.as_str()).collect();
    let remaining: Vec<&str> = pipeline
        .stages
        .iter()
        .map(|s| s.id.as_str())
        .filter(|id| state.stage(id).is_none_or(|s| !s.status.is_done()))
        .filter(|id| {
            started.start_from.as_ref().is_none_or(|from| pipeline.index_of(id) >= pipeline.index_of(from.as_str()))
        })
        .collect();
    let mut md = String::from("---\n");
    let _ = writeln!(md, "entity_name: {}", q(&format!("session.current.task.{}", started.task_id)));
    md.push_str("namespace: session.current\ncategory: task\n");
    let _ = writeln!(md, "task_id: {}", q(started.task_id.as_str()));
    let _ = writeln!(md, "run_id: {}", q(state.run_id.as_str()));
    let _ = writeln!(md, "pipeline: {}", q(&started.pipeline));
    let _ = writeln!(md, "state: {}", state.status.as_str());
    let _ = writeln!(md, "stages_completed: [{}]", done.join(", "));
    let _ = writeln!(md, "stages_remaining: [{}]", remaining.join(", "));
    if let Some(f) = &state.failed_stage {
        let _ = writeln!(md, "failed_stage: {f}");
    }
    let _ = writeln!(md, "created_at: {}", ts(state.created_at));
    let _ = writeln!(md, "updated_at: {}", ts(state.updated_at));
    md.push_str("---\n## Task\n");
    md.push_str(if started.task.trim().is_empty() { "(none given)" } else { started.task.trim() });
    md.push_str("\n\n## Stages\n| stage | status | attempts | duration_ms | note |\n|---|---|---|---|---|\n");
    for s in &state.stages {
        let note = match (&s.skip_reason, &s.last_error) {
            (Some(r), _) => r.as_str().to_owned(),
            (None, Some(e)) if s.status != StageStatus::Success => e.message.replace('|', "\\|"),
            _ => String::new(),
        };
        let _ = writeln!(md, "| {} | {} | {} | {} | {} |", s.id, s.status.as_str(), s.attempts, s.duration_ms, note);
    }
    md
}

/// `metrics.md`: durations and attempts per stage.
pub fn metrics_markdown(state: &RunState) -> String {
    let task_id = state.started.as_ref().map(|s| s.task_id.to_string()).unwrap_or_default();
    let total_ms: u64 = state.stages.iter().map(|s| s.duration_ms).sum();
    let attempts: u32 = state.stages.iter().map(|s| s.attempts).sum();
    let mut md = String::from("---\n");
    let _ = writeln!(md, "entity_name: {}", q(&format!("session.current.metrics.{task_id}")));
    md.push_str("namespace: session.current\ncategory: metrics\n");
    let _ = writeln!(md, "task_id: {}", q(&task_id));
    let _ = writeln!(md, "run_id: {}", q(state.run_id.as_str()));
    let _ = writeln!(md, "status: {}", state.status.as_str());
    let _ = writeln!(md, "total_duration_ms: {total_ms}");
    let _ = writeln!(md, "total_attempts: {attempts}");
    let _ = writeln!(md, "retries: {}", state.retries_used);
    md.push_str("---\n| stage | status | attempts | duration_ms |\n|---|---|---|---|\n");
    for s in &state.stages {
        let _ = writeln!(md, "| {} | {} | {} | {} |", s.id, s.status.as_str(), s.attempts, s.duration_ms);
    }
    for s in &state.stages {
        if let Some(lp) = s.closed.as_deref() {
            md.push_str(&loop_metrics(s, lp));
        }
    }
    md
}

/// Seed 000's per-execution closed-loop metrics of a stage, as a YAML block.
fn loop_metrics(stage: &StageState, lp: &crate::closed_loop::LoopState) -> String {
    let list = |v: Vec<String>| format!("[{}]", v.iter().map(|s| q(s)).collect::<Vec<_>>().join(", "));
    let validations: Vec<&(Vec<crate::closed_loop::Gate>, Vec<crate::closed_loop::Violation>)> =
        lp.iterations.iter().filter_map(|i| i.validation.as_ref()).collect();
    let passed = validations.iter().filter(|(_, v)| v.is_empty()).count();
    let catches: Vec<String> =
        validations.iter().flat_map(|(_, v)| v.iter().map(|x| x.gate.as_str().to_owned())).collect();
    let regression_runs = lp.iterations.iter().filter(|i| i.regression.is_some()).count();
    let detected = lp.iterations.iter().filter(|i| i.regression.as_ref().is_some_and(|(_, r)| !r.is_empty())).count();
    let auto_fixed = lp
        .iterations
        .windows(2)
        .filter(|w| w[0].regression.as_ref().is_some_and(|(_, r)| !r.is_empty()) && w[1].failure.is_none())
        .count();
    let mut md = format!("\n## Closed loop: {}\n\n```yaml\nper_execution:\n", stage.id);
    let _ = writeln!(md, "  total_attempts: {}", lp.iterations.len());
    let _ = writeln!(
        md,
        "  time_to_success_ms: {}",
        if lp.succeeded { stage.duration_ms.to_string() } else { "null".into() }
    );
    let _ = writeln!(md, "  patterns_encountered: {}", list(lp.patterns()));
    let _ =
        writeln!(md, "  strategies_used: {}", list(lp.strategies().iter().map(|s| s.as_str().to_owned()).collect()));
    let _ = writeln!(md, "  files_modified: {}", list(lp.files().paths().iter().map(|p| (*p).to_owned()).collect()));
    let _ = writeln!(md, "  final_status: {}", lp.status());
    let _ = writeln!(md, "  pre_validation_runs: {}", validations.len());
    let rate = if validations.is_empty() { 0.0 } else { passed as f64 / validations.len() as f64 };
    let _ = writeln!(md, "  pre_validation_pass_rate: {rate:.2}");
    let _ = writeln!(md, "  pre_validation_catches: {}", list(catches));
    let skipped = usize::from(matches!(lp.regression_gate, Some(None)));
    let _ = writeln!(md, "  regression_checks_run: {regression_runs}");
    let _ = writeln!(md, "  regression_checks_skipped: {skipped}");
    let _ = writeln!(md, "  regressions_detected: {detected}");
    let _ = writeln!(md, "  regressions_auto_fixed: {auto_fixed}");
    md.push_str("per_attempt:\n");
    for it in &lp.iterations {
        let (gates, violations) = it.validation.as_ref().map_or((0, 0), |(g, v)| (g.len(), v.len()));
        let _ = writeln!(
            md,
            "  - {{attempt_number: {}, duration_ms: {}, pattern_matched: {}, strategy_used: {}, success: {}, validation_passed: {}, validation_gates_run: {gates}, validation_violations: {violations}}}",
            it.attempt,
            it.duration_ms + it.checks.as_deref().unwrap_or_default().iter().map(|c| c.duration_ms).sum::<u64>(),
            it.failure.as_ref().and_then(|f| f.pattern.as_deref()).map_or_else(|| "null".to_owned(), q),
            it.analysis.as_ref().and_then(|a| a.strategy).map_or_else(|| "null".to_owned(), |s| q(s.as_str())),
            it.failure.is_none() && lp.succeeded,
            violations == 0 && it.validation.is_some()
        );
    }
    md.push_str("```\n");
    md
}

/// `attempts-STAGE.md`: seed 004's retry log of a stage.
pub fn attempts_markdown(state: &RunState, stage: &StageState) -> String {
    if let Some(lp) = stage.closed.as_deref() {
        return loop_attempts_markdown(state, stage, lp);
    }
    let task_id = state.started.as_ref().map(|s| s.task_id.to_string()).unwrap_or_default();
    let mut md = String::from("---\n");
    let _ = writeln!(md, "entity_name: {}", q(&format!("session.current.attempts.{task_id}.{}", stage.id)));
    md.push_str("namespace: session.current\ncategory: attempts\n");
    let _ = writeln!(md, "task_id: {}", q(&task_id));
    let _ = writeln!(md, "stage_id: {}", stage.id);
    md.push_str("retry_log:\n");
    let _ = writeln!(md, "  stage_id: {}", stage.id);
    md.push_str("  attempts:\n");
    for a in &stage.attempt_log {
        let _ = writeln!(md, "    - attempt: {}", a.attempt);
        let _ = writeln!(md, "      status: {}", a.status);
        if let Some(e) = &a.error {
            let _ = writeln!(md, "      error: {e}");
        }
        if let Some(m) = &a.message {
            let _ = writeln!(md, "      message: {}", q(m));
        }
        let _ = writeln!(md, "      duration_ms: {}", a.duration_ms);
        if let Some(d) = a.retry_delay_ms {
            let _ = writeln!(md, "      retry_delay_ms: {d}");
        }
        if let Some(r) = &a.retry_reason {
            let _ = writeln!(md, "      retry_reason: {}", q(r));
        }
        let _ = writeln!(md, "      timestamp: {}", a.timestamp);
    }
    let _ = writeln!(md, "  total_duration_ms: {}", stage.duration_ms);
    let _ = writeln!(md, "  final_status: {}", stage.status.as_str());
    md.push_str("---\n| attempt | status | error | duration_ms | then waited |\n|---|---|---|---|---|\n");
    for a in &stage.attempt_log {
        let waited = a.retry_delay_ms.map(|d| format!("{d} ms")).unwrap_or_default();
        let error = a.message.as_deref().unwrap_or("").replace('|', "\\|");
        let _ = writeln!(md, "| {} | {} | {} | {} | {} |", a.attempt, a.status, error, a.duration_ms, waited);
    }
    md
}

/// A closed-loop stage's attempts in seed 000's "Attempt Tracking" format.
fn loop_attempts_markdown(state: &RunState, stage: &StageState, lp: &crate::closed_loop::LoopState) -> String {
    let task_id = state.started.as_ref().map(|s| s.task_id.to_string()).unwrap_or_default();
    let created = lp.iterations.first().map_or_else(String::new, |i| i.at.to_string());
    let updated = lp.iterations.last().map_or_else(String::new, |i| i.fix_at.unwrap_or(i.at).to_string());
    let mut md = String::from("---\n");
    let _ = writeln!(md, "entity_name: {}", q(&format!("session.current.attempts.{task_id}.{}", stage.id)));
    md.push_str("namespace: session.current\ncategory: attempts\n");
    let _ = writeln!(md, "task_id: {}", q(&task_id));
    let _ = writeln!(md, "stage_id: {}", stage.id);
    let _ = writeln!(md, "total_attempts: {}", lp.iterations.len());
    let _ = writeln!(md, "final_status: {}", lp.status());
    let _ = writeln!(md, "created_at: {created}\nupdated_at: {updated}");
    md.push_str("tags: [attempts, closed-loop]\n---\n\n## Attempt History\n\n```yaml\nattempts:\n");
    for it in &lp.iterations {
        let _ = writeln!(md, "  - attempt: {}", it.attempt);
        let _ = writeln!(md, "    timestamp: {}", q(&it.at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()));
        let action = if it.files.is_empty() {
            "changed no file".to_owned()
        } else {
            format!("changed {}", it.files.described().join(", "))
        };
        let _ = writeln!(md, "    action: {}", q(&action));
        let checks = it.checks.as_deref().unwrap_or_default();
        let result = match &it.failure {
            Some(f) => f.summary.clone(),
            None if lp.succeeded && lp.iterations.last().is_some_and(|l| l.attempt == it.attempt) => {
                format!("All checks passed ({})", checks.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", "))
            }
            None => "in progress".to_owned(),
        };
        let _ = writeln!(md, "    result: {}", q(&result));
        let f = it.failure.as_ref();
        let _ = writeln!(md, "    error: {}", f.map_or_else(|| "null".to_owned(), |f| q(f.headline())));
        let _ = writeln!(
            md,
            "    pattern_matched: {}",
            f.and_then(|f| f.pattern.as_deref()).map_or_else(|| "null".to_owned(), q)
        );
        let _ = writeln!(md, "    confidence: {}", f.map_or(0.0, |f| f.confidence));
        let strategy = it.analysis.as_ref().and_then(|a| a.strategy);
        let _ = writeln!(md, "    strategy_used: {}", strategy.map_or_else(|| "null".to_owned(), |s| q(s.as_str())));
        if let Some(a) = &it.analysis {
            let _ = writeln!(md, "    next: {}", a.next.as_str());
        }
        if let Some(fix) = &it.fix {
            let _ = writeln!(md, "    fix_applied: {}", q(&fix.applied));
        }
        let _ = writeln!(md, "    duration_ms: {}", it.duration_ms + checks.iter().map(|c| c.duration_ms).sum::<u64>());
        let files: Vec<String> = it.files.paths().iter().map(|p| q(p)).collect();
        let _ = writeln!(md, "    files_modified: [{}]", files.join(", "));
        if let Some((gates, violations)) = &it.validation {
            let _ = writeln!(md, "    validation_passed: {}", violations.is_empty());
            let _ = writeln!(md, "    validation_gates_run: {}", gates.len());
            let _ = writeln!(md, "    validation_violations: {}", violations.len());
        }
        if !checks.is_empty() {
            md.push_str("    checks:\n");
            for c in checks {
                let _ = writeln!(
                    md,
                    "      - {{name: {}, passed: {}, exit_code: {}, duration_ms: {}}}",
                    q(&c.name),
                    c.passed,
                    c.exit_code.map_or_else(|| "null".to_owned(), |e| e.to_string()),
                    c.duration_ms
                );
            }
        }
    }
    md.push_str("```\n");
    md
}

/// `baseline-STAGE.md`: seed 000's regression baseline, per test file.
pub fn baseline_markdown(
    state: &RunState,
    stage: &str,
    baseline: &crate::closed_loop::Baseline,
    at: jiff::Timestamp,
) -> String {
    let task_id = state.started.as_ref().map(|s| s.task_id.to_string()).unwrap_or_default();
    let mut md = String::from("---\n");
    let _ = writeln!(md, "entity_name: {}", q(&format!("session.current.baseline.{task_id}.{stage}")));
    md.push_str("namespace: session.current\ncategory: regression-baseline\n");
    let _ = writeln!(md, "task_id: {}", q(&task_id));
    let _ = writeln!(md, "stage_id: {stage}");
    let _ = writeln!(md, "command: {}", q(&baseline.command));
    md.push_str("baseline_results:\n");
    for (file, c) in &baseline.results {
        let _ = writeln!(
            md,
            "  - {{file: {}, test_count: {}, pass_count: {}, fail_count: {}}}",
            q(file),
            c.pass + c.fail,
            c.pass,
            c.fail
        );
    }
    let _ = writeln!(md, "captured_at: {at}\n---");
    md
}
