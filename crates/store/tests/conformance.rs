//! The store conformance suite (`loopwright-testkit`) against SQLite, in memory and on disk
//! (including reopening the file, which is what a crash looks like), and what only SQLite has
//! to show: WAL mode, the schema version, two processes racing on one file.

use loopwright_journal::{Event, RunId, Store, StoreError};
use loopwright_spec::config::Synchronous;
use loopwright_store::SqliteStore;
use loopwright_testkit::conformance::{stage, started, suite, t};
use pretty_assertions::assert_eq;

#[path = "common/forget.rs"]
mod forget;

#[tokio::test]
async fn sqlite_forgets_only_the_runs_that_ended() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(&dir.path().join("state.db"), Synchronous::Full).expect("open");
    forget::only_ended_runs_are_forgotten_and_the_rest_stays_whole(&loopwright_store::Journal::Sqlite(store)).await;
}

#[tokio::test]
async fn sqlite_in_memory_conforms() {
    suite(&SqliteStore::in_memory().expect("store")).await;
}

#[tokio::test]
async fn sqlite_file_conforms_and_survives_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    {
        let store = SqliteStore::open(&path, Synchronous::Full).expect("open");
        suite(&store).await;
        assert_eq!(store.schema_version().expect("version"), 11);
        // What a quiet daemon gives back is opened again when next needed.
        let listed = store.runs(40).await.expect("runs").len();
        store.release_memory();
        assert_eq!(store.runs(40).await.expect("runs after giving memory back").len(), listed);
        // Another connection's commit (another process) moves this one's data version; its
        // own commits and reads do not.
        let before = store.data_version().await.expect("version");
        store.append(&RunId::new("own"), &started("task-12"), t("2027-02-01T00:00:00Z")).await.expect("own");
        assert_eq!(store.data_version().await.expect("version"), before);
        let other = SqliteStore::open(&path, Synchronous::Normal).expect("second connection");
        other.append(&RunId::new("other"), &started("task-12"), t("2027-02-02T00:00:00Z")).await.expect("other");
        assert_ne!(store.data_version().await.expect("version"), before);
    }
    let reopened = SqliteStore::open(&path, Synchronous::Normal).expect("reopen");
    assert_eq!(reopened.events(&RunId::new("r1")).await.expect("events").len(), 6);
    assert_eq!(reopened.runs(40).await.expect("runs").len(), 29);
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
                    let event =
                        Event::ApprovalGranted { stage: stage("gate"), by: by.into(), comment: None, via: None };
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

#[tokio::test]
async fn the_owner_column_is_filled_from_the_journal_when_the_store_is_migrated() {
    // A store written by the version before migration 3: its runs' owners are read from their
    // journals (`run_started`, then the last `run_resumed`).
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let at = t("2026-08-01T00:00:00Z");
    let started_by = |pid: u32| {
        let Event::RunStarted(mut s) = started("task-14") else { unreachable!("a start") };
        s.owner = Some(loopwright_journal::Owner { pid, start_time: Some(5), daemon: false, ..Default::default() });
        serde_json::to_string(&Event::RunStarted(s)).expect("json")
    };
    let resumed = serde_json::to_string(&Event::RunResumed {
        owner: loopwright_journal::Owner { pid: 99, start_time: None, daemon: true, ..Default::default() },
        by: None,
    })
    .expect("json");
    {
        let conn = rusqlite::Connection::open(&path).expect("open");
        for (i, sql) in
            [include_str!("../src/migrations/001_journal.sql"), include_str!("../src/migrations/002_feed.sql")]
                .iter()
                .enumerate()
        {
            conn.execute_batch(sql).expect("old schema");
            conn.pragma_update(None, "user_version", i as i64 + 1).expect("version");
        }
        for (run, events) in [("old-1", vec![started_by(7)]), ("old-2", vec![started_by(8), resumed.clone()])] {
            conn.execute(
                "INSERT INTO runs (run_id, pipeline, task_id, status, created_at, updated_at, last_seq) VALUES (?1, 'bug-fix', 'task-14', 'running', ?2, ?2, ?3)",
                rusqlite::params![run, at.to_string(), events.len() as i64],
            )
            .expect("run row");
            for (seq, payload) in events.iter().enumerate() {
                let kind = if seq == 0 { "run_started" } else { "run_resumed" };
                conn.execute(
                    "INSERT INTO events (run_id, seq, at, kind, payload) VALUES (?1, ?2, ?3, ?4, ?5)",
                    rusqlite::params![run, seq as i64 + 1, at.to_string(), kind, payload],
                )
                .expect("event");
            }
        }
    }
    let store = SqliteStore::open(&path, Synchronous::Normal).expect("migrate");
    assert_eq!(store.schema_version().expect("version"), 11);
    let owners: Vec<(String, Option<(u32, bool)>)> = store
        .runs(10)
        .await
        .expect("runs")
        .into_iter()
        .map(|r| (r.run_id.to_string(), r.owner.map(|o| (o.pid, o.daemon))))
        .collect();
    assert_eq!(owners, vec![("old-2".into(), Some((99, true))), ("old-1".into(), Some((7, false)))]);
}

#[tokio::test]
async fn the_runs_list_columns_are_filled_from_the_journal_when_the_store_is_migrated() {
    // A store written by the version before migration 5: each run's task text, when it left
    // the queue and who acted on it are read from its journal.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state.db");
    let owner = loopwright_journal::Owner { pid: 99, start_time: None, daemon: true, ..Default::default() };
    let mut first = loopwright_testkit::run_started("task-15");
    first.task = "Fix the login page".into();
    first.by = Some("carol".into());
    let events = [
        Event::RunStarted(Box::new(first)),
        Event::RunQueued {},
        Event::RunResumed { owner, by: Some("dan".into()) },
        Event::ApprovalGranted {
            stage: loopwright_spec::StageId::parse("ship").expect("id"),
            by: "carol".into(),
            comment: None,
            via: None,
        },
        // A run from a forge: its pull request is read from its journal too (migration 10).
        Event::Delivered(loopwright_journal::forge::Delivery {
            round: 0,
            number: 12,
            url: "https://github.com/acme/shop/pull/12".into(),
            head: "0123456789abcdef0123456789abcdef01234567".into(),
            watching: false,
        }),
    ];
    {
        let conn = rusqlite::Connection::open(&path).expect("open");
        let old = [
            include_str!("../src/migrations/001_journal.sql"),
            include_str!("../src/migrations/002_feed.sql"),
            include_str!("../src/migrations/003_owner.sql"),
            include_str!("../src/migrations/004_task_auto.sql"),
        ];
        for (i, sql) in old.iter().enumerate() {
            conn.execute_batch(sql).expect("old schema");
            conn.pragma_update(None, "user_version", i as i64 + 1).expect("version");
        }
        conn.execute(
            "INSERT INTO runs (run_id, pipeline, task_id, status, created_at, updated_at, last_seq) VALUES ('old', 'bug-fix', 'task-15', 'running', '2026-08-01T00:00:00Z', '2026-08-01T00:00:01Z', 5)",
            [],
        )
        .expect("run row");
        for (i, event) in events.iter().enumerate() {
            conn.execute(
                "INSERT INTO events (run_id, seq, at, kind, payload) VALUES ('old', ?1, ?2, ?3, ?4)",
                rusqlite::params![
                    i as i64 + 1,
                    format!("2026-08-01T00:00:0{i}Z"),
                    event.kind(),
                    serde_json::to_string(event).expect("json")
                ],
            )
            .expect("event");
        }
    }
    let store = SqliteStore::open(&path, Synchronous::Normal).expect("migrate");
    let runs = store.runs_page(&loopwright_journal::RunQuery { limit: 5, ..Default::default() }).await.expect("page");
    let got: Vec<_> = runs.runs.iter().map(|r| (r.task.clone(), r.running_at, r.people.clone())).collect();
    assert_eq!(
        got,
        vec![(
            "Fix the login page".to_owned(),
            Some(t("2026-08-01T00:00:02Z")),
            vec!["carol".to_owned(), "dan".to_owned()]
        )]
    );
    // The last event's time is on the run's row, and the run is counted.
    assert_eq!((runs.runs[0].updated_at, runs.total), (t("2026-08-01T00:00:04Z"), 1));
    assert_eq!(
        runs.runs[0].pull_request,
        Some(loopwright_journal::store::PullRequestRef {
            number: 12,
            url: "https://github.com/acme/shop/pull/12".into()
        })
    );
}

#[test]
fn a_loops_supervision_journal_is_capped_and_what_was_removed_summarised() {
    use loopwright_store::auto::{AUTO_LOG_CAP, AUTO_LOG_HEAD};
    let store = SqliteStore::in_memory().expect("store");
    let total = AUTO_LOG_CAP + 1_000;
    for i in 0..total {
        let kind = if i % 2 == 0 { "signal" } else { "signal_invalid" };
        store.auto_log("loop-1", "s", "2026-11-25T00:00:00Z", kind, &format!("{{\"n\": {i}}}")).expect("log");
    }
    // Another loop's journal is left alone.
    store.auto_log("loop-2", "t", "2026-11-25T00:00:00Z", "started", "{}").expect("log");
    let entries = store.auto_log_since("loop-1", 0).expect("read");
    assert!(entries.len() as i64 <= AUTO_LOG_CAP, "{} entries", entries.len());
    let first: Vec<String> = entries.iter().take(3).map(|e| e.data.clone()).collect();
    assert_eq!(first, ["{\"n\": 0}", "{\"n\": 1}", "{\"n\": 2}"]);
    let last = entries.iter().rev().find(|e| e.kind != "trimmed").expect("an entry");
    assert_eq!(last.data, format!("{{\"n\": {}}}", total - 1));
    let summaries: Vec<serde_json::Value> =
        entries.iter().filter(|e| e.kind == "trimmed").map(|e| serde_json::from_str(&e.data).expect("json")).collect();
    let removed: i64 = summaries.iter().map(|s| s["removed"].as_i64().unwrap_or(0)).sum();
    let kept = entries.iter().filter(|e| e.kind != "trimmed").count() as i64;
    assert_eq!(removed + kept, total, "every entry is either kept or counted");
    assert_eq!(summaries[0]["kept_first"], AUTO_LOG_HEAD);
    assert!(summaries[0]["kinds"]["signal"].as_i64().unwrap_or(0) > 0, "{summaries:?}");
    assert_eq!(store.auto_log_since("loop-2", 0).expect("read").len(), 1);
}
