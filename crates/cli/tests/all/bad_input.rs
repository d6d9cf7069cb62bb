//! Bad input: one clear message naming what is wrong and where, exit 2, nothing half-written.

use pretty_assertions::assert_eq;

use crate::support::Ws;

fn fails(ws: &Ws, args: &[&str]) -> String {
    let (code, stdout, stderr) = ws.run(args);
    assert_eq!(code, 2, "args {args:?}\nstdout: {stdout}\nstderr: {stderr}");
    assert_eq!(stdout, "");
    stderr
}

#[test]
fn a_missing_pipeline_names_what_is_available() {
    let ws = Ws::seed();
    let stderr = fails(&ws, &["run", "nope"]);
    assert!(stderr.starts_with("loopwright: error: Pipeline 'nope' not found in "), "{stderr}");
    assert!(stderr.ends_with("; available: bug-fix, example, full-feature\n"), "{stderr}");
    assert!(!ws.has_store());
    let stderr = fails(&ws, &["run", "missing/file.yml"]);
    assert!(stderr.contains("Pipeline 'missing/file.yml' not found: no file"), "{stderr}");
}

#[test]
fn a_yaml_error_is_shown_at_its_line_and_nothing_runs() {
    let ws = Ws::seed();
    ws.write(
        ".loopwright/pipelines/bad.yml",
        "name: bad\ndescription: d\nversion: 1\nstages:\n  - id: a\n    agent: [shell\n",
    );
    let stderr = fails(&ws, &["run", "bad"]);
    assert!(stderr.contains("╭─[.loopwright/pipelines/bad.yml:7:1]") || stderr.contains("bad.yml:6:"), "{stderr}");
    assert!(!ws.has_store());
}

#[test]
fn an_unknown_agent_is_a_validation_error() {
    let ws = Ws::seed();
    ws.write(".loopwright/pipelines/x.yml", "name: x\ndescription: d\nversion: 1\nstages:\n  - id: a\n    agent: ghost\n    mode: plan\n    description: d\n");
    let stderr = fails(&ws, &["run", "x"]);
    assert!(stderr.contains("stage `a`, field `agent`: Agent 'ghost' not found for stage 'a'"), "{stderr}");
    assert!(stderr.contains("╭─[.loopwright/pipelines/x.yml:6:12]"), "{stderr}");
    assert!(!ws.has_store());
}

#[test]
fn bad_vars_inputs_and_stage_names_are_usage_errors() {
    let ws = Ws::seed();
    let stderr = fails(&ws, &["run", "bug-fix", "--var", "colour=red"]);
    assert_eq!(
        stderr,
        "loopwright: error: --var colour: unknown variable `colour`; known: complexity, task_type, tags, always_include\n"
    );
    let stderr = fails(&ws, &["run", "bug-fix", "--var", "complexity"]);
    assert_eq!(stderr, "loopwright: error: --var `complexity`: expected KEY=VALUE\n");
    let stderr = fails(&ws, &["run", "bug-fix", "--var", "complexity=huge"]);
    assert_eq!(stderr, "loopwright: error: --var complexity=huge: expected low, medium or high\n");
    let stderr = fails(&ws, &["run", "bug-fix", "--input", "error_context=@/no/such/file"]);
    assert!(
        stderr.starts_with("loopwright: error: --input error_context=@/no/such/file: cannot read /no/such/file:"),
        "{stderr}"
    );
    let stderr = fails(&ws, &["run", "bug-fix", "--start-from", "deploy"]);
    assert_eq!(
        stderr,
        "loopwright: error: --start-from deploy: pipeline `bug-fix` has no stage `deploy`; its stages: diagnose, fix, verify\n"
    );
    let stderr = fails(&ws, &["run", "bug-fix", "--task-id", "../etc"]);
    assert!(stderr.contains("--task-id `../etc`"), "{stderr}");
    assert!(!ws.has_store());
}

#[test]
fn an_unknown_run_id_is_a_usage_error() {
    let ws = Ws::seed();
    let stderr = fails(&ws, &["status", "nope"]);
    assert!(stderr.starts_with("loopwright: error: no runs yet in "), "{stderr}");
    let (code, _, _) = ws.run(&["run", "bug-fix", "--quiet"]);
    assert_eq!(code, 0);
    for cmd in [&["status", "nope"][..], &["logs", "nope"], &["resume", "nope"], &["approve", "nope"]] {
        let stderr = fails(&ws, cmd);
        assert_eq!(
            stderr,
            "loopwright: error: no run `nope` in this workspace (see `loopwright status` for recent runs)\n"
        );
    }
}

#[test]
fn an_unwritable_state_directory_stops_before_running() {
    let ws = Ws::seed();
    // A file where the state directory should be: no user can write into it, not even root.
    ws.write(".loopwright/state", "not a directory");
    let stderr = fails(&ws, &["run", "bug-fix"]);
    assert!(stderr.starts_with("loopwright: error: cannot create the state directory"), "{stderr}");
    assert_eq!(ws.read(".loopwright/state"), "not a directory");
}

#[test]
fn a_bad_config_file_names_its_line() {
    let ws = Ws::seed();
    std::fs::write(ws.path().join(".loopwright/config.toml"), "[defaults]\nrunnr = \"command\"\n").expect("config");
    let stderr = fails(&ws, &["validate"]);
    assert!(stderr.contains("╭─[.loopwright/config.toml:2:1]"), "{stderr}");
    assert!(stderr.contains("unknown field `runnr`"), "{stderr}");
}

#[test]
fn validate_checks_the_failure_pattern_file_too() {
    let ws = Ws::seed();
    ws.write(".loopwright/failure-patterns.yml", "patterns:\n  - id: x\n    exit_codes: [75, SIGNOPE]\n");
    let (code, _, stderr) = ws.run(&["validate"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains(".loopwright/failure-patterns.yml:3:22"), "{stderr}");
    ws.write(".loopwright/failure-patterns.yml", "patterns:\n  - id: broken\n    signals: ['/unclosed(/']\n");
    let (code, _, stderr) = ws.run(&["validate"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("× pattern `broken`: signal /unclosed(/: regex parse error")
            && stderr.contains("in .loopwright/failure-patterns.yml"),
        "{stderr}"
    );
    ws.write(
        ".loopwright/failure-patterns.yml",
        "patterns:\n  - id: deploy\n    generic: true\n    signals: ['deploy failed']\n",
    );
    let (code, _, stderr) = ws.run(&["validate"]);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_misspelt_strategy_is_refused_where_it_is_written_never_replaced_at_run_time() {
    let ws = Ws::seed();
    ws.write(
        ".loopwright/failure-patterns.yml",
        "patterns:\n  - id: deploy\n    signals: ['deploy failed']\n    strategy: retry_with_backof\n    alternatives: [context_expand]\n",
    );
    for args in [&["validate"][..], &["run", "example"][..]] {
        let (code, _, stderr) = ws.run(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(".loopwright/failure-patterns.yml:4:15"), "{args:?}: {stderr}");
        assert!(
            stderr.contains("field `patterns[0].strategy`: unknown strategy `retry_with_backof` (did you mean `retry_with_backoff`?)"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn an_agent_cli_that_is_not_installed_is_refused_before_anything_runs() {
    let ws = Ws::seed();
    // A Claude Code sub-agent file runs with the `claude` preset: without `claude` installed,
    // the run is refused with how to install it (the HTTP agent needs nothing installed).
    ws.write(".claude/agents/reviewer.md", "---\nname: reviewer\ndescription: Reviews\nmodel: sonnet\n---\nReview.\n");
    ws.write(
        ".loopwright/agents/api.md",
        "---\nrunner: openai\nmodel: gpt-4o\nbase_url: http://127.0.0.1:9/v1\n---\nx\n",
    );
    ws.write(
        ".loopwright/pipelines/r.yml",
        "name: r\ndescription: d\nversion: 1\nstages:\n  - id: review\n    agent: reviewer\n    mode: plan\n    description: d\n  - id: fix\n    agent: api\n    mode: agent\n    description: d\n",
    );
    let out = ws.cmd().env("PATH", "/usr/bin:/bin").args(["run", "r"]).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "loopwright: error: stage `review` uses agent `reviewer` (.claude/agents/reviewer.md, `runner: claude`), but `claude` is not on PATH (install it: npm install -g @anthropic-ai/claude-code)\n"
    );
    assert!(!ws.has_store());
}

#[test]
fn a_worker_without_repositories_it_may_run_does_not_start() {
    let ws = Ws::empty();
    let store = "postgres://lw:secret@127.0.0.1:1/loopwright";
    let (code, out, err) = ws.run(&["worker", "--store", store]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(err.contains("a worker runs only the repositories it is told it may: --repo URL"), "{err}");
    assert!(!err.contains("secret"), "{err}");
    let (code, _, err) = ws.run(&["worker", "--store", store, "--repo", "--upload-pack=x"]);
    assert_eq!(code, 2, "{err}");
    // `[worker] repos` in the workspace's config.toml says it too: then the store is tried.
    ws.write(".loopwright/config.toml", "[worker]\nrepos = [\"/srv/repo.git\"]\n");
    let (code, _, err) =
        ws.run(&["worker", "--store", store, "--cache", &ws.path().join("cache").display().to_string()]);
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("--repo URL") && err.contains("postgres://lw:***@127.0.0.1:1/loopwright"), "{err}");
}

#[test]
fn a_fifo_among_the_learned_samples_hangs_nothing() {
    let ws = Ws::empty();
    let dir = ws.path().join(".loopwright/state/learned");
    std::fs::create_dir_all(&dir).expect("mkdir");
    nix::unistd::mkfifo(&dir.join("test-failure-0000.json"), nix::sys::stat::Mode::from_bits_truncate(0o600))
        .expect("mkfifo");
    let child = crate::support::spawn(&ws, &["patterns", "learned", "--json"]);
    let started = std::time::Instant::now();
    let (code, out, err) = crate::support::finish(child);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "[]");
    assert!(err.contains("test-failure-0000.json: not a regular file"), "{err}");
}
