//! The dead letter (seed 000): a stage the closed loop gave up on, written for a person, with
//! what similar failures of other tasks suggest.

use std::fmt::Write as _;

use super::{Failure, FileChanges, LoopState, Strategy};
use crate::patterns::Builtin;

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
        let similar = self.similar();
        let mut m = String::new();
        self.front_matter(&mut m, similar.len());
        let _ = writeln!(m, "## Task Description\n\n{}\n", self.task.trim());
        self.error_chain(&mut m);
        let _ = writeln!(m, "## Files Modified\n");
        let files = self.state.files();
        if files.is_empty() {
            let _ = writeln!(m, "- (none)");
        }
        for f in files.described() {
            let _ = writeln!(m, "- {f}");
        }
        m.push('\n');
        if !similar.is_empty() {
            self.suggestions(&mut m, &similar);
        }
        self.manual_steps(&mut m);
        m
    }

    /// The front matter: what failed, how often, how it is recognised.
    fn front_matter(&self, m: &mut String, similar: usize) {
        let state = self.state;
        let last = state.iterations.last().and_then(|i| i.failure.as_ref());
        let me = self.summary();
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
        let _ = writeln!(m, "similar_failures: {similar}");
        let _ = writeln!(m, "error_signature: {}", quote(me.as_ref().map_or("", |s| s.error_signature.as_str())));
        let _ = writeln!(m, "error_line: {}", quote(me.as_ref().map_or("", |s| s.error_line.as_str())));
        let paths: Vec<String> = state.files().paths().iter().map(|p| (*p).to_owned()).collect();
        let _ = writeln!(m, "files_modified: {}", list(&paths));
        let _ = writeln!(m, "---\n");
    }

    /// Each attempt: what it changed, how it failed, what was tried next.
    fn error_chain(&self, m: &mut String) {
        let _ = writeln!(m, "## Error Chain\n");
        let mut previous: Option<&str> = None;
        for it in &self.state.iterations {
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
    }

    /// What the similar failures suggest, and a pattern to learn when they are many.
    fn suggestions(&self, m: &mut String, similar: &[&DeadLetterSummary]) {
        let me = self.summary();
        let _ = writeln!(
            m,
            "## Smart Suggestions\n\nBased on {} similar failure{}:\n",
            similar.len(),
            if similar.len() == 1 { "" } else { "s" }
        );
        let _ = writeln!(m, "1. **Most likely root cause:** {}", root_cause(me.as_ref(), similar));
        let _ = writeln!(m, "2. **Specific area to investigate:** {}", investigation_target(me.as_ref(), similar));
        let _ =
            writeln!(m, "3. **Alternative approach:** {}\n", alternative(&names(&self.state.strategies()), similar));
        let _ = writeln!(m, "### Similar Failures\n");
        for s in similar {
            let _ =
                writeln!(m, "- {}: {} ({})", s.task_id, s.error_line, s.blocked_at.get(..10).unwrap_or(&s.blocked_at));
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

    /// What a person can do, and what to keep in mind when trying again.
    fn manual_steps(&self, m: &mut String) {
        let state = self.state;
        let last = state.iterations.last().and_then(|i| i.failure.as_ref());
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
    }
}

fn root_cause(me: Option<&DeadLetterSummary>, _similar: &[&DeadLetterSummary]) -> String {
    let Some(me) = me else { return "unknown".into() };
    let ext = me.error_signature.split(':').nth(1).unwrap_or("");
    match (Builtin::of(&me.final_pattern), ext) {
        (Some(Builtin::TypeError), _) => {
            "Type system constraints: the types involved do not fit the intended change".into()
        }
        (Some(Builtin::ImportNotFound), "py") => "Python path/module resolution".into(),
        (Some(Builtin::ImportNotFound | Builtin::DependencyConflict), _) => {
            "The dependency setup of the project (manifest or install)".into()
        }
        (Some(Builtin::TestFailure | Builtin::RegressionDetected), _) => {
            "Test environment or fixture issue, or an expectation the code cannot meet".into()
        }
        (Some(Builtin::SyntaxError), _) => "The generated code is repeatedly malformed in the same place".into(),
        _ => format!("A recurring {} with the error \"{}\"", me.final_pattern, me.error_line),
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

/// Manual steps for a failure, by its pattern (seed 000 "Suggested Manual Steps").
pub fn suggested_steps(failure: Option<&Failure>) -> Vec<String> {
    use Builtin as B;
    let first = match failure.and_then(|f| f.pattern.as_deref()).and_then(Builtin::of) {
        Some(B::PermissionError) => {
            "Check the ownership and permissions of the files the error names; loopwright does not change them"
        }
        Some(B::DiskFull) => "Free disk space (build caches, logs), then retry",
        Some(B::MergeConflict) => "Resolve the conflict markers by hand and commit",
        Some(B::GitError) => "Inspect `git status` and the repository state; fix it by hand before retrying",
        Some(B::TypeError | B::UndefinedName) => {
            "Read the definitions of the types and names the error mentions; the change may break a contract"
        }
        Some(B::ImportNotFound | B::DependencyConflict | B::CommandNotFound) => {
            "Install or declare the missing dependency or tool, or fix the import path"
        }
        Some(B::TestFailure | B::RegressionDetected) => {
            "Run the failing test alone and compare what it expects with what the code does"
        }
        Some(B::LintError | B::FormatError) => {
            "Run the project's fixer (formatter / linter --fix) and review what it cannot fix"
        }
        Some(B::Timeout | B::NetworkError | B::RateLimit) => {
            "Check the service or resource the stage waits on; retry when it is available"
        }
        Some(B::SyntaxError) | None => "Read the last error above and reproduce it by hand",
    };
    vec![
        first.to_owned(),
        "Review the task definition: are its success checks achievable?".to_owned(),
        "Fix the specific issue by hand, then `retry`, or give the agent a `fix` instruction".to_owned(),
        "Skip the stage if later stages do not need it, or abort the run".to_owned(),
    ]
}
