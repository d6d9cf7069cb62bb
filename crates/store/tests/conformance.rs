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
    assert!(matches!(
        store.append(&run, &started("task-2"), t("2026-01-01T00:00:01Z")).await,
        Err(StoreError::Exists(r)) if r == run
    ));
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

async fn compare_and_append_refuses_a_stale_reader(store: &impl Store) {
    let run = RunId::new("cas");
    let at = t("2026-05-01T00:00:00Z");
    store.append(&run, &started("task-8"), at).await.expect("start");
    let answer = |by: &str| Event::ApprovalGranted { stage: stage("gate"), by: by.into(), comment: None };
    // Two readers saw the journal end at event 1; the first to append wins.
    let won = store.append_after(&run, 1, &[(answer("alice"), at), (answer("alice-2"), at)]).await.expect("first");
    assert_eq!(won.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![2, 3]);
    match store.append_after(&run, 1, &[(answer("bob"), at)]).await {
        Err(StoreError::Conflict { run: r, expected: 1, found: 3 }) => assert_eq!(r, run),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(StoreError::Conflict { run: run.clone(), expected: 1, found: 3 }.is_retryable());
    let journal = store.events(&run).await.expect("events");
    assert_eq!(journal.iter().map(|r| r.event.clone()).collect::<Vec<_>>()[1..], [answer("alice"), answer("alice-2")]);
    // A reader that is up to date appends.
    assert_eq!(store.append_after(&run, 3, &[(answer("carol"), at)]).await.expect("append")[0].seq, 4);
    assert!(matches!(
        store.append_after(&RunId::new("nope"), 0, &[(answer("x"), at)]).await,
        Err(StoreError::RunNotFound(_))
    ));
    // What came after a point.
    let since = store.events_since(&run, 2).await.expect("since");
    assert_eq!(since.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![3, 4]);
    assert_eq!(store.events_since(&run, 4).await.expect("since"), vec![]);
}

async fn conformance(store: &impl Store) {
    journal_keeps_order_and_content(store).await;
    unknown_runs_are_reported(store).await;
    a_run_cannot_start_twice(store).await;
    runs_are_listed_newest_first_with_status(store).await;
    task_outputs_come_from_the_latest_run(store).await;
    cancel_requests_are_seen_after_a_point(store).await;
    several_events_append_in_one_transaction(store).await;
    compare_and_append_refuses_a_stale_reader(store).await;
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
        assert_eq!(store.schema_version().expect("version"), 2);
        // The feed holds every event of every run once, in commit order, each as the run's
        // journal has it.
        let feed = store.feed_since(0, 100_000).expect("feed");
        let ids: Vec<u64> = feed.iter().map(|(id, _, _)| *id).collect();
        assert_eq!(ids, (1..=feed.len() as u64).collect::<Vec<_>>());
        assert_eq!(store.feed_last().expect("last"), feed.len() as u64);
        let mut total = 0;
        for run in store.runs(100).await.expect("runs") {
            let events = store.events(&run.run_id).await.expect("events");
            let from_feed: Vec<_> =
                feed.iter().filter(|(_, r, _)| *r == run.run_id).map(|(_, _, e)| e.clone()).collect();
            assert_eq!(from_feed, events);
            total += events.len();
        }
        assert_eq!(total, feed.len());
        let tail = store.feed_since(feed.len() as u64 - 2, 10).expect("tail");
        assert_eq!(tail, feed[feed.len() - 2..].to_vec());
    }
    let reopened = SqliteStore::open(&path, Synchronous::Normal).expect("reopen");
    assert_eq!(reopened.events(&RunId::new("r1")).await.expect("events").len(), 6);
    assert_eq!(reopened.runs(20).await.expect("runs").len(), 11);
    let mode: String = rusqlite::Connection::open(&path)
        .expect("open")
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .expect("pragma");
    assert_eq!(mode, "wal");
}

#[test]
fn two_processes_answering_at_once_give_one_success() {
    // Two connections to one file (two loopwright processes), released together many times:
    // every time exactly one compare-and-append lands.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let at = t("2026-06-01T00:00:00Z");
    for i in 0..25 {
        let run = RunId::new(format!("race-{i}"));
        rt.block_on(async {
            let store = SqliteStore::open(&path, Synchronous::Normal).expect("open");
            store.append(&run, &started("task-9"), at).await.expect("start");
        });
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let handles: Vec<_> = ["alice", "bob"]
            .into_iter()
            .map(|by| {
                let (path, run, barrier) = (path.clone(), run.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let store = SqliteStore::open(&path, Synchronous::Normal).expect("open");
                    let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
                    let event = Event::ApprovalGranted { stage: stage("gate"), by: by.into(), comment: None };
                    barrier.wait();
                    rt.block_on(store.append_after(&run, 1, &[(event, at)]))
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().expect("thread")).collect();
        let wins = results.iter().filter(|r| r.is_ok()).count();
        let conflicts =
            results.iter().filter(|r| matches!(r, Err(StoreError::Conflict { expected: 1, found: 2, .. }))).count();
        assert_eq!((wins, conflicts), (1, 1), "try {i}: {results:?}");
        let events =
            rt.block_on(SqliteStore::open(&path, Synchronous::Normal).expect("open").events(&run)).expect("events");
        assert_eq!(events.len(), 2, "try {i}");
    }
}
