//! The store conformance suite (`loopwright-testkit`) on a real PostgreSQL, and what only a
//! server shared by many processes has to show: two writers racing for one journal, feed
//! positions in commit order under concurrent appends, migrations applied once when two
//! processes start at once. The server comes from `scripts/with-postgres.sh`
//! (`LOOPWRIGHT_TEST_PG`); without one these tests say so and pass, unless
//! `LOOPWRIGHT_REQUIRE_PG` is set (CI sets it).

use loopwright_journal::{Event, LeaseEpoch, RunId, Store, StoreError};
use loopwright_store::pg::PgStore;
use loopwright_testkit::conformance::{stage, started, suite, t};
use pretty_assertions::assert_eq;

/// A new, empty database on the test server: its URL.
async fn fresh_database() -> Option<String> {
    let Ok(base) = std::env::var("LOOPWRIGHT_TEST_PG") else {
        assert!(
            std::env::var_os("LOOPWRIGHT_REQUIRE_PG").is_none(),
            "LOOPWRIGHT_TEST_PG is not set: run the tests through scripts/with-postgres.sh"
        );
        eprintln!("skipped: no PostgreSQL (run through scripts/with-postgres.sh)");
        return None;
    };
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let name = format!(
        "lw_{}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
        jiff::Timestamp::now().as_microsecond() % 1_000_000
    );
    let (client, connection) = tokio_postgres::connect(&base, tokio_postgres::NoTls).await.expect("connect");
    let running = tokio::spawn(connection);
    client.batch_execute(&format!("CREATE DATABASE {name}")).await.expect("create database");
    drop(client);
    let _ = running.await;
    let (head, _) = base.rsplit_once('/').expect("a database in the URL");
    Some(format!("{head}/{name}"))
}

#[path = "common/forget.rs"]
mod forget;

#[tokio::test]
async fn postgres_forgets_only_the_runs_that_ended() {
    let Some(url) = fresh_database().await else { return };
    let store = PgStore::connect(&url, 2).await.expect("connect");
    forget::only_ended_runs_are_forgotten_and_the_rest_stays_whole(&loopwright_store::Journal::Postgres(store)).await;
}

#[tokio::test]
async fn postgres_conforms() {
    let Some(url) = fresh_database().await else { return };
    let store = PgStore::connect(&url, 4).await.expect("connect");
    suite(&store).await;
    assert_eq!(store.schema_version().await.expect("version"), 6);
    // A second handle (another process) reads what the first wrote, and the data version
    // moves with every commit, by anyone.
    let other = PgStore::connect(&url, 2).await.expect("second handle");
    assert_eq!(other.events(&RunId::new("r1")).await.expect("events").len(), 6);
    let before = store.data_version().await.expect("version");
    other.append(&RunId::new("other"), &started("task-12"), t("2027-02-02T00:00:00Z")).await.expect("other");
    assert_ne!(store.data_version().await.expect("version"), before);
}

#[tokio::test]
async fn of_two_writers_deciding_on_the_same_journal_exactly_one_wins() {
    let Some(url) = fresh_database().await else { return };
    let (a, b) = (PgStore::connect(&url, 2).await.expect("a"), PgStore::connect(&url, 2).await.expect("b"));
    for round in 0..20 {
        let run = RunId::new(format!("race-{round}"));
        a.append(&run, &started("task-race"), t("2027-04-01T00:00:00Z")).await.expect("start");
        let decide =
            |by: &str| vec![(Event::CancelRequested { by: by.to_owned(), rollback: false }, t("2027-04-01T00:00:01Z"))];
        let (by_a, by_b) = (decide("a"), decide("b"));
        let (first, second) = tokio::join!(a.append_after(&run, 1, &by_a), b.append_after(&run, 1, &by_b));
        let won = [first.is_ok(), second.is_ok()];
        assert_eq!(won.iter().filter(|w| **w).count(), 1, "round {round}: {first:?} {second:?}");
        let lost = if won[0] { second } else { first };
        assert!(
            matches!(lost, Err(StoreError::Conflict { expected: 1, found: 2, .. })),
            "round {round}: the loser is told the journal moved on: {lost:?}"
        );
        assert_eq!(a.events(&run).await.expect("events").len(), 2);
    }
}

#[tokio::test]
async fn feed_positions_are_dense_and_in_commit_order_under_concurrent_appends() {
    let Some(url) = fresh_database().await else { return };
    let stores: Vec<PgStore> = {
        let mut all = Vec::new();
        for _ in 0..4 {
            all.push(PgStore::connect(&url, 2).await.expect("connect"));
        }
        all
    };
    let writers = stores.iter().enumerate().map(|(i, store)| async move {
        let run = RunId::new(format!("writer-{i}"));
        store.append(&run, &started("task-feed"), t("2027-05-01T00:00:00Z")).await.expect("start");
        for n in 0..40 {
            let event = Event::AttemptStarted { stage: stage("s"), attempt: n + 1 };
            store.append(&run, &event, t("2027-05-01T00:00:01Z")).await.expect("append");
        }
    });
    futures_util::future::join_all(writers).await;
    let feed = stores[0].feed_since(0, 10_000).await.expect("feed");
    let positions: Vec<u64> = feed.iter().map(|f| f.position).collect();
    assert_eq!(positions, (1..=164).collect::<Vec<u64>>());
    // Within each run the feed has its events in journal order.
    for i in 0..4 {
        let seqs: Vec<u64> =
            feed.iter().filter(|f| f.run.as_str() == format!("writer-{i}")).map(|f| f.record.seq).collect();
        assert_eq!(seqs, (1..=41).collect::<Vec<u64>>());
    }
    assert_eq!(stores[0].feed_last().await.expect("last"), 164);
}

#[tokio::test]
async fn two_processes_starting_on_a_new_database_migrate_it_once() {
    let Some(url) = fresh_database().await else { return };
    let (a, b) = tokio::join!(PgStore::connect(&url, 1), PgStore::connect(&url, 1));
    let (a, b) = (a.expect("a"), b.expect("b"));
    assert_eq!((a.schema_version().await.expect("a"), b.schema_version().await.expect("b")), (6, 6));
}

#[tokio::test]
async fn an_unreachable_server_is_named_without_its_password() {
    let Err(e) = PgStore::connect("postgres://lw:s3cret@127.0.0.1:1/nothing", 1).await else {
        panic!("connected to a closed port")
    };
    let text = e.to_string();
    assert!(text.contains("postgres://lw:***@127.0.0.1:1/nothing") && !text.contains("s3cret"), "{text}");
}

#[tokio::test]
async fn a_feed_watcher_is_woken_by_another_processs_commit_and_otherwise_waits_out_its_pause() {
    let Some(url) = fresh_database().await else { return };
    let (watcher, writer) = (PgStore::connect(&url, 1).await.expect("a"), PgStore::connect(&url, 1).await.expect("b"));
    let watch = watcher.watch_feed().await.expect("watch");
    assert!(watch.listening());
    // Nothing committed: the pause runs out.
    assert!(!watch.changed(std::time::Duration::from_millis(200)).await);
    let (woken, appended) = tokio::join!(watch.changed(std::time::Duration::from_secs(20)), async {
        writer.append(&RunId::new("told"), &started("task-watch"), t("2027-06-01T00:00:00Z")).await.expect("append")
    });
    assert!(woken, "the commit woke the watcher (not its pause)");
    assert_eq!(appended.seq, 1);
    assert_eq!(watcher.feed_since(0, 10).await.expect("feed").len(), 1);
}

#[tokio::test]
async fn the_scrubber_redacts_every_event_before_it_reaches_the_database() {
    let Some(url) = fresh_database().await else { return };
    let store = PgStore::connect(&url, 1).await.expect("connect");
    store.set_scrubber(Box::new(|text| {
        text.contains("sk-secret-123").then(|| text.replace("sk-secret-123", "[redacted]"))
    }));
    let run = RunId::new("scrubbed");
    store.append(&run, &started("task-scrub"), t("2027-07-01T00:00:00Z")).await.expect("start");
    let failed = Event::AttemptFailed {
        stage: stage("s"),
        attempt: 1,
        duration_ms: 1,
        error: loopwright_journal::event::StageError {
            kind: loopwright_journal::event::FailureKind::ExecutionError,
            message: "401: key sk-secret-123 refused".into(),
            exit_code: Some(1),
            output_tail: String::new(),
            pattern: None,
            classified_by: None,
            unfixable: None,
        },
    };
    let record = store.append(&run, &failed, t("2027-07-01T00:00:01Z")).await.expect("append");
    let text = serde_json::to_string(&record.event).expect("json");
    assert!(text.contains("[redacted]") && !text.contains("sk-secret-123"), "{text}");
    // What another handle reads from the database is the redacted event.
    let other = PgStore::connect(&url, 1).await.expect("other");
    let stored = serde_json::to_string(&other.events(&run).await.expect("events")).expect("json");
    assert!(!stored.contains("sk-secret-123"), "{stored}");
}

#[tokio::test]
async fn a_server_asking_for_tls_is_reached_over_it_trusting_only_the_root_named() {
    let Some(url) = fresh_database().await else { return };
    let Ok(ca) = std::env::var("LOOPWRIGHT_TEST_PG_CA") else {
        assert!(std::env::var_os("LOOPWRIGHT_REQUIRE_PG").is_none(), "LOOPWRIGHT_TEST_PG_CA is not set");
        return;
    };
    let secure = format!("{url}?sslmode=require");
    // Trusting the run's CA: the connection is encrypted and works.
    let store = PgStore::connect_trusting(&secure, 1, Some(std::path::Path::new(&ca))).await.expect("over TLS");
    store.append(&RunId::new("tls"), &started("task-tls"), t("2027-08-01T00:00:00Z")).await.expect("append");
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("plain");
    let running = tokio::spawn(connection);
    let encrypted: bool = client
        .query_one("SELECT bool_and(ssl) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE datname = current_database() AND pid <> pg_backend_pid()", &[])
        .await
        .expect("pg_stat_ssl")
        .get(0);
    assert!(encrypted, "the store's connections are not encrypted");
    drop(client);
    let _ = running.await;
    // Trusting only this machine's roots, the run's own CA is unknown: refused, and said so.
    let Err(refused) = PgStore::connect_trusting(&secure, 1, None).await else {
        panic!("a certificate from an unknown CA was accepted")
    };
    let refused = refused.to_string();
    assert!(
        refused.contains("cannot reach PostgreSQL at")
            && refused.contains("UnknownIssuer")
            && refused.contains("PGSSLROOTCERT"),
        "{refused}"
    );
}

/// The repositories the test workers may run: the one every test run names.
fn repos() -> Vec<String> {
    vec!["/srv/repo.git".to_owned()]
}

/// A run submitted to workers with these labels.
async fn submit(store: &PgStore, run: &str, labels: &[(&str, &str)]) -> RunId {
    use loopwright_store::fleet::Submission;
    let id = RunId::new(run);
    let events = [(started("task-fleet"), t("2027-05-01T00:00:00Z")), (Event::RunQueued {}, t("2027-05-01T00:00:00Z"))];
    let submission = Submission {
        repo: "/srv/repo.git".into(),
        base: "main".into(),
        labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
    };
    store.submit(&id, &events, &submission).await.expect("submit");
    id
}

fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[tokio::test]
async fn of_two_workers_racing_for_one_run_exactly_one_claims_it() {
    let Some(url) = fresh_database().await else { return };
    let (a, b) = (PgStore::connect(&url, 2).await.expect("a"), PgStore::connect(&url, 2).await.expect("b"));
    let lease = std::time::Duration::from_secs(60);
    for round in 0..50 {
        let run = submit(&a, &format!("claim-{round}"), &[]).await;
        let none = labels(&[]);
        let repos = repos();
        let (first, second) = tokio::join!(a.claim("wa", &none, &repos, lease), b.claim("wb", &none, &repos, lease));
        let (first, second) = (first.expect("claim a"), second.expect("claim b"));
        let claims: Vec<_> = [first, second].into_iter().flatten().collect();
        assert_eq!(claims.len(), 1, "round {round}: {claims:?}");
        assert_eq!((claims[0].run.clone(), claims[0].epoch), (run, LeaseEpoch::new(1)), "round {round}");
    }
    // Nothing is left to claim.
    assert_eq!(a.claim("wa", &labels(&[]), &repos(), lease).await.expect("claim"), None);
}

#[tokio::test]
async fn workers_claim_in_submission_order_only_what_their_labels_allow() {
    let Some(url) = fresh_database().await else { return };
    let store = PgStore::connect(&url, 2).await.expect("store");
    let lease = std::time::Duration::from_secs(60);
    let gpu = submit(&store, "gpu", &[("gpu", "a100")]).await;
    let first = submit(&store, "first", &[]).await;
    let second = submit(&store, "second", &[("os", "linux")]).await;
    let plain = labels(&[("os", "linux")]);
    let claimed = |c: Option<loopwright_store::fleet::Claim>| c.map(|c| c.run);
    assert_eq!(claimed(store.claim("w1", &plain, &repos(), lease).await.expect("claim")), Some(first));
    assert_eq!(claimed(store.claim("w1", &plain, &repos(), lease).await.expect("claim")), Some(second));
    // The GPU run waits for a worker that has the label; one with more labels takes it.
    assert_eq!(claimed(store.claim("w1", &plain, &repos(), lease).await.expect("claim")), None);
    let big = labels(&[("gpu", "a100"), ("os", "linux")]);
    assert_eq!(claimed(store.claim("w2", &big, &repos(), lease).await.expect("claim")), Some(gpu));
    // A worker that may not run the repository claims nothing of it.
    let other = submit(&store, "other", &[]).await;
    assert_eq!(
        claimed(store.claim("w3", &plain, &["/srv/elsewhere.git".to_owned()], lease).await.expect("claim")),
        None
    );
    assert_eq!(claimed(store.claim("w3", &plain, &repos(), lease).await.expect("claim")), Some(other));
    let workers_before = store.workers().await.expect("workers");
    assert_eq!(workers_before, Vec::new(), "claims alone register no worker");
}

#[tokio::test]
async fn a_lease_taken_over_after_it_expired_fences_the_old_holders_writes() {
    let Some(url) = fresh_database().await else { return };
    let (a, b) = (PgStore::connect(&url, 2).await.expect("a"), PgStore::connect(&url, 2).await.expect("b"));
    let run = submit(&a, "fenced", &[]).await;
    let none = labels(&[]);
    let short = std::time::Duration::from_millis(300);
    a.register_worker("wa", "host-a", &none, 1, short).await.expect("register");
    let claim = a.claim("wa", &none, &repos(), short).await.expect("claim").expect("claimed");
    let old = a.fenced(loopwright_store::fleet::Fence { worker: "wa".into(), epoch: claim.epoch });
    let step =
        |n: u32| vec![(Event::AttemptStarted { stage: stage("diagnose"), attempt: n }, t("2027-05-01T00:00:01Z"))];
    old.append_all(&run, &step(1)).await.expect("the holder writes");
    // While the lease lives, nobody else may claim the run; renewed, it lives on.
    assert_eq!(b.claim("wb", &none, &repos(), short).await.expect("claim"), None);
    assert_eq!(a.renew("wa", &[(run.clone(), claim.epoch)], short).await.expect("renew"), Vec::<RunId>::new());
    assert_eq!(b.claim("wb", &none, &repos(), short).await.expect("claim"), None);
    // Expired (the holder frozen), it is taken over with the next epoch.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let taken =
        b.claim("wb", &none, &repos(), std::time::Duration::from_secs(60)).await.expect("claim").expect("taken over");
    assert_eq!((taken.run.clone(), taken.epoch), (run.clone(), LeaseEpoch::new(2)));
    let new = b.fenced(loopwright_store::fleet::Fence { worker: "wb".into(), epoch: LeaseEpoch::new(2) });
    // The old holder's late writes are refused, whole, and say who holds the run now.
    let late = old.append_all(&run, &step(2)).await;
    assert!(
        matches!(&late, Err(StoreError::Fenced { epoch, holder: Some(h), .. }) if h == "wb" && epoch.get() == 1),
        "{late:?}"
    );
    assert!(matches!(old.append_after(&run, 3, &step(2)).await, Err(StoreError::Fenced { .. })));
    assert_eq!(a.renew("wa", &[(run.clone(), LeaseEpoch::new(1))], short).await.expect("renew"), vec![run.clone()]);
    new.append_all(&run, &step(2)).await.expect("the new holder writes");
    assert_eq!(a.events(&run).await.expect("events").len(), 4);
    // The holder is listed with its lease; given back, the lease fences its giver too.
    let workers = a.workers().await.expect("workers");
    assert_eq!(
        workers.iter().map(|w| (w.id.as_str(), w.host.as_str(), w.slots)).collect::<Vec<_>>(),
        [("wa", "host-a", 1)]
    );
    assert_eq!(workers[0].leases, Vec::new(), "wa holds nothing now");
    b.release("wb", &run, LeaseEpoch::new(2)).await.expect("release");
    assert!(matches!(new.append_all(&run, &step(3)).await, Err(StoreError::Fenced { holder: None, .. })));
    // A run given back is claimed again at once, with the next epoch.
    let again = a.claim("wa", &none, &repos(), short).await.expect("claim").expect("claimed again");
    assert_eq!(again.epoch, LeaseEpoch::new(3));
}

/// A provider's pause is read without a write, as a gate with nothing to count asks it before
/// each request: the latest pause in force on any of the keys, another provider's never.
#[tokio::test]
async fn a_pause_is_read_without_taking_a_slot() {
    let Some(url) = fresh_database().await else { return };
    let store = PgStore::connect(&url, 2).await.expect("connect");
    let keys = vec!["github/*/*".to_owned(), "github/api/*".to_owned()];
    assert_eq!(store.paused_until(&keys).await.expect("read"), None);
    let soon = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(30);
    let later = soon + jiff::SignedDuration::from_secs(30);
    store.pause_limit("github/*/*", soon, "secondary rate limit").await.expect("pause");
    store.pause_limit("github/api/*", later, "Retry-After").await.expect("pause");
    store.pause_limit("anthropic/*/*", later + jiff::SignedDuration::from_secs(60), "429").await.expect("pause");
    let until = store.paused_until(&keys).await.expect("read").expect("paused");
    assert_eq!(until.as_second(), later.as_second());
    // Another provider's pause is not GitHub's.
    assert_eq!(store.paused_until(&["openai/*/*".to_owned()]).await.expect("read"), None);
}
