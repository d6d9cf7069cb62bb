//! Best of N's choice (SPEC §16) as a table: among the candidates whose checks passed, the
//! first by the selectors in order (each breaking the ties of the one before, then the lower
//! number); when none passed, the most promising failure.

use loopwright_engine::decide::candidates::{Choice, Entry, choose};
use loopwright_engine::event::CandidateResult;
use loopwright_spec::pipeline::Selector::{Cheapest, Checks, SmallestDiff};
use pretty_assertions::assert_eq;

fn result(passed: bool, checks: &[bool], files: usize, tokens: u64) -> CandidateResult {
    CandidateResult {
        passed,
        checks: checks.iter().enumerate().map(|(i, ok)| (format!("c{i}"), *ok)).collect(),
        files: (0..files).map(|i| format!("f{i}")).collect(),
        tokens,
        cost_usd: None,
        duration_ms: 1,
        outputs: Default::default(),
        error: (!passed).then(|| "check `c0` failed".to_owned()),
        output_tail: String::new(),
        kept: None,
    }
}

#[test]
fn the_winner_is_the_first_passing_candidate_by_the_selectors() {
    let small_dear = result(true, &[true, true], 1, 900);
    let big_cheap = result(true, &[true, true], 3, 100);
    let failed_most = result(false, &[true, false], 1, 50);
    let failed_least = result(false, &[false, false], 1, 10);
    let entries = |rs: &[&CandidateResult]| -> Vec<(u32, CandidateResult)> {
        rs.iter().enumerate().map(|(i, r)| (u32::try_from(i).expect("index"), (*r).clone())).collect()
    };
    // (what, the selectors, the candidates, the winner, the most promising, why)
    type Case<'c> = (
        &'c str,
        Vec<loopwright_spec::pipeline::Selector>,
        Vec<(u32, CandidateResult)>,
        Option<u32>,
        Option<u32>,
        &'c str,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "smallest change first",
            vec![Checks, SmallestDiff, Cheapest],
            entries(&[&big_cheap, &small_dear, &failed_most]),
            Some(1),
            Some(1),
            "candidate 2 (agent a): 2 of 2 checks passed, 1 file changed, 900 tokens won on smallest_diff over candidate 1 (agent a): 2 of 2 checks passed, 3 files changed, 100 tokens; 1 did not pass",
        ),
        (
            "cheapest first",
            vec![Cheapest, SmallestDiff],
            entries(&[&small_dear, &big_cheap]),
            Some(1),
            Some(1),
            "candidate 2 (agent a): 2 of 2 checks passed, 3 files changed, 100 tokens won on cheapest over candidate 1 (agent a): 2 of 2 checks passed, 1 file changed, 900 tokens",
        ),
        (
            "a tie goes to the lower number",
            vec![Checks],
            entries(&[&small_dear, &small_dear]),
            Some(0),
            Some(0),
            "candidate 1 (agent a): 2 of 2 checks passed, 1 file changed, 900 tokens won; tied with candidate 2 (agent a): 2 of 2 checks passed, 1 file changed, 900 tokens on every selector, the lower number wins",
        ),
        (
            "the only one that passed",
            vec![Checks, SmallestDiff],
            entries(&[&failed_most, &big_cheap]),
            Some(1),
            Some(1),
            "candidate 2 (agent a): 2 of 2 checks passed, 3 files changed, 100 tokens won; the only one whose checks passed; 1 did not pass",
        ),
        (
            "none passed: the failure with the most checks passed",
            vec![Checks, SmallestDiff],
            entries(&[&failed_least, &failed_most]),
            None,
            Some(1),
            "none of the 2 candidates passed; the most promising was candidate 2 (agent a): 1 of 2 checks passed, 1 file changed, 50 tokens — check `c0` failed",
        ),
    ];
    for (name, select, results, winner, best, why) in cases {
        let list: Vec<Entry<'_>> =
            results.iter().map(|(candidate, result)| Entry { candidate: *candidate, agent: "a", result }).collect();
        assert_eq!(choose(&select, &list), Choice { winner, best, why: why.to_owned() }, "{name}");
    }
}
