//! The sandbox tried as a hostile agent would (SPEC §12, "What the sandbox guarantees,
//! exactly"), through the binary, as the user running the tests and — when that is root — as
//! an unprivileged user too (`setpriv` to `nobody`), since bubblewrap behaves differently for
//! each.

use std::path::{Path, PathBuf};

use pretty_assertions::assert_eq;

use crate::support::Ws;

/// Who runs loopwright.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    /// The user running the tests (root in CI).
    Me,
    /// `nobody`, switched to with `setpriv` (only when the tests run as root).
    Nobody,
}

const NOBODY: u32 = 65534;

/// Everyone the tests can run loopwright as here: `nobody` too when the tests run as root and
/// `nobody` can reach the binary and the build's temporary folder (a checkout under a private
/// folder is out of its reach: then said, and only the user runs).
fn everyone() -> Vec<Who> {
    if !nix::unistd::getuid().is_root() {
        return vec![Who::Me];
    }
    let reach = std::process::Command::new("setpriv")
        .args([format!("--reuid={NOBODY}"), format!("--regid={NOBODY}"), "--clear-groups".into(), "--".into()])
        .args(["sh", "-c", "test -x \"$0\" && test -x \"$1\""])
        .arg(assert_cmd::cargo::cargo_bin!("loopwright"))
        .arg(env!("CARGO_TARGET_TMPDIR"))
        .status()
        .is_ok_and(|s| s.success());
    if reach {
        vec![Who::Me, Who::Nobody]
    } else {
        eprintln!("note: nobody cannot reach the build ({}): run as this user only", env!("CARGO_TARGET_TMPDIR"));
        vec![Who::Me]
    }
}

/// A folder outside every private folder of the sandbox (`/tmp`, `/var/tmp`, homes): under the
/// build's own temporary folder, which a sandbox sees read-only. Anyone may write it, so only
/// the sandbox keeps a write out.
fn outside() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("outside-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    chmod(dir.path(), 0o777);
    dir
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Gives `path` and everything in it to `who`.
fn give(who: Who, path: &Path) {
    if who == Who::Nobody {
        let out = std::process::Command::new("chown")
            .args(["-R", &format!("{NOBODY}:{NOBODY}")])
            .arg(path)
            .output()
            .expect("chown");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// A home for `who` outside `/tmp`, holding a planted SSH key.
fn home(who: Who) -> tempfile::TempDir {
    let home = tempfile::Builder::new().prefix("home-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    std::fs::create_dir_all(home.path().join(".ssh")).expect("mkdir");
    std::fs::write(home.path().join(".ssh/id_ed25519"), "PLANTED-KEY\n").expect("plant");
    give(who, home.path());
    home
}

/// Runs loopwright as `who` in `ws` (given to `who` first) with `HOME` at `home` and `env`:
/// (exit code, stdout, stderr).
fn run_as(who: Who, ws: &Ws, home: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = match who {
        Who::Me => ws.cmd().args(args).env("HOME", home).envs(env.iter().copied()).output().expect("run"),
        Who::Nobody => {
            give(who, ws.path());
            std::process::Command::new("setpriv")
                .args([format!("--reuid={NOBODY}"), format!("--regid={NOBODY}"), "--clear-groups".into(), "--".into()])
                .arg(assert_cmd::cargo::cargo_bin!("loopwright"))
                .args(args)
                .current_dir(ws.path())
                .env_clear()
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .env("HOME", home)
                .env("NO_COLOR", "1")
                .env("USER", "nobody")
                .envs(env.iter().copied())
                .output()
                .expect("setpriv")
        }
    };
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A one-stage pipeline `p` of `mode` running `script` (written to the workspace as
/// `attack.sh`), sandboxed.
fn attack(ws: &Ws, mode: &str, script: &str) {
    ws.write(".loopwright/config.toml", "sandbox = \"required\"\n");
    ws.write("attack.sh", script);
    ws.write(
        ".loopwright/pipelines/p.yml",
        &format!(
            "name: p\ndescription: d\nversion: 1\nstages:\n  - id: attack\n    description: d\n    agent: shell\n    mode: {mode}\n    run: sh attack.sh\n"
        ),
    );
}

/// What the latest run's stage `stage` printed.
fn printed(ws: &Ws, stage: &str) -> String {
    ws.run(&["logs", "latest", "--stage", stage]).1
}

#[test]
fn nothing_inside_holds_a_capability_or_can_unmount_remount_or_leave_its_view() {
    let Some(_) = super::bwrap() else { return };
    for who in everyone() {
        for mode in ["agent", "plan"] {
            let (ws, home, out) = (Ws::empty(), home(who), outside());
            let escaped = out.path().join("escaped");
            let home_path = home.path().display();
            attack(
                &ws,
                mode,
                &format!(
                    "grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status
umount /tmp 2>/dev/null && echo UMOUNTED-TMP || echo umount-refused
umount {home_path} 2>/dev/null && echo UMOUNTED-HOME || echo umount-home-refused
mount -o remount,rw / 2>/dev/null && echo REMOUNTED || echo remount-refused
unshare -Urm true 2>/dev/null && echo UNSHARED || echo unshare-refused
unshare -U true 2>/dev/null && echo UNSHARED-USER || echo userns-refused
cat {home_path}/.ssh/id_ed25519 ~/.ssh/id_ed25519 2>/dev/null || echo key-hidden
echo escaped > {escaped} 2>/dev/null && echo WROTE-OUTSIDE || echo outside-refused
",
                    escaped = escaped.display()
                ),
            );
            let (code, _, err) = run_as(who, &ws, home.path(), &["run", "p"], &[]);
            let logs = printed(&ws, "attack");
            assert_eq!(code, 0, "{who:?} {mode}: {err}\n{logs}");
            for line in [
                "CapEff:\t0000000000000000",
                "CapBnd:\t0000000000000000",
                "NoNewPrivs:\t1",
                "umount-refused",
                "umount-home-refused",
                "remount-refused",
                "unshare-refused",
                "userns-refused",
                "key-hidden",
                "outside-refused",
            ] {
                assert!(logs.lines().any(|l| l == line), "{who:?} {mode}: no `{line}` in\n{logs}");
            }
            assert!(!logs.contains("PLANTED-KEY"), "{who:?} {mode}: {logs}");
            assert!(!escaped.exists(), "{who:?} {mode}: a write left the sandbox");
        }
    }
}

#[test]
fn the_copy_back_never_writes_through_a_link_the_attempt_planted() {
    let Some(_) = super::bwrap() else { return };
    for who in everyone() {
        let (ws, home, out) = (Ws::empty(), home(who), outside());
        let (victim, dir) = (out.path().join("victim"), out.path().join("dir"));
        std::fs::write(&victim, "keep\n").expect("write");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("victim"), "keep\n").expect("write");
        give(who, out.path());
        ws.write("a.txt", "before\n");
        ws.write(".loopwright/config.toml", "sandbox = \"required\"\n");
        // Stage one plants a link where the copy-back used to stage `a.txt` and a link to a
        // folder outside; stage two replaces that link by a real folder holding a file of the
        // outside folder's name.
        ws.write(
            ".loopwright/pipelines/p.yml",
            &format!(
                "name: p\ndescription: d\nversion: 1\nstages:\n  - id: plant\n    description: d\n    agent: shell\n    mode: agent\n    run: \"ln -s {victim} .a.txt.loopwright-copy && echo changed > a.txt && ln -s {dir} x\"\n  - id: swap\n    description: d\n    agent: shell\n    mode: agent\n    run: \"rm x && mkdir x && echo new > x/victim\"\n",
                victim = victim.display(),
                dir = dir.display()
            ),
        );
        let (code, _, err) = run_as(who, &ws, home.path(), &["run", "p"], &[]);
        assert_eq!(code, 0, "{who:?}: {err}");
        assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "keep\n", "{who:?}");
        assert_eq!(std::fs::read_to_string(dir.join("victim")).expect("victim"), "keep\n", "{who:?}");
        assert_eq!(ws.read("a.txt"), "changed\n", "{who:?}");
        assert!(std::fs::symlink_metadata(ws.path().join("x")).expect("x").is_dir(), "{who:?}");
        assert_eq!(ws.read("x/victim"), "new\n", "{who:?}");
    }
}

#[test]
fn set_id_bits_are_dropped_sparse_files_stay_sparse_and_a_layer_too_large_fails_its_attempt() {
    use std::os::unix::fs::MetadataExt;
    let Some(_) = super::bwrap() else { return };
    for who in everyone() {
        let (ws, home) = (Ws::empty(), home(who));
        attack(
            &ws,
            "agent",
            "printf '#!/bin/sh\\necho hi\\n' > tool && chmod 6755 tool && truncate -s 64M sparse && printf end >> sparse\n",
        );
        let (code, _, err) = run_as(who, &ws, home.path(), &["run", "p"], &[]);
        assert_eq!(code, 0, "{who:?}: {err}");
        let tool = std::fs::metadata(ws.path().join("tool")).expect("tool");
        assert_eq!(tool.mode() & 0o7777, 0o755, "{who:?}");
        let sparse = std::fs::metadata(ws.path().join("sparse")).expect("sparse");
        assert_eq!(sparse.len(), 64 * 1024 * 1024 + 3, "{who:?}");
        assert!(sparse.blocks() * 512 <= 64 * 1024, "{who:?}: {} bytes on disk", sparse.blocks() * 512);

        // More than the layer may hold: the attempt fails, saying why, and nothing of it lands.
        let ws = Ws::empty();
        attack(&ws, "agent", "head -c 3000000 /dev/urandom > big\n");
        ws.write(".loopwright/config.toml", "sandbox = \"required\"\n\n[sandbox_limits]\nmax_layer_mb = 1\n");
        let (code, _, err) = run_as(who, &ws, home.path(), &["run", "p"], &[]);
        assert_eq!(code, 1, "{who:?}: {err}");
        assert!(!ws.path().join("big").exists(), "{who:?}");
        let status = ws.run(&["status", "latest"]).1;
        assert!(
            status.contains(
                "the attempt wrote 3 MiB, more than the 1 MiB a layer may hold ([sandbox_limits] max_layer_mb)"
            ),
            "{who:?}: {status}"
        );
    }
}

/// A Unix socket server at `path` that answers `pong` to whoever connects; connections counted.
fn socket_server(path: &Path) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use std::io::Write;
    let listener = std::os::unix::net::UnixListener::bind(path).expect("bind");
    chmod(path, 0o777);
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = std::sync::Arc::clone(&count);
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = conn.write_all(b"pong");
        }
    });
    count
}

#[test]
fn host_unix_sockets_and_the_auto_holders_are_out_of_reach_unless_a_stage_lists_one() {
    let Some(_) = super::bwrap() else { return };
    for who in everyone() {
        let (ws, home, out) = (Ws::empty(), home(who), outside());
        let tag = format!("{}-{who:?}", std::process::id());
        // Where host services keep sockets, and auto mode's holder in the workspace's state.
        let mut hidden: Vec<PathBuf> = vec![
            std::env::temp_dir().join(format!("lw-sock-{tag}")),
            PathBuf::from(format!("/dev/shm/lw-sock-{tag}")),
            PathBuf::from(format!("/var/tmp/lw-sock-{tag}")),
            ws.path().join(".loopwright/state/auto/loop/holder.sock"),
        ];
        if nix::unistd::getuid().is_root() {
            hidden.push(PathBuf::from(format!("/run/lw-sock-{tag}")));
        }
        let listed = out.path().join("listed.sock");
        std::fs::create_dir_all(ws.path().join(".loopwright/state/auto/loop")).expect("mkdir");
        let counts: Vec<_> = hidden.iter().map(|p| socket_server(p)).collect();
        let listed_count = socket_server(&listed);
        let probe = "import socket, sys\nfor p in sys.argv[1:]:\n    try:\n        s = socket.socket(socket.AF_UNIX)\n        s.connect(p)\n        print('REACHED', p, s.recv(4).decode())\n    except OSError as e:\n        print('unreachable', p)\n";
        ws.write("probe.py", probe);
        let all: Vec<String> = hidden.iter().map(|p| p.display().to_string()).collect();
        ws.write(".loopwright/config.toml", "sandbox = \"required\"\n");
        ws.write(
            ".loopwright/pipelines/p.yml",
            &format!(
                "name: p\ndescription: d\nversion: 1\nstages:\n  - id: none\n    description: d\n    agent: shell\n    mode: plan\n    network: none\n    run: /usr/bin/python3 probe.py {all}\n  - id: listed\n    description: d\n    agent: shell\n    mode: plan\n    network: [\"unix:{listed}\"]\n    run: /usr/bin/python3 probe.py {listed}\n",
                all = all.join(" "),
                listed = listed.display()
            ),
        );
        let (code, _, err) = run_as(who, &ws, home.path(), &["run", "p"], &[]);
        assert_eq!(code, 0, "{who:?}: {err}");
        let none = printed(&ws, "none");
        for path in &all {
            assert!(none.contains(&format!("unreachable {path}")), "{who:?}: {none}");
        }
        assert!(!none.contains("REACHED"), "{who:?}: {none}");
        let counted: Vec<usize> = counts.iter().map(|c| c.load(std::sync::atomic::Ordering::SeqCst)).collect();
        assert_eq!(counted, vec![0; hidden.len()], "{who:?}");
        assert!(printed(&ws, "listed").contains(&format!("REACHED {} pong", listed.display())), "{who:?}");
        assert_eq!(listed_count.load(std::sync::atomic::Ordering::SeqCst), 1, "{who:?}");
        for path in hidden.iter().filter(|p| !p.starts_with(ws.path())) {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[test]
fn pipelines_and_agents_wherever_they_are_read_from_cannot_be_rewritten_by_an_attempt() {
    let Some(_) = super::bwrap() else { return };
    for who in everyone() {
        let (ws, home) = (Ws::empty(), home(who));
        std::fs::remove_dir_all(ws.path().join(".loopwright/pipelines")).expect("rm");
        ws.write(".loopwright/config.toml", "sandbox = \"required\"\n");
        let pipeline = "name: p\ndescription: d\nversion: 1\nstages:\n  - id: widen\n    description: d\n    agent: shell\n    mode: agent\n    run: sh attack.sh\n";
        let agent = "---\nname: helper\ndescription: helps\ntools: Read\n---\nYou help.\n";
        ws.write("configurations/pipelines/p.yml", pipeline);
        ws.write(".claude/agents/helper.md", agent);
        ws.write(
            "attack.sh",
            "echo '    sandbox: off' >> configurations/pipelines/p.yml 2>/dev/null || echo pipeline-refused
echo 'tools: Bash' >> .claude/agents/helper.md 2>/dev/null || echo agent-refused
mkdir configurations/pipelines/more 2>/dev/null || echo folder-refused
mkdir -p .cursor/agents && echo '---' > .cursor/agents/evil.md && echo written-in-the-layer
echo ok > work.txt
",
        );
        let (code, _, err) = run_as(who, &ws, home.path(), &["run", "p"], &[]);
        assert_eq!(code, 0, "{who:?}: {err}");
        let logs = printed(&ws, "widen");
        for line in ["pipeline-refused", "agent-refused", "folder-refused", "written-in-the-layer"] {
            assert!(logs.lines().any(|l| l == line), "{who:?}: no `{line}` in\n{logs}");
        }
        assert_eq!(ws.read("configurations/pipelines/p.yml"), pipeline, "{who:?}");
        assert_eq!(ws.read(".claude/agents/helper.md"), agent, "{who:?}");
        assert!(!ws.path().join("configurations/pipelines/more").exists(), "{who:?}");
        assert!(!ws.path().join(".cursor/agents").exists(), "{who:?}");
        assert_eq!(ws.read("work.txt"), "ok\n", "{who:?}");
    }
}

#[test]
fn secrets_in_loopwrights_environment_and_state_never_reach_a_stage() {
    let Some(_) = super::bwrap() else { return };
    for who in everyone() {
        let (ws, home) = (Ws::empty(), home(who));
        ws.write(".loopwright/config.toml", "sandbox = \"required\"\n");
        ws.write(".loopwright/state/serve.token", "PLANTED-SERVE-TOKEN\n");
        ws.write(
            ".loopwright/agents/dev.md",
            "---\nname: dev\nrunner: command\ncommand: [\"sh\", \"-c\", \"cat > /dev/null; env > env-agent.txt; echo done\"]\napi_key_env: DEV_KEY\n---\nYou work.\n",
        );
        ws.write(
            ".loopwright/pipelines/p.yml",
            "name: p\ndescription: d\nversion: 1\nstages:\n  - id: shell\n    description: d\n    agent: shell\n    mode: agent\n    env: [LISTED_TOKEN]\n    run: \"env > env-shell.txt; cat .loopwright/state/serve.token >> env-shell.txt 2>&1 || true\"\n  - id: agent\n    description: d\n    agent: dev\n    mode: agent\n    network: none\n",
        );
        let env = [
            ("ANTHROPIC_API_KEY", "PLANTED-ANTHROPIC"),
            ("AWS_SECRET_ACCESS_KEY", "PLANTED-AWS"),
            ("DATABASE_PASSWORD", "PLANTED-DB"),
            ("LOOPWRIGHT_SERVE_TOKEN", "PLANTED-LW"),
            ("LISTED_TOKEN", "GIVEN-LISTED"),
            ("DEV_KEY", "GIVEN-DEV-KEY"),
        ];
        let (code, _, err) = run_as(who, &ws, home.path(), &["run", "p"], &env);
        assert_eq!(code, 0, "{who:?}: {err}");
        let (shell, agent) = (ws.read("env-shell.txt"), ws.read("env-agent.txt"));
        for planted in ["PLANTED-ANTHROPIC", "PLANTED-AWS", "PLANTED-DB", "PLANTED-LW", "PLANTED-SERVE-TOKEN"] {
            assert!(!shell.contains(planted) && !agent.contains(planted), "{who:?} {planted}:\n{shell}\n{agent}");
        }
        // A stage gets what it lists; the agent's own process its key, the shell stage not.
        assert!(shell.lines().any(|l| l == "LISTED_TOKEN=GIVEN-LISTED"), "{who:?}: {shell}");
        assert!(!shell.contains("GIVEN-DEV-KEY") && !agent.contains("GIVEN-LISTED"), "{who:?}");
        assert!(agent.lines().any(|l| l == "DEV_KEY=GIVEN-DEV-KEY"), "{who:?}: {agent}");
        // loopwright's own contract is there.
        let run = ws.json(&["status", "latest"]).1["run_id"].as_str().expect("run").to_owned();
        assert!(shell.lines().any(|l| l == format!("LOOPWRIGHT_RUN_ID={run}")), "{who:?}: {shell}");
        let names: Vec<&str> = shell.lines().filter_map(|l| l.split_once('=').map(|(n, _)| n)).collect();
        let unexpected: Vec<&&str> = names
            .iter()
            .filter(|n| {
                !(n.starts_with("LOOPWRIGHT_")
                    || n.starts_with("LC_")
                    || [
                        "PATH",
                        "HOME",
                        "TMPDIR",
                        "USER",
                        // Set by login tools (`runuser`, `su`) for a user who is not root.
                        "LOGNAME",
                        "LANG",
                        "TERM",
                        "NO_COLOR",
                        "PWD",
                        "SHLVL",
                        "OLDPWD",
                        "_",
                        "LISTED_TOKEN",
                        "GIT_REFLOG_ACTION",
                        // The W3C trace context of the attempt's span (no secret: ids only).
                        "TRACEPARENT",
                        "CARGO_HOME",
                        "RUSTUP_HOME",
                        "RUSTUP_TOOLCHAIN",
                        "PYENV_ROOT",
                        "NVM_DIR",
                    ]
                    .contains(n))
            })
            .collect();
        assert_eq!(unexpected, Vec::<&&str>::new(), "{who:?}: {shell}");
    }
}

#[test]
fn an_attempt_the_sandbox_refused_says_so_and_is_not_retried_unchanged() {
    let Some(_) = super::bwrap() else { return };
    let fetch = "import urllib.request\nurllib.request.urlopen('https://example.com/', timeout=5)\n";
    // A plain stage with retries: one attempt, failed for the refusal.
    let ws = Ws::empty();
    ws.write("fetch.py", fetch);
    ws.write(".loopwright/config.toml", "sandbox = \"required\"\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: fetch\n    description: d\n    agent: shell\n    mode: plan\n    network: [api.example.org]\n    retry:\n      max_attempts: 3\n      initial_delay_seconds: 1\n    run: /usr/bin/python3 fetch.py\n",
    );
    let (code, result, err) = ws.json(&["run", "p"]);
    assert_eq!((code, result["status"].clone()), (1, serde_json::json!("failed")), "{err}");
    assert_eq!(result["stages_executed"][0]["attempts"], 1, "{result}");
    let status = ws.run(&["status", "latest"]).1;
    assert!(
        status.contains("attempt 1 failed (validation_error): the sandbox refused its connection to `example.com:443` (a stage reaches only the hosts its `network:` names)"),
        "{status}"
    );

    // A closed-loop stage whose agent is refused: the failure is classified (not
    // "unclassified") and escalated rather than tried again.
    let ws = Ws::empty();
    ws.write("fetch.py", fetch);
    ws.write(".loopwright/config.toml", "sandbox = \"required\"\n");
    ws.write(
        ".loopwright/agents/dev.md",
        "---\nname: dev\nrunner: command\ncommand: [\"/usr/bin/python3\", \"fetch.py\"]\n---\nYou work.\n",
    );
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: fix\n    description: d\n    agent: dev\n    mode: agent\n    network: [api.example.org]\n    skill: closed-loop-execution\n    checks:\n      - name: ok\n        type: command\n        command: \"true\"\n",
    );
    let (_, result, err) = ws.json(&["run", "p"]);
    assert_ne!(result["status"], "success", "{err}");
    let generated = super::events_of(&ws, "generated");
    assert_eq!(generated.len(), 1, "{generated:#?}");
    let failure = &generated[0]["failure"];
    assert_eq!(failure["pattern"], "permission-error", "{failure:#}");
    let lines = serde_json::to_string(&failure["lines"]).expect("json");
    assert!(lines.contains("loopwright: the sandbox refused a connection to example.com:443"), "{failure:#}");
}

#[test]
fn an_http_model_works_under_sandbox_required_and_its_edit_is_committed_through_the_guard() {
    let Some(_) = super::bwrap() else { return };
    let fixed = "Now add really adds.\n\nFILE: calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";
    let server = crate::http::Server::start(vec![crate::http::openai_answer(fixed, 100, 20)]);
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"required\"\n");
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.write("calc.py", "def add(a, b):\n    return a - b\n");
    ws.write(
        ".loopwright/agents/model.md",
        &format!(
            "---\nrunner: openai\nmodel: test-model\nbase_url: http://127.0.0.1:{}/v1\napi_key_env: LW_TEST_KEY\n---\nYou fix bugs.\n",
            server.port
        ),
    );
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: fix\n    description: Make add add\n    agent: model\n    mode: agent\n    skill: closed-loop-execution\n    checks:\n      - {name: adds, type: command, command: \"/usr/bin/python3 -c 'from calc import add; assert add(2, 3) == 5'\"}\n",
    );
    ws.init_git();
    let out = ws.cmd().env("LW_TEST_KEY", "sk-test-key-123456").args(["run", "p", "--json"]).output().expect("run");
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(result["status"], "success", "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(ws.read("calc.py"), "def add(a, b):\n    return a + b\n");
    assert_eq!(ws.git(&["show", "--name-only", "--format=", "HEAD"]), "calc.py\n");
}
