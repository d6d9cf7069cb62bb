//! The state machine driven through its ports: a journal in memory, a runner that plays a
//! script of outcomes, and a clock that records waits instead of sleeping.

use loopwright_engine::ports;
use std::collections::BTreeMap;

use loopwright_engine::event::ConditionOutcome;
use loopwright_engine::patterns::Library;
use loopwright_engine::ports::{ExecOutcome, ProcessGroup};
use loopwright_engine::{
    Clock, Engine, Event, FailureKind, NeverStop, NoChanges, NoObserverExt, Outputs, RunId, RunStarted, RunState,
    RunStatus, Store, TaskId,
};
use loopwright_spec::{CompileContext, Pipeline, RunnerKind, SourceFile, StageId};
use loopwright_testkit::{FakeClock, MemoryStore, ScriptedRunner};
use pretty_assertions::assert_eq;

fn pipeline(stages: &str) -> Pipeline {
    let agent_src = SourceFile::new("a.md", "---\ncommand: [\"true\"]\n---\n");
    let agents = BTreeMap::from([(
        "a".to_owned(),
        loopwright_spec::parse_agent(&agent_src, "a", RunnerKind::Command).expect("agent"),
    )]);
    let yaml = format!("name: p\ndescription: d\nversion: 1\nmax_retries: 5\nstages:\n{stages}");
    let cx = CompileContext { agents: &agents, extra_inputs: &[], default_timeout_minutes: 1.0 };
    loopwright_spec::compile(&SourceFile::new("p.yml", yaml), &cx).expect("valid pipeline")
}

fn started() -> RunStarted {
    loopwright_testkit::run_started("task-1")
}

fn kinds(store: &MemoryStore) -> Vec<String> {
    store
        .all_events()
        .iter()
        .map(|r| match &r.event {
            Event::AttemptFailed { stage, attempt, error, .. } => {
                format!("{stage}#{attempt} failed {}", error.kind.as_str())
            }
            Event::AttemptSucceeded { stage, attempt, .. } => format!("{stage}#{attempt} ok"),
            Event::RetryScheduled { stage, attempt, delay_ms, .. } => {
                format!("{stage}#{attempt} retry in {delay_ms}ms")
            }
            Event::RunFinished { status } => format!("run {}", status.as_str()),
            e => match e.stage() {
                Some(s) => format!("{} {s}", e.kind()),
                None => e.kind().to_owned(),
            },
        })
        .collect()
}

async fn run(
    pipeline: &Pipeline,
    runner: &ScriptedRunner,
    clock: &FakeClock,
    store: &MemoryStore,
    started: RunStarted,
) -> RunState {
    run_with(pipeline, runner, clock, store, started, &NoChanges).await
}

async fn run_with(
    pipeline: &Pipeline,
    runner: &ScriptedRunner,
    clock: &FakeClock,
    store: &MemoryStore,
    started: RunStarted,
    changes: &impl loopwright_engine::ports::Changes,
) -> RunState {
    let mut observer = loopwright_engine::ports::NoObserver;
    let mut engine = Engine {
        pipeline,
        store,
        runner,
        clock,
        observer: observer.as_dyn(),
        stopper: &NeverStop,
        changes,
        patterns: &Library::builtin(),
        settings: &Default::default(),
        limits: loopwright_engine::ports::NoLimits,
        delivery: loopwright_engine::ports::NoDelivery,
        slots: Default::default(),
    };
    engine.start(RunId::new("r"), started).await.expect("run")
}

const RETRYING: &str = "  - id: fix\n    agent: a\n    mode: agent\n    description: x\n    retry:\n      max_attempts: 3\n      backoff: exponential\n      initial_delay_seconds: 5\n";

#[tokio::test]
async fn failed_attempts_are_retried_with_exponential_backoff() {
    let p = pipeline(RETRYING);
    let runner = ScriptedRunner::default();
    runner.script.borrow_mut().extend([
        (ExecOutcome::Exited(1), ""),
        (ExecOutcome::TimedOut, ""),
        (ExecOutcome::Exited(0), ""),
    ]);
    let (clock, store) = (FakeClock::default(), MemoryStore::default());
    let state = run(&p, &runner, &clock, &store, started()).await;
    assert_eq!(state.status, RunStatus::Success);
    assert_eq!(
        kinds(&store),
        vec![
            "run_started",
            "attempt_started fix",
            "process_started fix",
            "usage_recorded fix",
            "fix#1 failed execution_error",
            "fix#2 retry in 5000ms",
            "attempt_started fix",
            "process_started fix",
            "usage_recorded fix",
            "fix#2 failed timeout",
            "fix#3 retry in 10000ms",
            "attempt_started fix",
            "process_started fix",
            "usage_recorded fix",
            "fix#3 ok",
            "run success",
        ]
    );
    assert_eq!(*clock.waits.borrow(), vec![5000, 10000]);
    assert_eq!(state.stage("fix").map(|s| (s.attempts, s.duration_ms)), Some((3, 30)));
}

#[tokio::test]
async fn non_retryable_failures_fail_at_once() {
    let p = pipeline(RETRYING);
    let runner = ScriptedRunner::default();
    runner.script.borrow_mut().push_back((ExecOutcome::SpawnFailed("program not found".into()), ""));
    let (clock, store) = (FakeClock::default(), MemoryStore::default());
    let state = run(&p, &runner, &clock, &store, started()).await;
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(state.failed_stage.as_ref().map(ToString::to_string), Some("fix".into()));
    assert_eq!(
        state.stage("fix").and_then(|s| s.last_error.as_ref()).map(|e| e.kind),
        Some(FailureKind::ValidationError)
    );
    assert!(clock.waits.borrow().is_empty());
}

#[tokio::test]
async fn pipeline_max_retries_caps_retries_across_the_run() {
    let p = pipeline(RETRYING).clone();
    let mut p = p;
    p.max_retries = 1;
    let runner = ScriptedRunner::default();
    runner.script.borrow_mut().extend([
        (ExecOutcome::Exited(1), ""),
        (ExecOutcome::Exited(1), ""),
        (ExecOutcome::Exited(0), ""),
    ]);
    let (clock, store) = (FakeClock::default(), MemoryStore::default());
    let state = run(&p, &runner, &clock, &store, started()).await;
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(state.retries_used, 1);
    assert_eq!(runner.calls.borrow().len(), 2);
}

#[tokio::test]
async fn a_missing_declared_output_is_a_partial_failure() {
    let p =
        pipeline("  - id: plan\n    agent: a\n    mode: plan\n    description: x\n    outputs: [plan_text, risks]\n");
    let runner = ScriptedRunner::default();
    runner.script.borrow_mut().push_back((ExecOutcome::Exited(0), "## plan_text\nsteps\n"));
    let (clock, store) = (FakeClock::default(), MemoryStore::default());
    let state = run(&p, &runner, &clock, &store, started()).await;
    let error = state.stage("plan").and_then(|s| s.last_error.clone()).expect("error");
    assert_eq!(error.kind, FailureKind::PartialFailure);
    assert_eq!(
        error.message,
        "the stage did not produce declared output `risks` (expected a `## key` section for each)"
    );
    assert_eq!(state.status, RunStatus::Failed);
}

#[tokio::test]
async fn a_condition_reading_a_skipped_stage_is_false_and_says_why() {
    let p = pipeline(
        "  - id: review\n    agent: a\n    mode: plan\n    description: x\n    outputs: [risks]\n    condition: \"complexity == 'high'\"\n  - id: fix\n    agent: a\n    mode: agent\n    description: y\n    condition: \"stage_outputs.review.risks > 0\"\n  - id: done\n    agent: a\n    mode: plan\n    description: z\n",
    );
    let runner = ScriptedRunner::default();
    let (clock, store) = (FakeClock::default(), MemoryStore::default());
    let state = run(&p, &runner, &clock, &store, started()).await;
    assert_eq!(state.status, RunStatus::Success);
    assert_eq!(state.stage("review").and_then(|s| s.condition.clone()), Some(ConditionOutcome::False));
    assert_eq!(
        state.stage("fix").and_then(|s| s.condition.clone()),
        Some(ConditionOutcome::ReadsSkippedStage { stage: StageId::parse("review").expect("id") })
    );
    assert_eq!(*runner.calls.borrow(), vec![("done".to_owned(), 1)]);
}

#[tokio::test]
async fn typed_outputs_drive_later_conditions() {
    let p = pipeline(
        "  - id: review\n    agent: a\n    mode: plan\n    description: x\n    outputs: [risks]\n  - id: fix\n    agent: a\n    mode: agent\n    description: y\n    condition: \"stage_outputs.review.risks > 1\"\n",
    );
    for (printed, runs_fix) in [("2", true), ("1", false)] {
        let runner = ScriptedRunner::default();
        runner
            .script
            .borrow_mut()
            .push_back((ExecOutcome::Exited(0), if printed == "2" { "## risks\n2\n" } else { "## risks\n1\n" }));
        let (clock, store) = (FakeClock::default(), MemoryStore::default());
        run(&p, &runner, &clock, &store, started()).await;
        assert_eq!(runner.calls.borrow().len() == 2, runs_fix, "risks = {printed}");
    }
}

#[tokio::test]
async fn an_attempt_in_flight_is_redone_after_ending_its_leftovers() {
    let p = pipeline(
        "  - id: a1\n    agent: a\n    mode: plan\n    description: x\n  - id: a2\n    agent: a\n    mode: plan\n    description: y\n",
    );
    let (clock, store) = (FakeClock::default(), MemoryStore::default());
    // A journal as a crash leaves it: a1 done, a2 started with a process group, then nothing.
    let at = clock.now();
    for e in [
        Event::RunStarted(Box::new(started())),
        Event::AttemptStarted { stage: StageId::parse("a1").expect("id"), attempt: 1 },
        Event::AttemptSucceeded {
            stage: StageId::parse("a1").expect("id"),
            attempt: 1,
            duration_ms: 1,
            outputs: Outputs::new(),
        },
        Event::AttemptStarted { stage: StageId::parse("a2").expect("id"), attempt: 1 },
        Event::ProcessStarted {
            stage: StageId::parse("a2").expect("id"),
            attempt: 1,
            pgid: 4242,
            start_time: Some(7),
            host: Some("m1".into()),
            command: "x".into(),
        },
    ] {
        store.append(&RunId::new("r"), &e, at).await.expect("append");
    }
    let state = RunState::replay(RunId::new("r"), &store.events(&RunId::new("r")).await.expect("events"));
    let runner = ScriptedRunner::default();
    let mut observer = loopwright_engine::ports::NoObserver;
    let mut engine = Engine {
        pipeline: &p,
        store: &store,
        runner: &runner,
        clock: &clock,
        observer: observer.as_dyn(),
        stopper: &NeverStop,
        changes: &NoChanges,
        patterns: &Library::builtin(),
        settings: &Default::default(),
        limits: loopwright_engine::ports::NoLimits,
        delivery: loopwright_engine::ports::NoDelivery,
        slots: Default::default(),
    };
    let state = engine.drive(state).await.expect("drive");
    assert_eq!(state.status, RunStatus::Success);
    assert_eq!(*runner.ended.borrow(), vec![ProcessGroup { pgid: 4242, start_time: Some(7), host: Some("m1".into()) }]);
    assert_eq!(*runner.calls.borrow(), vec![("a2".to_owned(), 1)]);
}

#[tokio::test]
async fn approval_gates_wait_unless_approved_up_front() {
    let p =
        pipeline("  - id: implement\n    agent: a\n    mode: agent\n    description: x\n    requires_approval: true\n");
    let runner = ScriptedRunner::default();
    let (clock, store) = (FakeClock::default(), MemoryStore::default());
    let state = run(&p, &runner, &clock, &store, started()).await;
    assert_eq!(state.status, RunStatus::Waiting);
    assert!(runner.calls.borrow().is_empty());
    assert_eq!(state.waiting_for_approval().map(|s| s.id.to_string()), Some("implement".into()));

    let (clock, store) = (FakeClock::default(), MemoryStore::default());
    let state = run(&p, &runner, &clock, &store, RunStarted { auto_approve: true, ..started() }).await;
    assert_eq!(state.status, RunStatus::Success);
    assert_eq!(state.stage("implement").and_then(|s| s.approval.as_ref()).map(|a| a.by.clone()), Some("--yes".into()));
}

/// A workspace that cannot be snapshotted (a full disk, say).
struct Unwatchable;

impl ports::Workspace for Unwatchable {}

impl ports::Layers for Unwatchable {}

impl ports::Snapshots for Unwatchable {
    fn snapshot(&self, _: &RunId, _: &str, _: ports::Watch) -> Result<(String, usize), ports::SnapshotError> {
        Err(ports::SnapshotError::Take("No space left on device".into()))
    }
    fn restore(&self, _: &RunId, name: &str) -> Result<loopwright_engine::event::RestoreCounts, ports::SnapshotError> {
        Err(ports::SnapshotError::Read { name: name.to_owned(), reason: "no snapshot".into() })
    }
}

impl ports::Commits for Unwatchable {
    fn commit(
        &self,
        _: &RunId,
        _: &str,
        _: &TaskId,
        _: &StageId,
    ) -> Result<Option<(String, usize)>, ports::CommitError> {
        Ok(None)
    }
    fn revert(&self, _: &TaskId, _: &StageId) -> Result<usize, ports::CommitError> {
        Ok(0)
    }
}

#[tokio::test]
async fn a_plan_mode_stage_that_cannot_be_watched_does_not_run() {
    let p =
        pipeline("  - id: review\n    agent: a\n    mode: plan\n    description: x\n    retry: {max_attempts: 3}\n");
    let runner = ScriptedRunner::default();
    let (clock, store) = (FakeClock::default(), MemoryStore::default());
    let state = run_with(&p, &runner, &clock, &store, started(), &Unwatchable).await;
    assert_eq!(state.status, RunStatus::Failed);
    assert_eq!(runner.calls.borrow().len(), 0, "nothing was run");
    assert_eq!(
        kinds(&store),
        vec![
            "run_started",
            "attempt_started review",
            "review#1 failed validation_error",
            "stage_failed review",
            "run failed"
        ]
    );
    let message = store.all_events().iter().find_map(|r| match &r.event {
        Event::AttemptFailed { error, .. } => Some(error.message.clone()),
        _ => None,
    });
    assert_eq!(
        message.as_deref(),
        Some(
            "plan mode cannot be enforced, so the stage was not run: cannot snapshot the workspace: No space left on device. Free disk space or fix the permissions of the workspace and .loopwright/state, then `loopwright resume` (or run it with `mode: agent` if it may change files)"
        )
    );
}
