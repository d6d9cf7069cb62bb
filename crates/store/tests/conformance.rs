//! The store conformance suite: what every `Store` backend must do. Run here against SQLite,
//! in memory and on disk (including reopening the file, which is what a crash looks like).

use std::collections::BTreeMap;

use loopwright_engine::event::{FailureKind, StageError};
use loopwright_engine::{Event, RunId, RunStarted, RunStatus, Store, StoreError, TaskId};
use loopwright_spec::StageId;
use loopwright_spec::config::Synchronous;
use loopwright_store::SqliteStore;
use pretty_assertions::assert_eq;

fn t(s: &str) -> jiff::Timestamp {
    s.parse().expect("timestamp")
}

fn stage(s: &str) -> StageId {
    StageId::parse(s).expect("stage id")
}

fn started(task: &str) -> Event {
    Event::RunStarted(Box::new(RunStarted {
        pipeline: "bug-fix".into(),
        pipeline_path: "p.yml".into(),
        pipeline_source: "name: bug-fix".into(),
        task_id: TaskId::parse(task).expect("task"),
        task: "fix it".into(),
        vars: BTreeMap::new(),
        inputs: BTreeMap::new(),
        start_from: None,
        skip: vec![],
        auto_approve: false,
        prior_outputs: BTreeMap::new(),
        workspace: "/w".into(),
        owner: None,
        prices: Default::default(),
        budget: Default::default(),
        worktree: None,
    }))
}

fn succeeded(s: &str, key: &str, value: &str) -> Event {
    Event::AttemptSucceeded {
        stage: stage(s),
        attempt: 1,
        duration_ms: 5,
        outputs: BTreeMap::from([(key.to_owned(), value.to_owned())]),
    }
}

async fn journal_keeps_order_and_content(store: &impl Store) {
    let run = RunId::new("r1");
    let events = vec![
        started("task-1"),
        Event::AttemptStarted { stage: stage("diagnose"), attempt: 1 },
        Event::ProcessStarted {
            stage: stage("diagnose"),
            attempt: 1,
            pgid: 4242,
            start_time: Some(99),
            command: "sh x".into(),
        },
        succeeded("diagnose", "diagnosis", "it is broken"),
        Event::AttemptFailed {
            stage: stage("fix"),
            attempt: 1,
            duration_ms: 3,
            error: StageError {
                kind: FailureKind::ExecutionError,
                message: "exit 1".into(),
                exit_code: Some(1),
                output_tail: "boom".into(),
                pattern: None,
            },
        },
        Event::RunFinished { status: RunStatus::Failed },
    ];
    for (i, e) in events.iter().enumerate() {
        let rec = store.append(&run, e, t("2026-01-01T00:00:00Z")).await.expect("append");
        assert_eq!(rec.seq, i as u64 + 1);
    }
    let read: Vec<Event> = store.events(&run).await.expect("events").into_iter().map(|r| r.event).collect();
    assert_eq!(read, events);
}

async fn several_events_append_in_one_transaction(store: &impl Store) {
    let run = RunId::new("batch");
    let at = t("2026-05-01T00:00:00Z");
    let records = store
        .append_all(&run, &[(started("task-7"), at), (Event::AttemptStarted { stage: stage("a"), attempt: 1 }, at)])
        .await
        .expect("append_all");
    assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2]);
    // A batch with an invalid event (a second start) leaves nothing of itself behind.
    let bad = store
        .append_all(&run, &[(Event::AttemptStarted { stage: stage("b"), attempt: 1 }, at), (started("task-7"), at)])
        .await;
    assert!(bad.is_err());
    assert_eq!(store.events(&run).await.expect("events").len(), 2);
    // The store is usable after the failed batch, and numbering goes on from the journal.
    let more: Vec<_> =
        ["c", "d", "e"].iter().map(|s| (Event::AttemptStarted { stage: stage(s), attempt: 1 }, at)).collect();
    let records = store.append_all(&run, &more).await.expect("append_all after a failed one");
    assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![3, 4, 5]);
    let stored = store.events(&run).await.expect("events");
    assert_eq!(stored.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
    assert_eq!(stored[4].event, Event::AttemptStarted { stage: stage("e"), attempt: 1 });
}

async fn unknown_runs_are_reported(store: &impl Store) {
    let missing = RunId::new("nope");
    assert!(matches!(store.events(&missing).await, Err(StoreError::RunNotFound(id)) if id == missing));
    let err =
        store.append(&missing, &Event::RunFinished { status: RunStatus::Success }, t("2026-01-01T00:00:00Z")).await;
    assert!(matches!(err, Err(StoreError::RunNotFound(_))));
}

async fn a_run_cannot_start_twice(store: &impl Store) {
    let run = RunId::new("twice");
    store.append(&run, &started("task-2"), t("2026-01-01T00:00:00Z")).await.expect("first");
    assert!(store.append(&run, &started("task-2"), t("2026-01-01T00:00:01Z")).await.is_err());
    assert_eq!(store.events(&run).await.expect("events").len(), 1);
}

async fn runs_are_listed_newest_first_with_status(store: &impl Store) {
    for (id, at, status) in [
        ("a", "2026-02-01T00:00:00Z", None),
        ("b", "2026-02-02T00:00:00Z", Some(RunStatus::Success)),
        ("c", "2026-02-03T00:00:00Z", Some(RunStatus::Waiting)),
    ] {
        let run = RunId::new(id);
        store.append(&run, &started("task-3"), t(at)).await.expect("start");
        if let Some(status) = status {
            store.append(&run, &Event::RunFinished { status }, t(at)).await.expect("finish");
        }
    }
    let runs = store.runs(3).await.expect("runs");
    let got: Vec<(&str, RunStatus)> = runs.iter().map(|r| (r.run_id.as_str(), r.status)).collect();
    assert_eq!(got, vec![("c", RunStatus::Waiting), ("b", RunStatus::Success), ("a", RunStatus::Running)]);
}

async fn task_outputs_come_from_the_latest_run(store: &impl Store) {
    let first = RunId::new("t1");
    store.append(&first, &started("task-4"), t("2026-03-01T00:00:00Z")).await.expect("start");
    store.append(&first, &succeeded("plan", "plan_text", "old"), t("2026-03-01T00:00:01Z")).await.expect("ok");
    store.append(&first, &succeeded("review", "notes", "kept"), t("2026-03-01T00:00:02Z")).await.expect("ok");
    let second = RunId::new("t2");
    store.append(&second, &started("task-4"), t("2026-03-02T00:00:00Z")).await.expect("start");
    store.append(&second, &succeeded("plan", "plan_text", "new"), t("2026-03-02T00:00:01Z")).await.expect("ok");
    let other = RunId::new("t3");
    store.append(&other, &started("task-5"), t("2026-03-03T00:00:00Z")).await.expect("start");
    store.append(&other, &succeeded("plan", "plan_text", "other task"), t("2026-03-03T00:00:01Z")).await.expect("ok");

    let outputs = store.task_outputs(&TaskId::parse("task-4").expect("task")).await.expect("outputs");
    assert_eq!(
        outputs,
        BTreeMap::from([
            (stage("plan"), BTreeMap::from([("plan_text".to_owned(), "new".to_owned())])),
            (stage("review"), BTreeMap::from([("notes".to_owned(), "kept".to_owned())])),
        ])
    );
}

async fn cancel_requests_are_seen_after_a_point(store: &impl Store) {
    let run = RunId::new("c1");
    store.append(&run, &started("task-6"), t("2026-04-01T00:00:00Z")).await.expect("start");
    assert_eq!(store.cancel_requested(&run, 0).await.expect("query"), None);
    store
        .append(&run, &Event::CancelRequested { by: "alice".into(), rollback: true }, t("2026-04-01T00:00:01Z"))
        .await
        .expect("cancel");
    assert_eq!(store.cancel_requested(&run, 1).await.expect("query"), Some(("alice".into(), true)));
    assert_eq!(store.cancel_requested(&run, 2).await.expect("query"), None);
}

async fn conformance(store: &impl Store) {
    journal_keeps_order_and_content(store).await;
    unknown_runs_are_reported(store).await;
    a_run_cannot_start_twice(store).await;
    runs_are_listed_newest_first_with_status(store).await;
    task_outputs_come_from_the_latest_run(store).await;
    cancel_requests_are_seen_after_a_point(store).await;
    several_events_append_in_one_transaction(store).await;
}

#[tokio::test]
async fn sqlite_in_memory_conforms() {
    conformance(&SqliteStore::in_memory().expect("store")).await;
}

#[tokio::test]
async fn sqlite_file_conforms_and_survives_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    {
        let store = SqliteStore::open(&path, Synchronous::Full).expect("open");
        conformance(&store).await;
        assert_eq!(store.schema_version().expect("version"), 1);
    }
    let reopened = SqliteStore::open(&path, Synchronous::Normal).expect("reopen");
    assert_eq!(reopened.events(&RunId::new("r1")).await.expect("events").len(), 6);
    assert_eq!(reopened.runs(10).await.expect("runs").len(), 10);
    let mode: String = rusqlite::Connection::open(&path)
        .expect("open")
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .expect("pragma");
    assert_eq!(mode, "wal");
}
