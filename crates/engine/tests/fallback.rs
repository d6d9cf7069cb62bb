//! Fallback by failure class (SPEC §16), as a table of journals and the step the state machine
//! decides: a failure its agent cannot fix goes to the stage's next agent (its `fallback:`,
//! else its agent's), which has a retry budget of its own; any other failure, or one with no
//! agent left, is retried or fails as before.

use std::collections::BTreeMap;

use loopwright_engine::decide::{Step, next_step};
use loopwright_engine::event::Unfixable;
use loopwright_engine::{Event, FailureKind, StageError};
use loopwright_spec::{CompileContext, Pipeline, RunnerKind, SourceFile, StageId};
use loopwright_testkit::History;
use loopwright_testkit::conformance::t;
use pretty_assertions::assert_eq;

/// Agents `a` (falls back to `c`), `b` and `c`; stage `one` runs `a` and falls back to `b`
/// then `c` (two attempts each), stage `two` runs `a` with its own fallback.
fn pipeline() -> Pipeline {
    let agent = |name: &str, front: &str| {
        let src = SourceFile::new(format!("{name}.md"), format!("---\ncommand: [\"true\"]\n{front}---\n"));
        (name.to_owned(), loopwright_spec::parse_agent(&src, name, RunnerKind::Command).expect("agent"))
    };
    let agents = BTreeMap::from([agent("a", "fallback: [c]\n"), agent("b", ""), agent("c", "")]);
    let yaml = "name: p\ndescription: d\nversion: 1\nstages:\n\
        \x20 - id: one\n    agent: a\n    mode: agent\n    description: x\n    fallback: [b, c]\n\
        \x20   retry: {max_attempts: 2, backoff: fixed, initial_delay_seconds: 1}\n\
        \x20 - id: two\n    agent: a\n    mode: agent\n    description: y\n";
    let cx = CompileContext { agents: &agents, extra_inputs: &[], default_timeout_minutes: 1.0 };
    loopwright_spec::compile(&SourceFile::new("p.yml", yaml), &cx).expect("valid pipeline")
}

fn id(s: &str) -> StageId {
    StageId::parse(s).expect("stage id")
}

/// Attempt `attempt` of `stage` failed; its agent cannot fix it when `unfixable` says why.
fn failed(h: History, stage: &str, attempt: u32, unfixable: Option<Unfixable>) -> History {
    let error = StageError { unfixable, ..History::error(FailureKind::ExecutionError) };
    h.attempt(stage, attempt).then(Event::AttemptFailed { stage: id(stage), attempt, duration_ms: 10, error })
}

fn fell_back(stage: &str, attempt: u32, from: &str, to: &str, reason: Unfixable) -> Event {
    Event::AgentFellBack { stage: id(stage), attempt, from: from.into(), to: to.into(), reason }
}

fn retry(stage: &str, attempt: u32) -> Event {
    Event::RetryScheduled {
        stage: id(stage),
        attempt,
        delay_ms: 1000,
        reason: "execution_error after exited with status 1; fixed backoff 1s".into(),
    }
}

#[test]
fn a_failure_its_agent_cannot_fix_goes_to_the_next_agent_with_a_budget_of_its_own() {
    let p = pipeline();
    let now = t("2026-01-01T01:00:00Z");
    let auth = Some(Unfixable::Authentication);
    let first = failed(History::started(), "one", 1, auth);
    let to_b = first.clone().then(fell_back("one", 1, "a", "b", Unfixable::Authentication));
    let b_failed = failed(to_b.clone(), "one", 2, None);
    let b_retried = b_failed.clone().then(retry("one", 3));
    let b_spent = failed(b_retried.clone(), "one", 3, None);
    let b_quota = failed(b_retried.clone(), "one", 3, Some(Unfixable::Quota));
    let to_c = b_quota.clone().then(fell_back("one", 3, "b", "c", Unfixable::Quota));
    let c_auth = failed(to_c.clone(), "one", 4, auth);
    let two = History::started().succeeded("one", 1);
    let stage_failed = |h: &History, stage: &str| {
        let error = h.state().stage(stage).and_then(|s| s.last_error.clone()).expect("an error");
        Step::Record(Event::StageFailed { stage: id(stage), error })
    };
    let cases: Vec<(&str, History, Step)> = vec![
        (
            "an ordinary failure is retried by the same agent",
            failed(History::started(), "one", 1, None),
            Step::Record(retry("one", 2)),
        ),
        (
            "refused credentials go to the first fallback",
            first.clone(),
            Step::Record(fell_back("one", 1, "a", "b", Unfixable::Authentication)),
        ),
        ("the fallback's attempt is the stage's next", to_b.clone(), Step::Execute { stage: id("one"), attempt: 2 }),
        (
            "the new agent's failure is retried: its budget starts when it took over",
            b_failed.clone(),
            Step::Record(retry("one", 3)),
        ),
        ("its budget spent, the stage fails", b_spent.clone(), stage_failed(&b_spent, "one")),
        (
            "a spent quota goes to the next fallback",
            b_quota,
            Step::Record(fell_back("one", 3, "b", "c", Unfixable::Quota)),
        ),
        ("no agent left: the failure is handled as any other", c_auth.clone(), Step::Record(retry("one", 5))),
        (
            "a stage with no `fallback:` takes its agent's",
            failed(two.clone(), "two", 1, Some(Unfixable::CliMissing)),
            Step::Record(fell_back("two", 1, "a", "c", Unfixable::CliMissing)),
        ),
        (
            "with no retry policy, an unfixable failure still falls back",
            failed(two.clone(), "two", 1, Some(Unfixable::ContextLength)),
            Step::Record(fell_back("two", 1, "a", "c", Unfixable::ContextLength)),
        ),
    ];
    let mut wrong = Vec::new();
    for (name, history, want) in cases {
        let got = next_step(&p, &history.state(), now);
        if got != want {
            wrong.push(format!("{name}:\n  want {want:?}\n  got  {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_state_says_which_agent_made_each_attempt_and_who_took_over() {
    let h = failed(History::started(), "one", 1, Some(Unfixable::RateLimit))
        .then(fell_back("one", 1, "a", "b", Unfixable::RateLimit))
        .attempt("one", 2);
    let state = h.state();
    let st = state.stage("one").expect("stage");
    assert_eq!(st.agent.as_deref(), Some("b"));
    assert_eq!(st.agent_since, 1);
    let made_by: Vec<(u32, Option<&str>)> = st.attempt_log.iter().map(|a| (a.attempt, a.agent.as_deref())).collect();
    assert_eq!(made_by, vec![(1, None), (2, Some("b"))]);
    assert_eq!(
        st.fell_back,
        vec![loopwright_engine::state::FellBack {
            attempt: 1,
            from: "a".into(),
            to: "b".into(),
            reason: Unfixable::RateLimit
        }]
    );
}
