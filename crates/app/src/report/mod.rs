//! A run's result for CI (SPEC §15): JUnit XML, a Markdown summary, and GitHub Actions'
//! workflow commands and files. Each is a pure function of the journal's state — read once into
//! [`Summary`], the typed read model they share — and the pipeline (for the headlines' words).
//! A report file is written whole or not at all.

pub mod actions;
pub mod junit;
pub mod markdown;

use std::path::{Path, PathBuf};

use loopwright_engine::state::{StageState, StageStatus};
use loopwright_engine::{RunState, RunStatus};
use loopwright_spec::Pipeline;

use crate::ops::why::{self, Headline};

/// What a report is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JUnit XML: a suite for the run, a case per stage and per check.
    Junit,
    /// The run's "why" as Markdown.
    Markdown,
}

impl Format {
    /// Its name in `--report FORMAT=FILE` and `[report]`.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Junit => "junit",
            Format::Markdown => "markdown",
        }
    }
}

/// A report to write: its format and file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The format.
    pub format: Format,
    /// The file.
    pub path: PathBuf,
}

impl Target {
    /// Reads `junit=FILE` or `markdown=FILE`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (format, file) = text
            .split_once('=')
            .ok_or_else(|| format!("--report `{text}`: expected FORMAT=FILE, where FORMAT is junit or markdown"))?;
        let format = match format.trim() {
            "junit" => Format::Junit,
            "markdown" | "md" => Format::Markdown,
            other => {
                return Err(format!("--report `{text}`: unknown format `{other}`; expected junit or markdown"));
            }
        };
        if file.trim().is_empty() {
            return Err(format!("--report `{text}`: the file is missing after `=`"));
        }
        Ok(Self { format, path: PathBuf::from(file) })
    }
}

/// The reports a command writes: `[report]` of config.toml (its paths relative to the
/// workspace), each replaced by a `--report` of the same format.
pub fn targets(config: &loopwright_spec::config::ReportConfig, root: &Path, flags: &[Target]) -> Vec<Target> {
    let mut out: Vec<Target> = flags.to_vec();
    let configured = [(Format::Junit, &config.junit), (Format::Markdown, &config.markdown)];
    for (format, path) in configured {
        if let Some(path) = path
            && !out.iter().any(|t| t.format == format)
        {
            out.push(Target { format, path: root.join(path) });
        }
    }
    out
}

/// Writes each report whole (a temporary file beside it, renamed over it).
pub fn write(targets: &[Target], state: &RunState, pipeline: &Pipeline) -> Result<(), crate::error::Error> {
    if targets.is_empty() {
        return Ok(());
    }
    let summary = Summary::of(state, pipeline);
    for target in targets {
        let text = match target.format {
            Format::Junit => junit::render(&summary),
            Format::Markdown => markdown::render(&summary),
        };
        write_whole(&target.path, text.as_bytes()).map_err(|e| {
            crate::error::Error::Internal(anyhow::anyhow!(
                "cannot write the {} report to {}: {e}",
                target.format.as_str(),
                target.path.display()
            ))
        })?;
    }
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file in its folder, renamed over it.
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    file.persist(path).map(drop).map_err(|e| e.error)
}

/// How a stage ended, as a report says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It succeeded.
    Passed,
    /// It failed (its headline says why).
    Failed,
    /// It was skipped (the note says why).
    Skipped,
    /// Its outputs were taken from an earlier run of the task.
    Reused,
    /// It waits for a person (a gate, an escalation).
    Waiting,
    /// A person rejected it at its approval gate.
    Rejected,
    /// It was rolled back.
    RolledBack,
    /// It did not run (the run ended before it, or has not reached it).
    NotRun,
    /// It runs now, or is between attempts.
    Running,
}

impl Outcome {
    /// In one word.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
            Outcome::Skipped => "skipped",
            Outcome::Reused => "reused",
            Outcome::Waiting => "waiting",
            Outcome::Rejected => "rejected",
            Outcome::RolledBack => "rolled back",
            Outcome::NotRun => "not run",
            Outcome::Running => "running",
        }
    }
}

/// A check's last run in a stage, and what it did before.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckLine {
    /// Its name (its command when it has none).
    pub name: String,
    /// The command run.
    pub command: String,
    /// It passed in the stage's last evaluation.
    pub passed: bool,
    /// Its exit code there.
    pub exit_code: Option<i32>,
    /// How long it ran there.
    pub duration_ms: u64,
    /// The category of its failure there (the failure pattern), when classified.
    pub pattern: Option<String>,
    /// Its output's key lines there, when it failed.
    pub lines: Vec<String>,
    /// Earlier attempts where it failed: (attempt, the failure's pattern, its key lines).
    pub failed_before: Vec<(u32, Option<String>, Vec<String>)>,
}

/// A stage as a report shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct StageLine {
    /// The stage.
    pub id: String,
    /// How it ended.
    pub outcome: Outcome,
    /// Attempts made.
    pub attempts: u32,
    /// Time spent in attempts.
    pub duration_ms: u64,
    /// Why it failed or waits (its headline), when it did.
    pub headline: Option<Headline>,
    /// The failure pattern its last failure was classified as, when it was.
    pub pattern: Option<String>,
    /// A short note: why it was skipped, who rejected it, where its outputs came from.
    pub note: Option<String>,
    /// Its checks, as the closed loop ran them.
    pub checks: Vec<CheckLine>,
}

/// A run as every report reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The run.
    pub run_id: String,
    /// Its pipeline's name.
    pub pipeline: String,
    /// Its task.
    pub task: String,
    /// Its status.
    pub status: RunStatus,
    /// When it started.
    pub started: Option<jiff::Timestamp>,
    /// From its start to its last journal entry.
    pub duration_ms: u64,
    /// The run's headline (why it failed, waits or was cancelled).
    pub headline: Option<Headline>,
    /// Its stages, in the pipeline's order.
    pub stages: Vec<StageLine>,
    /// Tokens used.
    pub tokens: u64,
    /// What they cost.
    pub cost_usd: f64,
    /// True when some usage is estimated.
    pub estimated: bool,
}

impl Summary {
    /// The read model of `state`.
    pub fn of(state: &RunState, pipeline: &Pipeline) -> Self {
        let started = state.started.as_ref();
        let rejected = state.stages.iter().find(|s| s.approval.as_ref().is_some_and(|a| !a.granted));
        let headline = why::run_headline(state, state.status, pipeline).or_else(|| {
            let s = rejected?;
            let a = s.approval.as_ref()?;
            Some(Headline {
                tone: why::Tone::Cancelled,
                stage: Some(s.id.to_string()),
                title: format!("Rejected at the approval gate of stage {} by {}", s.id, a.by),
                check: None,
                lines: a.comment.iter().cloned().collect(),
                category: None,
                tried: Vec::new(),
                next: "Nothing runs on: start a new run when it should be tried again.".into(),
            })
        });
        let spend = state.spend();
        let duration_ms = match (state.created_at, state.updated_at) {
            (Some(a), Some(b)) => u64::try_from(b.duration_since(a).as_millis()).unwrap_or(0),
            _ => 0,
        };
        Self {
            run_id: state.run_id.to_string(),
            pipeline: started.map(|s| s.pipeline.clone()).unwrap_or_default(),
            task: started.map(|s| s.task.clone()).unwrap_or_default(),
            status: state.status,
            started: state.created_at,
            duration_ms,
            headline,
            stages: state.stages.iter().map(|s| stage_line(state, s, pipeline)).collect(),
            tokens: spend.tokens,
            cost_usd: spend.cost_usd,
            estimated: spend.estimated,
        }
    }

    /// The stages that failed (or were rejected).
    pub fn failures(&self) -> usize {
        self.stages.iter().filter(|s| matches!(s.outcome, Outcome::Failed | Outcome::Rejected)).count()
            + self.stages.iter().flat_map(|s| &s.checks).filter(|c| !c.passed).count()
    }
}

/// One stage's line.
fn stage_line(state: &RunState, s: &StageState, pipeline: &Pipeline) -> StageLine {
    let waiting = state.status == RunStatus::Waiting
        && (state.waiting_for_approval().is_some_and(|w| w.id == s.id)
            || state.waiting_for_escalation().is_some_and(|w| w.id == s.id));
    let reused = state.started.as_ref().is_some_and(|r| r.prior_outputs.contains_key(&s.id));
    let (outcome, note) = match s.status {
        _ if waiting => (Outcome::Waiting, None),
        _ if s.approval.as_ref().is_some_and(|a| !a.granted) => {
            let a = s.approval.as_ref().expect("just seen");
            let note = format!("rejected at its approval gate by {}", a.by)
                + &a.comment.as_ref().map(|c| format!(": {c}")).unwrap_or_default();
            (Outcome::Rejected, Some(note))
        }
        StageStatus::Success => (Outcome::Passed, None),
        StageStatus::Failed | StageStatus::Timeout => (Outcome::Failed, None),
        StageStatus::Skipped => (Outcome::Skipped, s.skip_reason.map(|r| format!("skipped: {}", r.as_str()))),
        StageStatus::RolledBack => (Outcome::RolledBack, Some("its changes were rolled back".to_owned())),
        StageStatus::Pending | StageStatus::Cancelled if reused => {
            (Outcome::Reused, Some("its outputs were taken from an earlier run of the task".to_owned()))
        }
        StageStatus::Pending | StageStatus::Cancelled => (Outcome::NotRun, Some(not_run(state))),
        StageStatus::Running | StageStatus::AttemptFailed | StageStatus::RetryWaiting | StageStatus::Looping => {
            (Outcome::Running, None)
        }
    };
    let headline = matches!(outcome, Outcome::Failed | Outcome::Waiting)
        .then(|| why::stage_headline(s, pipeline))
        .flatten()
        .or_else(|| (outcome == Outcome::Waiting).then(|| why::run_headline(state, state.status, pipeline)).flatten());
    StageLine {
        id: s.id.to_string(),
        outcome,
        attempts: s.attempts,
        duration_ms: s.duration_ms,
        headline,
        pattern: s
            .closed
            .as_ref()
            .and_then(|l| l.last_pattern().map(str::to_owned))
            .or_else(|| s.last_error.as_ref().and_then(|e| e.pattern.clone())),
        note,
        checks: checks(s),
    }
}

/// Why a stage did not run, in a few words.
fn not_run(state: &RunState) -> String {
    match state.status {
        RunStatus::Failed => match &state.failed_stage {
            Some(stage) => format!("not run: the run failed at stage {stage}"),
            None => "not run: the run failed".to_owned(),
        },
        RunStatus::Cancelled => "not run: the run was cancelled".to_owned(),
        RunStatus::Rejected => "not run: the run was rejected at an approval gate".to_owned(),
        RunStatus::Waiting => "not run yet: the run waits for a person".to_owned(),
        RunStatus::Interrupted => "not run yet: the run was interrupted".to_owned(),
        RunStatus::Success | RunStatus::Running | RunStatus::Queued => "not run yet".to_owned(),
    }
}

/// The checks of a closed-loop stage's last evaluation, each with its failures in earlier
/// attempts.
fn checks(s: &StageState) -> Vec<CheckLine> {
    let Some(lp) = s.closed.as_deref() else { return Vec::new() };
    let Some(last) = lp.iterations.iter().rev().find_map(|i| i.checks.as_ref().map(|c| (i, c))) else {
        return Vec::new();
    };
    let (last_iteration, last_checks) = last;
    let failure_of = |i: &loopwright_engine::state::Iteration, name: &str| {
        i.failure.as_ref().filter(|f| f.source == name).map(|f| (f.pattern.clone(), f.lines.clone()))
    };
    last_checks
        .iter()
        .map(|c| {
            let name = if c.name.is_empty() { c.command.clone() } else { c.name.clone() };
            let failed_before = lp
                .iterations
                .iter()
                .filter(|i| i.attempt != last_iteration.attempt)
                .filter_map(|i| {
                    let ran = i.checks.as_ref()?.iter().find(|r| r.name == c.name && !r.passed)?;
                    let (pattern, lines) = failure_of(i, &c.name).unwrap_or((None, why::last_lines(&ran.output)));
                    Some((i.attempt, pattern, lines))
                })
                .collect();
            let (pattern, lines) = if c.passed {
                (None, Vec::new())
            } else {
                failure_of(last_iteration, &c.name).unwrap_or((None, why::last_lines(&c.output)))
            };
            CheckLine {
                name,
                command: c.command.clone(),
                passed: c.passed,
                exit_code: c.exit_code,
                duration_ms: c.duration_ms,
                pattern,
                lines,
                failed_before,
            }
        })
        .collect()
}
