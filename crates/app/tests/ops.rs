//! The application layer's operations on a real workspace (temp dir, SQLite journal, shell
//! stages run as processes): what both front-ends — the CLI and the daemon — rely on.

use loopwright_app::Error;
use loopwright_app::ops::answer::{self, approval, claim_in_store, escalation, parse_answer};
use loopwright_app::ops::cancel::{Cancelled, cancel};
use loopwright_app::ops::read;
use loopwright_app::ops::resume::{Resumable, check};
use loopwright_app::ops::start::{StartRequest, prepare};
use loopwright_app::ownership::this_process;
use loopwright_app::session::Session;
use loopwright_app::workspace::Workspace;
use loopwright_engine::event::Via;
use loopwright_engine::ports::{NeverStop, NoObserver};
use loopwright_engine::{Event, RunId, RunState, RunStatus, Store};
use pretty_assertions::assert_eq;

const GATE: &str = "name: gate\ndescription: d\nversion: 1\nstages:\n  - id: first\n    agent: shell\n    mode: agent\n    description: d\n    run: echo one >> count.txt\n  - id: second\n    agent: shell\n    mode: agent\n    description: d\n    requires_approval: true\n    run: echo two >> count.txt\n";

struct Fixture {
    dir: tempfile::TempDir,
    ws: Workspace,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join(".loopwright/pipelines")).expect("mkdir");
    std::fs::write(dir.path().join(".loopwright/pipelines/gate.yml"), GATE).expect("write");
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git").args(args).current_dir(dir.path()).output().expect("git");
        assert!(ok.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&ok.stderr));
    };
    git(&["init", "--quiet", "-b", "main"]);
    git(&["-c", "user.name=T", "-c", "user.email=t@example.com", "add", "-A"]);
    git(&["-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "--quiet", "-m", "initial"]);
    let ws = Workspace::locate(Some(dir.path())).expect("workspace");
    Fixture { dir, ws }
}

/// Starts a run of `gate` and drives it here until it waits at the gate.
async fn started(f: &Fixture) -> RunId {
    let request = StartRequest { pipeline: "gate".into(), task: Some("count".into()), ..StartRequest::default() };
    let prepared = prepare(&f.ws, request, this_process(false)).await.expect("prepare");
    let store = loopwright_app::assemble::open_store(&f.ws).expect("store");
    let session = Session::start(&f.ws, &store, &prepared.pipeline, &prepared.root, &prepared.run_id).expect("session");
    let mut observer = NoObserver;
    let mut engine = session.engine(&prepared.pipeline, &store, &NeverStop, &mut observer);
    let state = engine.start(prepared.run_id.clone(), prepared.started).await.expect("start");
    assert_eq!(state.status, RunStatus::Waiting);
    prepared.run_id
}

/// Claims and drives a run here with `answer`, as `approve`/`respond` do in the foreground.
async fn drive(f: &Fixture, run: &RunId, answer: Option<Event>) -> Result<RunState, Error> {
    let store = loopwright_app::assemble::open_existing_store(&f.ws)?;
    let (pipeline, mut state) = read::load_run(&f.ws, &store, run).await?;
    let session = Session::resume(&f.ws, &store, &pipeline, &state)?;
    let mut observer = NoObserver;
    let mut engine = session.engine(&pipeline, &store, &NeverStop, &mut observer);
    answer::claim(&mut engine, &mut state, answer, this_process(false)).await?;
    Ok(engine.drive(state).await?)
}

/// The policy of a pipeline whose gates name no approvers, with no default against
/// self-approval: anyone who may answer may.
fn open(pipeline: &loopwright_spec::Pipeline) -> answer::GatePolicy<'_> {
    answer::GatePolicy { pipeline, prevent_self: false }
}

/// `name` answering through the API with a token of their own.
fn api(name: &str) -> answer::Answerer {
    answer::Answerer {
        name: name.to_owned(),
        role: Some(loopwright_spec::pipeline::ApproverRole::Approver),
        verified: true,
        via: Via::Api,
    }
}

fn count(f: &Fixture) -> String {
    std::fs::read_to_string(f.dir.path().join("count.txt")).unwrap_or_default()
}

#[tokio::test]
async fn approve_claims_the_run_once_and_a_stale_second_answer_is_told_who_won() {
    let f = fixture();
    let run = started(&f).await;
    let store = loopwright_app::assemble::open_existing_store(&f.ws).expect("store");
    let (pipeline, stale) = read::load_run(&f.ws, &store, &run).await.expect("load");
    let granted = approval(open(&pipeline), &stale, true, &api("alice"), Some("ok".into()), false).expect("waits");
    let done = drive(&f, &run, Some(granted)).await.expect("drive");
    assert_eq!(done.status, RunStatus::Success);
    assert_eq!(count(&f), "one\ntwo\n");
    // Bob answered from the journal as it was before Alice's answer.
    let mut stale = stale;
    let late = approval(open(&pipeline), &stale, true, &api("bob"), None, false).expect("the stale state still waits");
    let err = claim_in_store(&store, &mut stale, Some(late), this_process(true)).await.expect_err("conflict");
    let Error::Conflict(message) = err else { panic!("expected a conflict, got {err:?}") };
    assert!(message.contains("the approval of stage `second` was already granted by alice"), "{message}");
    assert_eq!(count(&f), "one\ntwo\n");
    // On the current state there is nothing to approve.
    let (_, now) = read::load_run(&f.ws, &store, &run).await.expect("load");
    let Err(Error::Conflict(message)) = approval(open(&pipeline), &now, true, &api("bob"), None, false) else {
        panic!("conflict")
    };
    assert_eq!(message, format!("run {run} is not waiting for an approval (its status is success)"));
}

#[tokio::test]
async fn reject_ends_the_run_rejected_and_nothing_more_runs() {
    let f = fixture();
    let run = started(&f).await;
    let store = loopwright_app::assemble::open_existing_store(&f.ws).expect("store");
    let (pipeline, state) = read::load_run(&f.ws, &store, &run).await.expect("load");
    let rejected = approval(open(&pipeline), &state, false, &api("carol"), None, false).expect("waits");
    let done = drive(&f, &run, Some(rejected)).await.expect("drive");
    assert_eq!(done.status, RunStatus::Rejected);
    assert_eq!(count(&f), "one\n");
    assert_eq!(check(&done).expect("check"), Resumable::Ended(RunStatus::Rejected));
}

#[tokio::test]
async fn respond_needs_an_escalation_and_fix_needs_its_text() {
    let f = fixture();
    let run = started(&f).await;
    let store = loopwright_app::assemble::open_existing_store(&f.ws).expect("store");
    let (_, state) = read::load_run(&f.ws, &store, &run).await.expect("load");
    assert!(matches!(parse_answer("fix", Some("  ")), Err(Error::Usage(_))));
    assert!(matches!(parse_answer("maybe", None), Err(Error::Usage(_))));
    let fix = parse_answer("fix", Some("use the v2 API")).expect("fix");
    let Err(Error::Conflict(message)) = escalation(&state, fix, "dan".into(), Via::Api) else { panic!("conflict") };
    assert_eq!(message, format!("run {run} is not waiting on an escalation (its status is waiting)"));
    assert_eq!(
        check(&state).expect("check"),
        Resumable::WaitsForApproval(loopwright_spec::StageId::parse("second").expect("id"))
    );
}

#[tokio::test]
async fn cancel_a_waiting_run_then_an_ended_one_then_one_that_does_not_exist() {
    let f = fixture();
    let run = started(&f).await;
    let store = loopwright_app::assemble::open_existing_store(&f.ws).expect("store");
    let outcome = cancel(&f.ws, &store, &run, "erin".into(), false, |_| false).await.expect("cancel");
    let Cancelled::Done(state) = outcome else { panic!("cancelled here, got {outcome:?}") };
    assert_eq!(state.status, RunStatus::Cancelled);
    let events = store.events(&run).await.expect("events");
    let last = &events.last().expect("an event").event;
    assert_eq!(
        serde_json::to_value(last).expect("json"),
        serde_json::json!({"type": "run_cancelled", "stage": "second", "by": "erin", "rollback": false})
    );
    let again = cancel(&f.ws, &store, &run, "erin".into(), false, |_| false).await;
    assert!(matches!(again, Err(Error::Conflict(ref m)) if m.contains("already ended (cancelled)")), "{again:?}");
    let missing = cancel(&f.ws, &store, &RunId::new("20990101-000000-000000"), "x".into(), false, |_| false).await;
    assert!(matches!(missing, Err(Error::NotFound(_))), "{missing:?}");
    // A run this process drives is asked to stop through the journal.
    let second = started(&f).await;
    let store = loopwright_app::assemble::open_existing_store(&f.ws).expect("store");
    let (pipeline, mut state) = read::load_run(&f.ws, &store, &second).await.expect("load");
    let granted = approval(open(&pipeline), &state, true, &api("alice"), None, false).expect("waits");
    claim_in_store(&store, &mut state, Some(granted), this_process(true)).await.expect("claim");
    let outcome = cancel(&f.ws, &store, &second, "erin".into(), true, |r| *r == second).await.expect("cancel");
    assert!(matches!(outcome, Cancelled::Requested(ref s) if s.status == RunStatus::Running), "{outcome:?}");
    assert_eq!(store.cancel_requested(&second, 0).await.expect("read"), Some(("erin".into(), true)));
}

#[tokio::test]
async fn an_interrupted_run_is_resumable_and_status_lists_it() {
    let f = fixture();
    let run = started(&f).await;
    let store = loopwright_app::assemble::open_existing_store(&f.ws).expect("store");
    let (_, state) = read::load_run(&f.ws, &store, &run).await.expect("load");
    let interrupted = Event::RunInterrupted { stage: None, signal: "SIGTERM".into() };
    store.append_after(&run, state.last_seq, &[(interrupted, jiff::Timestamp::now())]).await.expect("append");
    let (_, state) = read::load_run(&f.ws, &store, &run).await.expect("load");
    assert_eq!(check(&state).expect("check"), Resumable::Yes);
    let rows = read::list(&store, &read::ListFilter { limit: 10, ..Default::default() }).await.expect("list");
    assert_eq!(
        rows.iter().map(|r| (r.run_id.clone(), r.status)).collect::<Vec<_>>(),
        vec![(run.clone(), RunStatus::Interrupted)]
    );
    let (result, _) = read::status(&store, &run).await.expect("status");
    assert_eq!(result.status, RunStatus::Interrupted);
    let missing = read::status(&store, &RunId::new("nope")).await;
    assert!(matches!(missing, Err(Error::NotFound(_))));
}

#[tokio::test]
async fn folds_kept_between_reads_equal_a_fold_of_the_whole_journal() {
    let f = fixture();
    let first = started(&f).await;
    let store = loopwright_app::assemble::open_existing_store(&f.ws).expect("store");
    let folds = read::Folds::new(1);
    let same = |a: (loopwright_engine::result::PipelineResult, RunState),
                b: (loopwright_engine::result::PipelineResult, RunState)| {
        assert_eq!(serde_json::to_value(&a.0).expect("json"), serde_json::to_value(&b.0).expect("json"));
        assert_eq!(a.1, b.1);
    };
    same(folds.status(&store, &first).await.expect("fold"), read::status(&store, &first).await.expect("read"));
    // The run goes on: the next read folds only what was appended, and agrees with a fold of
    // the whole journal.
    let (pipeline, state) = read::load_run(&f.ws, &store, &first).await.expect("load");
    let grant = approval(open(&pipeline), &state, true, &api("alice"), None, false).expect("gate");
    let ended = drive(&f, &first, Some(grant)).await.expect("drive");
    assert_eq!(ended.status, RunStatus::Success);
    same(folds.status(&store, &first).await.expect("fold"), read::status(&store, &first).await.expect("read"));
    // A second run pushes the first out of a cache of one; reading it again folds it anew.
    std::fs::remove_file(f.dir.path().join("count.txt")).expect("reset");
    let second = started(&f).await;
    same(folds.status(&store, &second).await.expect("fold"), read::status(&store, &second).await.expect("read"));
    same(folds.status(&store, &first).await.expect("fold"), read::status(&store, &first).await.expect("read"));
    let missing = RunId::new("20990101-000000-00000000");
    assert!(matches!(folds.state(&store, &missing).await, Err(Error::NotFound(_))));
}
