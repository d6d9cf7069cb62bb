//! The store conformance suite: what every [`Store`] backend must do. `loopwright-store` runs
//! it against SQLite (in memory, on disk, reopened); this crate's tests run it against
//! [`MemoryStore`](crate::MemoryStore), so the double the engine's tests use is held to the
//! same contract.

use std::collections::BTreeMap;

use loopwright_journal::event::{FailureKind, StageError};
use loopwright_journal::{Event, Owner, RunId, RunQuery, RunStatus, RunSummary, Store, StoreError, TaskId};
use loopwright_spec::StageId;
use pretty_assertions::assert_eq;

/// A timestamp from its RFC 3339 text.
pub fn t(s: &str) -> jiff::Timestamp {
    s.parse().expect("timestamp")
}

/// A stage id.
pub fn stage(s: &str) -> StageId {
    StageId::parse(s).expect("stage id")
}

/// The first event of a run of pipeline `bug-fix` for task `task`, with no owner.
pub fn started(task: &str) -> Event {
    Event::RunStarted(Box::new(crate::run_started(task)))
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
            host: Some("ci-1/0123456789ab".into()),
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
                classified_by: None,
                unfixable: None,
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
    let answer = |by: &str| Event::ApprovalGranted { stage: stage("gate"), by: by.into(), comment: None, via: None };
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

/// Runs every check of the suite against an empty store, in order. Panics (with a diff) at
/// the first behaviour that differs from the contract.
pub async fn suite(store: &impl Store) {
    journal_keeps_order_and_content(store).await;
    unknown_runs_are_reported(store).await;
    a_run_cannot_start_twice(store).await;
    runs_are_listed_newest_first_with_status(store).await;
    task_outputs_come_from_the_latest_run(store).await;
    cancel_requests_are_seen_after_a_point(store).await;
    several_events_append_in_one_transaction(store).await;
    compare_and_append_refuses_a_stale_reader(store).await;
    the_feed_holds_every_event_once_in_commit_order(store).await;
    runs_are_found_by_status_oldest_first(store).await;
    a_summary_names_the_last_owner(store).await;
    a_page_of_runs_is_filtered_counted_and_ordered(store).await;
    every_page_lists_the_waiting_runs_first(store).await;
}

/// Every page of the waiting-first order, at every offset and size, is the same slice of one
/// list: the waiting runs newest first, then the others newest first.
async fn every_page_lists_the_waiting_runs_first(store: &impl Store) {
    let start = || {
        let mut s = crate::run_started("task-waiting-pages");
        s.pipeline = "waiting-pages".into();
        Event::RunStarted(Box::new(s))
    };
    // Oldest first; waiting and not interleaved in time.
    let runs = [("o1", false), ("w1", true), ("o2", false), ("o3", false), ("w2", true), ("o4", false), ("w3", true)];
    for (day, (id, waiting)) in runs.iter().enumerate() {
        let mut events = vec![start()];
        events.push(if *waiting {
            Event::ApprovalRequested { stage: stage("ship") }
        } else {
            Event::RunFinished { status: RunStatus::Success }
        });
        for (i, event) in events.iter().enumerate() {
            let at = t(&format!("2026-06-{:02}T00:00:{i:02}Z", day + 1));
            store.append(&RunId::new(*id), event, at).await.expect("append");
        }
    }
    let whole = ["w3", "w2", "w1", "o4", "o3", "o2", "o1"];
    for offset in 0..=whole.len() + 1 {
        for limit in 1..=whole.len() + 1 {
            let query = RunQuery {
                pipeline: Some("waiting-pages".into()),
                waiting_first: true,
                offset,
                limit,
                ..RunQuery::default()
            };
            let got = store.runs_page(&query).await.expect("page");
            let ids: Vec<String> = got.runs.iter().map(|r| r.run_id.to_string()).collect();
            let expected: Vec<String> = whole.iter().skip(offset).take(limit).map(|s| (*s).to_owned()).collect();
            assert_eq!((ids, got.total), (expected, whole.len() as u64), "offset {offset}, limit {limit}");
        }
    }
}

/// A pull request delivered (`watching`: the run waits for its CI).
fn delivered(number: u64, url: &str) -> Event {
    Event::Delivered(loopwright_journal::forge::Delivery {
        round: 0,
        number,
        url: url.into(),
        head: "0123456789abcdef0123456789abcdef01234567".into(),
        watching: true,
    })
}

async fn a_page_of_runs_is_filtered_counted_and_ordered(store: &impl Store) {
    let start = |text: &str, by: Option<&str>| {
        let mut s = crate::run_started("task-page");
        s.pipeline = "paging".into();
        s.task = text.into();
        s.by = by.map(Into::into);
        Event::RunStarted(Box::new(s))
    };
    let owner = Owner { pid: 1, start_time: None, daemon: true, ..Owner::default() };
    let journals: [(&str, &str, Vec<Event>); 4] = [
        (
            "p1",
            "2026-05-01",
            vec![
                start("Fix the LOGIN page", Some("carol")),
                Event::RunQueued {},
                Event::RunResumed { owner, by: Some("dan".into()) },
                Event::ApprovalRequested { stage: stage("ship") },
                Event::ApprovalGranted { stage: stage("ship"), by: "carol".into(), comment: None, via: None },
                Event::RunFinished { status: RunStatus::Success },
            ],
        ),
        (
            "p2",
            "2026-05-02",
            vec![
                start("add 100% coverage", None),
                delivered(7, "https://github.com/acme/shop/pull/7"),
                // The latest delivery is the one listed.
                delivered(8, "https://github.com/acme/shop/pull/8"),
                Event::ApprovalRequested { stage: stage("ship") },
            ],
        ),
        (
            "p3",
            "2026-05-03",
            vec![
                start("unrelated", None),
                Event::RunFinished { status: RunStatus::Failed },
                // An event that changes nothing of the run's status is still its last.
                Event::CancelRequested { by: "fay".into(), rollback: false },
            ],
        ),
        (
            "p4",
            "2026-05-04",
            vec![
                start("never ran", None),
                Event::RunQueued {},
                Event::CancelRequested { by: "erin".into(), rollback: false },
                Event::RunCancelled { stage: None, by: "erin".into(), rollback: false },
            ],
        ),
    ];
    for (id, day, events) in &journals {
        for (i, event) in events.iter().enumerate() {
            let at = t(&format!("{day}T00:00:{i:02}Z"));
            store.append(&RunId::new(*id), event, at).await.expect("append");
        }
    }
    let base = RunQuery { pipeline: Some("paging".into()), limit: 10, ..RunQuery::default() };
    let page = |q: RunQuery| async move {
        let got = store.runs_page(&q).await.expect("page");
        (got.runs.iter().map(|r| r.run_id.to_string()).collect::<Vec<_>>(), got.total)
    };
    let ids = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(page(base.clone()).await, (ids(&["p4", "p3", "p2", "p1"]), 4));
    assert_eq!(page(RunQuery { waiting_first: true, ..base.clone() }).await, (ids(&["p2", "p4", "p3", "p1"]), 4));
    assert_eq!(page(RunQuery { offset: 1, limit: 2, ..base.clone() }).await, (ids(&["p3", "p2"]), 4));
    let waiting_first = RunQuery { waiting_first: true, ..base.clone() };
    assert_eq!(page(RunQuery { limit: 1, ..waiting_first.clone() }).await, (ids(&["p2"]), 4));
    assert_eq!(page(RunQuery { offset: 1, limit: 2, ..waiting_first.clone() }).await, (ids(&["p4", "p3"]), 4));
    assert_eq!(page(RunQuery { offset: 3, limit: 5, ..waiting_first.clone() }).await, (ids(&["p1"]), 4));
    assert_eq!(page(RunQuery { text: Some("login".into()), ..base.clone() }).await, (ids(&["p1"]), 1));
    assert_eq!(page(RunQuery { text: Some("100%".into()), ..base.clone() }).await, (ids(&["p2"]), 1));
    // `%` and `_` in the text are themselves, not wildcards.
    assert_eq!(page(RunQuery { text: Some("1_0".into()), ..base.clone() }).await, (ids(&[]), 0));
    assert_eq!(page(RunQuery { text: Some("P3".into()), ..base.clone() }).await, (ids(&["p3"]), 1));
    assert_eq!(page(RunQuery { person: Some("carol".into()), ..base.clone() }).await, (ids(&["p1"]), 1));
    assert_eq!(page(RunQuery { person: Some("car".into()), ..base.clone() }).await, (ids(&[]), 0));
    assert_eq!(page(RunQuery { person: Some("erin".into()), ..base.clone() }).await, (ids(&["p4"]), 1));
    let (since, until) = (Some(t("2026-05-02T00:00:00Z")), Some(t("2026-05-04T00:00:00Z")));
    assert_eq!(page(RunQuery { since, until, ..base.clone() }).await, (ids(&["p3", "p2"]), 2));
    let cancelled = RunQuery { statuses: vec![RunStatus::Cancelled, RunStatus::Waiting], ..base.clone() };
    assert_eq!(page(cancelled).await, (ids(&["p4", "p2"]), 2));
    let all = store.runs_page(&base).await.expect("page").runs;
    let shown: Vec<(&str, &str, Option<jiff::Timestamp>, Vec<String>)> =
        all.iter().map(|r| (r.run_id.as_str(), r.task.as_str(), r.running_at, r.people.clone())).collect();
    assert_eq!(
        shown,
        vec![
            ("p4", "never ran", None, vec!["erin".to_owned()]),
            ("p3", "unrelated", None, vec!["fay".to_owned()]),
            ("p2", "add 100% coverage", Some(t("2026-05-02T00:00:01Z")), vec![]),
            ("p1", "Fix the LOGIN page", Some(t("2026-05-01T00:00:02Z")), vec!["carol".to_owned(), "dan".to_owned()]),
        ]
    );
    let pulls: Vec<(&str, Option<(u64, &str)>)> =
        all.iter().map(|r| (r.run_id.as_str(), r.pull_request.as_ref().map(|p| (p.number, p.url.as_str())))).collect();
    assert_eq!(
        pulls,
        vec![("p4", None), ("p3", None), ("p2", Some((8, "https://github.com/acme/shop/pull/8"))), ("p1", None)]
    );
    // Each run's last event's time, as the list shows it.
    let last: Vec<(&str, jiff::Timestamp)> = all.iter().map(|r| (r.run_id.as_str(), r.updated_at)).collect();
    assert_eq!(
        last,
        vec![
            ("p4", t("2026-05-04T00:00:03Z")),
            ("p3", t("2026-05-03T00:00:02Z")),
            ("p2", t("2026-05-02T00:00:03Z")),
            ("p1", t("2026-05-01T00:00:05Z")),
        ]
    );
}

async fn the_feed_holds_every_event_once_in_commit_order(store: &impl Store) {
    // Positions 1..=N with no gap, each run's events in its own order, each as its journal
    // has it; a read from a position returns exactly what followed it.
    let feed = store.feed_since(0, 100_000).await.expect("feed");
    assert!(!feed.is_empty(), "the suite's earlier checks wrote events");
    assert_eq!(feed.iter().map(|e| e.position).collect::<Vec<_>>(), (1..=feed.len() as u64).collect::<Vec<_>>());
    assert_eq!(store.feed_last().await.expect("last"), feed.len() as u64);
    let mut total = 0;
    for run in store.runs(1000).await.expect("runs") {
        let events = store.events(&run.run_id).await.expect("events");
        let from_feed: Vec<_> = feed.iter().filter(|e| e.run == run.run_id).map(|e| e.record.clone()).collect();
        assert_eq!(from_feed, events, "run {}", run.run_id);
        total += events.len();
    }
    assert_eq!(total, feed.len());
    let tail = store.feed_since(feed.len() as u64 - 2, 10).await.expect("tail");
    assert_eq!(tail, feed[feed.len() - 2..].to_vec());
    assert_eq!(store.feed_since(feed.len() as u64, 10).await.expect("past the end"), vec![]);
    assert_eq!(store.feed_since(1, 2).await.expect("a page"), feed[1..3].to_vec());
    // Nothing written, nothing changed: a watcher polling the version does not read again.
    let version = store.data_version().await.expect("version");
    assert_eq!(store.data_version().await.expect("version"), version);
    // A new event is at the end of the feed.
    let run = RunId::new("feed-tail");
    store.append(&run, &started("task-10"), t("2026-07-01T00:00:00Z")).await.expect("start");
    let last = store.feed_since(feed.len() as u64, 10).await.expect("new");
    assert_eq!(last.len(), 1);
    assert_eq!((last[0].position, &last[0].run, last[0].record.seq), (feed.len() as u64 + 1, &run, 1));
}

async fn runs_are_found_by_status_oldest_first(store: &impl Store) {
    let at = |d: u32| t(&format!("2027-01-{d:02}T00:00:00Z"));
    for (id, day, status) in
        [("s1", 1, RunStatus::Waiting), ("s2", 2, RunStatus::Interrupted), ("s3", 3, RunStatus::Waiting)]
    {
        let run = RunId::new(id);
        store.append(&run, &started("task-11"), at(day)).await.expect("start");
        store.append(&run, &Event::RunFinished { status }, at(day)).await.expect("status");
    }
    let found = store.runs_in(&[RunStatus::Waiting, RunStatus::Interrupted]).await.expect("runs_in");
    let ids: Vec<&str> = found.iter().filter(|r| r.task_id.as_str() == "task-11").map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, vec!["s1", "s2", "s3"]);
    assert!(found.iter().all(|r| matches!(r.status, RunStatus::Waiting | RunStatus::Interrupted)));
    let s1 = found.iter().find(|r| r.run_id.as_str() == "s1").expect("s1");
    assert_eq!((s1.pipeline.as_str(), s1.created_at, s1.updated_at, s1.owner.clone()), ("bug-fix", at(1), at(1), None));
}

async fn a_summary_names_the_last_owner(store: &impl Store) {
    let run = RunId::new("owned");
    let first =
        Owner { pid: 41, start_time: Some(7), daemon: false, host: Some("ci-2".into()), worker: Some("w-1".into()) };
    let second = Owner { pid: 42, start_time: None, daemon: true, ..Owner::default() };
    let Event::RunStarted(mut start) = started("task-13") else { unreachable!("a start") };
    start.owner = Some(first.clone());
    store.append(&run, &Event::RunStarted(start), t("2027-03-01T00:00:00Z")).await.expect("start");
    let owner_of = |runs: Vec<RunSummary>| runs.into_iter().find(|r| r.run_id == run).and_then(|r| r.owner);
    assert_eq!(owner_of(store.runs(1000).await.expect("runs")), Some(first));
    store
        .append(&run, &Event::RunResumed { owner: second.clone(), by: None }, t("2027-03-01T00:00:01Z"))
        .await
        .expect("resume");
    assert_eq!(owner_of(store.runs(1000).await.expect("runs")), Some(second.clone()));
    assert_eq!(owner_of(store.runs_in(&[RunStatus::Running]).await.expect("runs_in")), Some(second));
}
