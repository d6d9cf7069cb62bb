//! Stages as a graph (SPEC §16), as a table of journals and the steps the state machine names:
//! every ready stage (what it needs finished or skipped) at once, the stages in flight aside,
//! only what the driver admits; a failed branch ends the run; a rollback goes back in the
//! order the stages ended.

use std::collections::{BTreeMap, BTreeSet};

use loopwright_engine::decide::{Step, next_steps, rollback_candidates};
use loopwright_engine::event::{RunStatus, SkipReason};
use loopwright_engine::{Event, FailureKind};
use loopwright_spec::{CompileContext, Pipeline, SourceFile, StageId};
use loopwright_testkit::History;
use loopwright_testkit::conformance::t;
use pretty_assertions::assert_eq;

/// `a`, then `b` and `c` (each undone by `file_restore`), then `d`.
fn diamond() -> Pipeline {
    let stage = |id: &str, needs: &str| {
        format!(
            "  - id: {id}\n    agent: shell\n    mode: agent\n    description: x\n    run: 'true'\n    rollback: {{strategy: file_restore}}\n{needs}"
        )
    };
    let yaml = format!(
        "name: p\ndescription: d\nversion: 1\nstages:\n{}{}{}{}",
        stage("a", ""),
        stage("b", "    needs: [a]\n"),
        stage("c", "    needs: [a]\n"),
        stage("d", "    needs: [b, c]\n")
    );
    let agents = BTreeMap::new();
    let cx = CompileContext { agents: &agents, extra_inputs: &[], default_timeout_minutes: 1.0 };
    loopwright_spec::compile(&SourceFile::new("p.yml", yaml), &cx).expect("valid pipeline")
}

fn id(s: &str) -> StageId {
    StageId::parse(s).expect("stage id")
}

fn run(stage: &str, attempt: u32) -> Step {
    Step::Execute { stage: id(stage), attempt }
}

#[test]
fn every_ready_stage_is_named_at_once_and_a_stage_waits_for_what_it_needs() {
    let p = diamond();
    let now = t("2026-01-01T01:00:00Z");
    let a = History::started().succeeded("a", 1);
    let skipped_b = a.clone().then(Event::StageSkipped { stage: id("b"), reason: SkipReason::SkipList });
    let b_failed = a
        .clone()
        .attempt("c", 1)
        .failed("b", 1, FailureKind::ExecutionError)
        .then(Event::StageFailed { stage: id("b"), error: History::error(FailureKind::ExecutionError) });
    let both = a.clone().succeeded("c", 1).succeeded("b", 1);
    let all = both.clone().succeeded("d", 1);
    let busy = |ids: &[&str]| -> BTreeSet<StageId> { ids.iter().map(|s| id(s)).collect() };
    // (what, the journal, the stages in flight, how many may start, the steps named)
    type Case<'c> = (&'c str, History, BTreeSet<StageId>, usize, Vec<Step>);
    let cases: Vec<Case<'_>> = vec![
        ("the first stage needs nothing", History::started(), busy(&[]), 4, vec![run("a", 1)]),
        ("both branches at once", a.clone(), busy(&[]), 4, vec![run("b", 1), run("c", 1)]),
        ("only what is admitted", a.clone(), busy(&[]), 1, vec![run("b", 1)]),
        ("a branch in flight is not named", a.clone().attempt("b", 1), busy(&["b"]), 4, vec![run("c", 1)]),
        ("both in flight: wait", a.clone().attempt("b", 1).attempt("c", 1), busy(&["b", "c"]), 4, vec![]),
        (
            "an attempt in flight when loopwright died is run again",
            a.clone().attempt("b", 1),
            busy(&[]),
            4,
            vec![run("b", 1), run("c", 1)],
        ),
        ("a skipped need counts as done", skipped_b.clone().succeeded("c", 1), busy(&[]), 4, vec![run("d", 1)]),
        ("d waits for both", a.clone().succeeded("c", 1), busy(&[]), 4, vec![run("b", 1)]),
        (
            "a failed branch ends the run (the driver waits for the one in flight)",
            b_failed.clone(),
            busy(&["c"]),
            4,
            vec![Step::RollBack { trigger: Some(id("b")), stages: vec![id("b"), id("a")], resumed: false }],
        ),
        ("both done: d", both.clone(), busy(&[]), 4, vec![run("d", 1)]),
        ("all done", all, busy(&[]), 4, vec![Step::Record(Event::RunFinished { status: RunStatus::Success })]),
    ];
    let mut wrong = Vec::new();
    for (name, history, busy, room, want) in cases {
        let mut left = room;
        let mut admit = |_: &loopwright_spec::Stage| {
            let ok = left > 0;
            left = left.saturating_sub(1);
            ok
        };
        let got = next_steps(&p, &history.state(), now, &busy, &mut admit);
        if got != want {
            wrong.push(format!("{name}:\n  want {want:?}\n  got  {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_graphs_rollback_goes_back_in_the_order_its_stages_ended() {
    let p = diamond();
    // c ended before b; d failed.
    let h = History::started()
        .succeeded("a", 1)
        .attempt("b", 1)
        .succeeded("c", 1)
        .then(Event::AttemptSucceeded { stage: id("b"), attempt: 1, duration_ms: 10, outputs: Default::default() })
        .failed("d", 1, FailureKind::ExecutionError)
        .then(Event::StageFailed { stage: id("d"), error: History::error(FailureKind::ExecutionError) });
    let state = h.state();
    assert_eq!(rollback_candidates(&p, &state, p.stage("d")), vec![id("d"), id("b"), id("c"), id("a")]);
}
