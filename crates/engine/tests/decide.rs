//! `next_step`, the heart of a run, as a table: a journal built event by event
//! ([`History`]), the time, and the whole step the state machine decides.

use std::collections::BTreeMap;

use loopwright_engine::decide::{Step, next_step};
use loopwright_engine::event::{AUTO_APPROVED_BY, RunStatus, SkipReason};
use loopwright_engine::{Event, FailureKind, StageError};
use loopwright_spec::{CompileContext, Pipeline, RunnerKind, SourceFile, StageId};
use loopwright_testkit::History;
use loopwright_testkit::conformance::t;

/// `plan` (read-only), `fix` (retried three times, 5 s exponential backoff), `ship` (asks a
/// person first).
fn pipeline() -> Pipeline {
    let agent_src = SourceFile::new("a.md", "---\ncommand: [\"true\"]\n---\n");
    let agents = BTreeMap::from([(
        "a".to_owned(),
        loopwright_spec::parse_agent(&agent_src, "a", RunnerKind::Command).expect("agent"),
    )]);
    let yaml = "name: p\ndescription: d\nversion: 1\nmax_retries: 5\nstages:\n\
        \x20 - id: plan\n    agent: a\n    mode: plan\n    description: x\n\
        \x20 - id: fix\n    agent: a\n    mode: agent\n    description: y\n    retry:\n      max_attempts: 3\n      backoff: exponential\n      initial_delay_seconds: 5\n\
        \x20 - id: ship\n    agent: a\n    mode: agent\n    description: z\n    requires_approval: true\n";
    let cx = CompileContext { agents: &agents, extra_inputs: &[], default_timeout_minutes: 1.0 };
    loopwright_spec::compile(&SourceFile::new("p.yml", yaml), &cx).expect("valid pipeline")
}

fn id(s: &str) -> StageId {
    StageId::parse(s).expect("stage id")
}

fn execute(stage: &str, attempt: u32) -> Step {
    Step::Execute { stage: id(stage), attempt }
}

fn error(kind: FailureKind) -> StageError {
    History::error(kind)
}

fn retry(attempt: u32, delay_ms: u64, how: &str) -> Event {
    let reason = format!("execution_error after exited with status 1; {how}");
    Event::RetryScheduled { stage: id("fix"), attempt, delay_ms, reason }
}

fn planned() -> History {
    History::started().succeeded("plan", 1)
}

fn fixed() -> History {
    planned().succeeded("fix", 1)
}

#[test]
fn each_journal_decides_its_next_step() {
    let p = pipeline();
    let retrying =
        planned().failed("fix", 1, FailureKind::ExecutionError).then(retry(2, 5000, "exponential backoff 5s * 2^0"));
    let due = retrying.last_at() + jiff::SignedDuration::from_secs(5);
    let mut auto = loopwright_testkit::run_started("task-1");
    auto.auto_approve = true;
    let mut skipping = loopwright_testkit::run_started("task-1");
    skipping.skip = vec![id("plan")];
    let failed_for_good = planned().failed("fix", 1, FailureKind::ValidationError);
    let granted = Event::ApprovalGranted { stage: id("ship"), by: "dana".into(), comment: None, via: None };
    let rejected =
        Event::ApprovalRejected { stage: id("ship"), by: "dana".into(), comment: None, rollback: false, via: None };
    let cases: Vec<(&str, History, jiff::Timestamp, Step)> = vec![
        (
            "nothing journaled: nothing to run",
            History::default(),
            t("2026-01-01T00:00:00Z"),
            Step::Done(RunStatus::Failed),
        ),
        ("started: the first stage's first attempt", History::started(), t("2026-01-01T00:00:01Z"), execute("plan", 1)),
        (
            "an attempt in flight at a crash runs again as the same attempt",
            History::started().attempt("plan", 1),
            t("2026-01-01T00:00:09Z"),
            execute("plan", 1),
        ),
        ("a stage that passed: the next one", planned(), t("2026-01-01T00:00:09Z"), execute("fix", 1)),
        (
            "a retryable failure: a retry, its delay by the stage's backoff",
            planned().failed("fix", 1, FailureKind::ExecutionError),
            t("2026-01-01T00:00:09Z"),
            Step::Record(retry(2, 5000, "exponential backoff 5s * 2^0")),
        ),
        (
            "a retry not due yet: wait for it",
            retrying.clone(),
            retrying.last_at(),
            Step::Wait { stage: id("fix"), until: due },
        ),
        ("a retry due: its attempt", retrying.clone(), due, execute("fix", 2)),
        (
            "the second failure: a longer wait",
            retrying.clone().failed("fix", 2, FailureKind::ExecutionError),
            due,
            Step::Record(retry(3, 10_000, "exponential backoff 5s * 2^1")),
        ),
        (
            "attempts spent: the stage fails",
            retrying
                .clone()
                .failed("fix", 2, FailureKind::ExecutionError)
                .then(retry(3, 10_000, "exponential backoff 5s * 2^1"))
                .failed("fix", 3, FailureKind::ExecutionError),
            t("2026-01-02T00:00:00Z"),
            Step::Record(Event::StageFailed { stage: id("fix"), error: error(FailureKind::ExecutionError) }),
        ),
        (
            "a failure no retry can help: the stage fails at once",
            failed_for_good.clone(),
            t("2026-01-01T00:00:09Z"),
            Step::Record(Event::StageFailed { stage: id("fix"), error: error(FailureKind::ValidationError) }),
        ),
        (
            "a failed stage without rollback: the run fails",
            failed_for_good.then(Event::StageFailed { stage: id("fix"), error: error(FailureKind::ValidationError) }),
            t("2026-01-01T00:00:09Z"),
            Step::Record(Event::RunFinished { status: RunStatus::Failed }),
        ),
        (
            "a gate: a person is asked",
            fixed(),
            t("2026-01-01T00:00:09Z"),
            Step::Record(Event::ApprovalRequested { stage: id("ship") }),
        ),
        (
            "a gate under --yes: approved as such",
            History::started_with(auto).succeeded("plan", 1).succeeded("fix", 1),
            t("2026-01-01T00:00:09Z"),
            Step::Record(Event::ApprovalGranted {
                stage: id("ship"),
                by: AUTO_APPROVED_BY.into(),
                comment: None,
                via: None,
            }),
        ),
        (
            "asked, not answered: still asking",
            fixed().then(Event::ApprovalRequested { stage: id("ship") }),
            t("2026-01-03T00:00:00Z"),
            Step::Done(RunStatus::Waiting),
        ),
        (
            "approved: the stage runs",
            fixed().then(Event::ApprovalRequested { stage: id("ship") }).then(granted.clone()),
            t("2026-01-01T00:00:09Z"),
            execute("ship", 1),
        ),
        (
            "rejected: the run ends rejected",
            fixed().then(Event::ApprovalRequested { stage: id("ship") }).then(rejected),
            t("2026-01-01T00:00:09Z"),
            Step::Done(RunStatus::Rejected),
        ),
        (
            "every stage passed: the run succeeds",
            fixed().then(Event::ApprovalRequested { stage: id("ship") }).then(granted).succeeded("ship", 1),
            t("2026-01-01T00:00:09Z"),
            Step::Record(Event::RunFinished { status: RunStatus::Success }),
        ),
        (
            "a stage on the skip list: skipped",
            History::started_with(skipping),
            t("2026-01-01T00:00:01Z"),
            Step::Record(Event::StageSkipped { stage: id("plan"), reason: SkipReason::SkipList }),
        ),
    ];
    let mut wrong = Vec::new();
    for (what, history, now, expected) in cases {
        let decided = next_step(&p, &history.state(), now);
        if decided != expected {
            wrong.push(format!("{what}:\n  decided  {decided:?}\n  expected {expected:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Whether a stage's attempt may have left a commit the journal does not hold (asked of git
/// only then: a stage that changed nothing starts no git process otherwise).
#[test]
fn only_an_attempt_taken_up_again_may_hold_an_unjournaled_commit() {
    let resumed = || Event::RunResumed { owner: loopwright_engine::event::Owner::default(), by: None };
    let restarted = |h: History| h.state().stage("fix").is_some_and(|s| s.restarted);
    let table: Vec<(&str, History, bool)> = vec![
        ("first attempt in flight", planned().attempt("fix", 1), false),
        ("in flight when taken up", planned().attempt("fix", 1).then(resumed()), true),
        ("run again after it", planned().attempt("fix", 1).then(resumed()).attempt("fix", 1), true),
        ("the same attempt started again", planned().attempt("fix", 1).attempt("fix", 1), true),
        ("ended after it", planned().attempt("fix", 1).then(resumed()).succeeded("fix", 1), false),
        (
            "failed after it, then retried",
            planned().attempt("fix", 1).then(resumed()).failed("fix", 1, FailureKind::ExecutionError).attempt("fix", 2),
            false,
        ),
        ("taken up after it ended", planned().succeeded("fix", 1).then(resumed()), false),
        ("taken up before it started", planned().then(resumed()).attempt("fix", 1), false),
    ];
    for (what, history, expected) in table {
        assert_eq!(restarted(history), expected, "{what}");
    }
}
