//! The rules of auto mode, without a terminal: built states, one observation, a fixed time,
//! and the whole next state and action list compared.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use loopwright_auto::Settings;
use loopwright_auto::decide::{self, Action, Observation, Rules};
use loopwright_auto::event::AutoEvent;
use loopwright_auto::holder::{Exit, Response};
use loopwright_auto::module::ModuleStatus;
use loopwright_auto::policy::Policy;
use loopwright_auto::screen::{Colour, Face};
use loopwright_auto::signal::StopReason;
use loopwright_auto::state::{AutoStatus, CheckRun, Ending, Internal, LoopStatus, Persisted, WaitKind};

const T0: &str = "2026-11-25T02:00:00Z";

fn at(offset_s: f64) -> Timestamp {
    T0.parse::<Timestamp>().expect("time") + SignedDuration::from_secs_f64(offset_s)
}

/// A loop an hour into its work, with the default settings (60 s heartbeat) unless changed.
fn running(change: impl FnOnce(&mut Settings)) -> Persisted {
    let mut settings = Settings::default();
    settings.config.timeout_minutes = 600.0;
    change(&mut settings);
    Persisted {
        status: AutoStatus {
            session_name: "s".into(),
            task_dir: "/ws/mod".into(),
            status: LoopStatus::Running,
            agent: "claude".into(),
            iteration: 2,
            max_iterations: 20,
            timeout_s: settings.timeout_minutes * 60.0,
            started_at: at(-3600.0),
            agent_session_id: Some("sess-1".into()),
            loop_id: "s-1".into(),
            ..AutoStatus::default()
        },
        internal: Internal {
            settings,
            launched_at: Some(at(-3000.0)),
            session_started: true,
            agent_pid: 4242,
            checks: vec!["pytest".into()],
            ..Internal::default()
        },
    }
}

struct World {
    policy: Policy,
    root: tempfile::TempDir,
}

impl World {
    fn new() -> Self {
        let policy = Settings::default().policy().expect("policy");
        Self { policy, root: tempfile::tempdir().expect("dir") }
    }

    fn decide(&self, p: &Persisted, obs: Observation, now: Timestamp) -> (Persisted, Vec<Action>) {
        let rules = Rules { policy: &self.policy, root: self.root.path(), zone: &TimeZone::UTC };
        decide::decide(p, obs, &rules, now)
    }
}

/// A settled screen: `rows`, each with the output offset since which it has been on screen; a
/// row starting with `§` is drawn in Claude Code's grey (the `§` not drawn).
fn screen(rows: &[(&str, u64)], output_bytes: u64) -> Response {
    let face = |r: &str| match r {
        _ if r.starts_with('§') => Face::Uniform { colour: Colour::Indexed(246), dim: false },
        _ if r.trim().is_empty() => Face::Unknown,
        _ => Face::Uniform { colour: Colour::Default, dim: false },
    };
    Response {
        pid: 4242,
        output_bytes,
        quiet_ms: 400,
        screen: rows.iter().map(|(r, _)| r.trim_start_matches('§')).collect::<Vec<_>>().join("\n"),
        row_ages: rows.iter().map(|(r, age)| if r.trim().is_empty() { 0 } else { *age }).collect(),
        row_faces: rows.iter().map(|(r, _)| face(r)).collect(),
        ..Response::default()
    }
}

fn look(screen: Response) -> Observation {
    Observation::Look { screen, heartbeat: false, cpu_ticks: None }
}

fn heartbeat(screen: Response, cpu: u64) -> Observation {
    Observation::Look { screen, heartbeat: true, cpu_ticks: Some(cpu) }
}

fn typed(actions: &[Action]) -> Vec<(String, String)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Type { text, why } => Some((text.clone(), why.clone())),
            _ => None,
        })
        .collect()
}

fn kinds(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .map(|a| match a {
            Action::Journal(e) => e.to_entry().0,
            Action::Type { why, .. } => format!("type:{why}"),
            Action::Launch { message, resume } => format!("launch:{message:?}:{}", resume.as_deref().unwrap_or("-")),
            other => format!("{other:?}").split([' ', '(', '{']).next().unwrap_or_default().to_lowercase(),
        })
        .collect()
}

/// Claude's permission prompt for `command`; every row's age is `age` unless `new_rows` says
/// which rows were drawn at `fresh`.
fn claude_prompt(command: &str, age: u64, fresh_command_row: Option<u64>) -> Vec<(String, u64)> {
    let rows = [
        "● Bash(earlier work)",
        "  ⎿  done",
        "",
        " Bash command",
        "",
        &format!("   {command}"),
        "§   Run it",
        "",
        " Do you want to proceed?",
        " ❯ 1. Yes",
        "   2. Yes, and don't ask again for this command",
        "   3. No",
        "",
        " Esc to cancel · Tab to amend",
    ];
    rows.iter()
        .enumerate()
        .map(|(i, r)| ((*r).to_owned(), if i == 5 { fresh_command_row.unwrap_or(age) } else { age }))
        .collect()
}

fn as_rows(v: &[(String, u64)]) -> Vec<(&str, u64)> {
    v.iter().map(|(r, a)| (r.as_str(), *a)).collect()
}

#[test]
fn back_to_back_prompts_are_each_answered_once_as_they_appear() {
    let w = World::new();
    let mut p = running(|_| {});
    // The first prompt, drawn after the last keystroke (offset 100): answered at once, at a
    // look between heartbeats.
    p.internal.last_action_output = 100;
    let first = claude_prompt("pytest -q", 150, None);
    let (p1, actions) = w.decide(&p, look(screen(&as_rows(&first), 2000)), at(0.5));
    assert_eq!(typed(&actions), [("1".to_owned(), "command prompt".to_owned())]);
    assert_eq!(p1.internal.last_action_output, 2000);
    // The same screen looked at again (a heartbeat, more spinner output): not answered twice.
    let (_, again) = w.decide(&p1, look(screen(&as_rows(&first), 2100)), at(1.0));
    assert_eq!(typed(&again), []);
    // The second prompt replaces the first in the same frame: the menu rows have the same
    // text (old by their ages), the command row is new — answered.
    let second = claude_prompt("cargo test", 150, Some(2050));
    let (p2, actions) = w.decide(&p1, look(screen(&as_rows(&second), 2300)), at(1.2));
    assert_eq!(typed(&actions), [("1".to_owned(), "command prompt".to_owned())]);
    assert_eq!(p2.status.status, LoopStatus::Running);
    // A third identical to the second (the same command twice in one answer): every row of
    // its block is old, but it is the latest thing on a screen that changed — answered.
    let mut third = claude_prompt("cargo test", 150, None);
    third[1].0 = "  ⎿  3 passed".into();
    let (_, actions) = w.decide(&p2, look(screen(&as_rows(&third), 2600)), at(1.4));
    assert_eq!(typed(&actions), [("1".to_owned(), "command prompt".to_owned())]);
}

/// Gemini CLI 0.61's folder dialog (its frame taken off), under `above`, every row of age `age`.
fn gemini_trust(above: &str, age: u64) -> Vec<(String, u64)> {
    let mut rows: Vec<String> = (0..6).map(|i| format!(" {above} {i}")).collect();
    rows.extend(
        [
            " ╭────────────╮",
            "",
            "   Do you trust the files in this folder?",
            "",
            "   Trusting a folder allows Gemini CLI to load its local configurations, including custom",
            "   commands, hooks, MCP servers, agent skills, and settings. These configurations could",
            "   execute code on your behalf or change the behavior of the CLI.",
            "",
            "",
            "   ● 1. Trust folder (ws)",
            "     2. Trust parent folder (tmp)",
            "     3. Don't trust",
            " ╰────────────╯",
        ]
        .map(str::to_owned),
    );
    rows.into_iter().map(|r| (r, age)).collect()
}

#[test]
fn a_dialog_still_drawn_after_its_answer_is_not_answered_again_when_only_the_rows_above_change() {
    let w = World::new();
    let mut p = running(|_| {});
    p.internal.last_action_output = 100;
    let dialog = gemini_trust("? Shell  touch hi.txt", 150);
    let (p1, actions) = w.decide(&p, look(screen(&as_rows(&dialog), 2000)), at(0.5));
    assert_eq!(typed(&actions), [("\r".to_owned(), "trust prompt".to_owned())]);
    // Gemini redraws what is above the dialog while it restarts with the answer.
    let redrawn = gemini_trust("✓ Shell  touch hi.txt", 150);
    let (p2, actions) = w.decide(&p1, look(screen(&as_rows(&redrawn), 2400)), at(0.9));
    assert_eq!(typed(&actions), []);
    // The dialog drawn anew (its rows newer than the keystroke): asked again, answered.
    let anew = gemini_trust("✓ Shell  touch hi.txt", 2500);
    let (_, actions) = w.decide(&p2, look(screen(&as_rows(&anew), 2600)), at(1.5));
    assert_eq!(typed(&actions), [("\r".to_owned(), "trust prompt".to_owned())]);
}

#[test]
fn a_prompt_is_read_only_once_its_frame_settled_and_history_below_output_is_not_a_prompt() {
    let w = World::new();
    let mut p = running(|_| {});
    p.internal.last_action_output = 100;
    let prompt = claude_prompt("pytest", 150, None);
    let mut drawing = screen(&as_rows(&prompt), 2000);
    drawing.quiet_ms = 20;
    let (same, actions) = w.decide(&p, look(drawing), at(0.1));
    assert_eq!((typed(&actions), same), (vec![], p.clone()));
    // An old question with the agent's output below it: history, not a prompt.
    let old = claude_prompt("pytest", 50, None);
    let mut history = as_rows(&old);
    history.extend([("● Bash(pytest)", 300), ("  ⎿  3 passed", 300), ("● Now the docs", 300)]);
    let (_, actions) = w.decide(&p, look(screen(&history, 2000)), at(0.2));
    assert_eq!(typed(&actions), []);
}

#[test]
fn a_destructive_command_waits_for_a_person_with_the_command_shown() {
    let w = World::new();
    let mut p = running(|_| {});
    p.internal.last_action_output = 100;
    let prompt = claude_prompt("git push --force origin main", 150, None);
    let (next, actions) = w.decide(&p, look(screen(&as_rows(&prompt), 2000)), at(0.0));
    assert_eq!(typed(&actions), []);
    assert_eq!(next.status.status, LoopStatus::NeedsHuman);
    assert!(next.status.needs_human.as_deref().is_some_and(|n| n.contains("command:\ngit push --force origin main")));
    assert_eq!(kinds(&actions), ["needs_human"]);
}

#[test]
fn a_typed_first_message_goes_as_soon_as_the_cli_drew_and_paused() {
    let w = World::new();
    let mut p = running(|_| {});
    p.internal.launched_at = Some(at(0.0));
    p.internal.session_started = false;
    p.internal.pending_typed = Some("the protocol".into());
    let drawn = screen(&[("aider v0.86", 1), ("> ", 1)], 300);
    let (next, actions) = w.decide(&p, look(drawn), at(0.7));
    assert_eq!(typed(&actions), [("\x1b[200~the protocol\x1b[201~\r".to_owned(), "first message".to_owned())]);
    assert_eq!((next.internal.pending_typed, next.internal.session_started), (None, true));
    // One that draws nothing gets it after the startup grace (10 s), not the stall window.
    let blank = Response { pid: 4242, quiet_ms: 9000, ..Response::default() };
    let (_, early) = w.decide(&p, look(blank.clone()), at(9.0));
    let (_, late) = w.decide(&p, look(blank), at(10.5));
    assert_eq!((typed(&early).len(), typed(&late).len()), (0, 1));
}

#[test]
fn a_usage_limit_menu_is_waited_out_to_the_reset_time_on_screen_with_one_continue() {
    let w = World::new();
    let mut p = running(|s| s.config.quota_jitter_seconds = 2.0);
    p.internal.last_action_output = 100;
    let rows = [
        ("⎿  You've hit your session limit · resets 2:30am (UTC)", 150),
        ("", 0),
        (" What do you want to do?", 150),
        (" ❯ 1. Stop and wait for limit to reset", 150),
        ("   2. Add funds to continue with extra usage", 150),
        ("   3. Upgrade your plan", 150),
    ];
    let (waiting, actions) = w.decide(&p, look(screen(&rows, 900)), at(0.0));
    assert_eq!(typed(&actions), [("1".to_owned(), "quota_menu prompt".to_owned())]);
    assert_eq!(waiting.status.status, LoopStatus::QuotaWait);
    assert_eq!(waiting.status.quota_resets_at, Some("2026-11-25T02:30:00Z".parse().expect("t")));
    assert_eq!(waiting.status.quota_wait_since, Some(at(0.0)));
    assert_eq!(decide::wake_at(&waiting, at(0.0)), Some("2026-11-25T02:30:02Z".parse().expect("t")));
    // Before the reset and its jitter: nothing, not even at a heartbeat of a still screen.
    let still = screen(&[("  Stopped: waiting for the limit to reset", 950)], 1000);
    let (same, actions) = w.decide(&waiting, heartbeat(still.clone(), 0), at(1801.0));
    assert_eq!((typed(&actions), same.status.status), (vec![], LoopStatus::QuotaWait));
    // After: one continue, the wait's time not counted against the timeout.
    let (resumed, actions) = w.decide(&waiting, heartbeat(still, 0), at(1803.0));
    assert_eq!(typed(&actions), [("continue\r".to_owned(), "quota reset: one continue".to_owned())]);
    assert_eq!(resumed.status.status, LoopStatus::Running);
    assert_eq!(resumed.status.quota_paused_s, 1803.0);
    assert_eq!(resumed.status.elapsed_at(at(1803.0)), 3600.0);
}

#[test]
fn a_repeated_identical_limit_line_starts_a_new_wait_and_a_passed_reset_means_now() {
    let w = World::new();
    let mut p = running(|s| s.config.quota_jitter_seconds = 1.0);
    // After the last wait's continue (offset 500), the same line again, drawn below the old
    // one: its age (the second row with that text) is new.
    p.internal.last_action_output = 500;
    let line = "You've hit your limit · resets 1:55am (UTC)";
    let rows = [(line, 100), ("> continue", 500), (line, 520)];
    let (waiting, actions) = w.decide(&p, look(screen(&rows, 600)), at(0.0));
    assert_eq!(kinds(&actions), ["quota_wait"]);
    // 1:55am passed five minutes ago: the reset is now, the continue after the jitter.
    assert_eq!(waiting.status.quota_resets_at, Some(at(0.0)));
    // The old line alone, nothing new: no wait.
    let (_, actions) = w.decide(&p, look(screen(&[(line, 100), ("> continue", 500)], 600)), at(0.0));
    assert_eq!(kinds(&actions), Vec::<String>::new());
}

#[test]
fn the_providers_rate_limit_is_waited_out_with_backoff_never_nudged_and_never_failed() {
    let w = World::new();
    let mut p = running(|s| {
        s.config.quota_jitter_seconds = 10.0;
        s.config.heartbeat_seconds = 1.0;
    });
    p.internal.last_action_output = 100;
    // Claude retries by itself: a wait until its retry, the clock paused.
    let retrying = screen(&[("✻ API error · Retrying in 4s · attempt 3/10", 150), ("  esc to interrupt", 150)], 300);
    let (waiting, actions) = w.decide(&p, look(retrying.clone()), at(0.0));
    assert_eq!(kinds(&actions), ["quota_wait"]);
    assert_eq!((waiting.status.status, waiting.internal.wait), (LoopStatus::QuotaWait, WaitKind::RateLimit));
    // Heartbeats of an unchanged screen while it waits: no stall, no nudge.
    let mut state = waiting.clone();
    for i in 1..=12 {
        let (next, actions) = w.decide(&state, heartbeat(retrying.clone(), 0), at(f64::from(i)));
        assert_eq!(typed(&actions), [], "heartbeat {i}");
        state = next;
    }
    assert_eq!(state.status.status, LoopStatus::QuotaWait);
    // It gave up: at the backoff's end, one continue.
    let gave_up = screen(&[("  ⎿  API Error: 529 {\"type\":\"overloaded_error\"}", 400), ("❯", 400)], 500);
    let (resumed, actions) = w.decide(&state, heartbeat(gave_up.clone(), 0), at(60.0));
    assert_eq!(typed(&actions), [("continue\r".to_owned(), "quota reset: one continue".to_owned())]);
    assert_eq!((resumed.status.status, resumed.internal.quota_retries), (LoopStatus::Running, 1));
    // Refused again: the next backoff is twice as long (10 s × 2).
    let again = screen(&[("  ⎿  API Error: 529 {\"type\":\"overloaded_error\"}", 700)], 800);
    let (waiting, _) = w.decide(&resumed, look(again), at(61.0));
    assert_eq!(waiting.status.quota_resets_at, Some(at(81.0)));
    // The retry went through: the agent works, the wait ends by itself.
    let working = screen(&[("· Zesting…", 900), ("  esc to interrupt", 900)], 1000);
    let (back, actions) = w.decide(&waiting, look(working), at(70.0));
    assert_eq!((back.status.status, kinds(&actions)), (LoopStatus::Running, vec!["quota_resume".to_owned()]));
}

#[test]
fn a_provider_refusing_all_night_ends_the_loop_blocked_never_stalled() {
    let w = World::new();
    let mut p = running(|s| {
        s.config.quota_jitter_seconds = 10.0;
        s.config.provider_wait_minutes = 20.0;
    });
    p.internal.last_action_output = 100;
    // Claude gives up on a 429, again and again: each round a wait with backoff and one
    // continue; progress (a signal) in between starts the count afresh.
    let mut state = p;
    let mut now = 0.0;
    let mut offset = 200;
    let mut round = 0;
    loop {
        let refused = screen(
            &[
                ("  ⎿  API Error: Request rejected (429) · this may be a temporary capacity issue.", offset - 50),
                ("❯", offset - 50),
            ],
            offset,
        );
        let (next, actions) = w.decide(&state, look(refused.clone()), at(now));
        state = next;
        if state.status.status.is_final() {
            assert_eq!(kinds(&actions), ["verdict", "endagent", "cleanup", "finished"]);
            break;
        }
        assert_eq!(state.status.status, LoopStatus::QuotaWait, "round {round}");
        assert!(!kinds(&actions).contains(&"stall".to_owned()));
        let until = state.status.quota_resets_at.expect("a reset");
        now = until.duration_since(at(0.0)).as_secs_f64() + 10.0;
        let (next, actions) = w.decide(&state, heartbeat(refused, 0), at(now));
        assert_eq!(
            typed(&actions),
            [("continue\r".to_owned(), "quota reset: one continue".to_owned())],
            "round {round}"
        );
        state = next;
        now += 1.0;
        offset += 300;
        round += 1;
        assert!(round < 20, "never ended");
    }
    assert_eq!((state.status.status, state.status.stop_reason), (LoopStatus::Blocked, None));
    assert!(now >= 20.0 * 60.0, "ended after {now} s");
    let why = state.status.needs_human.clone().unwrap_or_default();
    assert!(why.starts_with("the provider refused requests for 20 minutes ([auto] provider_wait_minutes)"), "{why}");
}

fn exit(code: u32) -> Exit {
    Exit { code, signal: None, screen: "Error: cannot start".into(), at: T0.into() }
}

#[test]
fn an_agent_that_cannot_start_gets_fresh_sessions_then_the_loop_fails_saying_why() {
    let w = World::new();
    let mut p = running(|s| s.config.restart_backoff_seconds = 1.0);
    p.internal.launched_at = Some(at(0.0));
    p.internal.session_started = false;
    let mut now = 1.0;
    for attempt in 1..=2 {
        let (waiting, actions) = w.decide(&p, Observation::Exited { exit: exit(1), module: None }, at(now));
        assert_eq!(kinds(&actions), ["exited", "quitholder"], "attempt {attempt}");
        let after = waiting.internal.restart_after.expect("a restart waits");
        let (started, actions) = w.decide(&waiting, Observation::Tick, after);
        // Its session never started: a fresh one, with the protocol, not `--resume`.
        assert_eq!(kinds(&actions), ["restart", "save", "launch:Protocol:-"], "attempt {attempt}");
        assert_eq!(started.status.agent_session_id, None);
        p = started;
        p.internal.launched_at = Some(after);
        now = after.duration_since(at(0.0)).as_secs_f64() + 1.0;
    }
    let (failed, actions) = w.decide(&p, Observation::Exited { exit: exit(1), module: None }, at(now));
    assert_eq!(kinds(&actions), ["exited", "quitholder", "failed", "cleanup", "finished"]);
    assert_eq!((failed.status.status, failed.status.stop_reason), (LoopStatus::Failed, None));
    let Some(Action::Journal(AutoEvent::Failed { reason })) = actions.get(2) else { panic!("{actions:?}") };
    assert!(reason.starts_with("the agent exited during its startup 3 times in a row"), "{reason}");
}

#[test]
fn restarts_back_off_and_are_budgeted_per_window_resuming_the_session() {
    let w = World::new();
    let mut p = running(|s| {
        s.config.restarts = 2;
        s.config.restart_backoff_seconds = 5.0;
        s.config.restart_window_minutes = 60.0;
    });
    let mut now = 0.0;
    let mut waits = vec![];
    for _ in 0..2 {
        let (waiting, _) = w.decide(&p, Observation::Exited { exit: exit(137), module: None }, at(now));
        let after = waiting.internal.restart_after.expect("backoff");
        waits.push(after.duration_since(at(now)).as_secs_f64());
        // A look before the backoff ends starts nothing.
        let (same, actions) = w.decide(&waiting, Observation::Tick, at(now + 1.0));
        assert_eq!((actions.len(), same.internal.restart_after), (0, Some(after)));
        let (started, actions) = w.decide(&waiting, Observation::Tick, after);
        assert_eq!(kinds(&actions), ["restart", "save", "launch:Resume:sess-1"]);
        p = started;
        now = after.duration_since(at(0.0)).as_secs_f64() + 600.0;
        p.internal.launched_at = Some(at(now - 600.0));
    }
    assert_eq!(waits, [5.0, 10.0]);
    assert_eq!(p.status.restart_count, 2);
    // A third within the hour: the budget is spent.
    let (failed, actions) = w.decide(&p, Observation::Exited { exit: exit(137), module: None }, at(now));
    assert_eq!(
        kinds(&actions),
        ["exited", "quitholder", "limit", "writestop", "stop_requested", "cleanup", "finished"]
    );
    assert_eq!((failed.status.status, failed.status.stop_reason), (LoopStatus::Failed, Some(StopReason::StallLimit)));
    // The same exit two hours later: the old restarts no longer count.
    let (waiting, _) = w.decide(&p, Observation::Exited { exit: exit(137), module: None }, at(now + 7200.0));
    assert_eq!(waiting.internal.restart_after, Some(at(now + 7205.0)));
}

#[test]
fn a_quiet_agent_is_nudged_only_after_the_stall_window_and_never_during_its_startup() {
    let w = World::new();
    let mut p = running(|s| {
        s.config.heartbeat_seconds = 1.0;
        s.config.stall_captures = 3;
        s.config.startup_grace_seconds = 10.0;
    });
    p.internal.launched_at = Some(at(0.0));
    let quiet = screen(&[("● done", 10), ("❯", 10)], 100);
    let mut state = p.clone();
    let mut nudged_at = vec![];
    for i in 1..=14 {
        let (next, actions) = w.decide(&state, heartbeat(quiet.clone(), 5), at(f64::from(i)));
        for (_, why) in typed(&actions) {
            nudged_at.push((i, why));
        }
        state = next;
    }
    // The first look sets the baseline; the first window (looks 2–4) finds the child's CPU
    // time grown since nothing was measured; the next one falls in the startup grace; then a
    // nudge at every full window.
    let nudge = || "stalled: nudge".to_owned();
    assert_eq!(nudged_at, [(10, nudge()), (13, nudge())]);
    assert_eq!(state.status.recovery_count_total, 2);
    // A child process that works (its CPU time grows) is not a stall.
    let mut busy = p.clone();
    busy.internal.launched_at = Some(at(-100.0));
    for i in 1..=6u32 {
        let (next, actions) = w.decide(&busy, heartbeat(quiet.clone(), 5 + u64::from(i)), at(f64::from(i)));
        assert_eq!(typed(&actions), [], "heartbeat {i}");
        busy = next;
    }
}

#[test]
fn a_completed_loop_is_verified_its_closing_turn_let_through_then_ended() {
    let w = World::new();
    let p = running(|s| s.config.stop_grace_seconds = 30.0);
    let signal = r#"{"step":"report","result":"(done)","next":"(stop)","checkpoint":"","iteration":3,"timestamp":"2026-11-25T02:00:00Z"}"#;
    let (ended, actions) = w.decide(&p, Observation::Files { signal: Some(signal.into()), stop: None }, at(0.0));
    assert_eq!(kinds(&actions), ["signal", "loop_ended", "verify"]);
    assert_eq!(ended.internal.ending, Some(Ending::Complete));
    let passed =
        CheckRun { command: "pytest".into(), exit_code: Some(0), passed: true, output_tail: "1 passed".into() };
    let (verified, actions) = w.decide(&ended, Observation::Verified { runs: vec![passed], waiting: vec![] }, at(1.0));
    assert_eq!(kinds(&actions), ["check", "verified"]);
    assert_eq!(verified.status.status, LoopStatus::Running);
    // Still writing its last answer: let through.
    let busy = screen(&[("● Writing the report", 10), ("  esc to interrupt", 10)], 100);
    let (same, actions) = w.decide(&verified, look(busy.clone()), at(3.0));
    assert_eq!((actions, same.status.status), (vec![], LoopStatus::Running));
    // Idle: ended, complete.
    let idle = Response { quiet_ms: 2000, ..screen(&[("● Done.", 10), ("❯", 10)], 200) };
    let (done, actions) = w.decide(&verified, look(idle), at(5.0));
    assert_eq!(kinds(&actions), ["endagent", "cleanup", "finished"]);
    assert_eq!(done.status.status, LoopStatus::Complete);
    // Busy for the whole grace: ended anyway.
    let (done, actions) = w.decide(&verified, look(busy), at(31.0));
    assert_eq!(
        (kinds(&actions), done.status.status),
        (vec!["endagent".into(), "cleanup".into(), "finished".into()], LoopStatus::Complete)
    );
}

#[test]
fn a_failed_check_sends_the_module_back_and_an_exited_agent_is_started_again_not_counted() {
    let w = World::new();
    let mut p = running(|_| {});
    p.internal.ending = Some(Ending::Complete);
    p.internal.agent_pid = 0;
    let failed =
        CheckRun { command: "pytest".into(), exit_code: Some(1), passed: false, output_tail: "1 failed".into() };
    let (back, actions) = w.decide(&p, Observation::Verified { runs: vec![failed.clone()], waiting: vec![] }, at(0.0));
    assert_eq!(kinds(&actions), ["check", "verification_failed", "sendback", "launch:Resume:sess-1"]);
    assert_eq!((back.internal.ending, back.status.restart_count, back.status.recovery_count_total), (None, 0, 1));
    assert!(actions.contains(&Action::SendBack { failed }));
}

#[test]
fn an_agent_that_ignores_the_stop_is_ended_when_the_grace_is_over_whatever_the_heartbeat() {
    let w = World::new();
    let p = running(|s| s.config.stop_grace_seconds = 20.0);
    let (asked, actions) = w.decide(&p, Observation::StopAsked, at(0.0));
    assert_eq!(kinds(&actions), ["writestop", "stop_requested"]);
    // The driver wakes at the grace's end, not at the next 60 s heartbeat.
    assert_eq!(decide::wake_at(&asked, at(0.0)), Some(at(20.0)));
    let busy = screen(&[("· Zesting…", 10), ("  esc to interrupt", 10)], 100);
    let (_, actions) = w.decide(&asked, look(busy.clone()), at(19.0));
    assert_eq!(actions, []);
    let (stopped, actions) = w.decide(&asked, look(busy), at(20.5));
    assert_eq!(kinds(&actions), ["stop_ignored", "endagent", "cleanup", "finished"]);
    assert_eq!((stopped.status.status, stopped.status.stop_reason), (LoopStatus::Stopped, Some(StopReason::UserStop)));
}

#[test]
fn a_model_call_that_hangs_is_interrupted_once_the_limit_passes() {
    let w = World::new();
    let p = running(|s| {
        s.config.hung_call_minutes = 5.0;
        s.config.heartbeat_seconds = 60.0;
    });
    let hung = screen(&[("❯ go on", 10), ("✻ Zesting… (4m 2s · ↓ 12 tokens)", 10), ("  esc to interrupt", 10)], 100);
    let mut state = p;
    let mut interrupted = vec![];
    for minute in 0..=6 {
        let (next, actions) = w.decide(&state, heartbeat(hung.clone(), 7), at(f64::from(minute) * 60.0));
        if !typed(&actions).is_empty() {
            interrupted.push((minute, typed(&actions)));
        }
        state = next;
    }
    assert_eq!(interrupted, [(5, vec![("\x1b".to_owned(), "hung model call: interrupt".to_owned())])]);
}

#[test]
fn the_module_status_at_exit_ends_the_loop_and_added_checks_wait_for_a_person() {
    let w = World::new();
    let p = running(|_| {});
    let (ended, actions) =
        w.decide(&p, Observation::Exited { exit: exit(0), module: Some(ModuleStatus::Blocked) }, at(0.0));
    assert_eq!(kinds(&actions), ["exited", "quitholder", "cleanup", "finished"]);
    assert_eq!(ended.status.status, LoopStatus::Blocked);
    // Complete with an added check: the fixed ones pass, the added one waits for a person.
    let mut done = p.clone();
    done.internal.ending = Some(Ending::Complete);
    let passed = CheckRun { command: "pytest".into(), exit_code: Some(0), passed: true, output_tail: String::new() };
    let (waiting, _) =
        w.decide(&done, Observation::Verified { runs: vec![passed], waiting: vec!["make lint".into()] }, at(0.0));
    assert_eq!(waiting.status.status, LoopStatus::NeedsHuman);
    assert_eq!(waiting.status.checks_to_approve, ["make lint"]);
    let (_, actions) = w.decide(&waiting, Observation::Approved(vec![]), at(1.0));
    assert_eq!(actions, []);
    let (approved, actions) = w.decide(&waiting, Observation::Approved(vec!["make lint".into()]), at(2.0));
    assert_eq!((kinds(&actions), approved.status.status), (vec!["verify".to_owned()], LoopStatus::Running));
    assert_eq!(
        decide::plan_checks(&["pytest".into()], &["make lint".into()], &["make lint".into(), "rm -rf /".into()]),
        (vec!["pytest".to_owned(), "make lint".to_owned()], vec!["rm -rf /".to_owned()])
    );
}

#[test]
fn the_timeout_counts_supervised_time_only_and_max_iterations_stops_the_loop() {
    let w = World::new();
    let mut p = running(|s| s.config.timeout_minutes = 61.0);
    p.status.quota_paused_s = 120.0;
    let quiet = screen(&[("· Zesting…", 10), ("  esc to interrupt", 10)], 100);
    let (_, actions) = w.decide(&p, heartbeat(quiet.clone(), 0), at(100.0));
    assert_eq!(actions, []);
    let (stopping, actions) = w.decide(&p, heartbeat(quiet, 0), at(181.0));
    assert_eq!(kinds(&actions), ["writestop", "stop_requested"]);
    assert_eq!(stopping.status.stop_reason, Some(StopReason::Timeout));
    let mut last = running(|_| {});
    last.status.max_iterations = 3;
    let signal = r#"{"step":"exec","result":"(done)","next":"check","checkpoint":"post-exec","iteration":3,"timestamp":"2026-11-25T02:00:00Z"}"#;
    let (next, actions) = w.decide(&last, Observation::Files { signal: Some(signal.into()), stop: None }, at(0.0));
    assert_eq!(kinds(&actions), ["signal", "writestop", "stop_requested"]);
    assert_eq!((next.status.iteration, next.status.stop_reason), (3, Some(StopReason::MaxIterations)));
}

#[test]
fn waiting_for_a_person_does_not_spend_the_timeout_and_human_wait_minutes_bounds_it() {
    let w = World::new();
    // 60 of its 61 minutes spent when a prompt nobody may answer comes.
    let mut p = running(|s| s.config.timeout_minutes = 61.0);
    p.internal.last_action_output = 100;
    let push = claude_prompt("git push --force origin main", 150, None);
    let (asked, _) = w.decide(&p, look(screen(&as_rows(&push), 2000)), at(0.0));
    assert_eq!((asked.status.status, asked.status.human_wait_since), (LoopStatus::NeedsHuman, Some(at(0.0))));
    // Forty minutes later nobody has answered: the loop is not stopped, its time stood still.
    let (night, actions) = w.decide(&asked, heartbeat(screen(&as_rows(&push), 2000), 0), at(2400.0));
    assert_eq!((kinds(&actions), night.status.stop_reason), (Vec::<String>::new(), None));
    assert_eq!(night.status.elapsed_at(at(2400.0)).round(), 3600.0);
    // The person answers; the screen moves on: the wait is counted apart, the clock runs again.
    let answered = screen(&[("● Bash(git push origin main)", 2100), ("  ⎿  done", 2100)], 2200);
    let (morning, _) = w.decide(&night, look(answered), at(2401.0));
    assert_eq!(morning.status.status, LoopStatus::Running);
    assert_eq!((morning.status.human_wait_since, morning.status.human_paused_s), (None, 2401.0));
    assert_eq!(morning.status.elapsed_at(at(2430.0)).round(), 3629.0);
    // With `human_wait_minutes = 30` the same wait ends the loop, saying why.
    let mut bounded = asked.clone();
    bounded.internal.settings.config.human_wait_minutes = Some(30.0);
    let (early, _) = w.decide(&bounded, heartbeat(screen(&as_rows(&push), 2000), 0), at(1700.0));
    assert_eq!(early.status.stop_reason, None);
    let (stopped, actions) = w.decide(&bounded, heartbeat(screen(&as_rows(&push), 2000), 0), at(1800.0));
    assert_eq!(
        (kinds(&actions), stopped.status.stop_reason),
        (vec!["writestop".to_owned(), "stop_requested".to_owned()], Some(StopReason::Timeout))
    );
}

#[test]
fn a_loop_nobody_supervises_is_ended_by_a_persons_stop_with_its_wait_cleared() {
    let w = World::new();
    let mut p = running(|_| {});
    p.status.status = LoopStatus::QuotaWait;
    p.status.quota_wait_since = Some(at(-60.0));
    p.status.quota_resets_at = Some(at(600.0));
    p.internal.pending_typed = Some("the protocol".into());
    let (ended, actions) = w.decide(&p, Observation::Abandoned { by: "auto stop".into() }, at(0.0));
    assert_eq!(kinds(&actions), ["stop_requested", "quitholder", "cleanup", "finished"]);
    assert_eq!((ended.status.status, ended.status.stop_reason), (LoopStatus::Stopped, Some(StopReason::UserStop)));
    assert_eq!((ended.status.quota_wait_since, ended.status.quota_resets_at), (None, None));
    assert_eq!((ended.status.quota_paused_s, ended.internal.pending_typed.as_deref()), (60.0, None));
    // Ended: nothing more happens, whatever is observed.
    let (same, actions) = w.decide(&ended, Observation::StopAsked, at(1.0));
    assert_eq!((actions, same), (vec![], ended));
}

/// A loop's status, stop reason and ending after a step.
type Outcome = (LoopStatus, Option<StopReason>, Option<Ending>);

fn signal(step: &str, result: &str, next: &str, iteration: u64) -> String {
    format!(
        r#"{{"step":"{step}","result":"{result}","next":"{next}","checkpoint":"","iteration":{iteration},"timestamp":"2026-11-25T02:00:00Z"}}"#
    )
}

#[test]
fn the_files_the_agent_writes_move_the_loop_by_seed_002s_tables() {
    let w = World::new();
    let p = running(|_| {});
    let files =
        |signal: Option<String>, stop: Option<&str>| Observation::Files { signal, stop: stop.map(str::to_owned) };
    // Table: (state change, file contents, journal kinds, then status, stop reason, ending).
    let mut waiting = p.clone();
    waiting.status.status = LoopStatus::NeedsHuman;
    waiting.status.needs_human = Some("a prompt".into());
    let mut asked = p.clone();
    asked.status.stop_reason = Some(StopReason::Timeout);
    asked.internal.stop_requested_at = Some(at(-5.0));
    let cases: Vec<(&str, &Persisted, Observation, Vec<&str>, Outcome)> = vec![
        (
            "a new iteration",
            &p,
            files(Some(signal("exec", "(done)", "check", 3)), None),
            vec!["signal"],
            (LoopStatus::Running, None, None),
        ),
        (
            "not a signal",
            &p,
            files(Some("{\"step\": \"dance\"}".into()), None),
            vec!["signal_invalid"],
            (LoopStatus::Running, None, None),
        ),
        (
            "a blocked end",
            &p,
            files(Some(signal("exec", "(blocked)", "(stop)", 3)), None),
            vec!["signal", "loop_ended"],
            (LoopStatus::Running, None, Some(Ending::Blocked)),
        ),
        (
            "a signal after a person answered",
            &waiting,
            files(Some(signal("exec", "(done)", "check", 3)), None),
            vec!["signal"],
            (LoopStatus::Running, None, None),
        ),
        (
            "a stop the agent wrote, reason unknown",
            &p,
            files(None, Some("{\"reason\": \"<b>owned</b>\"}")),
            vec!["stop_requested"],
            (LoopStatus::Running, Some(StopReason::UserStop), None),
        ),
        (
            "a stop with a known reason",
            &p,
            files(None, Some("{\"reason\": \"max_iterations\", \"by\": \"ann\"}")),
            vec!["stop_requested"],
            (LoopStatus::Running, Some(StopReason::MaxIterations), None),
        ),
        (
            "the stop file consumed: the agent left",
            &asked,
            files(None, None),
            vec!["stop_honoured"],
            (LoopStatus::Running, Some(StopReason::Timeout), Some(Ending::Stopped)),
        ),
    ];
    for (what, state, obs, journal, outcome) in cases {
        let (next, actions) = w.decide(state, obs, at(0.0));
        assert_eq!(kinds(&actions), journal, "{what}");
        assert_eq!((next.status.status, next.status.stop_reason, next.internal.ending), outcome, "{what}");
    }
}

#[test]
fn a_person_answering_a_refused_prompt_resumes_supervision_when_the_screen_moves_on() {
    let w = World::new();
    let mut p = running(|_| {});
    p.status.status = LoopStatus::NeedsHuman;
    p.status.needs_human = Some("a destructive command".into());
    p.internal.last_action_output = 500;
    p.internal.last_action_hash = loopwright_auto::screen::masked_hash("old");
    let same = Response { screen: "old".into(), output_bytes: 500, quiet_ms: 900, ..Response::default() };
    let (still, actions) = w.decide(&p, heartbeat(same, 0), at(1.0));
    assert_eq!((still.status.status, actions.len()), (LoopStatus::NeedsHuman, 0));
    let moved = screen(&[("⎿  answered", 600), ("· Zesting…", 600), ("  esc to interrupt", 600)], 700);
    let (resumed, actions) = w.decide(&p, look(moved), at(2.0));
    assert_eq!((resumed.status.status, resumed.status.needs_human), (LoopStatus::Running, None));
    assert_eq!(kinds(&actions), ["verdict"]);
}

#[test]
fn limit_messages_without_a_time_or_with_a_relative_one_and_a_cli_that_continues_by_itself() {
    let w = World::new();
    let mut p = running(|_| {});
    p.internal.last_action_output = 100;
    let wait_of = |line: &str| {
        let (next, _) = w.decide(&p, look(screen(&[(line, 150)], 200)), at(0.0));
        (next.status.status, next.status.quota_resets_at)
    };
    assert_eq!(
        wait_of("Quota exceeded. Check your plan and billing details."),
        (LoopStatus::QuotaWait, Some(at(3600.0)))
    );
    assert_eq!(
        wait_of("■ You've hit your usage limit. Upgrade to Pro (…) or try again in 2 hours 5 minutes."),
        (LoopStatus::QuotaWait, Some(at(7500.0)))
    );
    assert_eq!(
        wait_of(
            "TerminalQuotaError: You have exhausted your capacity on this model. Your quota will reset after 1h2m3s."
        ),
        (LoopStatus::QuotaWait, Some(at(3723.0)))
    );
    // Waiting; the CLI goes back to work by itself at the reset: the wait ends, nothing typed.
    let (waiting, _) =
        w.decide(&p, look(screen(&[("Quota exceeded. Check your plan and billing details.", 150)], 200)), at(0.0));
    let working = screen(&[("· Zesting…", 300), ("  esc to interrupt", 300)], 400);
    let (back, actions) = w.decide(&waiting, look(working), at(100.0));
    assert_eq!((back.status.status, back.status.quota_paused_s), (LoopStatus::Running, 100.0));
    assert_eq!(kinds(&actions), ["quota_resume"]);
}
