//! What the closed loop tells agents and humans: the `<retry_context>` block of seed 001, the
//! escalation message of seed 001, and the dead letter of seed 000.

use std::fmt::Write as _;

use super::{Failure, FileChanges, LoopState, Strategy};
use crate::tokens::cap_tokens;

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
pub fn retry_context(attempt: u32, max: u32, user_fix: Option<&str>, failures: &[PriorFailure]) -> String {
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
        let _ = writeln!(p, "    <failure attempt=\"{}\">", f.attempt);
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

/// Manual steps for a failure, by its pattern (seed 000 "Suggested Manual Steps").
pub fn suggested_steps(failure: Option<&Failure>) -> Vec<String> {
    let pattern = failure.and_then(|f| f.pattern.as_deref()).unwrap_or("");
    let first = match pattern {
        "permission-error" => {
            "Check the ownership and permissions of the files the error names; loopwright does not change them"
        }
        "disk-full" => "Free disk space (build caches, logs), then retry",
        "merge-conflict" => "Resolve the conflict markers by hand and commit",
        "git-error" => "Inspect `git status` and the repository state; fix it by hand before retrying",
        "type-error" | "undefined-name" => {
            "Read the definitions of the types and names the error mentions; the change may break a contract"
        }
        "import-not-found" | "dependency-conflict" | "command-not-found" => {
            "Install or declare the missing dependency or tool, or fix the import path"
        }
        "test-failure" | "regression-detected" => {
            "Run the failing test alone and compare what it expects with what the code does"
        }
        "lint-error" | "format-error" => {
            "Run the project's fixer (formatter / linter --fix) and review what it cannot fix"
        }
        "timeout" | "network-error" | "rate-limit" => {
            "Check the service or resource the stage waits on; retry when it is available"
        }
        _ => "Read the last error above and reproduce it by hand",
    };
    vec![
        first.to_owned(),
        "Review the task definition: are its success checks achievable?".to_owned(),
        "Fix the specific issue by hand, then `retry`, or give the agent a `fix` instruction".to_owned(),
        "Skip the stage if later stages do not need it, or abort the run".to_owned(),
    ]
}

/// A dead letter already written, as another dead letter's similar-failure search sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeadLetterSummary {
    /// Its task.
    pub task_id: String,
    /// `{pattern}:{ext}:{error_type}`.
    pub error_signature: String,
    /// The final pattern.
    pub final_pattern: String,
    /// The first line of the final error.
    pub error_line: String,
    /// When it was written.
    pub blocked_at: String,
    /// Strategies it exhausted.
    pub strategies: Vec<String>,
    /// Files it modified.
    pub files: Vec<String>,
    /// The pattern matched with confidence >= 0.5.
    pub confident: bool,
    /// The stage that gave up.
    pub stage: String,
    /// Its run.
    pub run_id: String,
    /// Attempts made.
    pub total_attempts: u64,
    /// `retry_budget_exhausted` or `unrecoverable_error`.
    pub blocked_reason: String,
    /// Similar earlier dead letters, as the file counted them.
    pub similar_failures: u64,
}

impl DeadLetterSummary {
    /// Reads the frontmatter of a dead-letter file.
    pub fn parse(text: &str) -> Option<Self> {
        let front = text.strip_prefix("---\n")?.split("\n---").next()?;
        let value: serde_json::Value = serde_saphyr::from_str(front).ok()?;
        let s = |k: &str| value.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        let list = |k: &str| {
            value
                .get(k)
                .and_then(|v| v.as_array())
                .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
                .unwrap_or_default()
        };
        Some(Self {
            task_id: s("task_id"),
            error_signature: s("error_signature"),
            final_pattern: s("final_pattern"),
            error_line: s("error_line"),
            blocked_at: s("blocked_at"),
            strategies: list("strategies_exhausted"),
            files: list("files_modified"),
            confident: value.get("confidence").and_then(serde_json::Value::as_f64).is_some_and(|c| c >= 0.5),
            stage: s("stage"),
            run_id: s("run_id"),
            total_attempts: value.get("total_attempts").and_then(serde_json::Value::as_u64).unwrap_or(0),
            blocked_reason: s("blocked_reason"),
            similar_failures: value.get("similar_failures").and_then(serde_json::Value::as_u64).unwrap_or(0),
        })
    }

    /// Similar (seed 000): same pattern and extension, and the same error type (signature) or
    /// the same first 50 characters of the error line.
    pub fn similar_to(&self, other: &DeadLetterSummary) -> bool {
        let parts = |s: &str| s.splitn(3, ':').map(str::to_owned).collect::<Vec<_>>();
        let (a, b) = (parts(&self.error_signature), parts(&other.error_signature));
        if a.len() < 3 || b.len() < 3 || a[0] != b[0] || a[1] != b[1] {
            return false;
        }
        let head = |s: &str| s.chars().take(50).collect::<String>();
        a[2] == b[2] || (!self.error_line.is_empty() && head(&self.error_line) == head(&other.error_line))
    }
}

/// The `error_signature` of seed 000: `{pattern}:{extension}:{error_type}`.
pub fn error_signature(failure: &Failure, files: &FileChanges, located: Option<&str>) -> (String, String) {
    let line = failure.headline().to_owned();
    let ext = located
        .or_else(|| files.paths().first().copied())
        .and_then(|p| p.rsplit_once('.').map(|(_, e)| e.to_owned()))
        .filter(|e| e.len() <= 5 && !e.contains('/'))
        .unwrap_or_else(|| "none".into());
    let code = regex::Regex::new(r"\b(E\d{4}|TS\d{4}|[A-Z]{1,3}\d{3,4})\b")
        .expect("valid")
        .captures(&line)
        .map(|c| c[1].to_ascii_lowercase());
    let error_type = code.unwrap_or_else(|| {
        const STOP: [&str; 12] =
            ["error", "the", "and", "for", "with", "from", "that", "this", "not", "was", "file", "line"];
        let words: Vec<String> = line
            .split(|c: char| !c.is_ascii_alphabetic())
            .filter(|w| w.len() >= 3)
            .map(str::to_ascii_lowercase)
            .filter(|w| !STOP.contains(&w.as_str()))
            .take(3)
            .collect();
        if words.is_empty() { "unknown".into() } else { words.join("_") }
    });
    (format!("{}:{ext}:{error_type}", failure.key()), line)
}

/// Everything a dead letter says.
pub struct DeadLetter<'a> {
    /// The run.
    pub run: &'a str,
    /// The task.
    pub task_id: &'a str,
    /// The task's description.
    pub task: &'a str,
    /// The stage.
    pub stage: &'a str,
    /// The loop.
    pub state: &'a LoopState,
    /// `retry_budget_exhausted` or `unrecoverable_error`.
    pub reason: &'a str,
    /// When.
    pub blocked_at: jiff::Timestamp,
    /// The first workspace file the final error names.
    pub located: Option<&'a str>,
    /// Earlier dead letters.
    pub others: &'a [DeadLetterSummary],
}

impl DeadLetter<'_> {
    /// This dead letter's own summary.
    pub fn summary(&self) -> Option<DeadLetterSummary> {
        let f = self.state.iterations.last()?.failure.as_ref()?;
        let (error_signature, error_line) = error_signature(f, &self.state.files(), self.located);
        Some(DeadLetterSummary {
            task_id: self.task_id.to_owned(),
            error_signature,
            final_pattern: f.key().to_owned(),
            error_line,
            blocked_at: self.blocked_at.to_string(),
            strategies: names(&self.state.strategies()),
            files: self.state.files().paths().iter().map(|p| (*p).to_owned()).collect(),
            confident: f.pattern.is_some() && f.confidence >= 0.5,
            stage: self.stage.to_owned(),
            run_id: self.run.to_owned(),
            total_attempts: self.state.iterations.len() as u64,
            blocked_reason: self.reason.to_owned(),
            similar_failures: 0,
        })
    }

    /// The similar earlier dead letters.
    pub fn similar(&self) -> Vec<&DeadLetterSummary> {
        let Some(me) = self.summary() else { return Vec::new() };
        self.others.iter().filter(|o| o.task_id != me.task_id && o.similar_to(&me)).collect()
    }

    /// A pattern-learning candidate is due: ≥ 3 similar failures and no confident pattern.
    pub fn learning_candidate(&self) -> Option<(String, String)> {
        let me = self.summary()?;
        let similar = self.similar();
        if similar.len() < 3 || me.confident {
            return None;
        }
        let hash = format!("{:08x}", crate::hash::fnv1a(me.error_signature.as_bytes()) as u32);
        let signal =
            regex::Regex::new(r"\d+").expect("valid").replace_all(&regex::escape(&me.error_line), r"\d+").into_owned();
        let mut text = String::new();
        let _ = writeln!(
            text,
            "---\ncategory: candidate-pattern\nstatus: proposed\nerror_signature: {}\nsimilar_failures: {}\ncreated_at: {}\n---\n",
            serde_json::to_string(&me.error_signature).unwrap_or_default(),
            similar.len(),
            self.blocked_at
        );
        let _ = writeln!(
            text,
            "## Candidate Pattern\n\n{} dead letters share this error and no pattern matched it with confidence >= 0.5.\nReview the proposal, then add it to `.loopwright/failure-patterns.yml`:\n",
            similar.len() + 1
        );
        let _ = writeln!(
            text,
            "```yaml\npatterns:\n  - id: learned-{hash}\n    description: \"{}\"\n    strategy: analyze_then_fix\n    signals:\n      - {{regex: '{}', strength: 0.8}}\n```\n",
            me.error_line.replace('"', "'"),
            signal.replace('\'', "''")
        );
        let _ = writeln!(text, "### Seen in\n");
        for s in std::iter::once(&me).chain(similar.iter().copied()) {
            let _ = writeln!(text, "- {} ({})", s.task_id, s.blocked_at);
        }
        Some((format!("candidate-pattern-{hash}.md"), text))
    }

    /// The dead letter in seed 000's format.
    pub fn render(&self) -> String {
        let state = self.state;
        let last = state.iterations.last().and_then(|i| i.failure.as_ref());
        let me = self.summary();
        let similar = self.similar();
        let files = state.files();
        let mut m = String::new();
        let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
        let list = |v: &[String]| format!("[{}]", v.iter().map(|s| quote(s)).collect::<Vec<_>>().join(", "));
        let _ = writeln!(m, "---");
        let _ = writeln!(m, "entity_name: session.current.dead-letter.{}", self.task_id);
        let _ = writeln!(m, "namespace: session.current\ncategory: dead-letter");
        let _ = writeln!(m, "task_id: {}", self.task_id);
        let _ = writeln!(m, "run_id: {}", self.run);
        let _ = writeln!(m, "stage: {}", self.stage);
        let _ = writeln!(m, "original_task: {}", quote(self.task.lines().next().unwrap_or("").trim()));
        let _ = writeln!(m, "total_attempts: {}", state.iterations.len());
        let _ = writeln!(m, "final_pattern: {}", last.map_or("unclassified", Failure::key));
        let _ = writeln!(m, "confidence: {}", last.map_or(0.0, |f| f.confidence));
        let _ = writeln!(m, "strategies_exhausted: {}", list(&names(&state.strategies())));
        let _ = writeln!(m, "blocked_at: {}", self.blocked_at);
        let _ = writeln!(m, "blocked_reason: {}", self.reason);
        let _ = writeln!(m, "tags: [dead-letter, blocked]");
        let _ = writeln!(m, "similar_failures: {}", similar.len());
        let _ = writeln!(m, "error_signature: {}", quote(me.as_ref().map_or("", |s| s.error_signature.as_str())));
        let _ = writeln!(m, "error_line: {}", quote(me.as_ref().map_or("", |s| s.error_line.as_str())));
        let paths: Vec<String> = files.paths().iter().map(|p| (*p).to_owned()).collect();
        let _ = writeln!(m, "files_modified: {}", list(&paths));
        let _ = writeln!(m, "---\n");
        let _ = writeln!(m, "## Task Description\n\n{}\n", self.task.trim());
        let _ = writeln!(m, "## Error Chain\n");
        let mut previous: Option<&str> = None;
        for it in &state.iterations {
            let Some(f) = &it.failure else { continue };
            let _ = writeln!(m, "### Attempt {} ({})", it.attempt, it.at.strftime("%H:%M:%S"));
            let action = if it.files.is_empty() {
                "Changed no file".to_owned()
            } else {
                format!("Changed {}", it.files.described().join(", "))
            };
            let _ = writeln!(m, "- **Action:** {action}");
            let _ = writeln!(m, "- **Error:** {}", f.headline());
            let same = if previous == Some(f.key()) { " (same)" } else { "" };
            let _ = writeln!(m, "- **Pattern:** {}{same}", f.key());
            let strategy = it.analysis.as_ref().and_then(|a| a.strategy).map_or("exhausted", Strategy::as_str);
            let _ = writeln!(m, "- **Strategy:** {strategy}\n");
            previous = Some(f.key());
        }
        let _ = writeln!(m, "## Files Modified\n");
        if files.is_empty() {
            let _ = writeln!(m, "- (none)");
        }
        for f in files.described() {
            let _ = writeln!(m, "- {f}");
        }
        m.push('\n');
        if !similar.is_empty() {
            let _ = writeln!(
                m,
                "## Smart Suggestions\n\nBased on {} similar failure{}:\n",
                similar.len(),
                if similar.len() == 1 { "" } else { "s" }
            );
            let _ = writeln!(m, "1. **Most likely root cause:** {}", root_cause(me.as_ref(), &similar));
            let _ = writeln!(m, "2. **Specific area to investigate:** {}", investigation_target(me.as_ref(), &similar));
            let _ =
                writeln!(m, "3. **Alternative approach:** {}\n", alternative(&names(&state.strategies()), &similar));
            let _ = writeln!(m, "### Similar Failures\n");
            for s in &similar {
                let _ = writeln!(
                    m,
                    "- {}: {} ({})",
                    s.task_id,
                    s.error_line,
                    s.blocked_at.get(..10).unwrap_or(&s.blocked_at)
                );
            }
            let _ = writeln!(
                m,
                "\n### Common Thread\n\nAll {} failures end in `{}` on `.{}` files{}.\n",
                similar.len() + 1,
                me.as_ref().map_or("", |s| s.final_pattern.as_str()),
                me.as_ref().and_then(|s| s.error_signature.split(':').nth(1)).unwrap_or("?"),
                me.as_ref().map_or(String::new(), |s| format!(" with the error \"{}\"", s.error_line))
            );
            // learning_candidate is due only with >= 3 similar failures and no confident pattern.
            if let Some((file, _)) = self.learning_candidate() {
                let _ = writeln!(
                    m,
                    "## Pattern Learning Candidate\n\nThis failure matches {} others with no confident pattern match.\nA candidate pattern has been proposed for review.\nSee: .loopwright/state/dead-letters/{file}\n",
                    similar.len()
                );
            }
        }
        let _ = writeln!(m, "## Suggested Manual Steps\n");
        for (i, s) in suggested_steps(last).iter().enumerate() {
            let _ = writeln!(m, "{}. {s}", i + 1);
        }
        let _ = writeln!(m, "\n## Context for Retry\n\nWhen retrying, consider:");
        if let Some(f) = last {
            let _ = writeln!(m, "- The last failure: {}", f.summary);
            let _ = writeln!(m, "- Its decisive line: `{}`", f.headline());
        }
        let tried = state.strategies();
        if !tried.is_empty() {
            let _ = writeln!(m, "- Strategies already tried: {}", names(&tried).join(", "));
        }
        let _ = writeln!(m, "- Patterns seen: {}", state.patterns().join(", "));
        let _ = writeln!(
            m,
            "- Start again with `loopwright run` once the cause is fixed; finished stages of task {} are not repeated",
            self.task_id
        );
        m
    }
}

fn root_cause(me: Option<&DeadLetterSummary>, _similar: &[&DeadLetterSummary]) -> String {
    let Some(me) = me else { return "unknown".into() };
    let ext = me.error_signature.split(':').nth(1).unwrap_or("");
    match (me.final_pattern.as_str(), ext) {
        ("type-error", _) => "Type system constraints: the types involved do not fit the intended change".into(),
        ("import-not-found", "py") => "Python path/module resolution".into(),
        ("import-not-found" | "dependency-conflict", _) => {
            "The dependency setup of the project (manifest or install)".into()
        }
        ("test-failure" | "regression-detected", _) => {
            "Test environment or fixture issue, or an expectation the code cannot meet".into()
        }
        ("syntax-error", _) => "The generated code is repeatedly malformed in the same place".into(),
        (p, _) => format!("A recurring {p} with the error \"{}\"", me.error_line),
    }
}

fn investigation_target(me: Option<&DeadLetterSummary>, similar: &[&DeadLetterSummary]) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for s in me.into_iter().chain(similar.iter().copied()) {
        for f in &s.files {
            *counts.entry(f.as_str()).or_default() += 1;
        }
    }
    counts.into_iter().max_by_key(|(f, n)| (*n, std::cmp::Reverse(*f))).map_or_else(
        || "the files named in the error".to_owned(),
        |(f, n)| format!("`{f}` (touched by {n} of the failures)"),
    )
}

/// Strategies by name, as files and prompts write them.
fn names(strategies: &[Strategy]) -> Vec<String> {
    strategies.iter().map(|s| s.as_str().to_owned()).collect()
}

fn alternative(tried_here: &[String], similar: &[&DeadLetterSummary]) -> String {
    let all = Strategy::ALL.iter().map(|(n, _)| *n).filter(|n| *n != Strategy::Escalate.as_str());
    let tried: Vec<&str> = tried_here
        .iter()
        .map(String::as_str)
        .chain(similar.iter().flat_map(|s| s.strategies.iter().map(String::as_str)))
        .collect();
    match all.into_iter().find(|s| !tried.contains(s)) {
        Some(s) => format!("`{s}` has not been tried on this error; or split the task into smaller steps"),
        None => "every strategy was tried: split the task into smaller steps, or change the approach by hand".into(),
    }
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
            retry_context(2, 3, Some("check for whitespace with .trim()"), &failures),
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
