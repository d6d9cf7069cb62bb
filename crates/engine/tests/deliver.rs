//! The end of a run whose work came from a forge (SPEC §14), as a table of journals and the
//! step the state machine decides: delivered before it succeeds, its CI waited for, a red
//! round sent back to the delivering stage up to `ci_retries`, then a person asked, and a
//! failure reported once before the run ends failed.

use std::collections::BTreeMap;

use loopwright_engine::decide::{DELIVERY_TRIES, Step, next_step};
use loopwright_engine::event::{Answer, RunStatus};
use loopwright_engine::forge::{CiOutcome, Delivery, ForgeLink};
use loopwright_engine::{Event, FailureKind};
use loopwright_spec::{CompileContext, Pipeline, RunnerKind, SourceFile, StageId};
use loopwright_testkit::History;
use loopwright_testkit::conformance::t;
use pretty_assertions::assert_eq;

/// `plan` (read-only), `fix` (delivers), `verify`.
fn pipeline() -> Pipeline {
    let agent_src = SourceFile::new("a.md", "---\ncommand: [\"true\"]\n---\n");
    let agents = BTreeMap::from([(
        "a".to_owned(),
        loopwright_spec::parse_agent(&agent_src, "a", RunnerKind::Command).expect("agent"),
    )]);
    let yaml = "name: p\ndescription: d\nversion: 1\nstages:\n\
        \x20 - id: plan\n    agent: a\n    mode: plan\n    description: x\n\
        \x20 - id: fix\n    agent: a\n    mode: agent\n    description: y\n\
        \x20 - id: verify\n    agent: a\n    mode: agent\n    description: z\n";
    let cx = CompileContext { agents: &agents, extra_inputs: &[], default_timeout_minutes: 1.0 };
    loopwright_spec::compile(&SourceFile::new("p.yml", yaml), &cx).expect("valid pipeline")
}

fn id(s: &str) -> StageId {
    StageId::parse(s).expect("stage id")
}

fn link(watch: bool) -> ForgeLink {
    ForgeLink {
        forge: "github".into(),
        repo: "acme/shop".into(),
        issue: 7,
        issue_url: "https://github.com/acme/shop/issues/7".into(),
        title: "Totals are off".into(),
        trigger: "comment/900".into(),
        actor: "carol".into(),
        branch: "loopwright/task-1".into(),
        base: "main".into(),
        watch,
        ci_retries: 1,
        draft_until_green: false,
        stage: id("fix"),
        merge: None,
        from_fork: false,
    }
}

fn forge_run(watch: bool) -> History {
    let mut started = loopwright_testkit::run_started("task-1");
    started.forge = Some(link(watch));
    History::started_with(started)
}

fn done(h: History, fix_attempt: u32) -> History {
    h.succeeded("plan", 1).succeeded("fix", fix_attempt).succeeded("verify", fix_attempt)
}

fn delivered(round: u32, head: &str, watching: bool) -> Event {
    Event::Delivered(Delivery {
        round,
        number: 12,
        url: "https://github.com/acme/shop/pull/12".into(),
        head: head.into(),
        watching,
    })
}

fn red(round: u32, head: &str) -> Event {
    let failure = loopwright_testkit::classified("test failed", "test-failure", &[]);
    Event::CiReported {
        round,
        head: head.into(),
        outcome: CiOutcome::Failed {
            check: "test".into(),
            url: Some("https://github.com/acme/shop/actions/runs/1/job/2".into()),
            failure: Box::new(failure),
            command: Some("cargo test --locked".into()),
            excerpt: "test totals::adds ... FAILED".into(),
        },
    }
}

fn green(round: u32, head: &str) -> Event {
    Event::CiReported { round, head: head.into(), outcome: CiOutcome::Passed { checks: vec!["test".into()] } }
}

fn resumed() -> Event {
    Event::RunResumed { owner: loopwright_engine::event::Owner::default(), by: None }
}

const BRIEF_1: &str = "The pull request's CI failed (round 1 of at most 2): check `test` (https://github.com/acme/shop/actions/runs/1/job/2).\n\
Classified: test-failure, strategy analyze_then_fix.\n\
Failed step: `cargo test --locked`\n\
What it printed (the lines that matter):\n```\ntest totals::adds ... FAILED\n```\n\
Fix the cause; the new commit goes to the same pull request.\n";

#[test]
fn the_end_of_a_forge_run_decides_its_next_step() {
    let p = pipeline();
    let now = t("2026-01-01T01:00:00Z");
    let retried = done(forge_run(true), 1).then(delivered(0, "aaa", true)).then(red(0, "aaa")).then(resumed()).then(
        Event::CiRetried { round: 1, target: id("fix"), reset: vec![id("fix"), id("verify")], brief: BRIEF_1.into() },
    );
    let red_again = done(retried.clone(), 2).then(delivered(1, "bbb", true)).then(red(1, "bbb")).then(resumed());
    let escalated = red_again.clone().then(Event::CiEscalated { round: 1, stage: id("fix"), comment: None });
    let answered = |answer: Answer| {
        escalated.clone().then(Event::EscalationAnswered { stage: id("fix"), answer, by: "carol".into(), via: None })
    };
    let human = BRIEF_1
        .replace("round 1 of", "round 2 of")
        .replace("Fix the cause;", "Instruction from a human (high priority): keep the old rounding\nFix the cause;");
    let failed_at = |retry_at: Option<jiff::Timestamp>| Event::DeliveryFailed {
        round: 0,
        message: "GitHub could not be reached".into(),
        retry_at,
    };
    let mut flaky = done(forge_run(true), 1);
    for _ in 0..DELIVERY_TRIES {
        flaky = flaky.then(failed_at(Some(t("2026-01-01T00:30:00Z"))));
    }
    let cases: Vec<(&str, History, Step)> = vec![
        (
            "a run from no forge succeeds",
            done(History::started(), 1),
            Step::Record(Event::RunFinished { status: RunStatus::Success }),
        ),
        ("a forge run is delivered before it succeeds", done(forge_run(true), 1), Step::Deliver { round: 0 }),
        (
            "delivered, it waits for CI",
            done(forge_run(true), 1).then(delivered(0, "aaa", true)),
            Step::Done(RunStatus::Waiting),
        ),
        (
            "delivered without watching, it succeeds",
            done(forge_run(false), 1).then(delivered(0, "aaa", false)),
            Step::Record(Event::RunFinished { status: RunStatus::Success }),
        ),
        (
            "green CI on the head: success",
            done(forge_run(true), 1).then(delivered(0, "aaa", true)).then(green(0, "aaa")).then(resumed()),
            Step::Record(Event::RunFinished { status: RunStatus::Success }),
        ),
        (
            "a report on another head is not this round's: it waits again",
            done(forge_run(true), 1).then(delivered(0, "aaa", true)).then(green(0, "zzz")).then(resumed()),
            Step::Record(Event::CiAwaited { round: 0 }),
        ),
        (
            "red CI goes back to the delivering stage with what failed",
            done(forge_run(true), 1).then(delivered(0, "aaa", true)).then(red(0, "aaa")).then(resumed()),
            Step::Record(Event::CiRetried {
                round: 1,
                target: id("fix"),
                reset: vec![id("fix"), id("verify")],
                brief: BRIEF_1.into(),
            }),
        ),
        ("sent back, the delivering stage runs again", retried.clone(), Step::Execute { stage: id("fix"), attempt: 2 }),
        ("done again, the next round is delivered", done(retried.clone(), 2), Step::Deliver { round: 1 }),
        ("red more often than ci_retries: a person is asked", red_again.clone(), Step::EscalateCi { round: 1 }),
        ("asked, it waits", escalated.clone(), Step::Done(RunStatus::Waiting)),
        ("taken up again while asked, it asks again (found, not posted twice)", escalated.clone().then(resumed()), Step::EscalateCi { round: 1 }),
        (
            "a person's fix goes back with their words",
            answered(Answer::Fix { text: "keep the old rounding".into() }),
            Step::Record(Event::CiRetried {
                round: 2,
                target: id("fix"),
                reset: vec![id("fix"), id("verify")],
                brief: human,
            }),
        ),
        (
            "a person's review while CI runs goes back with their words, before CI's result",
            done(forge_run(true), 1)
                .then(delivered(0, "aaa", true))
                .then(Event::ReviewReceived { by: "erin@github#review-5".into(), text: "Keep the old name.".into() })
                .then(resumed()),
            Step::Record(Event::CiRetried {
                round: 1,
                target: id("fix"),
                reset: vec![id("fix"), id("verify")],
                brief: "People reviewing the pull request asked for changes:\n<user_intervention>\n@erin: Keep the old name.\n</user_intervention>\nAddress it; the new commit goes to the same pull request.\n".into(),
            }),
        ),
        (
            "skip accepts the pull request as it is",
            answered(Answer::Skip),
            Step::Record(Event::RunFinished { status: RunStatus::Success }),
        ),
        ("abort cancels", answered(Answer::Abort), Step::Done(RunStatus::Cancelled)),
        (
            "a delivery the forge will take later waits",
            done(forge_run(true), 1).then(failed_at(Some(t("2026-01-01T02:00:00Z")))),
            Step::Wait { stage: id("fix"), until: t("2026-01-01T02:00:00Z") },
        ),
        (
            "its time come, it is tried again",
            done(forge_run(true), 1).then(failed_at(Some(now))),
            Step::Deliver { round: 0 },
        ),
        (
            "a delivery that waiting cannot mend reports the failure",
            done(forge_run(true), 1).then(failed_at(None)),
            Step::ReportFailure,
        ),
        ("after every try, the failure is reported", flaky, Step::ReportFailure),
        (
            "a stage failed for good is reported where the work came from",
            forge_run(true)
                .succeeded("plan", 1)
                .failed("fix", 1, FailureKind::ValidationError)
                .then(Event::StageFailed { stage: id("fix"), error: History::error(FailureKind::ValidationError) }),
            Step::ReportFailure,
        ),
        (
            "reported, the run ends failed",
            forge_run(true)
                .succeeded("plan", 1)
                .failed("fix", 1, FailureKind::ValidationError)
                .then(Event::StageFailed { stage: id("fix"), error: History::error(FailureKind::ValidationError) })
                .then(Event::FailureReported {
                    url: Some("https://github.com/acme/shop/issues/7#c".into()),
                    error: None,
                }),
            Step::Record(Event::RunFinished { status: RunStatus::Failed }),
        ),
    ];
    for (what, history, expected) in cases {
        assert_eq!(next_step(&p, &history.state(), now), expected, "{what}");
    }
}

#[test]
fn a_ci_escalation_is_what_an_answer_names() {
    let h = done(forge_run(true), 1).then(delivered(0, "aaa", true)).then(red(0, "aaa")).then(resumed()).then(
        Event::CiRetried { round: 1, target: id("fix"), reset: vec![id("fix"), id("verify")], brief: BRIEF_1.into() },
    );
    let h = done(h, 2).then(delivered(1, "bbb", true)).then(red(1, "bbb")).then(resumed()).then(Event::CiEscalated {
        round: 1,
        stage: id("fix"),
        comment: None,
    });
    let state = h.state();
    assert_eq!(state.status, RunStatus::Waiting);
    assert_eq!(state.waiting_for_escalation().map(|s| s.id.as_str()), Some("fix"));
    assert_eq!(state.forge.change().map(|d| (d.round, d.head.as_str())), Some((1, "bbb")));
    assert_eq!(state.stage("fix").and_then(|s| s.feedback_brief.as_deref()), Some(BRIEF_1));
}

/// A run whose pull request is merged by loopwright (`merge = "auto"`).
fn merging_run() -> History {
    let mut started = loopwright_testkit::run_started("task-1");
    started.forge = Some(ForgeLink { merge: Some(loopwright_spec::github::MergeMethod::Squash), ..link(true) });
    History::started_with(started)
}

fn approval(by: &str, head: &str) -> Event {
    Event::ApprovalReceived { by: format!("{by}@github#review-1"), head: head.into() }
}

#[test]
fn with_merge_auto_only_the_tested_head_a_person_approved_is_merged() {
    let p = pipeline();
    let now = t("2026-01-01T01:00:00Z");
    let green_aaa = done(merging_run(), 1).then(delivered(0, "aaa", true)).then(green(0, "aaa")).then(resumed());
    let awaited = green_aaa.clone().then(Event::ReviewAwaited { head: "aaa".into() });
    let moved = green_aaa.clone().then(approval("erin", "aaa")).then(Event::HeadMoved { head: "fff".into() });
    let cases: Vec<(&str, History, Step)> = vec![
        ("green, nobody approved: it waits for a review", green_aaa.clone(), Step::Record(Event::ReviewAwaited { head: "aaa".into() })),
        ("waiting for a review, it waits", awaited.clone(), Step::Done(RunStatus::Waiting)),
        ("an approval of the tested head merges it", awaited.clone().then(approval("erin", "aaa")), Step::Merge { head: "aaa".into() }),
        (
            "an approval of another head does not count",
            awaited.clone().then(approval("erin", "bbb")),
            Step::Record(Event::ReviewAwaited { head: "aaa".into() }),
        ),
        (
            "approved before CI passed: merged once it passes",
            done(merging_run(), 1).then(delivered(0, "aaa", true)).then(approval("erin", "aaa")).then(green(0, "aaa")),
            Step::Merge { head: "aaa".into() },
        ),
        (
            "approved while CI still runs: it waits for CI",
            done(merging_run(), 1).then(delivered(0, "aaa", true)).then(approval("erin", "aaa")),
            Step::Record(Event::CiAwaited { round: 0 }),
        ),
        (
            "merged: success",
            awaited.clone().then(approval("erin", "aaa")).then(Event::Merged { number: 12, head: "aaa".into(), auto_merge: false }),
            Step::Record(Event::RunFinished { status: RunStatus::Success }),
        ),
        ("a commit someone else pushed: it waits", moved.clone(), Step::Done(RunStatus::Waiting)),
        (
            "that head's CI passes, unapproved: it waits for a review of it",
            moved.clone().then(green(0, "fff")),
            Step::Record(Event::ReviewAwaited { head: "fff".into() }),
        ),
        (
            "approved and green on that head: it is merged",
            moved.clone().then(approval("erin", "fff")).then(green(0, "fff")),
            Step::Merge { head: "fff".into() },
        ),
        (
            "approved, CI not yet run on that head: it waits for CI",
            moved.clone().then(approval("erin", "fff")),
            Step::Record(Event::CiAwaited { round: 0 }),
        ),
        (
            "a merge the forge refused is not tried again on the same approval",
            awaited.clone().then(approval("erin", "aaa")).then(Event::MergeFailed { head: "aaa".into(), message: "not mergeable".into() }).then(resumed()),
            Step::Record(Event::ReviewAwaited { head: "aaa".into() }),
        ),
        (
            "a new approval tries again",
            awaited.clone().then(approval("erin", "aaa")).then(Event::MergeFailed { head: "aaa".into(), message: "not mergeable".into() }).then(approval("frank", "aaa")),
            Step::Merge { head: "aaa".into() },
        ),
        (
            "changes asked for after an approval: the next round needs its own",
            green_aaa.clone().then(approval("erin", "aaa")).then(Event::ReviewReceived { by: "frank@github#review-2".into(), text: "rename it".into() }),
            Step::Record(Event::CiRetried {
                round: 1,
                target: id("fix"),
                reset: vec![id("fix"), id("verify")],
                brief: "People reviewing the pull request asked for changes:\n<user_intervention>\n@frank: rename it\n</user_intervention>\nAddress it; the new commit goes to the same pull request.\n".into(),
            }),
        ),
    ];
    for (what, history, expected) in cases {
        assert_eq!(next_step(&p, &history.state(), now), expected, "{what}");
    }
    let state = awaited.state();
    let result = loopwright_engine::PipelineResult::from_state(&state);
    assert_eq!(
        result.waiting.map(|w| (w.kind, w.stage)),
        Some((loopwright_engine::result::WaitKind::Review, "fix".to_owned()))
    );
}
