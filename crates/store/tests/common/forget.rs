//! What forgetting runs must do on every backend (`gc` after `[retention] runs_days`): take out
//! only the runs that ended — their events, outputs, feed entries and rows — and leave every
//! other run, the count of runs and the feed's order as they were.

use std::collections::BTreeMap;

use loopwright_journal::{Event, RunId, RunQuery, RunStatus, Store, StoreError, TaskId};
use loopwright_store::Journal;
use loopwright_testkit::conformance::{stage, started, t};
use pretty_assertions::assert_eq;

pub async fn only_ended_runs_are_forgotten_and_the_rest_stays_whole(journal: &Journal) {
    let ship = || stage("ship");
    let output = |v: &str| Event::AttemptSucceeded {
        stage: stage("plan"),
        attempt: 1,
        duration_ms: 1,
        outputs: BTreeMap::from([("plan_text".to_owned(), v.to_owned())]),
    };
    let journals: Vec<(&str, &str, Vec<Event>)> = vec![
        (
            "f-done",
            "task-f1",
            vec![started("task-f1"), output("forgotten"), Event::RunFinished { status: RunStatus::Success }],
        ),
        (
            "f-rejected",
            "task-f2",
            vec![
                started("task-f2"),
                Event::ApprovalRequested { stage: ship() },
                Event::ApprovalRejected {
                    stage: ship(),
                    by: "carol".into(),
                    comment: None,
                    rollback: false,
                    via: None,
                },
                Event::RunFinished { status: RunStatus::Rejected },
            ],
        ),
        ("f-waiting", "task-f2", vec![started("task-f2"), output("waits"), Event::ApprovalRequested { stage: ship() }]),
        ("f-failed", "task-f3", vec![started("task-f3"), Event::RunFinished { status: RunStatus::Failed }]),
    ];
    for (day, (id, _, events)) in journals.iter().enumerate() {
        for (i, event) in events.iter().enumerate() {
            let at = t(&format!("2027-03-0{}T00:00:{i:02}Z", day + 1));
            journal.append(&RunId::new(*id), event, at).await.expect("append");
        }
    }
    let all = RunQuery { limit: 100, ..RunQuery::default() };
    assert_eq!(journal.runs_page(&all).await.expect("page").total, 4);
    let feed_before = journal.feed_since(0, 1000).await.expect("feed");

    // A run that has not ended, and one that does not exist, are not taken whatever is asked.
    let ids = ["f-done", "f-waiting", "f-rejected", "nope"].map(RunId::new);
    let taken = journal.forget(&ids).await.expect("forget");
    assert_eq!(taken, [RunId::new("f-done"), RunId::new("f-rejected")]);
    for gone in ["f-done", "f-rejected"] {
        assert!(matches!(journal.events(&RunId::new(gone)).await, Err(StoreError::RunNotFound(_))), "{gone}");
    }
    let page = journal.runs_page(&all).await.expect("page");
    let listed: Vec<&str> = page.runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!((listed, page.total), (vec!["f-failed", "f-waiting"], 2));
    // The others' journals are whole; the forgotten run's outputs no longer answer for its task.
    assert_eq!(journal.events(&RunId::new("f-waiting")).await.expect("events").len(), 3);
    assert_eq!(journal.events(&RunId::new("f-failed")).await.expect("events").len(), 2);
    let outputs = |task: &str| {
        let task = TaskId::parse(task).expect("task");
        async move { journal.task_outputs(&task).await.expect("outputs") }
    };
    assert_eq!(outputs("task-f1").await, BTreeMap::new());
    assert_eq!(
        outputs("task-f2").await,
        BTreeMap::from([(stage("plan"), BTreeMap::from([("plan_text".to_owned(), "waits".to_owned())]))])
    );
    // The feed keeps the others' entries at their positions, in order.
    let kept: Vec<(u64, String, u64)> = feed_before
        .iter()
        .filter(|e| !["f-done", "f-rejected"].contains(&e.run.as_str()))
        .map(|e| (e.position, e.run.to_string(), e.record.seq))
        .collect();
    let feed_after: Vec<(u64, String, u64)> = journal
        .feed_since(0, 1000)
        .await
        .expect("feed")
        .iter()
        .map(|e| (e.position, e.run.to_string(), e.record.seq))
        .collect();
    assert_eq!(feed_after, kept);
    // Asked again, nothing more goes; what comes next is appended after every position given.
    assert_eq!(journal.forget(&ids).await.expect("again"), Vec::<RunId>::new());
    let last = feed_before.last().map_or(0, |e| e.position);
    let next = RunId::new("f-next");
    journal.append(&next, &started("task-f4"), t("2027-03-09T00:00:00Z")).await.expect("next");
    let newest = journal.feed_since(last, 10).await.expect("feed");
    assert_eq!(newest.iter().map(|e| (e.run.as_str(), e.position > last)).collect::<Vec<_>>(), [("f-next", true)]);
    assert_eq!(journal.runs_page(&all).await.expect("page").total, 3);
}
