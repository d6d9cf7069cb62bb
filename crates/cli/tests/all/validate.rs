//! `loopwright validate` on the seed pipelines and on a pipeline with one mistake of each kind.

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::Ws;

#[test]
fn the_seed_pipelines_are_valid() {
    let ws = Ws::seed();
    let (code, stdout, stderr) = ws.run(&["validate"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout,
        "✓ .loopwright/pipelines/bug-fix.yml: pipeline `bug-fix`, 3 stages\n\
         ✓ .loopwright/pipelines/example.yml: pipeline `example`, 4 stages\n\
         ✓ .loopwright/pipelines/full-feature.yml: pipeline `full-feature`, 6 stages\n"
    );
}

/// One mistake of each kind seed 004 names (and SPEC §4 adds), each on its own line.
const BROKEN: &str = r#"name: broken
version: 1
stages:
  - id: Plan
    agent: cto
    mode: plan
    description: Plan it
    outputs: [implementation_plan]
  - id: review
    agent: vp-archtecture
    mode: review
    description: Review
    inputs: [implementation_plam]
    outputs: [risks_identified]
    condition: "complexity == 'high' and stage_outputs.plan.risks > 0"
  - id: review
    agent: shell
    mode: agent
    description: Duplicate id
    run: echo hi
    timeout_minutes: 0
    retry:
      max_attempts: 12
      backoff: quadratic
      initial_delay_seconds: 0
    rollback:
      strategy: undo
  - id: implement
    agent: tech-lead
    mode: agent
    condition: "complexty == 'high' and"
"#;

#[test]
fn every_problem_is_reported_with_its_place() {
    let ws = Ws::seed();
    ws.write(".loopwright/pipelines/broken.yml", BROKEN);
    let (code, stdout, stderr) = ws.run(&["validate", "broken"]);
    assert_eq!(code, 2);
    assert_eq!(stdout, "");
    insta::assert_snapshot!("broken_pipeline_diagnostics", stderr);
}

#[test]
fn json_diagnostics_name_line_stage_and_field() {
    let ws = Ws::seed();
    ws.write(".loopwright/pipelines/broken.yml", BROKEN);
    let (code, out, _) = ws.json(&["validate", "broken"]);
    assert_eq!(code, 2);
    assert_eq!(out["valid"], Value::Bool(false));
    let got: Vec<(u64, u64, String, String)> = out["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .map(|d| {
            (
                d["position"]["line"].as_u64().expect("line"),
                d["position"]["column"].as_u64().expect("column"),
                d["stage"].as_str().unwrap_or("-").to_owned(),
                d["field"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    let want: Vec<(u64, u64, &str, &str)> = vec![
        (1, 1, "-", "description"),
        (4, 9, "Plan", "id"),
        (10, 12, "review", "agent"),
        (11, 11, "review", "mode"),
        (13, 14, "review", "inputs"),
        (15, 42, "review", "condition"),
        (16, 9, "review", "id"),
        (21, 22, "review", "timeout_minutes"),
        (23, 21, "review", "retry.max_attempts"),
        (24, 16, "review", "retry.backoff"),
        (25, 30, "review", "retry.initial_delay_seconds"),
        (27, 17, "review", "rollback.strategy"),
        (28, 5, "implement", "description"),
        (31, 37, "implement", "condition"),
    ];
    let want: Vec<(u64, u64, String, String)> =
        want.into_iter().map(|(l, c, s, f)| (l, c, s.to_owned(), f.to_owned())).collect();
    assert_eq!(got, want);
}

#[test]
fn a_yaml_syntax_error_names_file_line_and_column() {
    let ws = Ws::seed();
    ws.write(".loopwright/pipelines/bad.yml", "name: bad\ndescription: 'unterminated\nstages: []\n");
    let (code, _, stderr) = ws.run(&["validate", "bad"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("╭─[.loopwright/pipelines/bad.yml:3:1]"), "{stderr}");
    assert!(stderr.ends_with("error: 1 problem found in 1 file\n"), "{stderr}");
}

#[test]
fn broken_agent_files_are_reported_too() {
    let ws = Ws::seed();
    ws.write(".loopwright/agents/broken.md", "---\nrunner: claudee\n---\nx\n");
    let (code, _, stderr) = ws.run(&["validate"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("field `runner`: unknown runner `claudee`"), "{stderr}");
    assert!(stderr.contains(".loopwright/agents/broken.md:2:9"), "{stderr}");
    assert!(stderr.contains("did you mean `claude`?"), "{stderr}");
}
