//! The annotations on loopwright's check run (SPEC §14, "Reporting"): each place a classified
//! failure's key lines name — one of the tree's files — once, titled with the failure's
//! category, its message the failure's headline and the line naming the place.

use loopwright_app::forge::annotations;
use loopwright_engine::Event;
use loopwright_engine::forge::{CiOutcome, Delivery};
use loopwright_forge::port::Annotation;
use loopwright_testkit::History;
use pretty_assertions::assert_eq;

fn ci_failed(round: u32, head: &str, pattern: &str, lines: &[&str]) -> Event {
    let failure = loopwright_testkit::classified("CI check `test` failed", pattern, lines);
    Event::CiReported {
        round,
        head: head.into(),
        outcome: CiOutcome::Failed {
            check: "test".into(),
            url: None,
            failure: Box::new(failure),
            command: None,
            excerpt: String::new(),
        },
    }
}

#[test]
fn each_place_a_classified_failure_names_in_the_tree_is_annotated_once() {
    let files = ["README.md", "src/totals.rs", "tests/test_totals.py"].map(str::to_owned);
    let delivered = |round, head: &str| {
        Event::Delivered(Delivery { round, number: 2, url: "u".into(), head: head.into(), watching: true })
    };
    let state = History::started()
        .then(delivered(0, "aaa"))
        .then(ci_failed(
            0,
            "aaa",
            "compile-error",
            &[
                "error[E0308]: mismatched types",
                "  --> src/totals.rs:12:5",
                "  --> src/totals.rs:12:5 (again)",
                "see https://doc.rust-lang.org/error_codes/E0308.html:1",
                "  --> /etc/passwd:1:1",
                "  --> ../outside.rs:3:1",
                "  --> src/missing.rs:4:1",
            ],
        ))
        .then(ci_failed(
            1,
            "bbb",
            "test-failure",
            &["FAILED tests/test_totals.py:7: AssertionError (`./src/totals.rs:30`)"],
        ))
        .state();
    assert_eq!(
        annotations(&state, &files),
        [
            Annotation {
                path: "src/totals.rs".into(),
                line: 12,
                title: "compile-error".into(),
                message: "error[E0308]: mismatched types\n--> src/totals.rs:12:5".into(),
            },
            Annotation {
                path: "tests/test_totals.py".into(),
                line: 7,
                title: "test-failure".into(),
                message: "FAILED tests/test_totals.py:7: AssertionError (`./src/totals.rs:30`)".into(),
            },
            Annotation {
                path: "src/totals.rs".into(),
                line: 30,
                title: "test-failure".into(),
                message: "FAILED tests/test_totals.py:7: AssertionError (`./src/totals.rs:30`)".into(),
            },
        ]
    );
}
