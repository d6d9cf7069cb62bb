//! What loopwright enforces rather than trusts: plan mode is read-only, secrets stay out of
//! the state files, budgets stop a run.

use serde_json::json;

use crate::support::{Ws, files_under, st, stages};

#[test]
fn a_plan_mode_stage_that_changes_files_is_restored_and_fails_without_retry() {
    let ws = Ws::empty();
    ws.write("src/app.txt", "original\n");
    ws.write("notes/keep.txt", "keep\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: review\n    description: Only read\n    agent: shell\n    mode: plan\n    retry: {max_attempts: 3, backoff: fixed, initial_delay_seconds: 1}\n    run: echo changed > src/app.txt; rm notes/keep.txt; echo new > created.txt; echo reviewed\n  - id: next\n    description: d\n    agent: shell\n    mode: plan\n    run: echo never\n",
    );
    let (code, result, stderr) = ws.json(&["run", "p"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(stages(&result), vec![st("review", "failed", 1, None)]);
    assert_eq!(result["failed_stage"], "review");
    // Modified restored, deleted recreated, created removed.
    assert_eq!(ws.read("src/app.txt"), "original\n");
    assert_eq!(ws.read("notes/keep.txt"), "keep\n");
    assert!(!ws.path().join("created.txt").exists());
    let (_, status, _) = ws.run(&["status", "latest"]);
    assert!(
        status.contains("plan-mode stage changed files: created.txt (created), notes/keep.txt (deleted), src/app.txt (modified) (plan mode is read-only; the files were restored)"),
        "{status}"
    );
    let (_, logs, _) = ws.run(&["logs", "latest"]);
    assert!(logs.contains("review: attempt 1 failed after"), "{logs}");
    assert!(logs.contains("(security_violation): plan-mode stage changed files"), "{logs}");
    // A plan stage that only reads (and writes tool caches) passes.
    let ws = Ws::empty();
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: review\n    description: Only read\n    agent: shell\n    mode: plan\n    run: mkdir -p .pytest_cache && echo x > .pytest_cache/v; ls\n",
    );
    let (code, result, stderr) = ws.json(&["run", "p"]);
    assert_eq!((code, &result["status"]), (0, &json!("success")), "{stderr}");
}

#[test]
fn an_api_key_in_the_environment_appears_in_no_state_file() {
    const KEY: &str = "sk-loopwright-test-SECRET-4242";
    let ws = Ws::empty();
    // An agent that leaks its key everywhere it can: output, stderr, a declared output, and a
    // failing first attempt; a closed-loop check that prints it too.
    ws.write(
        ".loopwright/agents/leaky.md",
        "---\nrunner: command\ncommand: [\"sh\", \".loopwright/agents/leaky.sh\"]\n---\nYou leak.\n",
    );
    ws.write(
        ".loopwright/agents/leaky.sh",
        "cat > /dev/null\necho \"using $OPENAI_API_KEY\" >&2\nif [ \"$LOOPWRIGHT_ATTEMPT\" = 1 ]; then echo \"failed with $OPENAI_API_KEY\"; exit 1; fi\necho \"## notes\"\necho \"the key is $OPENAI_API_KEY\"\n",
    );
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: first\n    description: d\n    agent: leaky\n    mode: agent\n    outputs: [notes]\n    retry: {max_attempts: 2, backoff: fixed, initial_delay_seconds: 1}\n  - id: second\n    description: d\n    agent: leaky\n    mode: agent\n    inputs: [notes]\n    skill: closed-loop-execution\n    closed_loop: {max_retries: 2}\n    checks:\n      - {name: leak, type: command, command: 'echo \"check sees $OPENAI_API_KEY\"; exit 1'}\n",
    );
    let out = ws
        .cmd()
        .env("OPENAI_API_KEY", KEY)
        .args(["run", "p", "--task", &format!("do not print {KEY}"), "--input", &format!("extra={KEY}"), "--json"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(result["artifacts"]["notes"], "the key is [REDACTED:OPENAI_API_KEY]");
    // Nor is any part of the key in the task's id (made from the task's words).
    let task_id = result["task_id"].as_str().expect("task id");
    assert!(task_id.ends_with("-do-not-print-redacted-openai"), "{task_id}");
    let files = files_under(&ws.path().join(".loopwright/state"));
    assert!(files.iter().any(|f| f.ends_with("state.db")) && files.len() > 10, "{files:?}");
    for file in files {
        let bytes = std::fs::read(&file).expect("read");
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(KEY), "{} holds the key", file.display());
    }
    // The -wal file is checkpointed into state.db or still beside it; both were scanned.
    assert!(!String::from_utf8_lossy(&out.stdout).contains(KEY));
    assert!(!String::from_utf8_lossy(&out.stderr).contains(KEY), "the progress lines print no key either");
}

#[test]
fn budgets_stop_the_run_before_the_attempt_that_would_exceed_them() {
    // Invocations (run) and cost (stage, from config.toml prices).
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "[prices.\"test-model\"]\ninput_per_mtok = 1000.0\noutput_per_mtok = 2000.0\n");
    ws.write(".loopwright/agents/dev.md", "---\nrunner: command\nmodel: test-model\ncommand: [\"sh\", \"-c\", \"cat > /dev/null; echo done with the work\"]\n---\nYou work.\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nbudget: {invocations: 2}\nstages:\n  - {id: one, description: d, agent: dev, mode: agent}\n  - {id: two, description: d, agent: dev, mode: agent}\n  - {id: three, description: d, agent: dev, mode: agent}\n",
    );
    let (code, result, stderr) = ws.json(&["run", "p"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        stages(&result),
        vec![st("one", "success", 1, None), st("two", "success", 1, None), st("three", "failed", 0, None)]
    );
    let (_, status, _) = ws.run(&["status", "latest"]);
    assert!(status.contains("run invocation budget exhausted: 2 of 2 agent invocations made"), "{status}");
    assert!(status.contains("2 agent invocations of 2"), "{status}");
    let (_, logs, _) = ws.run(&["logs", "latest"]);
    assert!(logs.contains("one: attempt 1 used"), "{logs}");
    assert!(logs.contains("(counted by loopwright), $"), "{logs}");

    ws.write(
        ".loopwright/pipelines/c.yml",
        "name: c\ndescription: d\nversion: 1\nstages:\n  - id: one\n    description: d\n    agent: dev\n    mode: agent\n    outputs: [never, nope]\n    retry: {max_attempts: 3, backoff: fixed, initial_delay_seconds: 1}\n    budget: {cost_usd: 0.01}\n",
    );
    let (code, result, stderr) = ws.json(&["run", "c"]);
    assert_eq!(code, 1, "{stderr}");
    // The first attempt (a partial failure: no `## never`) spent more than a cent.
    assert_eq!(stages(&result), vec![st("one", "failed", 1, None)]);
    let (_, status, _) = ws.run(&["status", "latest"]);
    assert!(status.contains("stage `one` cost budget exhausted: $0."), "{status}");

    // Time: the attempt is cut at what is left of the run's time budget.
    let ws = Ws::empty();
    ws.write(
        ".loopwright/pipelines/t.yml",
        "name: t\ndescription: d\nversion: 1\nbudget: {wall_minutes: 0.02}\nstages:\n  - id: slow\n    description: d\n    agent: shell\n    mode: agent\n    run: sleep 30\n    retry: {max_attempts: 3, backoff: fixed, initial_delay_seconds: 1}\n",
    );
    let started = std::time::Instant::now();
    let (code, result, stderr) = ws.json(&["run", "t"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "the sleep was cut short");
    assert_eq!(stages(&result), vec![st("slow", "failed", 1, None)]);
    let (_, status, _) = ws.run(&["status", "latest"]);
    assert!(status.contains("run time budget exhausted"), "{status}");
}

#[test]
fn a_commit_a_person_makes_while_a_plan_stage_reads_is_kept_and_a_stages_rewrite_is_kept_aside() {
    // Without a sandbox, the plan stage is watched; a person commits in a terminal meanwhile.
    let ws = crate::support::Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"off\"\n");
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.write("notes.txt", "first\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: read\n    description: d\n    agent: shell\n    mode: plan\n    run: \"while [ ! -e .loopwright/state/go ]; do sleep 0.05; done; cat notes.txt\"\n",
    );
    ws.init_git();
    let child = crate::support::spawn(&ws, &["run", "p", "--json"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while crate::support::processes_with("while [ ! -e .loopwright/state/go ]").is_empty() {
        assert!(std::time::Instant::now() < deadline, "the stage never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    ws.write("notes.txt", "second\n");
    ws.git(&["commit", "--quiet", "-am", "a person's commit"]);
    let theirs = ws.git(&["rev-parse", "HEAD"]).trim().to_owned();
    ws.write(".loopwright/state/go", "");
    let (code, out, err) = crate::support::finish(child);
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(ws.git(&["rev-parse", "HEAD"]).trim(), theirs, "the person's commit was undone");
    assert_eq!(ws.read("notes.txt"), "second\n");
    let run = serde_json::from_str::<serde_json::Value>(&out).expect("json")["run_id"].as_str().expect("id").to_owned();
    let kept: Vec<serde_json::Value> =
        ws.journal(&run).into_iter().map(|e| e["event"].clone()).filter(|e| e["type"] == "commits_kept").collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0]["commits"][0].as_str().is_some_and(|c| c.ends_with(" a person's commit")), "{kept:?}");

    // A plan stage that rewrites the last commit is refused, its branch put back, and the
    // commit it made kept aside rather than lost.
    ws.write(
        ".loopwright/pipelines/q.yml",
        "name: q\ndescription: d\nversion: 1\nstages:\n  - id: sneak\n    description: d\n    agent: shell\n    mode: plan\n    run: \"git -c user.name=x -c user.email=x@x commit --quiet --amend -m rewritten\"\n",
    );
    let (code, result, err) = ws.json(&["run", "q"]);
    assert_eq!((code, result["status"].clone()), (1, serde_json::json!("failed")), "{err}");
    assert_eq!(ws.git(&["rev-parse", "HEAD"]).trim(), theirs);
    let undone = ws.git(&["for-each-ref", "--format=%(refname) %(subject)", "refs/loopwright/undone/"]);
    assert!(undone.trim_end().ends_with("/main rewritten"), "{undone}");
    let status = ws.run(&["status", "latest"]).1;
    assert!(status.contains("refs/heads/main was ") && status.contains("kept as refs/loopwright/undone/"), "{status}");
}
