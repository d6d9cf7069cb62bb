//! Cross-stage feedback loops (seed 004): a loop that converges, one that escalates, and the
//! answers to an escalation.

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support::{Ws, st, stages};

/// `implement` counts its runs and keeps each prompt; `review` blocks while `blockers`
/// says so (a number of passes to block, or `always`), and passes once `fixed` exists.
fn pipeline(max_iterations: u32) -> String {
    format!(
        r#"name: loop
description: implement, review, loop on blocking feedback
version: 1
stages:
  - id: implement
    agent: shell
    mode: agent
    description: Implement
    run: "n=$(($(cat implement.count 2>/dev/null || echo 0) + 1)); echo $n > implement.count; cp \"$LOOPWRIGHT_PROMPT_FILE\" implement-$n.prompt; if grep -q 'use the v2 API' \"$LOOPWRIGHT_PROMPT_FILE\"; then touch fixed; fi; echo changed"
    outputs: [code_changes]
  - id: review
    agent: shell
    mode: plan
    description: Review
    inputs: [code_changes]
    outputs: [review_notes, feedback_items]
    run: "sh review.sh"
    feedback_loop:
      target_stage: implement
      max_iterations: {max_iterations}
"#
    )
}

const REVIEW: &str = r###"n=$(cat implement.count)
echo "## review_notes"
echo "reviewed pass $n"
echo "## feedback_items"
if [ -f fixed ] || { [ "$(cat blockers)" != always ] && [ "$n" -gt "$(cat blockers)" ]; }; then
  printf '```yaml\n- severity: advisory\n  description: rename x\n```\n'
else
  printf '```yaml\n- severity: blocking\n  file: src/api.rs\n  line: 12\n  description: calls the removed v1 endpoint\n  suggested_fix: call /v2/items\n- severity: advisory\n  description: rename x\n```\n'
fi
"###;

fn loop_ws(max_iterations: u32, blockers: &str) -> Ws {
    let ws = Ws::empty();
    ws.write(".loopwright/pipelines/loop.yml", &pipeline(max_iterations));
    ws.write("review.sh", REVIEW);
    ws.write("blockers", blockers);
    ws
}

#[test]
fn blocking_feedback_sends_the_pipeline_back_until_the_review_passes() {
    let ws = loop_ws(2, "1");
    let (code, result, stderr) = ws.json(&["run", "loop"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stages(&result), vec![st("implement", "success", 2, None), st("review", "success", 2, None)]);
    assert!(stderr.contains("↺ review: 1 blocking item — back to `implement` (feedback iteration 1/2)"), "{stderr}");
    let second = ws.read("implement-2.prompt");
    assert!(
        second.contains(
            "# Feedback to address\nReview `review` found 1 blocking item (feedback iteration 1 of 2). Fix them:\n- src/api.rs:12: calls the removed v1 endpoint (suggested fix: call /v2/items)\n"
        ),
        "{second}"
    );
    assert!(!ws.read("implement-1.prompt").contains("# Feedback to address"));
    let (_, log, _) = ws.run(&["logs", "latest"]);
    assert!(log.contains("feedback_loop source=review target=implement iteration=1 (1 blocking of 2)"), "{log}");
    assert!(log.contains("review: feedback=none (1 items, none blocking), continuing"), "{log}");
}

#[test]
fn feedback_that_stays_blocking_escalates_and_respond_decides() {
    let ws = loop_ws(1, "always");
    let (code, result, _) = ws.json(&["run", "loop", "--quiet"]);
    assert_eq!(code, 3);
    assert_eq!(result["status"], "waiting");
    assert_eq!(result["waiting"], json!({"kind": "escalation", "stage": "review"}));
    assert_eq!(ws.read("implement.count").trim(), "2", "the first run and one loop iteration");
    let run_id = result["run_id"].as_str().expect("id").to_owned();

    // `retry`: one more iteration, still blocking, escalates again.
    let (code, again, _) = ws.json(&["respond", &run_id, "retry", "--quiet"]);
    assert_eq!(code, 3);
    assert_eq!(again["waiting"], json!({"kind": "escalation", "stage": "review"}));
    assert_eq!(ws.read("implement.count").trim(), "3");

    // `fix TEXT`: the instruction reaches the implementation's prompt, and the review passes.
    let (code, done, stderr) = ws.json(&["respond", &run_id, "fix", "use", "the", "v2", "API"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stages(&done), vec![st("implement", "success", 4, None), st("review", "success", 4, None)]);
    assert!(ws.read("implement-4.prompt").contains("Instruction from a human (high priority): use the v2 API\n"));
}

#[test]
fn an_escalation_can_be_accepted_or_aborted() {
    let ws = loop_ws(1, "always");
    let (_, first, _) = ws.json(&["run", "loop", "--quiet"]);
    let (code, accepted, _) = ws.json(&["respond", first["run_id"].as_str().expect("id"), "skip", "--quiet"]);
    assert_eq!(code, 0);
    assert_eq!(accepted["status"], "success");
    let (_, log, _) = ws.run(&["logs", first["run_id"].as_str().expect("id")]);
    assert!(log.contains("feedback_loop accepted source=review"), "{log}");

    std::fs::remove_file(ws.path().join("implement.count")).expect("rm");
    let (_, second, _) = ws.json(&["run", "loop", "--quiet"]);
    let (code, aborted, _) = ws.json(&["respond", second["run_id"].as_str().expect("id"), "abort", "--quiet"]);
    assert_eq!(code, 4);
    assert_eq!(aborted["status"], "cancelled");
    let (code, _, stderr) = ws.run(&["respond", second["run_id"].as_str().expect("id"), "retry"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("is not waiting on an escalation"), "{stderr}");
}
