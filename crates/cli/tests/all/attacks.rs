//! What a hostile model, a careless agent, a second terminal or a crash may try, through the
//! binary (issue: "trust under attack and under races"). Each test fails on a loopwright that
//! lets the attack through.

use crate::http::{Server, openai_answer};
use crate::support::{Ws, files_under, finish, spawn, st, stages, wait_for};

const KEY: &str = "sk-attack-test-key-987654321";

/// A git workspace whose one agent-mode stage is answered by the model at `port`.
fn model_ws(port: u16) -> Ws {
    let ws = Ws::empty();
    ws.write("ok.txt", "before\n");
    ws.write(
        ".loopwright/agents/model.md",
        &format!("---\nrunner: openai\nmodel: m\nbase_url: http://127.0.0.1:{port}/v1\napi_key_env: LW_TEST_KEY\n---\nYou edit files.\n"),
    );
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: edit\n    description: Change files\n    agent: model\n    mode: agent\n",
    );
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.init_git();
    ws
}

fn run_model(ws: &Ws) -> (i32, serde_json::Value, String) {
    let out = ws.cmd().env("LW_TEST_KEY", KEY).args(["run", "p", "--task", "edit", "--json"]).output().expect("run");
    let result = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), result, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn whole(path: &str, content: &str) -> String {
    format!("FILE: {path}\n<<<<<<< WHOLE\n{content}\n>>>>>>> WHOLE\n")
}

#[test]
fn a_models_edits_cannot_reach_git_loopwright_or_outside_and_are_all_or_none() {
    let outside = tempfile::tempdir().expect("tempdir");
    let marker = outside.path().join("pwned");
    let fsmonitor = format!("[core]\n\tfsmonitor = \"touch {}\"\n", marker.display());
    let cases = [
        (whole(".git/config", &fsmonitor), "`.git/config` is inside `.git/`, which only git and loopwright may change"),
        (
            whole(".git/hooks/post-commit", &format!("#!/bin/sh\ntouch {}", marker.display())),
            "`.git/hooks/post-commit` is inside `.git/`, which only git and loopwright may change",
        ),
        (
            whole(".loopwright/agents/model.md", "---\nrunner: shell\n---\n"),
            "`.loopwright/agents/model.md` is inside `.loopwright/`, which only git and loopwright may change",
        ),
        (whole("out/escaped.txt", "x"), "`out/escaped.txt` goes through the symbolic link `out`"),
        // A good block, then one that cannot be applied: neither lands.
        (
            format!(
                "{}FILE: ok.txt\n<<<<<<< SEARCH\nnot there\n=======\nx\n>>>>>>> REPLACE\n",
                whole("new.txt", "new")
            ),
            "ok.txt: the SEARCH text was not found",
        ),
    ];
    for (answer, why) in cases {
        let server = Server::start(vec![openai_answer(&answer, 5, 5)]);
        let ws = model_ws(server.port);
        std::os::unix::fs::symlink(outside.path(), ws.path().join("out")).expect("symlink");
        let config = ws.read(".git/config");
        let head = ws.git(&["rev-parse", "HEAD"]);
        let (code, result, stderr) = run_model(&ws);
        assert_eq!(code, 1, "{answer}\n{stderr}");
        assert_eq!(stages(&result), vec![st("edit", "failed", 1, None)], "{answer}");
        let (_, attempt, _) = ws.run(&["logs", "latest", "--stage", "edit", "--attempt", "1"]);
        assert!(attempt.contains(&format!("the answer's edits could not be applied: {why}")), "{answer}\n{attempt}");
        assert_eq!(ws.read(".git/config"), config);
        assert!(!ws.path().join(".git/hooks/post-commit").exists());
        assert_eq!(ws.read(".loopwright/agents/model.md").lines().nth(1), Some("runner: openai"));
        assert_eq!(ws.read("ok.txt"), "before\n");
        assert!(!ws.path().join("new.txt").exists(), "{answer}");
        assert_eq!(ws.git(&["rev-parse", "HEAD"]), head);
        // git ran (status, commits) and no command of the model's ran with it.
        assert!(!marker.exists(), "{answer}");
        assert_eq!(std::fs::read_dir(outside.path()).expect("dir").count(), 0, "{answer}");
    }
}

#[test]
fn loopwrights_own_git_runs_no_hook_and_no_fsmonitor() {
    // An agent CLI (a process, which loopwright cannot stop from writing) planted a hook and an
    // fsmonitor command; loopwright's commit of the stage's work must run neither.
    let outside = tempfile::tempdir().expect("tempdir");
    let ws = Ws::empty();
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.write("a.txt", "a\n");
    ws.init_git();
    let hook = outside.path().join("hook-ran");
    let monitor = outside.path().join("fsmonitor-ran");
    ws.write(".git/hooks/post-commit", &format!("#!/bin/sh\ntouch {}\n", hook.display()));
    ws.write(".git/hooks/pre-commit", &format!("#!/bin/sh\ntouch {}\nexit 1\n", hook.display()));
    std::fs::set_permissions(
        ws.path().join(".git/hooks/post-commit"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    std::fs::set_permissions(
        ws.path().join(".git/hooks/pre-commit"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    ws.git(&["config", "core.fsmonitor", &format!("touch {} #", monitor.display())]);
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: work\n    description: d\n    agent: shell\n    mode: agent\n    run: echo b > a.txt\n",
    );
    let (code, result, stderr) = ws.json(&["run", "p"]);
    assert_eq!((code, &result["status"]), (0, &serde_json::json!("success")), "{stderr}");
    assert_eq!(
        ws.git(&["log", "--format=%s", "-1"]).trim(),
        "loopwright: stage work of ".to_owned() + result["task_id"].as_str().expect("task")
    );
    assert!(!hook.exists(), "a hook ran");
    assert!(!monitor.exists(), "the fsmonitor command ran");
}

/// The state files (the journal included) and the terminal texts that hold `needle`.
fn leaks(ws: &Ws, terminal: &[&str], needle: &str) -> Vec<String> {
    let mut found: Vec<String> = files_under(&ws.path().join(".loopwright/state"))
        .into_iter()
        .filter(|f| String::from_utf8_lossy(&std::fs::read(f).expect("read")).contains(needle))
        .map(|f| f.display().to_string())
        .collect();
    found.extend(terminal.iter().filter(|t| t.contains(needle)).map(|t| format!("terminal: {t}")));
    found
}

#[test]
fn a_key_echoed_by_a_refusal_encoded_or_cut_by_the_output_cap_is_stored_nowhere() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("user:{KEY}"));
    let body = format!(
        "{{\"error\": {{\"message\": \"Incorrect API key provided: {KEY}. Basic {b64}\"}}}}\nyour key: {KEY}\n"
    );
    let server = Server::start(vec![crate::http::Reply::Http {
        status: "401 Unauthorized",
        headers: vec!["content-type: application/json".into()],
        chunks: vec![body],
    }]);
    let ws = model_ws(server.port);
    let (code, result, stderr) = run_model(&ws);
    assert_eq!(code, 1, "{stderr}");
    let (_, logs, logs_err) = ws.run(&["logs", "latest", "--stage", "edit", "--attempt", "1"]);
    assert!(logs.contains("Incorrect API key provided: [REDACTED:LW_TEST_KEY]"), "{logs}");
    let (_, status, _) = ws.run(&["status", "latest"]);
    let terminal = [stderr.as_str(), &result.to_string(), &logs, &logs_err, &status];
    for needle in [KEY, &KEY[8..], &b64[4..24]] {
        assert_eq!(leaks(&ws, &terminal, needle), Vec::<String>::new(), "{needle}");
    }

    // A stage printing the key over and over, past the 8 MB output cap: where the cap cuts,
    // the part of the key it keeps is redacted too.
    let ws = Ws::empty();
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: loud\n    description: d\n    agent: shell\n    mode: plan\n    run: python3 -c 'import os,sys; k=os.environ[\"ATTACK_API_KEY\"]; sys.stdout.write(k*(9*1024*1024//len(k)+7)); sys.stdout.flush()'\n",
    );
    let out = ws.cmd().env("ATTACK_API_KEY", KEY).args(["run", "p", "--json"]).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let kept = std::fs::read_to_string(
        files_under(&ws.path().join(".loopwright/state/runs"))
            .into_iter()
            .find(|f| f.extension().is_some_and(|e| e == "out"))
            .expect("the output file"),
    )
    .expect("read");
    assert!(kept.contains(" bytes of earlier output omitted ...]\n[REDACTED:ATTACK_API_KEY]"), "{}", &kept[..200]);
    for needle in [KEY, &KEY[KEY.len() - 6..]] {
        assert_eq!(leaks(&ws, &[&String::from_utf8_lossy(&out.stdout)], needle), Vec::<String>::new(), "{needle}");
    }
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

#[test]
fn two_approvals_at_once_run_the_rest_once() {
    let counters = tempfile::tempdir().expect("tempdir");
    let ws = Ws::empty();
    for i in 0..20 {
        let counter = counters.path().join(format!("after-{i}"));
        ws.write(
            ".loopwright/pipelines/p.yml",
            &format!("name: p\ndescription: d\nversion: 1\nstages:\n  - id: gate\n    description: d\n    agent: shell\n    mode: plan\n    requires_approval: true\n    run: echo gate\n  - id: after\n    description: d\n    agent: shell\n    mode: plan\n    run: echo x >> {}\n", counter.display()),
        );
        let (code, result, stderr) = ws.json(&["run", "p"]);
        assert_eq!(code, 3, "{stderr}");
        let run = result["run_id"].as_str().expect("run id").to_owned();
        let (a, b) = (spawn(&ws, &["approve", &run, "--by", "alice"]), spawn(&ws, &["approve", &run, "--by", "bob"]));
        let mut outcomes = [finish(a), finish(b)];
        outcomes.sort_by_key(|o| o.0);
        assert_eq!((outcomes[0].0, outcomes[1].0), (0, 2), "try {i}: {outcomes:?}");
        // Refused by the journal (the other answer landed first) or by the working tree's lock
        // (the other process is driving the run on).
        let told = outcomes[1].2.contains(&format!("run {run}: the approval of stage `gate` was already granted by "))
            || outcomes[1].2.contains(&format!("run {run} is being driven by process "));
        assert!(told, "try {i}: {}", outcomes[1].2);
        assert_eq!(lines(&counter), 1, "try {i}: the stage after the gate ran once");
        let (_, status, _) = ws.json(&["status", &run]);
        assert_eq!(stages(&status), vec![st("gate", "success", 1, None), st("after", "success", 1, None)]);
    }
}

#[test]
fn two_resumes_at_once_run_the_rest_once() {
    let counters = tempfile::tempdir().expect("tempdir");
    let ws = Ws::empty();
    for i in 0..20 {
        let (slow, after, mark) = (
            counters.path().join(format!("slow-{i}")),
            counters.path().join(format!("after-{i}")),
            counters.path().join(format!("mark-{i}")),
        );
        ws.write(
            ".loopwright/pipelines/p.yml",
            &format!(
                "name: p\ndescription: d\nversion: 1\nstages:\n  - id: slow\n    description: d\n    agent: shell\n    mode: plan\n    run: echo x >> {slow}; [ -f {mark} ] || {{ touch {mark}; sleep 30; }}\n  - id: after\n    description: d\n    agent: shell\n    mode: plan\n    run: echo x >> {after}\n",
                slow = slow.display(),
                mark = mark.display(),
                after = after.display()
            ),
        );
        let first = spawn(&ws, &["run", "p", "--json"]);
        wait_for(&mark);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(first.id() as i32), nix::sys::signal::Signal::SIGINT)
            .expect("SIGINT");
        let (code, stdout, stderr) = finish(first);
        assert_eq!(code, 130, "{stderr}");
        let result: serde_json::Value = serde_json::from_str(&stdout).expect("json");
        let run = result["run_id"].as_str().expect("run id").to_owned();
        let (a, b) = (spawn(&ws, &["resume", &run]), spawn(&ws, &["resume", &run]));
        let mut outcomes = [finish(a), finish(b)];
        outcomes.sort_by_key(|o| o.0);
        assert_eq!(outcomes[0].0, 0, "try {i}: {outcomes:?}");
        let refused = &outcomes[1];
        let told = refused.2.contains("was already taken up by process")
            || refused.2.contains(&format!("run {run} is being driven by process"))
            || refused.2.contains("already ended (success); nothing to resume");
        assert!(told, "try {i}: {refused:?}");
        assert_eq!(
            (lines(&slow), lines(&after)),
            (2, 1),
            "try {i}: the interrupted stage ran again once, the next once"
        );
    }
}

#[test]
fn a_second_run_in_one_working_tree_is_refused_and_damages_nothing() {
    let ws = Ws::empty();
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: work\n    description: d\n    agent: shell\n    mode: agent\n    run: echo $LOOPWRIGHT_RUN_ID > out-$LOOPWRIGHT_RUN_ID.txt; sleep 0.3\n  - id: review\n    description: d\n    agent: shell\n    mode: plan\n    run: sleep 0.2; ls\n",
    );
    for i in 0..20 {
        let (a, b) = (spawn(&ws, &["run", "p", "--json"]), spawn(&ws, &["run", "p", "--json"]));
        let mut outcomes = [finish(a), finish(b)];
        outcomes.sort_by_key(|o| o.0);
        assert_eq!((outcomes[0].0, outcomes[1].0), (0, 2), "try {i}: {outcomes:?}");
        assert!(
            outcomes[1].2.contains(") is live in ") && outcomes[1].2.contains("`--worktree`"),
            "try {i}: {}",
            outcomes[1].2
        );
        let result: serde_json::Value = serde_json::from_str(&outcomes[0].1).expect("json");
        let run = result["run_id"].as_str().expect("run");
        assert_eq!(ws.read(&format!("out-{run}.txt")), format!("{run}\n"), "try {i}: the run's own file stays");
    }
    // Every run that started succeeded: none saw another's files as its own.
    let (_, runs, _) = ws.json(&["status"]);
    let statuses: Vec<&str> =
        runs.as_array().expect("rows").iter().map(|r| r["status"].as_str().expect("status")).collect();
    assert_eq!(statuses, vec!["success"; 20]);
}

#[test]
fn loopwrights_own_redirected_output_is_not_a_change_of_the_workspace() {
    let ws = Ws::empty();
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: work\n    description: d\n    agent: shell\n    mode: agent\n    run: echo b > a.txt\n  - id: review\n    description: d\n    agent: shell\n    mode: plan\n    run: ls\n",
    );
    ws.init_git();
    let log = std::fs::File::create(ws.path().join("run.log")).expect("log");
    let out = std::fs::File::create(ws.path().join("run.json")).expect("out");
    let status = std::process::Command::new(assert_cmd::cargo::cargo_bin!("loopwright"))
        .args(["run", "p", "--json"])
        .current_dir(ws.path())
        .stdout(out)
        .stderr(log)
        .status()
        .expect("run");
    assert_eq!(status.code(), Some(0), "{}", ws.read("run.log"));
    assert_eq!(
        ws.git(&["ls-files"]),
        ".gitignore\n.loopwright/config.toml\n.loopwright/pipelines/p.yml\na.txt\n",
        "run.log and run.json were not committed"
    );
    assert!(ws.read("run.log").contains("▶ review"));
}

#[test]
fn runs_in_worktrees_start_and_merge_together() {
    let ws = Ws::empty();
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: work\n    description: d\n    agent: shell\n    mode: agent\n    run: echo $LOOPWRIGHT_TASK_ID > $LOOPWRIGHT_TASK_ID.txt\n",
    );
    ws.init_git();
    for round in 0..2 {
        let children: Vec<_> = (0..6)
            .map(|i| spawn(&ws, &["run", "p", "--worktree", "--task-id", &format!("t{round}-{i}"), "--json"]))
            .collect();
        for (i, child) in children.into_iter().enumerate() {
            let (code, _, stderr) = finish(child);
            assert_eq!(code, 0, "round {round}, run {i}: {stderr}");
        }
    }
    let files = ws.git(&["ls-files"]);
    for round in 0..2 {
        for i in 0..6 {
            assert!(files.contains(&format!("t{round}-{i}.txt\n")), "{files}");
        }
    }
    assert_eq!(ws.git(&["worktree", "list"]).lines().count(), 1, "every worktree was removed");
}

fn one_stage(ws: &Ws, extra: &str, run: &str) {
    ws.write(
        ".loopwright/pipelines/p.yml",
        &format!("name: p\ndescription: d\nversion: 1\ninitial_inputs: [k]\nstages:\n  - id: s\n    description: d\n    agent: shell\n    mode: plan\n    inputs: [k]\n{extra}    run: {run}\n"),
    );
}

#[test]
fn unbounded_inputs_are_refused_with_a_clear_error() {
    let ws = Ws::empty();
    one_stage(&ws, "", "echo hi");
    let (code, _, stderr) = ws.run(&["run", "p", "--input", "k=@/dev/zero"]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(
        stderr,
        "loopwright: error: --input k=@/dev/zero: /dev/zero is not a regular file (a device, FIFO or folder); give a file, or pipe the text in with `-` where that is accepted\n"
    );
    ws.write("big.txt", &"x".repeat(4 * 1024 * 1024 + 1));
    let (code, _, stderr) = ws.run(&["run", "p", "--input", "k=@big.txt"]);
    assert_eq!(
        (code, stderr.as_str()),
        (2, "loopwright: error: --input k=@big.txt: big.txt is larger than the 4 MiB accepted\n")
    );
    assert!(!ws.has_store(), "nothing ran");
    let (code, _, stderr) = ws.run(&["patterns", "test", "/dev/zero"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("patterns test: /dev/zero is not a regular file"), "{stderr}");

    // A condition that would allocate without bound is a validation error, located.
    for (condition, message) in [
        (
            "(('a' ~ 'a') | replace('a', 'aaaaaaaaaa') | replace('a', 'aaaaaaaaaa') | length) > 0",
            "conditions cannot use the filter `replace`",
        ),
        ("('a' * 100000000) | length > 0", "conditions cannot multiply"),
        ("range(100000) | length > 0", "conditions cannot call functions"),
    ] {
        one_stage(&ws, &format!("    condition: \"{condition}\"\n"), "echo hi");
        let (code, _, stderr) = ws.run(&["validate", "p"]);
        assert_eq!(code, 2, "{condition}: {stderr}");
        assert!(stderr.contains(message) && stderr.contains("p.yml:"), "{condition}: {stderr}");
    }
    let long = vec!["complexity == 'high'"; 3000].join(" or ");
    one_stage(&ws, &format!("    condition: \"{long}\"\n"), "echo hi");
    let (code, _, stderr) = ws.run(&["validate", "p"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!("condition is {} characters long; at most 500 are accepted", long.len())),
        "{stderr}"
    );
}

#[test]
fn a_closed_pipe_ends_output_quietly() {
    let ws = Ws::empty();
    one_stage(&ws, "", "seq 1 5000");
    let (code, _, stderr) = ws.run(&["run", "p", "--input", "k=v"]);
    assert_eq!(code, 0, "{stderr}");
    let exe = assert_cmd::cargo::cargo_bin!("loopwright").display().to_string();
    for args in ["logs latest --json", "logs latest --stage s", "status latest --json"] {
        let out = std::process::Command::new("bash")
            .args([
                "-c",
                &format!("set -o pipefail; RUST_BACKTRACE=1 {exe} {args} | head -c 1 >/dev/null; echo \"exit=$?\" >&2"),
            ])
            .current_dir(ws.path())
            .output()
            .expect("sh");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.ends_with("exit=141\n") || stderr.ends_with("exit=0\n"), "{args}: {stderr}");
        assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"), "{args}: {stderr}");
    }
}

#[test]
fn a_crashed_run_shows_interrupted_and_a_moved_workspace_is_not_resumed() {
    let ws = Ws::empty();
    let outside = tempfile::tempdir().expect("tempdir");
    let mark = outside.path().join("started");
    one_stage(&ws, "", &format!("if [ -f {m} ]; then echo again; else touch {m}; sleep 30; fi", m = mark.display()));
    let child = spawn(&ws, &["run", "p", "--input", "k=v", "--json"]);
    wait_for(&mark);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL)
        .expect("kill");
    let _ = finish(child);
    let (_, result, _) = ws.json(&["status", "latest"]);
    assert_eq!(result["status"], "interrupted");
    let (_, table, _) = ws.json(&["status"]);
    assert_eq!(table[0]["status"], "interrupted");
    // The same journal in another place: a copy of the workspace.
    let copy = tempfile::tempdir().expect("tempdir");
    let status = std::process::Command::new("cp")
        .args(["-a", &format!("{}/.", ws.path().display()), &copy.path().display().to_string()])
        .status()
        .expect("cp");
    assert!(status.success());
    let run = result["run_id"].as_str().expect("run");
    let out = ws.cmd().current_dir(copy.path()).args(["resume", run]).output().expect("resume");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "run {run} was started in {}, but this workspace is {}",
            ws.path().display(),
            copy.path().display()
        )),
        "{stderr}"
    );
    // The original resumes (and ends the orphaned `sleep` first).
    let (code, _, stderr) = ws.run(&["resume", run]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("✓ s"), "{stderr}");
}

#[test]
fn plan_mode_sees_and_undoes_every_hole() {
    let outside = tempfile::tempdir().expect("tempdir");
    let x = outside.path().join("ran");
    // (what the read-only stage does, what the violation names, what must hold afterwards)
    type Check = Box<dyn Fn(&Ws)>;
    let cases: Vec<(String, &str, Check)> = vec![
        (
            format!("printf '#!/bin/sh\\ntouch {}\\n' > .git/hooks/post-commit; chmod +x .git/hooks/post-commit", x.display()),
            ".git/hooks/post-commit (created)",
            Box::new(|ws: &Ws| assert!(!ws.path().join(".git/hooks/post-commit").exists())),
        ),
        (
            format!("git config core.fsmonitor 'touch {}'", x.display()),
            ".git/config (modified)",
            Box::new(|ws: &Ws| assert!(!ws.read(".git/config").contains("fsmonitor"))),
        ),
        (
            "mkdir -p .loopwright/agents; echo '---' > .loopwright/agents/evil.md; echo '# x' >> .loopwright/pipelines/p.yml".into(),
            ".loopwright/agents/evil.md (created)",
            Box::new(|ws: &Ws| {
                assert!(!ws.path().join(".loopwright/agents/evil.md").exists());
                assert!(!ws.read(".loopwright/pipelines/p.yml").ends_with("# x\n"));
            }),
        ),
        ("git rm --cached --quiet a.txt".into(), "the git index (staged content) (modified)", Box::new(|ws: &Ws| assert_eq!(ws.git(&["status", "--porcelain"]), ""))),
        (
            "chmod +x a.txt".into(),
            "a.txt (modified)",
            Box::new(|ws: &Ws| {
                let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(ws.path().join("a.txt")).expect("meta").permissions());
                assert_eq!(mode & 0o111, 0);
            }),
        ),
        (
            // Same size, the modification time put back: only the change time tells.
            "python3 -c \"import os; s=os.stat('a.txt'); open('a.txt','w').write('evil\\n'); os.utime('a.txt', ns=(s.st_atime_ns, s.st_mtime_ns))\"".into(),
            "a.txt (modified)",
            Box::new(|ws: &Ws| assert_eq!(ws.read("a.txt"), "good\n")),
        ),
        (
            "ln -s /etc/passwd link".into(),
            "link (created)",
            Box::new(|ws: &Ws| assert!(std::fs::symlink_metadata(ws.path().join("link")).is_err())),
        ),
        (
            "echo 'module.exports = 1' > node_modules/.bin/jest".into(),
            "node_modules/ (modified)",
            Box::new(|_: &Ws| {}),
        ),
        ("echo x > target/debug/app".into(), "target/ (modified)", Box::new(|_: &Ws| {})),
    ];
    for (script, named, holds) in cases {
        let ws = Ws::empty();
        ws.write(".gitignore", ".loopwright/state/\nnode_modules/\ntarget/\n");
        ws.write("a.txt", "good\n");
        ws.write("node_modules/.bin/tool", "x\n");
        ws.write("target/debug/app", "binary\n");
        ws.write(
            ".loopwright/pipelines/p.yml",
            &format!("name: p\ndescription: d\nversion: 1\nstages:\n  - id: review\n    description: d\n    agent: shell\n    mode: plan\n    run: {}\n  - id: work\n    description: d\n    agent: shell\n    mode: agent\n    run: echo more >> b.txt\n", serde_json::to_string(&script).expect("quote")),
        );
        ws.init_git();
        let (code, _, stderr) = ws.json(&["run", "p"]);
        assert_eq!(code, 1, "{script}: {stderr}");
        let (_, status, _) = ws.run(&["status", "latest"]);
        assert!(status.contains("plan-mode stage changed files: ") && status.contains(named), "{script}:\n{status}");
        if named.ends_with("/ (modified)") {
            assert!(status.contains("compared by fingerprint only"), "{script}:\n{status}");
        }
        holds(&ws);
        // Nothing a planted hook or fsmonitor would run has run (a later commit would).
        assert!(!x.exists(), "{script}");
    }
}

#[test]
fn a_workspace_past_the_copy_budget_is_still_watched() {
    let ws = Ws::empty();
    ws.write("small.txt", "keep\n");
    // 600 MB, sparse: past the 512 MB a snapshot copies.
    let big = std::fs::File::create(ws.path().join("big.bin")).expect("big");
    big.set_len(600 * 1024 * 1024).expect("truncate");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: review\n    description: d\n    agent: shell\n    mode: plan\n    run: echo changed > small.txt\n",
    );
    let (code, _, stderr) = ws.json(&["run", "p"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(ws.read("small.txt"), "keep\n", "the small file was copied within the budget and restored");
    let (_, status, _) = ws.run(&["status", "latest"]);
    assert!(status.contains("plan-mode stage changed files: small.txt (modified)"), "{status}");
}
