//! One test per validation rule of seed 004 (plus SPEC §4), through `compile`.

use std::collections::BTreeMap;

use loopwright_spec::agent::parse_agent;
use loopwright_spec::pipeline::Select;
use loopwright_spec::{Agent, CompileContext, Pipeline, RunnerKind, SourceFile, compile};

fn sid(s: &str) -> loopwright_spec::StageId {
    loopwright_spec::StageId::parse(s).expect("an id")
}
use pretty_assertions::assert_eq;

fn agents() -> BTreeMap<String, Agent> {
    let mut m = BTreeMap::new();
    for (name, modes) in [("cto", "[plan, agent]"), ("tech-lead", "[plan, agent]"), ("reviewer", "[plan]")] {
        let src =
            SourceFile::new(format!("{name}.md"), format!("---\ncommand: [\"true\"]\nmodes: {modes}\n---\npersona\n"));
        m.insert(name.to_owned(), parse_agent(&src, name, RunnerKind::Command).expect("valid agent"));
    }
    m
}

fn try_compile(yaml: &str) -> Result<Pipeline, Vec<String>> {
    let agents = agents();
    let cx = CompileContext { agents: &agents, extra_inputs: &[], default_timeout_minutes: 30.0 };
    compile(&SourceFile::new("p.yml", yaml), &cx).map_err(|d| d.items.iter().map(ToString::to_string).collect())
}

fn errors(yaml: &str) -> Vec<String> {
    try_compile(yaml).expect_err("the pipeline is invalid")
}

const HEAD: &str = "name: p\ndescription: d\nversion: 1\nstages:\n";

fn stage(extra: &str) -> String {
    format!("{HEAD}  - id: s\n    agent: cto\n    mode: plan\n    description: x\n{extra}")
}

#[test]
fn a_valid_pipeline_compiles_with_defaults() {
    let p = try_compile(&stage("    outputs: [plan_text]\n")).expect("valid");
    assert_eq!(p.name, "p");
    assert_eq!(p.max_retries, 5);
    assert_eq!(p.stages.len(), 1);
    assert_eq!(p.stages[0].timeout, std::time::Duration::from_secs(1800));
    assert_eq!(p.stages[0].retry, None);
    assert_eq!(p.initial_inputs, vec!["task_description", "context"]);
}

#[test]
fn required_top_level_fields_are_all_reported() {
    assert_eq!(
        errors("stages:\n  - id: s\n    agent: cto\n    mode: plan\n    description: x\n"),
        vec![
            "p.yml:1:1: error: field `name`: missing required field `name` in the pipeline (help: add `name:` (a unique pipeline identifier))",
            "p.yml:1:1: error: field `description`: missing required field `description` in the pipeline (help: add `description:` (what this pipeline does))",
            "p.yml:1:1: error: field `version`: missing required field `version` in the pipeline (help: add `version:` (the schema version, e.g. `1`))",
        ]
    );
}

#[test]
fn stages_must_be_present_and_non_empty() {
    assert_eq!(
        errors("name: p\ndescription: d\nversion: 1\nstages: []\n"),
        vec!["p.yml:4:9: error: field `stages`: `stages` is empty, expected at least one stage"]
    );
    assert_eq!(errors("name: p\ndescription: d\nversion: 1\n").len(), 1);
}

#[test]
fn required_stage_fields_are_all_reported() {
    assert_eq!(
        errors(&format!("{HEAD}  - id: s\n")),
        vec![
            "p.yml:5:5: error: stage `s`, field `agent`: missing required field `agent` in stage `s` (help: add `agent:` (an agent name, or `shell`))",
            "p.yml:5:5: error: stage `s`, field `mode`: missing required field `mode` in stage `s` (help: add `mode:` (`plan` or `agent`))",
            "p.yml:5:5: error: stage `s`, field `description`: missing required field `description` in stage `s` (help: add `description:` (the stage's purpose))",
        ]
    );
}

#[test]
fn stage_ids_must_match_the_pattern() {
    for bad in ["Plan", "1plan", "plan-review", "_x"] {
        let e = errors(&format!("{HEAD}  - id: {bad}\n    agent: cto\n    mode: plan\n    description: x\n"));
        assert_eq!(e.len(), 1, "{bad}: {e:?}");
        assert!(
            e[0].starts_with(&format!(
                "p.yml:5:9: error: stage `{bad}`, field `id`: stage id `{bad}` does not match ^[a-z][a-z0-9_]*$"
            )),
            "{}",
            e[0]
        );
    }
}

#[test]
fn stage_ids_must_be_unique() {
    let yaml = format!(
        "{HEAD}  - id: a\n    agent: cto\n    mode: plan\n    description: x\n  - id: a\n    agent: cto\n    mode: plan\n    description: y\n"
    );
    assert_eq!(
        errors(&yaml),
        vec![
            "p.yml:9:9: error: stage `a`, field `id`: duplicate stage id `a`: stage #1 already uses it (help: stage ids must be unique within a pipeline)"
        ]
    );
}

#[test]
fn mode_must_be_plan_or_agent() {
    let e = errors(&format!("{HEAD}  - id: s\n    agent: cto\n    mode: review\n    description: x\n"));
    assert_eq!(
        e,
        vec![
            "p.yml:7:11: error: stage `s`, field `mode`: unknown mode `review`, expected `plan` or `agent` (help: `plan` is read-only review; `agent` may change files)"
        ]
    );
}

#[test]
fn inputs_must_come_from_earlier_stages_or_initial_inputs() {
    let yaml = format!(
        "{HEAD}  - id: a\n    agent: cto\n    mode: plan\n    description: x\n    inputs: [task_description, later_thing]\n    outputs: [plan_text]\n  - id: b\n    agent: cto\n    mode: plan\n    description: y\n    inputs: [plan_text, plan_txt]\n    outputs: [later_thing]\n"
    );
    let e = errors(&yaml);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].starts_with("p.yml:9:32: error: stage `a`, field `inputs`: input `later_thing` is not an output of any earlier stage nor an initial input"), "{}", e[0]);
    assert!(
        e[1].starts_with("p.yml:15:25: error: stage `b`, field `inputs`: input `plan_txt` is not an output"),
        "{}",
        e[1]
    );
    assert!(e[1].ends_with("(help: did you mean `plan_text`?)"), "{}", e[1]);
}

#[test]
fn declared_and_given_initial_inputs_are_accepted() {
    let yaml = String::from(
        "name: p\ndescription: d\nversion: 1\ninitial_inputs: [error_context]\nstages:\n  - id: s\n    agent: cto\n    mode: plan\n    description: x\n    inputs: [error_context, context, task_description, extra]\n",
    );
    let agents = agents();
    let extra = vec!["extra".to_owned()];
    let cx = CompileContext { agents: &agents, extra_inputs: &extra, default_timeout_minutes: 30.0 };
    let p = compile(&SourceFile::new("p.yml", yaml), &cx).expect("valid");
    assert_eq!(p.initial_inputs, vec!["task_description", "context", "error_context", "extra"]);
}

#[test]
fn retry_limits_are_checked() {
    let e = errors(&stage(
        "    retry:\n      max_attempts: 0\n      backoff: quadratic\n      initial_delay_seconds: 301\n",
    ));
    assert_eq!(
        e,
        vec![
            "p.yml:10:21: error: stage `s`, field `retry.max_attempts`: `max_attempts` is 0, expected 1 to 10",
            "p.yml:11:16: error: stage `s`, field `retry.backoff`: unknown backoff `quadratic`, expected `exponential`, `linear` or `fixed`",
            "p.yml:12:30: error: stage `s`, field `retry.initial_delay_seconds`: `initial_delay_seconds` is 301, expected 1 to 300",
        ]
    );
    let p = try_compile(&stage(
        "    retry:\n      max_attempts: 10\n      backoff: linear\n      initial_delay_seconds: 1\n",
    ))
    .expect("valid");
    let r = p.stages[0].retry.expect("retry");
    assert_eq!((r.max_attempts, r.delay(3)), (10, std::time::Duration::from_secs(3)));
}

#[test]
fn retry_defaults_and_backoff_cap() {
    let p = try_compile(&stage("    retry: {}\n")).expect("valid");
    let r = p.stages[0].retry.expect("retry");
    assert_eq!(r.max_attempts, 3);
    let delays: Vec<u64> = (1..=8).map(|n| r.delay(n).as_secs()).collect();
    assert_eq!(delays, vec![5, 10, 20, 40, 80, 160, 300, 300]);
}

#[test]
fn rollback_strategy_names_are_checked() {
    let e = errors(&stage("    rollback:\n      strategy: git_revrt\n"));
    assert_eq!(
        e,
        vec![
            "p.yml:10:17: error: stage `s`, field `rollback.strategy`: unknown rollback strategy `git_revrt`, expected one of git_revert, file_restore, memory_cleanup, manual (help: did you mean `git_revert`?)"
        ]
    );
    let e = errors(&stage("    rollback:\n      strategy: manual\n"));
    assert_eq!(e.len(), 1);
    assert!(e[0].contains("`strategy: manual` needs a `description`"), "{}", e[0]);
}

#[test]
fn agents_must_exist_and_allow_the_mode() {
    let e = errors(&format!(
        "{HEAD}  - id: s\n    agent: tech-leed\n    mode: plan\n    description: x\n  - id: t\n    agent: reviewer\n    mode: agent\n    description: y\n"
    ));
    assert_eq!(
        e,
        vec![
            "p.yml:6:12: error: stage `s`, field `agent`: Agent 'tech-leed' not found for stage 's' (help: did you mean `tech-lead`?)",
            "p.yml:10:12: error: stage `t`, field `mode`: agent `reviewer` may not run in `agent` mode (its `modes:` allow plan) (help: change the stage's mode, or add `agent` to `modes:` in reviewer.md)",
        ]
    );
}

#[test]
fn conditions_must_parse_and_name_known_variables() {
    let e = errors(&stage("    condition: \"complexity == 'high' and\"\n"));
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("p.yml:9:38: error: stage `s`, field `condition`: condition does not parse:"), "{}", e[0]);
    let e = errors(&stage("    condition: \"complexty == 'high'\"\n"));
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with(
            "p.yml:9:17: error: stage `s`, field `condition`: condition uses unknown variable `complexty`"
        ),
        "{}",
        e[0]
    );
}

#[test]
fn conditions_may_use_declared_vars_and_earlier_outputs() {
    let yaml = String::from(
        "name: p\ndescription: d\nversion: 1\nvars:\n  risk_budget: 3\nstages:\n  - id: review\n    agent: cto\n    mode: plan\n    description: x\n    outputs: [risks_identified]\n  - id: fix\n    agent: cto\n    mode: agent\n    description: y\n    condition: \"stage_outputs.review.risks_identified > 0 and risk_budget > 1 and 'x' not in tags\"\n",
    );
    let p = try_compile(&yaml).expect("valid");
    assert_eq!(p.vars, BTreeMap::from([("risk_budget".to_owned(), serde_json::json!(3))]));
    let e = errors(&yaml.replace("risks_identified > 0", "risks > 0"));
    assert_eq!(e.len(), 1);
    assert!(e[0].contains("stage `review` declares no output `risks`"), "{}", e[0]);
}

#[test]
fn shell_stages_need_run_and_others_must_not_have_it() {
    let e = errors(&format!(
        "{HEAD}  - id: s\n    agent: shell\n    mode: agent\n    description: x\n  - id: t\n    agent: cto\n    mode: plan\n    description: y\n    run: echo\n"
    ));
    assert_eq!(
        e,
        vec![
            "p.yml:6:12: error: stage `s`, field `run`: `agent: shell` needs `run:` with a command or a list of commands (help: for example: run: cargo test)",
            "p.yml:13:10: error: stage `t`, field `run`: `run:` is only for `agent: shell`, but this stage runs agent `cto` (help: remove `run:`, or set `agent: shell`)",
        ]
    );
    let p = try_compile(&format!("{HEAD}  - id: s\n    agent: shell\n    mode: agent\n    description: x\n    run: [\"echo a\", \"echo b\"]\n    timeout_minutes: 0.05\n")).expect("valid");
    assert_eq!(p.stages[0].run, vec!["echo a", "echo b"]);
    assert_eq!(p.stages[0].timeout, std::time::Duration::from_secs(3));
}

#[test]
fn timeouts_must_be_positive() {
    let e = errors(&stage("    timeout_minutes: 0\n"));
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("p.yml:9:22: error: stage `s`, field `timeout_minutes`: `timeout_minutes` is 0, expected a number of minutes above 0"), "{}", e[0]);
}

#[test]
fn unknown_fields_and_wrong_types_name_the_place() {
    assert_eq!(
        errors(&stage("    timout_minutes: 3\n")),
        vec![
            "p.yml:9:5: error: unknown field `timout_minutes`, expected one of id, agent, mode, description, inputs, outputs, condition, requires_approval, approvers, prevent_self_approval, timeout_minutes, retry, rollback, skill, run, checks, closed_loop, feedback_loop, budget, sandbox, network, env, fallback, needs, candidates (help: did you mean `timeout_minutes`?)"
        ]
    );
    let e = errors(&stage("    timeout_minutes: ten\n"));
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("p.yml:9:22: error: "), "{}", e[0]);
}

#[test]
fn yaml_syntax_errors_have_a_position() {
    let e = errors("name: 'p\nstages: []\n");
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("p.yml:2:1: error: "), "{}", e[0]);
}

#[test]
fn feedback_loops_follow_the_review_to_implementation_rule() {
    let yaml = format!(
        "{HEAD}  - id: implement\n    agent: cto\n    mode: agent\n    description: x\n    outputs: [code_changes]\n  - id: review\n    agent: cto\n    mode: plan\n    description: y\n    inputs: [code_changes]\n    outputs: [review_notes, feedback_items]\n    feedback_loop:\n      target_stage: implement\n      max_iterations: 2\n"
    );
    let p = try_compile(&yaml).expect("valid");
    assert_eq!(
        p.stages[1].feedback_loop.as_ref().map(|f| (f.target_stage.as_str(), f.max_iterations)),
        Some(("implement", 2))
    );
    let e = errors(&yaml.replace("[review_notes, feedback_items]", "[review_notes]"));
    assert_eq!(e.len(), 1);
    assert!(e[0].contains("must declare `feedback_items`"), "{}", e[0]);
    let e = errors(&yaml.replace("target_stage: implement", "target_stage: review"));
    assert!(e[0].contains("feedback target `review` is not a stage before this one"), "{}", e[0]);
}

#[test]
fn checks_are_validated() {
    let e = errors(&stage("    checks:\n      - name: tests\n        type: tests\n        command: cargo test\n"));
    assert_eq!(e.len(), 1);
    assert!(e[0].contains("unknown check type `tests`"), "{}", e[0]);
    let p = try_compile(&stage("    checks:\n      - name: tests\n        type: test\n        command: cargo test\n"))
        .expect("valid");
    assert_eq!(p.stages[0].checks[0].command, "cargo test");
}

#[test]
fn schema_file_is_up_to_date() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../schema/pipeline.schema.json");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    let generated = loopwright_spec::schema::pipeline_schema_json();
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(path, &generated).expect("write schema");
        return;
    }
    assert!(
        committed == generated,
        "schema/pipeline.schema.json is out of date: run `UPDATE_SCHEMA=1 cargo test -p loopwright-spec schema`"
    );
}

#[test]
fn a_run_that_is_neither_a_command_nor_a_list_says_what_was_expected() {
    for value in ["true", "42", "{a: b}"] {
        let e = errors(&format!(
            "{HEAD}  - id: s\n    agent: shell\n    mode: agent\n    description: x\n    run: {value}\n"
        ));
        assert_eq!(e.len(), 1, "{value}: {e:?}");
        assert!(e[0].starts_with("p.yml:9:"), "{value}: {}", e[0]);
        assert!(e[0].contains("expected a shell command (a string) or a list of shell commands"), "{value}: {}", e[0]);
        assert!(!e[0].contains("did not match any variant"), "{value}: {}", e[0]);
    }
}

#[test]
fn sandbox_and_network_are_typed_and_checked_where_they_are_written() {
    use loopwright_spec::sandbox::{Host, Network, SandboxMode};
    let p =
        try_compile(&stage("    sandbox: required\n    network: [api.example.com, \"http://127.0.0.1:8080/v1\"]\n"))
            .expect("valid");
    assert_eq!(p.stages[0].sandbox, Some(SandboxMode::Required));
    assert_eq!(
        p.stages[0].network,
        Some(Network::Hosts(vec![
            Host { host: "api.example.com".into(), port: 443 },
            Host { host: "127.0.0.1".into(), port: 8080 }
        ]))
    );
    let p = try_compile(&stage("    network: none\n")).expect("valid");
    assert_eq!((p.stages[0].sandbox, p.stages[0].network.clone()), (None, Some(Network::None)));
    assert_eq!(
        errors(&stage("    sandbox: requird\n    network: all\n")),
        vec![
            "p.yml:9:14: error: stage `s`, field `sandbox`: unknown sandbox mode `requird`, expected `auto`, `required` or `off` (help: did you mean `required`?)",
            "p.yml:10:14: error: stage `s`, field `network`: unknown network `all`, expected `none`, `model` or a list of hosts (help: for example: network: [api.example.com, \"127.0.0.1:8080\"])",
        ]
    );
    let shell = format!(
        "{HEAD}  - id: s\n    agent: shell\n    mode: agent\n    description: x\n    run: make\n    network: model\n    sandbox: off\n"
    );
    assert_eq!(
        errors(&shell),
        vec![
            "p.yml:10:14: error: stage `s`, field `network`: `network: model` on a shell stage: a shell stage has no model to reach (help: write `network: none`, or the hosts its commands need: network: [crates.io])"
        ]
    );
    let bad_host = errors(&stage("    network: [\"user@host\", \"ftp://x\"]\n"));
    assert_eq!(bad_host.len(), 2, "{bad_host:?}");
    assert!(
        bad_host[0].starts_with("p.yml:9:14: error: stage `s`, field `network`: `user@host` carries a user name"),
        "{bad_host:?}"
    );
}

#[test]
fn repo_and_runs_on_say_where_workers_run_a_pipeline() {
    let yaml = format!(
        "repo: git@example.com:team/app.git\nruns_on: {{gpu: a100, os: linux}}\n{}",
        stage("").trim_start_matches('\n')
    );
    let p = try_compile(&yaml).expect("valid");
    assert_eq!(p.repo.as_deref(), Some("git@example.com:team/app.git"));
    assert_eq!(
        p.runs_on,
        BTreeMap::from([("gpu".to_owned(), "a100".to_owned()), ("os".to_owned(), "linux".to_owned())])
    );
    let p = try_compile(&stage("")).expect("valid");
    assert_eq!((p.repo, p.runs_on), (None, BTreeMap::new()));
    let errs = errors(&format!("runs_on: {{gpu: 'a 100'}}\nrepo: '--upload-pack=x'\n{}", stage("")));
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs[0].contains("p.yml:1") && errs[0].contains("`gpu: a 100` is not a label"), "{errs:?}");
    assert!(errs[1].contains("p.yml:2") && errs[1].contains("`repo` is `--upload-pack=x`"), "{errs:?}");
}

#[test]
fn each_stages_sandbox_mode_is_its_own_else_the_workspaces() {
    use loopwright_spec::SandboxPlan;
    use loopwright_spec::sandbox::SandboxMode::{Auto, Off, Required};
    let yaml = format!(
        "{HEAD}  - id: a\n    agent: cto\n    mode: plan\n    description: x\n  - id: b\n    agent: cto\n    mode: plan\n    description: x\n    sandbox: off\n  - id: c\n    agent: cto\n    mode: plan\n    description: x\n    sandbox: required\n"
    );
    let p = try_compile(&yaml).expect("valid");
    let modes = |plan: &SandboxPlan| p.stages.iter().map(|s| plan.mode(&s.id)).collect::<Vec<_>>();
    let by = |plan: &SandboxPlan| plan.required_by(&p).map(|s| s.map(ToString::to_string));
    for (workspace, expected, required) in [
        (Auto, vec![Auto, Off, Required], Some(Some("c".to_owned()))),
        (Off, vec![Off, Off, Required], Some(Some("c".to_owned()))),
        (Required, vec![Required, Off, Required], Some(None)),
    ] {
        let plan = SandboxPlan::resolve(&p, workspace);
        assert_eq!((modes(&plan), by(&plan), plan.all_off(&p)), (expected, required, false), "{workspace:?}");
    }
    let quiet = try_compile(&stage("")).expect("valid");
    let off = SandboxPlan::resolve(&quiet, Off);
    assert_eq!((off.all_off(&quiet), off.required_by(&quiet)), (true, None));
    assert_eq!(SandboxPlan::default(), off, "no sandbox unless a stage asks");
}

#[test]
fn fallback_agents_must_exist_allow_the_mode_and_be_named_once() {
    let e = errors(&format!(
        "{HEAD}  - id: s\n    agent: cto\n    mode: agent\n    description: x\n    fallback: [tech-leed, reviewer, cto]\n\
         \x20 - id: t\n    agent: tech-lead\n    mode: plan\n    description: y\n    fallback: [cto, cto, shell]\n\
         \x20 - id: u\n    agent: shell\n    mode: plan\n    description: z\n    run: 'true'\n    fallback: [cto]\n"
    ));
    assert_eq!(
        e,
        vec![
            "p.yml:9:16: error: stage `s`, field `fallback`: fallback agent `tech-leed` not found (help: did you mean `tech-lead`?)",
            "p.yml:9:27: error: stage `s`, field `fallback`: fallback agent `reviewer` may not run in `agent` mode",
            "p.yml:9:37: error: stage `s`, field `fallback`: agent `cto` cannot fall back to itself",
            "p.yml:14:21: error: stage `t`, field `fallback`: fallback agent `cto` is named twice",
            "p.yml:14:26: error: stage `t`, field `fallback`: `shell` cannot take an agent's attempt over",
            "p.yml:20:16: error: stage `u`, field `fallback`: `fallback:` is for a stage run by an agent, not `agent: shell` (help: remove `fallback:`, or run the stage with an agent)",
        ]
    );
}

#[test]
fn a_stage_without_fallback_takes_its_agents_and_its_own_replaces_it() {
    let mut agents = agents();
    let src = SourceFile::new("lead.md", "---\ncommand: [\"true\"]\nfallback: [cto, tech-lead]\n---\npersona\n");
    agents.insert("lead".into(), parse_agent(&src, "lead", RunnerKind::Command).expect("valid agent"));
    let cx = CompileContext { agents: &agents, extra_inputs: &[], default_timeout_minutes: 30.0 };
    let yaml = format!(
        "{HEAD}  - id: s\n    agent: lead\n    mode: agent\n    description: x\n\
         \x20 - id: t\n    agent: lead\n    mode: agent\n    description: y\n    fallback: [tech-lead]\n\
         \x20 - id: u\n    agent: cto\n    mode: agent\n    description: z\n"
    );
    let p = compile(&SourceFile::new("p.yml", yaml), &cx).expect("valid");
    let chains: Vec<Vec<&str>> = p.stages.iter().map(|s| s.fallback.iter().map(String::as_str).collect()).collect();
    assert_eq!(chains, vec![vec!["cto", "tech-lead"], vec!["tech-lead"], vec![]]);
    assert_eq!(p.next_fallback(&p.stages[0], None), Some("cto"));
    assert_eq!(p.next_fallback(&p.stages[0], Some("cto")), Some("tech-lead"));
    assert_eq!(p.next_fallback(&p.stages[0], Some("tech-lead")), None);

    let src = SourceFile::new("bad.md", "---\ncommand: [\"true\"]\nfallback: [nobody]\n---\npersona\n");
    agents.insert("bad".into(), parse_agent(&src, "bad", RunnerKind::Command).expect("valid agent"));
    let cx = CompileContext { agents: &agents, extra_inputs: &[], default_timeout_minutes: 30.0 };
    let yaml = format!("{HEAD}  - id: s\n    agent: bad\n    mode: agent\n    description: x\n");
    let e: Vec<String> = compile(&SourceFile::new("p.yml", yaml), &cx)
        .expect_err("invalid")
        .items
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        e,
        vec![
            "p.yml:6:12: error: stage `s`, field `fallback`: fallback agent `nobody` not found (the `fallback:` of agent `bad` in bad.md) (help: agents are read from .loopwright/agents/, .claude/agents/ and .cursor/agents/ (NAME.md); known: `bad`, `cto`, `lead`, `reviewer`, `tech-lead`)"
        ]
    );
}

#[test]
fn needs_make_a_graph_and_a_stage_without_needs_needs_the_one_before() {
    let p = try_compile(&format!(
        "{HEAD}max_parallel: 2\n  - id: a\n    agent: cto\n    mode: plan\n    description: x\n    outputs: [plan]\n\
         \x20 - id: b\n    agent: cto\n    mode: plan\n    description: y\n    needs: [a]\n    inputs: [plan]\n    outputs: [left]\n\
         \x20 - id: c\n    agent: cto\n    mode: plan\n    description: z\n    needs: [a]\n    outputs: [right]\n\
         \x20 - id: d\n    agent: cto\n    mode: plan\n    description: w\n    needs: [b, c]\n    inputs: [left, right, plan]\n\
         \x20 - id: e\n    agent: cto\n    mode: plan\n    description: v\n"
    )
    .replace("stages:\nmax_parallel: 2\n", "max_parallel: 2\nstages:\n"))
    .expect("valid");
    let needs: Vec<(&str, Vec<&str>)> =
        p.stages.iter().map(|s| (s.id.as_str(), s.needs.iter().map(|n| n.as_str()).collect())).collect();
    assert_eq!(needs, vec![("a", vec![]), ("b", vec!["a"]), ("c", vec!["a"]), ("d", vec!["b", "c"]), ("e", vec!["d"])]);
    assert_eq!(p.max_parallel, 2);
    assert!(p.is_graph());
    assert!(p.depends_on(3, 0) && p.depends_on(4, 1) && !p.depends_on(2, 1) && !p.depends_on(1, 2));
    assert_eq!(p.producer_of("plan", 3).map(|s| s.id.as_str()), Some("a"));
    let line = try_compile(&stage("")).expect("valid");
    assert!(!line.is_graph());
    assert_eq!(line.max_parallel, 4);
}

#[test]
fn needs_must_name_known_stages_once_and_make_no_cycle() {
    let e = errors(&format!(
        "{HEAD}  - id: a\n    agent: cto\n    mode: plan\n    description: x\n    needs: [c]\n\
         \x20 - id: b\n    agent: cto\n    mode: plan\n    description: y\n    needs: [a, a, bb, b]\n\
         \x20 - id: c\n    agent: cto\n    mode: plan\n    description: z\n"
    ));
    assert_eq!(
        e,
        vec![
            "p.yml:14:13: error: stage `b`, field `needs`: the stages' `needs:` make a cycle: a needs c needs b needs a (help: a stage without `needs:` needs the stage before it; break the cycle by changing one `needs:`)",
            "p.yml:14:16: error: stage `b`, field `needs`: `needs:` names stage `a` twice",
            "p.yml:14:19: error: stage `b`, field `needs`: `needs:` names stage `bb`, which the pipeline does not have (help: did you mean `b`?)",
            "p.yml:14:23: error: stage `b`, field `needs`: a stage cannot need itself",
        ]
    );
    let e = errors(&format!(
        "{HEAD}  - id: a\n    agent: cto\n    mode: plan\n    description: x\n    outputs: [plan]\n\
         \x20 - id: b\n    agent: cto\n    mode: plan\n    description: y\n    needs: []\n    inputs: [plan]\n"
    ));
    assert_eq!(
        e,
        vec![
            "p.yml:15:14: error: stage `b`, field `inputs`: input `plan` comes from stage `a`, which this stage does not need (help: add `a` to this stage's `needs:`)"
        ]
    );
    let e = errors(&format!("{HEAD}max_parallel: 0\n").replace(
        "stages:\nmax_parallel: 0\n",
        "max_parallel: 0\nstages:\n  - id: a\n    agent: cto\n    mode: plan\n    description: x\n",
    ));
    assert_eq!(
        e,
        vec!["p.yml:4:15: error: field `max_parallel`: `max_parallel` is 0, expected 1 to 64 stages at once"]
    );
}

#[test]
fn candidates_need_agent_mode_two_to_eight_known_agents_and_known_selectors() {
    let p = try_compile(&format!(
        "{HEAD}  - id: s\n    agent: cto\n    mode: agent\n    description: x\n    candidates: {{count: 3, agents: [cto, tech-lead]}}\n"
    ))
    .expect("valid");
    let c = p.stages[0].candidates.as_ref().expect("candidates");
    assert_eq!(c.agents, vec!["cto", "tech-lead", "cto"]);
    assert_eq!(
        c.select,
        Select::By(vec![
            loopwright_spec::pipeline::Selector::Checks,
            loopwright_spec::pipeline::Selector::SmallestDiff
        ])
    );
    let e = errors(&format!(
        "{HEAD}  - id: s\n    agent: cto\n    mode: plan\n    description: x\n    candidates: {{count: 9, agents: [reviewer, nobody], select: [cheapest, cheapest, smalest_diff]}}\n"
    ));
    assert_eq!(
        e,
        vec![
            "p.yml:9:17: error: stage `s`, field `candidates`: best of N applies a winner's changes: it needs `mode: agent` (help: set `mode: agent`, or remove `candidates:`)",
            "p.yml:9:25: error: stage `s`, field `candidates.count`: `count` is 9, expected 2 to 8",
            "p.yml:9:47: error: stage `s`, field `candidates.agents`: candidate agent `nobody` not found",
            "p.yml:9:75: error: stage `s`, field `candidates.select`: `cheapest` is named twice",
            "p.yml:9:85: error: stage `s`, field `candidates.select`: unknown selector `smalest_diff`, expected checks, smallest_diff, cheapest or `{judge: STAGE}` (help: did you mean `smallest_diff`?)",
        ]
    );
}

#[test]
fn a_judge_is_a_plan_mode_agent_stage_of_the_pipeline_judging_one_round() {
    let judged = |select: &str, judge: &str| {
        format!(
            "{HEAD}  - id: build\n    agent: cto\n    mode: agent\n    description: x\n    candidates: {{count: 2, select: {select}}}\n\
             \x20 - id: pick\n    agent: {judge}\n    mode: plan\n    description: y\n\
             \x20 - id: ship\n    agent: cto\n    mode: agent\n    description: z\n"
        )
    };
    let p = try_compile(&judged("{judge: pick}", "reviewer")).expect("valid");
    assert_eq!(p.stages[0].candidates.as_ref().map(|c| c.select.clone()), Some(Select::Judge(sid("pick"))));
    assert_eq!(p.stages.iter().map(|s| s.judges.clone()).collect::<Vec<_>>(), vec![None, Some(sid("build")), None]);
    let e = errors(&judged("{judge: pik}", "reviewer"));
    assert_eq!(
        e,
        vec![
            "p.yml:9:44: error: stage `build`, field `candidates.select.judge`: judge stage `pik` not found (help: did you mean `pick`?)"
        ]
    );
    let e = errors(&judged("{judge: ship}", "reviewer"));
    assert_eq!(
        e,
        vec![
            "p.yml:9:44: error: stage `build`, field `candidates.select.judge`: judge stage `ship` must be `mode: plan`: a judge reads the candidates, it does not change the workspace"
        ]
    );
    let e = errors(&judged("{judge: build}", "reviewer"));
    assert_eq!(
        e,
        vec![
            "p.yml:9:44: error: stage `build`, field `candidates.select.judge`: a stage cannot judge its own candidates: name another, plan-mode stage"
        ]
    );
    let e = errors(&judged("{judge: pick, by: me}", "reviewer"));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("p.yml:9:"), "{e:?}");
    assert!(e[0].contains("unexpected `by` in `select`, expected only `judge: STAGE`"), "{e:?}");
}

#[test]
fn a_gate_names_who_may_answer_it_and_whether_its_starter_may_approve() {
    use loopwright_spec::pipeline::{Approver, ApproverRole};
    let p = try_compile(&stage(
        "    requires_approval: true\n    approvers: [bob, \"role:admin\", alice.smith]\n    prevent_self_approval: true\n",
    ))
    .expect("valid");
    let gate = &p.stages[0];
    assert_eq!(
        gate.approvers,
        vec![
            Approver::Person("bob".into()),
            Approver::Role(ApproverRole::Admin),
            Approver::Person("alice.smith".into())
        ]
    );
    assert_eq!(gate.prevent_self_approval, Some(true));
    let plain = try_compile(&stage("    requires_approval: true\n")).expect("valid");
    assert_eq!((plain.stages[0].approvers.clone(), plain.stages[0].prevent_self_approval), (vec![], None));
    assert_eq!(
        errors(&stage("    requires_approval: true\n    approvers: [\"role:lead\", bob, bob, \"b o b\"]\n")),
        vec![
            "p.yml:10:17: error: stage `s`, field `approvers`: `role:lead` is not a role that may answer: use role:approver or role:admin",
            "p.yml:10:35: error: stage `s`, field `approvers`: `bob` is listed twice",
            "p.yml:10:40: error: stage `s`, field `approvers`: `b o b` is not a person's name (letters, digits, `.`, `_`, `@`, `-`) or role:ROLE",
        ]
    );
    assert_eq!(
        errors(&stage("    approvers: [bob]\n    prevent_self_approval: true\n")),
        vec![
            "p.yml:9:17: error: stage `s`, field `approvers`: `approvers` goes with `requires_approval: true`: only a gate is answered",
            "p.yml:10:28: error: stage `s`, field `prevent_self_approval`: `prevent_self_approval` goes with `requires_approval: true`",
        ]
    );
}
