//! The night's summary of a loop (`loopwright auto report`, the dashboard): what each
//! iteration's steps reported, the checks and their results, the waits for the provider, the
//! stalls, recoveries and restarts with why, what a person was asked, the module's changes
//! since the start and the cost where the CLI printed one. Built from the typed journal only.

use jiff::Timestamp;
use serde::Serialize;

use crate::event::AutoEvent;
use crate::signal::StopReason;
use crate::state::{AutoStatus, LoopStatus, WaitKind};

/// A loop's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The session.
    pub session_name: String,
    /// The task module.
    pub task_dir: String,
    /// The agent.
    pub agent: String,
    /// Where the loop is.
    pub status: LoopStatus,
    /// Why it was stopped.
    pub stop_reason: Option<StopReason>,
    /// When it started.
    pub started_at: Timestamp,
    /// When it ended (its last entry, for an ended loop).
    pub ended_at: Option<Timestamp>,
    /// Seconds supervised, waits excluded.
    pub elapsed_s: f64,
    /// Seconds waited for the provider.
    pub waited_s: f64,
    /// Iterations completed.
    pub iterations: u64,
    /// Each step the agent reported, in order.
    pub steps: Vec<StepReport>,
    /// Each check the supervisor ran.
    pub checks: Vec<CheckReport>,
    /// Each wait for the provider.
    pub waits: Vec<WaitReport>,
    /// Each time the agent was helped along, with why: stalls (nudged), hung calls, failed
    /// verifications, continuations.
    pub recoveries: Vec<Happening>,
    /// Each restart of the agent (and each exit and takeover around it), with why.
    pub restarts: Vec<Happening>,
    /// How many times the agent was started again.
    pub restart_count: usize,
    /// Each time a person was needed, with why.
    pub needs_human: Vec<Happening>,
    /// What each person answered (the keys or the menu choice) and approved.
    pub answered: Vec<Happening>,
    /// What changed in the working tree since the loop started: commits and the diff.
    pub changes: Changes,
    /// The cost or token use the CLI printed when it exited, if it did.
    pub cost: Option<String>,
}

/// One step the agent reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepReport {
    /// When.
    pub at: Timestamp,
    /// Its iteration.
    pub iteration: Option<u64>,
    /// The step.
    pub step: crate::signal::Step,
    /// Its result.
    pub result: crate::signal::Outcome,
    /// What came next.
    pub next: crate::signal::Next,
}

/// One check run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckReport {
    /// When.
    pub at: Timestamp,
    /// The command.
    pub command: String,
    /// Passed.
    pub passed: bool,
    /// Its exit code.
    pub exit_code: Option<i32>,
}

/// One wait for the provider.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitReport {
    /// When it began.
    pub at: Timestamp,
    /// A usage limit or a rate limit.
    pub wait: WaitKind,
    /// Until when.
    pub until: Timestamp,
    /// The reset time was read from the screen.
    pub given: bool,
    /// The line that started it.
    pub excerpt: String,
}

/// Something that happened, with why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Happening {
    /// When.
    pub at: Timestamp,
    /// What and why, in words.
    pub what: String,
}

/// The working tree's changes since the loop started.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct Changes {
    /// The commits made since the loop started (`git log --oneline`), newest first.
    pub commits: Vec<String>,
    /// `git diff --stat` of the working tree against the commit the loop started at.
    pub stat: String,
    /// Files in the working tree git does not track yet (and does not ignore).
    pub untracked: Vec<String>,
    /// Why there is nothing to show (not a git repository, no start commit).
    pub unavailable: Option<String>,
}

impl Report {
    /// The report of the loop `status` from its journal (`entries` in order, each with its
    /// time), its changes and `now`.
    pub fn build(status: &AutoStatus, entries: &[(Timestamp, AutoEvent)], changes: Changes, now: Timestamp) -> Self {
        let mut r = Report {
            session_name: status.session_name.clone(),
            task_dir: status.task_dir.clone(),
            agent: status.agent.clone(),
            status: status.status,
            stop_reason: status.stop_reason,
            started_at: status.started_at,
            ended_at: None,
            elapsed_s: status.elapsed_s,
            waited_s: status.quota_paused_s,
            iterations: status.iteration,
            steps: vec![],
            checks: vec![],
            waits: vec![],
            recoveries: vec![],
            restarts: vec![],
            restart_count: 0,
            needs_human: vec![],
            answered: vec![],
            changes,
            cost: None,
        };
        if !status.status.is_final() {
            r.elapsed_s = status.elapsed_at(now);
        }
        for (at, e) in entries {
            let at = *at;
            let happened = |what: String| Happening { at, what };
            match e {
                AutoEvent::Signal { signal, .. } => r.steps.push(StepReport {
                    at,
                    iteration: signal.iteration,
                    step: signal.step,
                    result: signal.result,
                    next: signal.next,
                }),
                AutoEvent::Check { command, passed, exit_code, .. } => {
                    r.checks.push(CheckReport { at, command: command.clone(), passed: *passed, exit_code: *exit_code });
                }
                AutoEvent::QuotaWait { wait, resets_at, given, excerpt, .. } => r.waits.push(WaitReport {
                    at,
                    wait: *wait,
                    until: *resets_at,
                    given: *given,
                    excerpt: excerpt.clone(),
                }),
                AutoEvent::Stall { .. } | AutoEvent::HungCall { .. } | AutoEvent::VerificationFailed { .. } => {
                    r.recoveries.push(happened(e.describe()));
                }
                AutoEvent::Keys { why, .. } if why == "continuation prompt" => {
                    r.recoveries.push(happened("a continuation prompt answered".into()));
                }
                AutoEvent::Keys { keys, why, .. } if why.starts_with("typed by ") => {
                    let (who, choice) =
                        why["typed by ".len()..].split_once(": ").unwrap_or((&why["typed by ".len()..], ""));
                    r.answered.push(happened(if choice.is_empty() {
                        format!("{who} typed `{keys}`")
                    } else {
                        format!("{who} answered {choice}")
                    }));
                }
                AutoEvent::ChecksApproved(a) => r.answered.push(happened(format!(
                    "{} approved the checks {}",
                    a.by,
                    a.checks.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
                ))),
                AutoEvent::Restart { .. } => {
                    r.restart_count += 1;
                    r.restarts.push(happened(e.describe()));
                }
                AutoEvent::Reattached { .. } | AutoEvent::Failed { .. } => r.restarts.push(happened(e.describe())),
                AutoEvent::Exited { excerpt, .. } => {
                    if let Some(cost) = cost_line(excerpt) {
                        r.cost = Some(cost);
                    }
                    r.restarts.push(happened(e.describe()));
                }
                AutoEvent::NeedsHuman { .. } | AutoEvent::ChecksNeedApproval { .. } => {
                    r.needs_human.push(happened(e.describe()));
                }
                AutoEvent::Finished { .. } => r.ended_at = Some(at),
                _ => {}
            }
        }
        r
    }

    /// The report as Markdown.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        line(format!("# Auto loop `{}`: {}", self.session_name, self.status));
        line(String::new());
        line(format!("- module: `{}`, agent: {}", self.task_dir, self.agent));
        line(format!(
            "- started {}{}; {} supervised, {} waiting for the provider",
            self.started_at.strftime("%Y-%m-%d %H:%M:%S UTC"),
            self.ended_at.map(|t| format!(", ended {}", t.strftime("%H:%M:%S UTC"))).unwrap_or_default(),
            words(self.elapsed_s),
            words(self.waited_s)
        ));
        line(format!(
            "- {} iteration(s){}",
            self.iterations,
            self.stop_reason.map(|r| format!("; stopped: {r}")).unwrap_or_default()
        ));
        if let Some(cost) = &self.cost {
            line(format!("- cost: {cost}"));
        }
        line(String::new());
        line("## Steps".into());
        line(String::new());
        if self.steps.is_empty() {
            line("No step reported.".into());
        }
        for s in &self.steps {
            line(format!(
                "- {} {}{} → {} (next {})",
                s.at.strftime("%H:%M:%S"),
                s.iteration.map(|i| format!("iteration {i}: ")).unwrap_or_default(),
                s.step,
                s.result,
                s.next
            ));
        }
        let sections: [(&str, Vec<String>); 6] = [
            (
                "Checks",
                self.checks
                    .iter()
                    .map(|c| {
                        format!(
                            "- {} `{}` {}",
                            c.at.strftime("%H:%M:%S"),
                            c.command,
                            if c.passed {
                                "passed".to_owned()
                            } else {
                                format!(
                                    "failed ({})",
                                    c.exit_code.map_or("no exit status".into(), |x| format!("exit {x}"))
                                )
                            }
                        )
                    })
                    .collect(),
            ),
            (
                "Waits for the provider",
                self.waits
                    .iter()
                    .map(|w| {
                        format!(
                            "- {} {} until {}{}: {}",
                            w.at.strftime("%H:%M:%S"),
                            match w.wait {
                                WaitKind::Quota => "usage limit",
                                WaitKind::RateLimit => "rate limit",
                            },
                            w.until.strftime("%H:%M:%S"),
                            if w.given { "" } else { " (no reset time shown)" },
                            w.excerpt
                        )
                    })
                    .collect(),
            ),
            ("Recoveries", happenings(&self.recoveries)),
            ("Restarts", happenings(&self.restarts)),
            ("A person was needed", happenings(&self.needs_human)),
            ("What people answered", happenings(&self.answered)),
        ];
        for (title, items) in sections {
            line(String::new());
            line(format!("## {title}"));
            line(String::new());
            if items.is_empty() {
                line("None.".into());
            }
            for i in items {
                line(i);
            }
        }
        line(String::new());
        line("## Changes in the working tree".into());
        line(String::new());
        let c = &self.changes;
        match &c.unavailable {
            Some(why) => line(format!("Not available: {why}.")),
            None if c.stat.trim().is_empty() && c.untracked.is_empty() && c.commits.is_empty() => {
                line("None.".into());
            }
            None => {
                for commit in &self.changes.commits {
                    line(format!("- commit {commit}"));
                }
                if !self.changes.stat.trim().is_empty() {
                    line("```".into());
                    line(self.changes.stat.trim_end().to_owned());
                    line("```".into());
                }
                for f in &self.changes.untracked {
                    line(format!("- new: `{f}`"));
                }
            }
        }
        out
    }
}

fn happenings(items: &[Happening]) -> Vec<String> {
    items.iter().map(|h| format!("- {} {}", h.at.strftime("%H:%M:%S"), h.what)).collect()
}

/// Seconds in words: `42 s`, `3 min 5 s`, `2 h 4 min`.
fn words(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// The cost or token use an exit banner printed (`Total cost: $1.23`, Codex's `Token usage:
/// total=…`).
fn cost_line(screen: &str) -> Option<String> {
    screen
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with("Total cost:") || l.starts_with("Token usage:"))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signal::Signal;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("time")
    }

    #[test]
    fn a_night_reads_as_steps_checks_waits_recoveries_restarts_and_changes() {
        let status = AutoStatus {
            session_name: "night".into(),
            task_dir: "/ws/mod".into(),
            agent: "claude".into(),
            status: LoopStatus::Complete,
            iteration: 1,
            started_at: at("2026-11-25T01:00:00Z"),
            elapsed_s: 3725.0,
            quota_paused_s: 1800.0,
            ..AutoStatus::default()
        };
        let signal = |step: &str, result: &str, next: &str| AutoEvent::Signal {
            signal: Signal {
                step: crate::signal::Step::parse(step).expect("a step"),
                result: crate::signal::Outcome::parse(result).expect("an outcome"),
                next: crate::signal::Next::parse(next).expect("a next step"),
                checkpoint: crate::signal::Checkpoint::None,
                iteration: Some(1),
                timestamp: "2026-11-25T01:10:00Z".into(),
            },
            table_next: None,
            unjournaled: 0,
        };
        let entries = vec![
            (at("2026-11-25T01:10:00Z"), signal("plan", "(generated)", "check")),
            (
                at("2026-11-25T01:20:00Z"),
                AutoEvent::QuotaWait {
                    pattern: "claude.limit@2026".into(),
                    excerpt: "You've hit your limit · resets 2am (UTC)".into(),
                    resets_at: at("2026-11-25T02:00:00Z"),
                    given: true,
                    wait: WaitKind::Quota,
                },
            ),
            (at("2026-11-25T02:05:00Z"), AutoEvent::Stall { captures: 3, signal_age_s: None, excerpt: String::new() }),
            (
                at("2026-11-25T02:06:00Z"),
                AutoEvent::Exited {
                    code: 0,
                    signal: None,
                    session_id: Some("abc".into()),
                    excerpt: "Total cost: $1.20\nclaude --resume abc".into(),
                },
            ),
            (
                at("2026-11-25T02:06:05Z"),
                AutoEvent::Restart {
                    restart_count: 1,
                    resume: Some("abc".into()),
                    why: "the agent exited mid-loop".into(),
                    waited_s: 5.0,
                },
            ),
            (
                at("2026-11-25T02:30:00Z"),
                AutoEvent::Check {
                    command: "pytest".into(),
                    exit_code: Some(0),
                    passed: true,
                    output_tail: String::new(),
                },
            ),
            (
                at("2026-11-25T02:10:00Z"),
                AutoEvent::Keys {
                    keys: "3".into(),
                    why: "typed by alice: choice 3 (No)".into(),
                    excerpt: String::new(),
                },
            ),
            (
                at("2026-11-25T02:11:00Z"),
                AutoEvent::Keys { keys: "y⏎".into(), why: "typed by bo".into(), excerpt: String::new() },
            ),
            (
                at("2026-11-25T02:31:00Z"),
                AutoEvent::Finished { status: LoopStatus::Complete, stop_reason: None, iteration: 1, by: None },
            ),
        ];
        let changes = Changes {
            commits: vec!["1a2b3c4 Add the greeting".into()],
            stat: " mod/plan.md | 12 ++++++++++++\n 1 file changed, 12 insertions(+)\n".into(),
            untracked: vec!["mod/notes.md".into()],
            unavailable: None,
        };
        let report = Report::build(&status, &entries, changes, at("2026-11-25T09:00:00Z"));
        assert_eq!(report.cost.as_deref(), Some("Total cost: $1.20"));
        assert_eq!(report.ended_at, Some(at("2026-11-25T02:31:00Z")));
        assert_eq!(report.restart_count, 1);
        assert_eq!(
            report.to_markdown(),
            "# Auto loop `night`: complete

- module: `/ws/mod`, agent: claude
- started 2026-11-25 01:00:00 UTC, ended 02:31:00 UTC; 1 h 2 min supervised, 30 min 0 s waiting for the provider
- 1 iteration(s)
- cost: Total cost: $1.20

## Steps

- 01:10:00 iteration 1: plan → (generated) (next check)

## Checks

- 02:30:00 `pytest` passed

## Waits for the provider

- 01:20:00 usage limit until 02:00:00: You've hit your limit · resets 2am (UTC)

## Recoveries

- 02:05:00 stalled (3 unchanged looks)

## Restarts

- 02:06:00 agent exited (code 0)
- 02:06:05 restart 1, resuming its session: the agent exited mid-loop

## A person was needed

None.

## What people answered

- 02:10:00 alice answered choice 3 (No)
- 02:11:00 bo typed `y⏎`

## Changes in the working tree

- commit 1a2b3c4 Add the greeting
```
 mod/plan.md | 12 ++++++++++++
 1 file changed, 12 insertions(+)
```
- new: `mod/notes.md`
"
        );
    }
}
