//! Presets for the coding-agent CLIs: the argv per mode, a run through a stand-in CLI that
//! speaks the real one's JSON, and every flag checked against the installed real CLIs.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::support::Ws;

const PRESETS: [&str; 6] = ["claude", "codex", "gemini", "aider", "opencode", "goose"];

fn preset_agents(ws: &Ws) {
    for runner in PRESETS {
        ws.write(
            &format!(".loopwright/agents/{runner}-agent.md"),
            &format!("---\nrunner: {runner}\nmodel: m1\n---\nYou code.\n"),
        );
    }
}

fn argv(ws: &Ws, runner: &str, mode: &str) -> serde_json::Value {
    let (code, shown, stderr) = ws.json(&["agents", "show", &format!("{runner}-agent"), "--mode", mode]);
    assert_eq!(code, 0, "{stderr}");
    shown
}

#[test]
fn each_preset_maps_modes_onto_its_tools_permissions() {
    let ws = Ws::empty();
    preset_agents(&ws);
    let all: Vec<serde_json::Value> = PRESETS.iter().flat_map(|r| ["plan", "agent"].map(|m| argv(&ws, r, m))).collect();
    insta::assert_json_snapshot!("preset_argv", all);
}

#[test]
fn a_claude_agent_runs_headless_and_its_json_gives_the_answer_and_usage() {
    let ws = Ws::empty();
    // A stand-in `claude` that records how it was called and answers as `claude -p
    // --output-format json` does.
    // Outside the workspace: a plan-mode stage may not write in it.
    let out_dir = tempfile::tempdir().expect("tempdir");
    let bin = out_dir.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let fake = bin.join("claude");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$@\" > {0}/argv.txt\ncat > {0}/stdin.txt\nprintf '%s' '{{\"type\":\"result\",\"subtype\":\"success\",\"result\":\"## notes\\nread the code\",\"total_cost_usd\":0.25,\"usage\":{{\"input_tokens\":11,\"output_tokens\":7}}}}'\n",
            out_dir.path().display()
        ),
    )
    .expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    ws.write(
        ".claude/agents/reviewer.md",
        "---\nname: reviewer\ndescription: Reviews\nmodel: sonnet\n---\nYou review.\n",
    );
    ws.write(
        ".loopwright/pipelines/r.yml",
        "name: r\ndescription: d\nversion: 1\nstages:\n  - id: review\n    agent: reviewer\n    mode: plan\n    description: Review the code\n    outputs: [notes]\n",
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = ws.cmd().env("PATH", path).args(["run", "r", "--task", "review it", "--json"]).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(result["artifacts"], json!({"notes": "read the code"}));
    let read = |f: &str| std::fs::read_to_string(out_dir.path().join(f)).expect("read");
    assert_eq!(read("argv.txt"), "-p --output-format json --permission-mode plan --model sonnet\n");
    let stdin = read("stdin.txt");
    assert!(stdin.starts_with("You review.\n\n# Task\nreview it\n"), "{stdin}");
    let (_, logs, _) = ws.run(&["logs", "latest"]);
    assert!(logs.contains("review: attempt 1 used 11 tokens in, 7 out, $0.2500"), "{logs}");
}

/// `target/agent-clis`, where `scripts/install-agent-clis.sh` puts the real CLIs.
fn clis() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/agent-clis")
}

/// Installs the real CLIs into [`clis`] once per test process (`scripts/install-agent-clis.sh`,
/// idempotent); the tests that use them call this first, so two never install at once.
pub fn installed_clis() -> PathBuf {
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let install =
            std::process::Command::new("bash").arg(root.join("scripts/install-agent-clis.sh")).arg(clis()).output();
        if let Ok(out) = &install
            && !out.status.success()
        {
            eprintln!("note: some agent CLIs could not be installed:\n{}", String::from_utf8_lossy(&out.stderr));
        }
    });
    clis()
}

#[test]
fn every_flag_a_preset_uses_is_accepted_by_the_installed_cli() {
    installed_clis();
    let ws = Ws::empty();
    preset_agents(&ws);
    let bin = clis().join("node_modules/.bin");
    let tools: [(&str, PathBuf, &[&str]); 5] = [
        ("claude", bin.join("claude"), &["--help"]),
        ("codex", bin.join("codex"), &["exec", "--help"]),
        ("gemini", bin.join("gemini"), &["--help"]),
        ("opencode", bin.join("opencode"), &["run", "--help"]),
        ("aider", clis().join("aider-venv/bin/aider"), &["--help"]),
    ];
    let mut checked = 0;
    for (runner, program, help_args) in tools {
        let help = std::process::Command::new(&program).args(help_args).env("NO_COLOR", "1").output();
        let Some(help) = help.ok().filter(|h| h.status.success()) else {
            eprintln!("skipped: `{runner}` is not installed ({}); its flags were not checked", program.display());
            continue;
        };
        let text = format!("{}{}", String::from_utf8_lossy(&help.stdout), String::from_utf8_lossy(&help.stderr));
        for mode in ["plan", "agent"] {
            let shown = argv(&ws, runner, mode);
            let args: Vec<String> = shown["argv"]
                .as_array()
                .expect("argv")
                .iter()
                .skip(1)
                .map(|a| a.as_str().expect("str").to_owned())
                .collect();
            let mut previous_flag = false;
            for arg in &args {
                let is_flag = arg.starts_with('-') && arg != "-";
                if is_flag {
                    assert!(text.contains(arg.as_str()), "`{runner}` ({mode} mode) does not document `{arg}`:\n{text}");
                } else if previous_flag
                    && !["m1", "{prompt_file}"].contains(&arg.as_str())
                    && !(runner == "opencode"
                        && args.iter().any(|a| a == "--agent")
                        && ["plan", "build"].contains(&arg.as_str()))
                {
                    // (opencode's `--agent` takes an agent's name; `plan` and `build` are its built-in agents.)
                    // A flag's value (a permission mode, a sandbox, a format): one of its choices.
                    assert!(text.contains(arg.as_str()), "`{runner}` ({mode} mode) knows no value `{arg}`:\n{text}");
                }
                previous_flag = is_flag;
            }
        }
        checked += 1;
    }
    eprintln!("checked the flags of {checked} installed agent CLIs (goose is not on npm or PyPI)");
}

#[test]
fn a_claude_agent_is_asked_in_plan_mode_about_a_failure_nothing_sure_classified() {
    // A stand-in `claude` answering as `claude -p --output-format json` does: the attempt
    // (agent mode) changes nothing; the question (plan mode) is answered with the JSON asked
    // for inside its prose, as a CLI's one-shot answer may be.
    let ws = Ws::empty();
    let out_dir = tempfile::tempdir().expect("tempdir");
    let bin = out_dir.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let envelope = |text: &str, tokens: u32| {
        json!({"type": "result", "subtype": "success", "result": text, "usage": {"input_tokens": tokens, "output_tokens": 9}})
            .to_string()
    };
    let answer = envelope(
        "Here is the label:\n```json\n{\"category\": \"runtime-error\", \"signal\": \"the widget is not ready\", \"reason\": \"the program gave up\"}\n```",
        420,
    );
    std::fs::write(
        bin.join("claude"),
        format!(
            "#!/bin/sh\nn=$(ls {0} | grep -c '\\.argv$')\necho \"$@\" > {0}/call-$n.argv\ncat > {0}/call-$n.stdin\ncase \"$*\" in\n  *'--permission-mode plan'*) printf '%s' '{1}' ;;\n  *) printf '%s' '{2}' ;;\nesac\n",
            out_dir.path().display(),
            answer.replace('\'', "'\\''"),
            envelope("Nothing to change.", 100),
        ),
    )
    .expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("claude"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    ws.write(".loopwright/agents/dev.md", "---\nrunner: claude\nmodel: sonnet\n---\nYou fix code.\n");
    ws.write(".loopwright/config.toml", "[classify]\nstatistical = false\n");
    ws.write("check.sh", "echo 'compiling widgets'\necho 'quux: the widget is not ready (slot 7)'\nexit 1\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: fix\n    description: Make the check pass\n    agent: dev\n    mode: agent\n    skill: closed-loop-execution\n    closed_loop:\n      max_retries: 1\n    checks:\n      - {name: widgets, type: custom, command: sh check.sh}\n",
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = ws.cmd().env("PATH", path).args(["run", "p", "--task", "fix it", "--json"]).output().expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let read = |f: &str| std::fs::read_to_string(out_dir.path().join(f)).expect("read");
    assert_eq!(read("call-0.argv"), "-p --output-format json --permission-mode acceptEdits --model sonnet\n");
    assert_eq!(read("call-1.argv"), "-p --output-format json --permission-mode plan --model sonnet\n");
    let question = read("call-1.stdin");
    assert!(
        question.contains("<output>\ncompiling widgets\nquux: the widget is not ready (slot 7)\n</output>"),
        "{question}"
    );
    assert!(question.contains("\"required\":[\"category\",\"signal\",\"reason\"]"), "{question}");
    assert!(!out_dir.path().join("call-2.argv").exists(), "asked once");
    let journal = ws.journal(result["run_id"].as_str().expect("run id"));
    let failure =
        journal.iter().find(|e| e["event"]["type"] == "evaluated").expect("evaluated")["event"]["failure"].clone();
    assert_eq!((&failure["pattern"], &failure["classified_by"]), (&json!("runtime-error"), &json!("agent")));
    let used: Vec<u64> = journal
        .iter()
        .filter(|e| e["event"]["type"] == "usage_recorded")
        .map(|e| e["event"]["usage"]["input_tokens"].as_u64().expect("tokens"))
        .collect();
    assert_eq!(used, vec![100, 420]);
    // Its prompt and answer are kept apart from the attempt's.
    let run_dir = ws.path().join(".loopwright/state/runs").join(result["run_id"].as_str().expect("id"));
    assert!(run_dir.join("prompts/fix-1-classify.md").exists());
    assert!(run_dir.join("prompts/fix-1.md").exists());
}
