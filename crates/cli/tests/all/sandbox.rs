//! `loopwright doctor`: what the machine offers for sandboxes and which agent CLIs it has.

mod attacks;

use std::path::Path;

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support::Ws;

#[test]
fn doctor_says_what_is_missing_and_how_to_install_it() {
    let ws = Ws::empty();
    // A PATH with a `claude` and nothing else: no bubblewrap, no other CLI.
    let bin = ws.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let claude = bin.join("claude");
    std::fs::write(&claude, "#!/bin/sh\necho 1.0\n").expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = ws.cmd().args(["doctor", "--json"]).env("PATH", &bin).output().expect("doctor");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        report["sandbox"],
        json!({"available": false, "bubblewrap": {"missing": "bubblewrap (`bwrap`) is not installed: `apt-get install bubblewrap`"},
               "namespaces": "not tried: no bubblewrap", "capabilities": "not tried: no bubblewrap",
               "overlay": "not tried: no bubblewrap", "layers": null,
               "state": report["sandbox"]["state"].clone(), "limits": null,
               "proxy": "built in: HTTPS CONNECT to the hosts a stage names, on a Unix socket"})
    );
    assert!(report["sandbox"]["state"]["path"].as_str().is_some_and(|p| p.contains("loopwright-")), "{report}");
    let agents: Vec<(String, Option<String>)> = report["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| (a["name"].as_str().unwrap_or_default().to_owned(), a["path"].as_str().map(str::to_owned)))
        .collect();
    assert_eq!(agents[0], ("claude".to_owned(), Some(claude.display().to_string())));
    assert!(agents[1..].iter().all(|(_, p)| p.is_none()), "{agents:?}");
}

/// A sandbox can be made here (else the test says so and passes, unless
/// `LOOPWRIGHT_REQUIRE_SANDBOX` is set, as CI's scripts/sandbox-test.sh does).
fn bwrap() -> Option<std::path::PathBuf> {
    let scratch = tempfile::tempdir().expect("tempdir");
    match loopwright_runners::sandbox::probe(scratch.path()).usable() {
        Ok(path) => Some(path.to_path_buf()),
        Err(why) => {
            assert!(std::env::var_os("LOOPWRIGHT_REQUIRE_SANDBOX").is_none(), "no sandbox here: {why}");
            eprintln!("skipped: no sandbox here ({why})");
            None
        }
    }
}

#[test]
fn a_process_without_network_reaches_only_the_allowed_hosts_through_the_proxy() {
    use std::io::{Read, Write};
    let Some(bwrap) = bwrap() else { return };
    // An echo server on the host's loopback: allowed through the proxy, not reachable directly.
    let server = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = server.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for mut conn in server.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 64];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 || conn.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("proxy.sock");
    let (ready, started) = std::sync::mpsc::channel();
    let allowed = loopwright_runners::proxy::Allowed::parse(&format!("127.0.0.1:{port}")).expect("allowed");
    let proxy_socket = socket.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async move {
            let _proxy = loopwright_runners::proxy::start(&proxy_socket, vec![allowed]).expect("proxy");
            ready.send(()).expect("ready");
            std::future::pending::<()>().await;
        });
    });
    started.recv().expect("the proxy started");
    let (ws, home) = (dir.path().join("ws"), dir.path().join("home"));
    std::fs::create_dir_all(&ws).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    let plan = loopwright_runners::sandbox::Plan {
        workspace: ws,
        write: loopwright_runners::sandbox::Write::ReadOnly,
        home,
        config: vec![],
        network: false,
        proxy: Some(loopwright_runners::sandbox::ProxyPlan {
            socket,
            helper: assert_cmd::cargo::cargo_bin!("loopwright").to_path_buf(),
            tunnels: vec![],
        }),
        user_home: None,
        limits: None,
        read_only: vec![],
        hidden: vec![],
        sockets: vec![],
    };
    let script = format!(
        r#"
import os, socket
def tunnel(target):
    host, port = os.environ["HTTPS_PROXY"].rsplit("/", 1)[1].split(":")
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall(f"CONNECT {{target}} HTTP/1.1\r\nHost: {{target}}\r\n\r\n".encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += s.recv(1)
    return head.split(b"\r\n")[0].decode(), s
status, s = tunnel("127.0.0.1:{port}")
s.sendall(b"ping")
print(status, s.recv(4).decode())
print(tunnel("127.0.0.1:{other}")[0])
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2)
    print("direct: connected")
except OSError:
    print("direct: refused")
"#,
        other = port.wrapping_add(1)
    );
    let argv = loopwright_runners::sandbox::command(&bwrap, &plan, &["python3".into(), "-c".into(), script]);
    let out = std::process::Command::new(&argv[0]).args(&argv[1..]).output().expect("run");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "HTTP/1.1 200 OK ping\nHTTP/1.1 403 Forbidden\ndirect: refused\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sandbox_required_without_bubblewrap_runs_nothing_and_says_what_is_missing() {
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"required\"\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - {id: a, description: d, agent: shell, mode: agent, run: 'echo ran > ran.txt'}\n",
    );
    let empty = ws.path().join("no-bin");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let out = ws.cmd().args(["run", "p"]).env("PATH", &empty).output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("sandbox = \"required\" in config.toml, but no sandbox can be made here: bubblewrap (`bwrap`) is not installed: `apt-get install bubblewrap`"),
        "{err}"
    );
    assert!(!ws.path().join("ran.txt").exists());
}

#[test]
fn without_bubblewrap_auto_runs_unsandboxed_and_says_why_once_and_a_stage_may_require_it() {
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"auto\"\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - {id: a, description: d, agent: shell, mode: agent, run: 'echo a > a.txt'}\n  - {id: b, description: d, agent: shell, mode: agent, run: 'echo b > b.txt'}\n",
    );
    // A PATH with a shell and nothing else: no bubblewrap.
    let bin = ws.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    std::os::unix::fs::symlink("/bin/sh", bin.join("sh")).expect("link");
    let out = ws.cmd().args(["run", "p"]).env("PATH", &bin).output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!((ws.read("a.txt"), ws.read("b.txt")), ("a\n".to_owned(), "b\n".to_owned()));
    let why = "bubblewrap (`bwrap`) is not installed: `apt-get install bubblewrap`";
    assert_eq!(err.matches(&format!("no sandbox here ({why}); stages run unsandboxed")).count(), 1, "{err}");
    assert_eq!(events_of(&ws, "sandbox_unavailable"), vec![json!({"type": "sandbox_unavailable", "reason": why})]);

    // One stage that must not run unsandboxed stops the whole run before anything runs.
    ws.write(".loopwright/config.toml", "sandbox = \"off\"\n");
    ws.write(
        ".loopwright/pipelines/q.yml",
        "name: q\ndescription: d\nversion: 1\nstages:\n  - {id: a, description: d, agent: shell, mode: agent, run: 'echo q > q.txt'}\n  - {id: risky, description: d, agent: shell, mode: agent, sandbox: required, run: 'echo r > r.txt'}\n",
    );
    let out = ws.cmd().args(["run", "q"]).env("PATH", &bin).output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "stage `risky` of pipeline `q` says `sandbox: required`, but no sandbox can be made here: {why}"
        )),
        "{err}"
    );
    assert!(!ws.path().join("q.txt").exists() && !ws.path().join("r.txt").exists());
}

#[test]
fn a_sandboxed_plan_stage_is_refused_by_the_mount_and_writes_nothing_anywhere() {
    let Some(_) = bwrap() else { return };
    let marker = std::env::temp_dir().join(format!("loopwright-plan-escape-{}", std::process::id()));
    let pipeline = format!(
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: look\n    description: d\n    agent: shell\n    mode: plan\n    run: \"echo z > {}; echo y > $HOME/h; echo x > new.txt\"\n",
        marker.display()
    );
    // A config.toml that does not say (written past the tests' own default, `off`) means `auto`.
    for (mode, host_written) in [("auto", false), ("off", true), ("the default", false)] {
        let ws = Ws::empty();
        let config = match mode {
            "the default" => "[auto]\nstall_captures = 5\n".to_owned(),
            _ => format!("sandbox = \"{mode}\"\n"),
        };
        std::fs::write(ws.path().join(".loopwright/config.toml"), config).expect("config");
        ws.write(".loopwright/pipelines/p.yml", &pipeline);
        let _ = std::fs::remove_file(&marker);
        let (_, result, err) = ws.json(&["run", "p"]);
        // Sandboxed, the write into the workspace fails at the mount (the stage fails, there is
        // nothing to restore) and the host's /tmp is not the one written; unsandboxed, the
        // watcher catches the workspace write and restores it, but the host's /tmp is written.
        assert!(!ws.path().join("new.txt").exists(), "{mode}: {result}\n{err}");
        assert_eq!(marker.exists(), host_written, "{mode}: {err}");
        if !host_written {
            assert_eq!(result["status"], "failed", "{result}");
            let logs = ws.run(&["logs", "latest", "--stage", "look"]).1;
            assert!(logs.contains("Read-only file system"), "{logs}");
        }
    }
    let _ = std::fs::remove_file(&marker);
}

#[test]
fn a_sandboxed_agent_stage_writes_the_workspace_but_not_git_loopwright_or_the_host() {
    let Some(_) = bwrap() else { return };
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"auto\"\n");
    std::fs::create_dir_all(ws.path().join(".git/hooks")).expect("mkdir");
    let outside = ws.path().parent().expect("parent").join(format!("loopwright-outside-{}", std::process::id()));
    ws.write(
        ".loopwright/pipelines/p.yml",
        &format!(
            "name: p\ndescription: d\nversion: 1\nstages:\n  - id: work\n    description: d\n    agent: shell\n    mode: agent\n    run: \"echo ok > inside.txt && (echo x > .git/hooks/post-commit 2>/dev/null || echo git-refused) && (echo x > .loopwright/pipelines/evil.yml 2>/dev/null || echo loopwright-refused) && echo x > {} && echo $HOME\"\n",
            outside.display()
        ),
    );
    let (code, result, err) = ws.json(&["run", "p"]);
    assert_eq!((code, result["status"].clone()), (0, json!("success")), "{err}");
    assert_eq!(ws.read("inside.txt"), "ok\n");
    assert!(
        !ws.path().join(".git/hooks/post-commit").exists()
            && !ws.path().join(".loopwright/pipelines/evil.yml").exists()
    );
    assert!(!outside.exists(), "a write outside the workspace reached the host");
    let logs = ws.run(&["logs", "latest", "--stage", "work"]).1;
    assert!(logs.contains("git-refused") && logs.contains("loopwright-refused"), "{logs}");
    // Its home was its own, outside the workspace, and is gone with the attempt; the attempt
    // wrote into a layer, copied into the workspace when it passed.
    let home = logs.lines().find(|l| l.ends_with("/homes/work-1")).expect("the home it was given").to_owned();
    assert!(!home.starts_with(&ws.path().display().to_string()) && !Path::new(&home).exists(), "{logs}");
    assert!(
        logs.contains("writes into layer work-1 (a kernel overlay in a user namespace)")
            || logs.contains("writes into layer work-1 (fuse-overlayfs in a user namespace)"),
        "{logs}"
    );
}

#[test]
fn a_sandboxed_stage_that_times_out_leaves_no_process_behind() {
    let Some(_) = bwrap() else { return };
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"auto\"\n");
    // A daemon that leaves the stage's process group and clears its environment, then the
    // stage hangs until its timeout.
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: hang\n    description: d\n    agent: shell\n    mode: agent\n    timeout_minutes: 0.02\n    run: \"setsid env -i sleep 307.25 & sleep 306.25\"\n",
    );
    let (_, result, err) = ws.json(&["run", "p"]);
    assert_eq!(result["status"], "failed", "{err}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let left: Vec<String> = std::fs::read_dir("/proc")
        .expect("proc")
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("sleep 307.25") || c.contains("sleep 306.25"))
        .collect();
    assert_eq!(left, Vec::<String>::new());
}

/// The kinds of a run's journal, in order.
fn kinds(ws: &Ws) -> Vec<String> {
    let (_, run, _) = ws.json(&["status", "latest"]);
    let id = run["run_id"].as_str().expect("run id").to_owned();
    ws.journal(&id).iter().map(|e| e["event"]["type"].as_str().unwrap_or_default().to_owned()).collect()
}

/// The events of one kind in the latest run's journal.
fn events_of(ws: &Ws, kind: &str) -> Vec<serde_json::Value> {
    let (_, run, _) = ws.json(&["status", "latest"]);
    let id = run["run_id"].as_str().expect("run id").to_owned();
    ws.journal(&id).into_iter().map(|e| e["event"].clone()).filter(|e| e["type"] == kind).collect()
}

#[test]
fn a_failed_attempt_is_its_layer_dropped_and_nothing_is_restored() {
    let Some(_) = bwrap() else { return };
    // Attempt 1 writes a file, deletes one and fails; attempt 2 passes only if it finds the
    // workspace as it was.
    let pipeline = "name: p\ndescription: d\nversion: 1\nstages:\n  - id: work\n    description: d\n    agent: shell\n    mode: agent\n    retry:\n      max_attempts: 2\n      initial_delay_seconds: 1\n    run: \"if [ $LOOPWRIGHT_ATTEMPT = 1 ]; then echo bad > a.txt; rm keep.txt; exit 1; fi; test ! -e a.txt && test -e keep.txt && echo good > b.txt\"\n";
    for mode in ["auto", "off"] {
        let ws = Ws::empty();
        ws.write(".loopwright/config.toml", &format!("sandbox = \"{mode}\"\n"));
        ws.write(".loopwright/pipelines/p.yml", pipeline);
        ws.write("keep.txt", "kept\n");
        ws.write(".gitignore", ".loopwright/state/\n");
        ws.init_git();
        let (_, result, err) = ws.json(&["run", "p"]);
        let kinds = kinds(&ws);
        if mode == "off" {
            // Unsandboxed, a failed attempt's changes stay for the next one to find.
            assert_eq!(result["status"], "failed", "{err}");
            assert!(ws.path().join("a.txt").exists() && kinds.contains(&"snapshot_taken".to_owned()), "{kinds:?}");
            continue;
        }
        assert_eq!(result["status"], "success", "{err}\n{kinds:?}");
        assert_eq!((ws.read("b.txt"), ws.read("keep.txt")), ("good\n".to_owned(), "kept\n".to_owned()));
        assert!(!ws.path().join("a.txt").exists());
        // No snapshot was taken, nothing restored: the first attempt's layer was dropped whole.
        assert!(!kinds.iter().any(|k| k == "snapshot_taken" || k == "snapshot_restored"), "{kinds:?}");
        let dropped = events_of(&ws, "layer_dropped");
        assert_eq!(
            dropped,
            vec![json!({"type": "layer_dropped", "stage": "work", "attempt": 1, "files": 2,
                "reason": "attempt 1 did not pass; attempt 2 starts from the workspace as it was"})]
        );
        // The passing attempt's layer became one commit of exactly what it wrote.
        assert_eq!(ws.git(&["show", "--name-only", "--format=", "HEAD"]), "b.txt\n");
        let layers = events_of(&ws, "layer_made");
        assert_eq!(layers.len(), 2, "{layers:?}");
    }
}

#[test]
fn closed_loop_checks_see_the_attempts_layer_and_a_failed_attempt_leaves_nothing() {
    let Some(_) = bwrap() else { return };
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"auto\"\n");
    ws.write(
        ".loopwright/agents/dev.md",
        "---\nname: dev\nrunner: command\ncommand: [\"sh\", \".loopwright/agents/dev.sh\"]\n---\nYou fix code.\n",
    );
    // The first attempt writes the wrong answer, the second the right one.
    ws.write(
        ".loopwright/agents/dev.sh",
        "cat > /dev/null\nif [ \"$LOOPWRIGHT_ATTEMPT\" = 1 ]; then echo wrong > answer.txt; else echo right > answer.txt; fi\necho done\n",
    );
    ws.write(
        ".loopwright/pipelines/loop.yml",
        "name: loop\ndescription: d\nversion: 1\nstages:\n  - id: implement\n    description: Answer\n    agent: dev\n    mode: agent\n    skill: closed-loop-execution\n    checks:\n      - name: right\n        type: command\n        command: grep -q right answer.txt\n",
    );
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.init_git();
    let (code, result, err) = ws.json(&["run", "loop"]);
    assert_eq!((code, result["status"].clone()), (0, json!("success")), "{err}");
    assert_eq!(ws.read("answer.txt"), "right\n");
    let kinds = kinds(&ws);
    assert!(!kinds.iter().any(|k| k == "snapshot_taken" || k == "snapshot_restored"), "{kinds:?}");
    // The check failed on attempt 1's layer (it saw `wrong`, not a missing file) and passed on
    // attempt 2's; attempt 1's layer was dropped before attempt 2 began.
    let evaluated = events_of(&ws, "evaluated");
    let outputs: Vec<String> =
        evaluated.iter().map(|e| format!("{}:{}", e["attempt"], e["checks"][0]["passed"])).collect();
    assert_eq!(outputs, ["1:false", "2:true"], "{evaluated:#?}");
    let generated = events_of(&ws, "generated");
    let files: Vec<serde_json::Value> = generated.iter().map(|g| g["files"].clone()).collect();
    assert_eq!(files, [json!({"created": ["answer.txt"]}), json!({"created": ["answer.txt"]})], "{generated:#?}");
    assert_eq!(events_of(&ws, "layer_dropped").len(), 1);
    assert_eq!(ws.git(&["show", "--name-only", "--format=", "HEAD"]), "answer.txt\n");
}

#[test]
fn a_sandboxed_attempt_killed_with_loopwright_leaves_no_process_and_reruns_on_resume() {
    let Some(_) = bwrap() else { return };
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"auto\"\n");
    // Until `.loopwright/go` exists the stage writes a file and hangs; then it passes.
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: work\n    description: d\n    agent: shell\n    mode: agent\n    run: \"if [ -e .loopwright/go ]; then echo done > done.txt; else echo partial > partial.txt; setsid env -i sleep 309.25 & sleep 308.25; fi\"\n",
    );
    // Processes running exactly `sleep SECONDS` (not a command line that mentions it).
    let sleeping = |seconds: &str| -> Vec<u32> {
        crate::support::processes_with(seconds)
            .into_iter()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c == format!("sleep\0{seconds}\0").as_bytes())
            })
            .collect()
    };
    let mut child = crate::support::spawn(&ws, &["run", "p"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while sleeping("308.25").is_empty() || sleeping("309.25").is_empty() {
        assert!(std::time::Instant::now() < deadline, "the stage never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().expect("kill -9");
    let _ = child.wait();
    // bubblewrap dies with loopwright, and every process of its PID namespace with it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !(sleeping("308.25").is_empty() && sleeping("309.25").is_empty()) {
        assert!(std::time::Instant::now() < deadline, "a process of the attempt outlived loopwright");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!ws.path().join("partial.txt").exists(), "the attempt's write reached the workspace");
    ws.write(".loopwright/go", "");
    let (code, result, err) = ws.json(&["resume", "latest"]);
    assert_eq!((code, result["status"].clone()), (0, json!("success")), "{err}");
    assert_eq!(ws.read("done.txt"), "done\n");
    assert!(!ws.path().join("partial.txt").exists());
    let dropped = events_of(&ws, "layer_dropped");
    assert_eq!(
        dropped,
        vec![json!({"type": "layer_dropped", "stage": "work", "attempt": 1, "files": 1,
            "reason": "the attempt was interrupted; it runs again from the start"})]
    );
}

#[test]
fn a_sandboxed_stage_reaches_only_the_hosts_it_names_and_the_refusals_are_journaled() {
    let Some(_) = bwrap() else { return };
    let reply = |body: &str| crate::http::Reply::Http {
        status: "200 OK",
        headers: vec!["content-type: application/json".into()],
        chunks: vec![body.to_owned()],
    };
    let allowed = crate::http::Server::start(vec![reply("{\"hello\":\"sandbox\"}")]);
    let other = crate::http::Server::start(vec![reply("{\"leaked\":true}")]);
    let script = format!(
        r#"import socket, urllib.request
print(urllib.request.urlopen("http://127.0.0.1:{allowed}/ok", timeout=5).read().decode())
try:
    urllib.request.urlopen("http://127.0.0.1:{other}/no", timeout=5)
    print("other: reached")
except Exception as e:
    print("other: unreachable")
s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
s.sendall(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
print("connect:", s.recv(100).decode().split("\r\n")[0])
"#,
        allowed = allowed.port,
        other = other.port
    );
    let ws = Ws::empty();
    ws.write("probe.py", &script);
    ws.write(".loopwright/config.toml", "sandbox = \"auto\"\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        &format!(
            "name: p\ndescription: d\nversion: 1\nstages:\n  - id: net\n    description: d\n    agent: shell\n    mode: plan\n    network: [\"127.0.0.1:{}\"]\n    run: python3 probe.py\n",
            allowed.port
        ),
    );
    let (code, result, err) = ws.json(&["run", "p"]);
    assert_eq!((code, result["status"].clone()), (0, json!("success")), "{err}");
    let logs = ws.run(&["logs", "latest", "--stage", "net"]).1;
    assert!(logs.contains("{\"hello\":\"sandbox\"}"), "{logs}");
    assert!(logs.contains("other: unreachable") && logs.contains("connect: HTTP/1.1 403 Forbidden"), "{logs}");
    assert_eq!(other.requests().len(), 0, "a host it does not name was reached");
    assert_eq!(
        events_of(&ws, "network_refused"),
        vec![json!({"type": "network_refused", "stage": "net", "attempt": 1, "target": "example.com:443",
            "why": "not a host this stage may reach"})]
    );
}

#[test]
fn a_sandboxed_stage_sees_none_of_the_users_home_but_its_toolchains() {
    let Some(_) = bwrap() else { return };
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir_all(home.path().join(".ssh")).expect("mkdir");
    std::fs::write(home.path().join(".ssh/id_ed25519"), "PLANTED-KEY\n").expect("plant");
    std::fs::create_dir_all(home.path().join(".cargo")).expect("mkdir");
    std::fs::write(home.path().join(".cargo/credentials.toml"), "token = \"PLANTED-TOKEN\"\n").expect("plant");
    std::fs::write(home.path().join(".cargo/config.toml"), "# toolchain config\n").expect("write");
    let real = home.path().display().to_string();
    let pipeline = format!(
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: look\n    description: d\n    agent: shell\n    mode: plan\n    run: \"cat {real}/.ssh/id_ed25519 ~/.ssh/id_ed25519 {real}/.cargo/credentials.toml; cat {real}/.cargo/config.toml; echo CARGO_HOME=$CARGO_HOME; true\"\n"
    );
    for (mode, sees) in [("auto", false), ("off", true)] {
        let ws = Ws::empty();
        ws.write(".loopwright/config.toml", &format!("sandbox = \"{mode}\"\n"));
        ws.write(".loopwright/pipelines/p.yml", &pipeline);
        let out = ws.cmd().args(["run", "p"]).env("HOME", home.path()).env_remove("CARGO_HOME").output().expect("run");
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let logs = ws.run(&["logs", "latest", "--stage", "look"]).1;
        assert_eq!(logs.contains("PLANTED-KEY"), sees, "{mode}: {logs}");
        assert_eq!(logs.contains("PLANTED-TOKEN"), sees, "{mode}: {logs}");
        assert!(logs.contains("# toolchain config"), "{mode}: {logs}");
        if mode == "auto" {
            assert!(logs.contains(&format!("CARGO_HOME={real}/.cargo")), "{logs}");
        }
    }
}

/// Every request line a scripted API got, in order.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// A scripted API on 127.0.0.1, in place of a model provider: each request is answered with
/// what `answer(request line, JSON body)` returns (a whole HTTP response, the connection then
/// closed), and every request line is recorded.
fn scripted_api(answer: impl Fn(&str, &serde_json::Value) -> String + Send + 'static) -> (u16, Seen) {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen: Seen = Seen::default();
    let log = std::sync::Arc::clone(&seen);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let (head, body) = crate::http::read_request(&conn);
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let line = head.lines().next().unwrap_or_default().to_owned();
            log.lock().expect("lock").push(line.clone());
            let _ = conn.write_all(answer(&line, &body).as_bytes());
        }
    });
    (port, seen)
}

/// A whole HTTP response with `status`, `kind` (its content type) and `body`.
fn reply(status: &str, kind: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A 404 without a body (a WebSocket upgrade, a path the script does not serve).
fn not_found() -> String {
    reply("404 Not Found", "text/plain", "")
}

/// Runs pipeline `p` on `task` with a real agent CLI: its folder `bin` first on `PATH`, `HOME`
/// at `home`, and `env` (a `None` removes the variable). Asserts the run succeeded, else shows
/// why (its stderr, the stage's logs, what the API got). Returns the result and the request
/// lines the API got.
fn run_real_cli(
    ws: &Ws,
    task: &str,
    bin: &Path,
    home: &Path,
    env: &[(&str, Option<String>)],
    stage: &str,
    seen: &Seen,
) -> (serde_json::Value, Vec<String>) {
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = ws.cmd();
    cmd.args(["run", "p", "--task", task, "--json"]).env("PATH", path).env("HOME", home);
    for (name, value) in env {
        match value {
            Some(v) => cmd.env(name, v),
            None => cmd.env_remove(name),
        };
    }
    let out = cmd.output().expect("run");
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let requests = seen.lock().expect("lock").clone();
    if result["status"] != "success" {
        let logs = ws.run(&["logs", "latest", "--stage", stage]).1;
        panic!("{}\n{logs}\nrequests: {requests:?}", String::from_utf8_lossy(&out.stderr));
    }
    (result, requests)
}

/// A scripted Anthropic Messages API for a headless Claude Code: with tools and no answer yet
/// it asks to write `file` with `content`; after the tool's result it gives the stage's output.
fn scripted_anthropic(file: std::path::PathBuf, content: &'static str) -> (u16, Seen) {
    scripted_api(move |line, body| {
        let path = line.split_whitespace().nth(1).unwrap_or_default();
        if !path.starts_with("/v1/messages") || path.contains("count_tokens") {
            let text = r#"{"type":"error","error":{"type":"not_found_error","message":"not here"}}"#;
            return reply("404 Not Found", "application/json", text);
        }
        let blocks = if body["tools"].as_array().is_none_or(Vec::is_empty) {
            vec![json!({"type": "text", "text": "Sandbox"})]
        } else if body["messages"].to_string().contains("tool_result") {
            vec![json!({"type": "text", "text": "## notes\nwrote the file"})]
        } else {
            vec![json!({"type": "tool_use", "id": "toolu_sb1", "name": "Write",
                "input": {"file_path": file.display().to_string(), "content": content}})]
        };
        let stop = if blocks[0]["type"] == "tool_use" { "tool_use" } else { "end_turn" };
        reply("200 OK", "text/event-stream", &crate::claude_tui::stream(&blocks, stop))
    })
}

#[test]
fn the_real_claude_code_runs_sandboxed_against_its_scripted_api_and_its_edit_lands_through_the_layer() {
    let Some(_) = bwrap() else { return };
    let bin = crate::presets::installed_clis().join("node_modules/.bin");
    if !std::process::Command::new(bin.join("claude")).arg("--version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: Claude Code is not installed ({}): it was not run in the sandbox", bin.display());
        return;
    }
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"auto\"\n");
    ws.write(".loopwright/agents/coder.md", "---\nrunner: claude\nmodel: claude-test\n---\nYou write files.\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: write\n    description: Write hello.txt\n    agent: coder\n    mode: agent\n    outputs: [notes]\n",
    );
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.init_git();
    let root = std::fs::canonicalize(ws.path()).expect("root");
    let (port, seen) = scripted_anthropic(root.join("hello.txt"), "hello from claude\n");
    // The user's home: Claude Code's state file (copied into the attempt's home) and a key
    // nobody may read.
    let home = tempfile::tempdir().expect("home");
    std::fs::write(home.path().join(".claude.json"), json!({"hasCompletedOnboarding": true}).to_string())
        .expect("seed");
    std::fs::create_dir_all(home.path().join(".ssh")).expect("mkdir");
    std::fs::write(home.path().join(".ssh/id_ed25519"), "PLANTED-KEY\n").expect("plant");
    let (result, requests) = run_real_cli(
        &ws,
        "write hello.txt",
        &bin,
        home.path(),
        &[
            ("ANTHROPIC_BASE_URL", Some(format!("http://127.0.0.1:{port}"))),
            ("ANTHROPIC_API_KEY", Some("sk-ant-loopwright-offline-test-key".into())),
            ("DISABLE_TELEMETRY", Some("1".into())),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", Some("1".into())),
            ("ANTHROPIC_AUTH_TOKEN", None),
        ],
        "write",
        &seen,
    );
    assert_eq!(result["artifacts"]["notes"], "wrote the file");
    assert_eq!(ws.read("hello.txt"), "hello from claude\n");
    assert_eq!(ws.git(&["show", "--name-only", "--format=", "HEAD"]), "hello.txt\n");
    assert!(requests.iter().any(|line| line.starts_with("POST /v1/messages")), "{requests:?}");
    let logs = ws.run(&["logs", "latest", "--stage", "write"]).1;
    assert!(events_of(&ws, "layer_made").len() == 1 && !logs.contains("PLANTED-KEY"), "{logs}");
}

#[test]
fn a_file_past_the_size_limit_ends_the_writer_and_nothing_of_it_is_left() {
    let Some(_) = bwrap() else { return };
    let pipeline = "name: p\ndescription: d\nversion: 1\nstages:\n  - id: fill\n    description: d\n    agent: shell\n    mode: agent\n    run: head -c 3000000 /dev/zero > big.bin\n";
    for (mode, fails) in [("auto", true), ("off", false)] {
        let ws = Ws::empty();
        ws.write(".loopwright/config.toml", &format!("sandbox = \"{mode}\"\n\n[sandbox_limits]\nfile_size_mb = 1\n"));
        ws.write(".loopwright/pipelines/p.yml", pipeline);
        let (_, result, err) = ws.json(&["run", "p"]);
        assert_eq!(result["status"] == "failed", fails, "{mode}: {result}\n{err}");
        assert_eq!(ws.path().join("big.bin").exists(), !fails, "{mode}");
        if fails {
            // Journaled as the attempt's failure: the shell says the writer was ended.
            let failed = events_of(&ws, "attempt_failed");
            let message = failed[0]["error"]["message"].as_str().unwrap_or_default().to_owned();
            assert!(message.contains("153") || message.contains("SIGXFSZ"), "{failed:#?}");
            assert_eq!(events_of(&ws, "layer_dropped").len(), 1, "the layer holding the partial file is gone");
        }
    }
}

#[test]
fn plan_mode_in_a_sandbox_cannot_write_through_links_build_or_dependency_folders() {
    let Some(_) = bwrap() else { return };
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(outside.path().join("victim.txt"), "untouched\n").expect("write");
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"auto\"\n");
    ws.write("node_modules/dep/index.js", "module.exports = 1;\n");
    ws.write("target/debug/app", "binary\n");
    std::os::unix::fs::symlink(outside.path().join("victim.txt"), ws.path().join("link.txt")).expect("link");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: look\n    description: d\n    agent: shell\n    mode: plan\n    run: \"for f in link.txt node_modules/dep/index.js target/debug/app; do (echo changed > $f) 2>/dev/null && echo wrote $f || echo refused $f; done\"\n",
    );
    let (code, result, err) = ws.json(&["run", "p"]);
    assert_eq!((code, result["status"].clone()), (0, json!("success")), "{err}");
    let logs = ws.run(&["logs", "latest", "--stage", "look"]).1;
    assert!(
        logs.contains("refused link.txt")
            && logs.contains("refused node_modules/dep/index.js")
            && logs.contains("refused target/debug/app"),
        "{logs}"
    );
    assert_eq!(std::fs::read_to_string(outside.path().join("victim.txt")).expect("read"), "untouched\n");
    assert_eq!(
        (ws.read("node_modules/dep/index.js"), ws.read("target/debug/app")),
        ("module.exports = 1;\n".to_owned(), "binary\n".to_owned())
    );
    // Nothing was watched or restored: the mount refused every write.
    let kinds = kinds(&ws);
    assert!(!kinds.iter().any(|k| k.starts_with("snapshot")), "{kinds:?}");
}

#[test]
fn a_rolled_back_stage_whose_attempt_ran_on_a_layer_is_reverted() {
    let Some(_) = bwrap() else { return };
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"auto\"\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: build\n    description: d\n    agent: shell\n    mode: agent\n    run: echo built > built.txt\n    rollback:\n      strategy: git_revert\n  - id: verify\n    description: d\n    agent: shell\n    mode: plan\n    run: exit 1\n",
    );
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.init_git();
    let (_, result, err) = ws.json(&["run", "p"]);
    assert_eq!(result["status"], "failed", "{err}");
    assert!(!ws.path().join("built.txt").exists(), "the rollback left the stage's file");
    let log = ws.git(&["log", "--format=%s"]);
    assert_eq!(log.lines().count(), 3, "{log}");
    assert!(log.lines().next().unwrap_or_default().starts_with("loopwright: revert stage build"), "{log}");
    assert_eq!(events_of(&ws, "layer_made").len(), 1);
}

/// A scripted OpenAI Responses API for a headless Codex: a WebSocket upgrade gets a 404 (Codex
/// falls back to HTTPS), each `POST /v1/responses` gets one message with the stage's output.
fn scripted_responses() -> (u16, Seen) {
    scripted_api(|line, _| {
        if !line.starts_with("POST /v1/responses") {
            return not_found();
        }
        let item = json!({"type": "message", "role": "assistant", "id": "msg_1",
            "content": [{"type": "output_text", "text": "## notes\nread in the sandbox"}]});
        let usage = json!({"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 17});
        let events = [
            json!({"type": "response.created", "response": {"id": "resp_1"}}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            json!({"type": "response.completed", "response": {"id": "resp_1", "usage": usage}}),
        ];
        reply("200 OK", "text/event-stream", &sse(&events))
    })
}

/// Server-sent events, each `event: TYPE` (its `type`) and `data: JSON`.
fn sse(events: &[serde_json::Value]) -> String {
    events.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or_default())).collect()
}

#[test]
fn the_real_codex_runs_sandboxed_with_its_own_model_provider_reached_through_network_model() {
    let Some(_) = bwrap() else { return };
    let bin = crate::presets::installed_clis().join("node_modules/.bin");
    if !std::process::Command::new(bin.join("codex")).arg("--version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: Codex is not installed ({}): it was not run in the sandbox", bin.display());
        return;
    }
    let (port, seen) = scripted_responses();
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"auto\"\n");
    ws.write(".loopwright/agents/reader.md", "---\nrunner: codex\nmodel: gpt-test\n---\nYou read code.\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: read\n    description: Read the code\n    agent: reader\n    mode: plan\n    outputs: [notes]\n",
    );
    // Codex finds its API in its own config file, which the sandbox copies into its home: a
    // model provider of its own on a local server, which `network: model` (the default) allows.
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir_all(home.path().join(".codex")).expect("mkdir");
    std::fs::write(
        home.path().join(".codex/config.toml"),
        format!(
            "model_provider = \"local\"\n\n[model_providers.local]\nname = \"local\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nwire_api = \"responses\"\nenv_key = \"OPENAI_API_KEY\"\n"
        ),
    )
    .expect("config");
    let (result, requests) = run_real_cli(
        &ws,
        "read it",
        &bin,
        home.path(),
        &[
            ("OPENAI_API_KEY", Some("sk-loopwright-offline-test-key".into())),
            ("OPENAI_BASE_URL", None),
            ("CODEX_HOME", None),
        ],
        "read",
        &seen,
    );
    assert_eq!(result["artifacts"]["notes"], "read in the sandbox");
    assert!(requests.iter().any(|r| r.starts_with("POST /v1/responses")), "{requests:?}");
    let all = ws.run(&["logs", "latest"]).1;
    assert!(all.contains("read: attempt 1 used 12 tokens in, 5 out"), "{all}");
    // What else it tried to reach (its sign-in, its telemetry) was refused, and journaled.
    let refused: Vec<String> =
        events_of(&ws, "network_refused").iter().map(|e| e["target"].as_str().unwrap_or_default().to_owned()).collect();
    assert!(refused.iter().all(|t| !t.starts_with("127.0.0.1")), "{refused:?}");
    // Its home was a copy: the user's own config file is as it was.
    assert_eq!(
        std::fs::read_dir(home.path().join(".codex")).expect("read").count(),
        1,
        "Codex wrote into the user's real ~/.codex"
    );
}

#[test]
fn the_real_aider_runs_sandboxed_in_plan_mode_with_the_users_git_identity_and_its_api_from_the_environment() {
    let Some(_) = bwrap() else { return };
    let aider = crate::presets::installed_clis().join("aider-venv/bin");
    if !aider.join("aider").is_file() {
        eprintln!("skipped: aider is not installed ({}): it was not run in the sandbox", aider.display());
        return;
    }
    // A scripted OpenAI chat-completions API: every request gets the stage's output.
    let (port, seen) = scripted_api(|line, _| {
        if !line.starts_with("POST /v1/chat/completions") {
            return not_found();
        }
        let body = json!({"id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-test",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "## notes\nread by aider"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}});
        reply("200 OK", "application/json", &body.to_string())
    });
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"auto\"\n");
    ws.write(".loopwright/agents/reader.md", "---\nrunner: aider\nmodel: openai/gpt-test\n---\nYou read code.\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: read\n    description: Read the code\n    agent: reader\n    mode: plan\n    outputs: [notes]\n",
    );
    ws.write("src/lib.rs", "pub fn one() -> u32 { 1 }\n");
    // A repository without an identity of its own: aider takes the user's from ~/.gitconfig
    // (bound into the sandbox read-only), or it would write one into .git/config.
    ws.git(&["init", "--quiet", "-b", "main"]);
    let home = tempfile::tempdir().expect("home");
    std::fs::write(home.path().join(".gitconfig"), "[user]\n\tname = Tester\n\temail = tester@example.com\n")
        .expect("gitconfig");
    let before = std::fs::read_to_string(ws.path().join(".git/config")).expect("git config");
    let (result, requests) = run_real_cli(
        &ws,
        "read it",
        &aider,
        home.path(),
        &[
            ("OPENAI_API_BASE", Some(format!("http://127.0.0.1:{port}/v1"))),
            ("OPENAI_API_KEY", Some("sk-loopwright-offline-test-key".into())),
        ],
        "read",
        &seen,
    );
    assert!(result["artifacts"]["notes"].as_str().is_some_and(|n| n.contains("read by aider")), "{result}");
    assert!(requests.iter().any(|r| r.starts_with("POST /v1/chat/completions")), "{requests:?}");
    // Plan mode: nothing of the workspace changed, its files (chat history, tags cache) included.
    assert_eq!(std::fs::read_to_string(ws.path().join(".git/config")).expect("git config"), before);
    let names: Vec<String> = std::fs::read_dir(ws.path())
        .expect("read")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".aider"))
        .collect();
    assert_eq!(names, Vec::<String>::new());
}

#[test]
fn the_real_gemini_cli_runs_sandboxed_with_its_settings_and_trusted_folders_copied_in() {
    let Some(_) = bwrap() else { return };
    let bin = crate::presets::installed_clis().join("node_modules/.bin");
    if !std::process::Command::new(bin.join("gemini")).arg("--version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: Gemini CLI is not installed ({}): it was not run in the sandbox", bin.display());
        return;
    }
    // A scripted Gemini API: a streamed answer for generateContent, a count for countTokens.
    let (port, seen) = scripted_api(|line, _| {
        if !line.starts_with("POST ") {
            return not_found();
        }
        let chunk = json!({"candidates": [{"content": {"parts": [{"text": "## notes\nread by gemini"}], "role": "model"},
            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 4, "totalTokenCount": 14}});
        if line.contains("countTokens") {
            reply("200 OK", "application/json", &json!({"totalTokens": 10}).to_string())
        } else if line.contains("alt=sse") {
            reply("200 OK", "text/event-stream", &format!("data: {chunk}\n\n"))
        } else {
            reply("200 OK", "application/json", &chunk.to_string())
        }
    });
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"auto\"\n");
    ws.write(".loopwright/agents/reader.md", "---\nrunner: gemini\nmodel: gemini-test\n---\nYou read code.\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: read\n    description: Read the code\n    agent: reader\n    mode: plan\n    outputs: [notes]\n",
    );
    // Its sign-in choice and the workspace's trust are in the user's ~/.gemini: copied in.
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir_all(home.path().join(".gemini")).expect("mkdir");
    std::fs::write(
        home.path().join(".gemini/settings.json"),
        json!({"security": {"auth": {"selectedType": "gemini-api-key"}}}).to_string(),
    )
    .expect("settings");
    let root = std::fs::canonicalize(ws.path()).expect("root");
    std::fs::write(
        home.path().join(".gemini/trustedFolders.json"),
        json!({root.display().to_string(): "TRUST_FOLDER"}).to_string(),
    )
    .expect("trust");
    let (result, requests) = run_real_cli(
        &ws,
        "read it",
        &bin,
        home.path(),
        &[
            ("GOOGLE_GEMINI_BASE_URL", Some(format!("http://127.0.0.1:{port}"))),
            ("GEMINI_API_KEY", Some("loopwright-offline-test-key".into())),
        ],
        "read",
        &seen,
    );
    assert_eq!(result["artifacts"]["notes"], "read by gemini");
    assert!(requests.iter().any(|r| r.contains(":streamGenerateContent")), "{requests:?}");
    let all = ws.run(&["logs", "latest"]).1;
    assert!(all.contains("read: attempt 1 used 10 tokens in, 4 out"), "{all}");
}

#[test]
fn the_real_opencode_runs_sandboxed_with_its_provider_config_copied_in_and_its_base_url_allowed() {
    let Some(_) = bwrap() else { return };
    let bin = crate::presets::installed_clis().join("node_modules/.bin");
    if !std::process::Command::new(bin.join("opencode")).arg("--version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: opencode is not installed ({}): it was not run in the sandbox", bin.display());
        return;
    }
    // A scripted OpenAI Responses API, streamed as the AI SDK reads it.
    let (port, seen) = scripted_api(|line, _| {
        if !line.starts_with("POST /v1/responses") {
            return not_found();
        }
        let text = "## notes\nread by opencode";
        let response = json!({"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-4o", "status": "in_progress", "output": []});
        let done = json!({"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]});
        let mut last = response.clone();
        last["status"] = json!("completed");
        last["output"] = json!([done]);
        last["usage"] = json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 4,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 14});
        let part = |extra: serde_json::Value| {
            let mut v = json!({"item_id": "msg_1", "output_index": 0, "content_index": 0});
            for (k, x) in extra.as_object().expect("object") {
                v[k] = x.clone();
            }
            v
        };
        reply(
            "200 OK",
            "text/event-stream",
            &sse(&[
                json!({"type": "response.created", "sequence_number": 0, "response": response}),
                json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
                    "item": {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}}),
                part(
                    json!({"type": "response.content_part.added", "sequence_number": 2, "part": {"type": "output_text", "text": "", "annotations": []}}),
                ),
                part(
                    json!({"type": "response.output_text.delta", "sequence_number": 3, "delta": text, "logprobs": []}),
                ),
                part(json!({"type": "response.output_text.done", "sequence_number": 4, "text": text, "logprobs": []})),
                json!({"type": "response.output_item.done", "sequence_number": 5, "output_index": 0, "item": done}),
                json!({"type": "response.completed", "sequence_number": 6, "response": last}),
            ]),
        )
    });
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"auto\"\n");
    ws.write(".loopwright/agents/reader.md", "---\nrunner: opencode\nmodel: openai/gpt-4o\n---\nYou read code.\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: read\n    description: Read the code\n    agent: reader\n    mode: plan\n    outputs: [notes]\n",
    );
    ws.init_git();
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir_all(home.path().join(".config/opencode")).expect("mkdir");
    let config = json!({"provider": {"openai": {"options": {"baseURL": format!("http://127.0.0.1:{port}/v1"), "apiKey": "sk-loopwright-offline"}}}});
    std::fs::write(home.path().join(".config/opencode/opencode.json"), config.to_string()).expect("config");
    let (result, requests) = run_real_cli(
        &ws,
        "read it",
        &bin,
        home.path(),
        &[("XDG_CONFIG_HOME", None), ("XDG_DATA_HOME", None)],
        "read",
        &seen,
    );
    assert_eq!(result["artifacts"]["notes"], "read by opencode");
    assert!(requests.iter().any(|r| r.starts_with("POST /v1/responses")), "{requests:?}");
    // opencode keeps its sessions under its data folder: in the attempt's home, not the user's.
    assert!(!home.path().join(".local/share/opencode").exists(), "opencode wrote into the user's real home");
}

#[test]
fn a_sandboxed_attempt_in_a_worktree_reads_its_prompt_and_its_repository_and_its_change_merges_back() {
    let Some(_) = bwrap() else { return };
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"auto\"\n");
    ws.write(
        ".loopwright/agents/dev.md",
        "---\nname: dev\nrunner: command\ncommand: [\"sh\", \"-c\", \"head -n 1 \\\"$LOOPWRIGHT_PROMPT_FILE\\\"; git rev-parse --abbrev-ref HEAD; echo made > made.txt\"]\n---\nYou write files.\n",
    );
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: make\n    description: Make a file\n    agent: dev\n    mode: agent\n",
    );
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.init_git();
    let (code, result, err) = ws.json(&["run", "p", "--worktree", "--task-id", "wt-1"]);
    assert_eq!((code, result["status"].clone()), (0, json!("success")), "{err}");
    let logs = ws.run(&["logs", "latest", "--stage", "make"]).1;
    // The prompt file (in the main checkout's state) and the repository the worktree belongs
    // to were readable; its write went through the layer into the worktree, then merged.
    assert!(logs.contains("You write files.") && logs.contains("loopwright/wt-1"), "{logs}");
    assert_eq!(ws.read("made.txt"), "made\n");
    assert_eq!(events_of(&ws, "layer_made").len(), 1);
}

#[test]
fn the_real_claude_code_answers_the_question_about_a_failed_check_in_plan_mode_in_its_sandbox() {
    let Some(_) = bwrap() else { return };
    let bin = crate::presets::installed_clis().join("node_modules/.bin");
    if !std::process::Command::new(bin.join("claude")).arg("--version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: Claude Code is not installed ({}): it was not asked", bin.display());
        return;
    }
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"auto\"\n\n[classify]\nstatistical = false\n");
    ws.write(".loopwright/agents/coder.md", "---\nrunner: claude\nmodel: claude-test\n---\nYou fix code.\n");
    ws.write("check.sh", "echo 'compiling widgets'\necho 'quux: the widget is not ready (slot 7)'\nexit 1\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: fix\n    description: Make the check pass\n    agent: coder\n    mode: agent\n    skill: closed-loop-execution\n    closed_loop:\n      max_retries: 1\n    checks:\n      - {name: widgets, type: custom, command: sh check.sh}\n",
    );
    ws.write(".gitignore", ".loopwright/state/\n");
    ws.init_git();
    // The attempt changes nothing; the question (it carries the categories) is answered with the
    // JSON asked for, in prose as a model may.
    let label = r#"The category is: {"category": "runtime-error", "signal": "the widget is not ready", "reason": "the program gave up"}"#;
    let (port, seen) = scripted_api(move |line, body| {
        let path = line.split_whitespace().nth(1).unwrap_or_default();
        if !path.starts_with("/v1/messages") || path.contains("count_tokens") {
            let text = r#"{"type":"error","error":{"type":"not_found_error","message":"not here"}}"#;
            return reply("404 Not Found", "application/json", text);
        }
        let asked = body["messages"].to_string().contains("Label the failure");
        let text = if asked { label } else { "Nothing to change." };
        let blocks = vec![json!({"type": "text", "text": text})];
        reply("200 OK", "text/event-stream", &crate::claude_tui::stream(&blocks, "end_turn"))
    });
    let home = tempfile::tempdir().expect("home");
    std::fs::write(home.path().join(".claude.json"), json!({"hasCompletedOnboarding": true}).to_string())
        .expect("seed");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = ws
        .cmd()
        .args(["run", "p", "--task", "make the widgets ready", "--json"])
        .env("PATH", path)
        .env("HOME", home.path())
        .env("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}"))
        .env("ANTHROPIC_API_KEY", "sk-ant-loopwright-offline-test-key")
        .env("DISABLE_TELEMETRY", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let evaluated = events_of(&ws, "evaluated");
    let failure = &evaluated[0]["failure"];
    let requests = seen.lock().expect("lock").clone();
    assert_eq!(
        (&failure["pattern"], &failure["classified_by"]),
        (&json!("runtime-error"), &json!("agent")),
        "{failure}\nrequests: {requests:?}\n{}",
        ws.run(&["logs", "latest"]).1
    );
    // Asked in plan mode, in its sandbox: nothing of the workspace changed.
    assert_eq!(ws.git(&["status", "--porcelain"]), "");
    assert_eq!(events_of(&ws, "usage_recorded").len(), 2, "the attempt's and the question's");
}

#[test]
fn doctor_says_per_preset_whether_it_runs_in_the_sandbox_and_what_it_may_reach() {
    let Some(_) = bwrap() else { return };
    let clis = crate::presets::installed_clis();
    let bin = clis.join("node_modules/.bin");
    if !bin.join("codex").exists() {
        eprintln!("skipped: the agent CLIs are not installed ({})", bin.display());
        return;
    }
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir_all(home.path().join(".codex")).expect("mkdir");
    std::fs::write(
        home.path().join(".codex/config.toml"),
        "model_provider = \"local\"\n\n[model_providers.local]\nname = \"local\"\nbase_url = \"http://127.0.0.1:8089/v1\"\n",
    )
    .expect("config");
    let ws = Ws::empty();
    let path = format!(
        "{}:{}:{}",
        bin.display(),
        clis.join("aider-venv/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = ws
        .cmd()
        .args(["doctor", "--json"])
        .env("PATH", path)
        .env("HOME", home.path())
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:8090")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .expect("doctor");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let agents = report["agents"].as_array().expect("agents");
    let by_name = |name: &str| agents.iter().find(|a| a["name"] == name).expect("listed").clone();
    for name in ["claude", "codex", "gemini", "opencode"] {
        assert_eq!(by_name(name)["sandbox"]["runs"], true, "{name}: {report:#}");
    }
    assert_eq!(by_name("codex")["hosts"], json!(["127.0.0.1:8089"]));
    assert_eq!(by_name("claude")["hosts"], json!(["127.0.0.1:8090"]));
    assert_eq!(by_name("gemini")["hosts"][0], "generativelanguage.googleapis.com:443");
    assert_eq!(by_name("goose")["sandbox"], serde_json::Value::Null);
}

#[test]
fn a_second_sandboxed_run_starts_bubblewrap_only_for_its_stage() {
    let Some(_) = bwrap() else { return };
    let ws = Ws::empty();
    ws.write(".loopwright/config.toml", "sandbox = \"required\"\n");
    ws.write(
        ".loopwright/pipelines/p.yml",
        "name: p\ndescription: d\nversion: 1\nstages:\n  - {id: s, description: d, agent: shell, mode: agent, run: 'true'}\n",
    );
    let state = tempfile::tempdir().expect("state");
    let log = state.path().join("bwrap-calls");
    let (bin, path) = crate::costs::counting("bwrap", &log);
    let starts = || {
        let before = std::fs::read_to_string(&log).map_or(0, |l| l.lines().count());
        let out = ws
            .cmd()
            .env("PATH", &path)
            .env("LOOPWRIGHT_SANDBOX_DIR", state.path().join("sandbox"))
            .args(["run", "p"])
            .output()
            .expect("run");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::fs::read_to_string(&log).map_or(0, |l| l.lines().count()) - before
    };
    // The first run probes (bubblewrap's version, a trial sandbox, a trial of what a stage's
    // process holds) and keeps what it found; the second reads it and starts the stage alone.
    assert!(starts() > 1, "the first run probes");
    assert_eq!(starts(), 1, "the second run starts bubblewrap for its stage only");
    // Another bubblewrap (here: the same file written again) is probed afresh.
    let wrapper = bin.path().join("bwrap");
    std::fs::write(&wrapper, std::fs::read(&wrapper).expect("read")).expect("rewrite");
    assert!(starts() > 1, "a changed bubblewrap is probed again");
}

/// Two agent-mode stages that need nothing of each other, each writing its file: `left` and
/// `right` scripts.
fn branches(ws: &Ws, left: &str, right: &str) {
    ws.write(".loopwright/config.toml", "sandbox = \"required\"\n");
    ws.write(
        ".loopwright/pipelines/fork.yml",
        &format!(
            "name: fork\ndescription: d\nversion: 1\nstages:\n\
             \x20 - id: left\n    description: l\n    agent: shell\n    mode: agent\n    needs: []\n    run: {left}\n\
             \x20 - id: right\n    description: r\n    agent: shell\n    mode: agent\n    needs: []\n    run: {right}\n"
        ),
    );
}

#[test]
fn agent_mode_stages_run_at_once_each_in_its_layer_and_overlapping_edits_fail_the_later_as_a_merge_conflict() {
    let Some(_) = bwrap() else { return };
    let ws = Ws::empty();
    branches(&ws, "sleep 0.5; echo left > left.txt", "sleep 0.5; echo right > right.txt");
    let (code, result, stderr) = ws.json(&["run", "fork"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!((ws.read("left.txt"), ws.read("right.txt")), ("left\n".to_owned(), "right\n".to_owned()));
    let journal = ws.journal(result["run_id"].as_str().expect("run id"));
    let seq = |kind: &str, stage: &str| {
        journal
            .iter()
            .find(|e| e["event"]["type"] == kind && e["event"]["stage"] == stage)
            .and_then(|e| e["seq"].as_u64())
            .expect("event")
    };
    assert!(seq("attempt_started", "right") < seq("attempt_succeeded", "left"), "{journal:#?}");
    assert!(seq("layer_made", "left") > 0 && seq("layer_made", "right") > 0);

    // Both write the same file: the one that ends first lands, the other fails as a conflict.
    let ws = Ws::empty();
    branches(&ws, "sleep 0.2; echo left > shared.txt", "sleep 1.2; echo right > shared.txt");
    let (code, result, stderr) = ws.json(&["run", "fork"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(ws.read("shared.txt"), "left\n");
    let statuses: Vec<(String, String)> =
        crate::support::stages(&result).into_iter().map(|(id, status, _, _)| (id, status)).collect();
    assert_eq!(statuses, vec![("left".into(), "success".into()), ("right".into(), "failed".into())]);
    let journal = ws.journal(result["run_id"].as_str().expect("run id"));
    let failed = journal
        .iter()
        .find(|e| e["event"]["type"] == "attempt_failed" && e["event"]["stage"] == "right")
        .expect("right failed");
    assert_eq!(failed["event"]["error"]["pattern"], "merge-conflict", "{failed}");
    assert!(
        failed["event"]["error"]["output_tail"]
            .as_str()
            .is_some_and(|t| t.contains("CONFLICT (content): Merge conflict in shared.txt")),
        "{failed}"
    );
}

#[test]
fn in_a_repository_stages_at_once_editing_other_lines_of_one_file_both_land_and_changes_go_in_pipeline_order() {
    let Some(_) = bwrap() else { return };
    let lines: String = (1..=10).map(|n| format!("{n}\n")).collect();
    // Different lines: the file gets both changes, whichever ends first.
    let ws = Ws::empty();
    branches(&ws, "\"sleep 0.8; sed -i s/^2$/two/ shared.txt\"", "\"sleep 0.1; sed -i s/^9$/nine/ shared.txt\"");
    ws.write("shared.txt", &lines);
    ws.init_git();
    let (code, result, stderr) = ws.json(&["run", "fork"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(ws.read("shared.txt"), lines.replace("2\n", "two\n").replace("9\n", "nine\n"));
    // The later stage ended first, and waited: the earlier stage's changes were applied first.
    let journal = ws.journal(result["run_id"].as_str().expect("run id"));
    let committed: Vec<&str> = journal
        .iter()
        .filter(|e| e["event"]["type"] == "changes_committed")
        .filter_map(|e| e["event"]["stage"].as_str())
        .collect();
    assert_eq!(committed, ["left", "right"]);

    // The same line: the later stage in the pipeline fails, though it ended first.
    let ws = Ws::empty();
    branches(&ws, "\"sleep 0.8; sed -i s/^5$/left/ shared.txt\"", "\"sleep 0.1; sed -i s/^5$/right/ shared.txt\"");
    ws.write("shared.txt", &lines);
    ws.init_git();
    let (code, result, stderr) = ws.json(&["run", "fork"]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(ws.read("shared.txt"), lines.replace("5\n", "left\n"));
    let journal = ws.journal(result["run_id"].as_str().expect("run id"));
    let failed = journal
        .iter()
        .find(|e| e["event"]["type"] == "attempt_failed" && e["event"]["stage"] == "right")
        .expect("right failed");
    assert_eq!(failed["event"]["error"]["pattern"], "merge-conflict", "{failed}");
    assert!(
        failed["event"]["error"]["output_tail"].as_str().is_some_and(|t| t.contains(
            "stage `right` changed the same lines of `shared.txt` as an earlier stage running at the same time"
        )),
        "{failed}"
    );
}

/// Agents `wrong`, `right` and `wordy` (right, with an extra file), each a script in the
/// workspace, and a pipeline `best` of one stage running the three as candidates, checked by
/// `grep -qx 42 answer.txt`; `extra` goes under the stage (indented 4).
fn best_of_three(ws: &Ws, agents: &str, extra: &str) {
    ws.write(".loopwright/config.toml", "sandbox = \"required\"\n");
    for (name, script) in [
        ("wrong", "cat > /dev/null; echo 41 > answer.txt; echo noise > extra.txt; echo tried"),
        ("right", "cat > /dev/null; echo 42 > answer.txt; echo solved"),
        ("wordy", "cat > /dev/null; echo 42 > answer.txt; echo more > other.txt; echo solved at length"),
        ("lost", "cat > /dev/null; echo 40 > answer.txt; echo lost"),
    ] {
        ws.write(&format!("{name}.sh"), &format!("{script}\n"));
        ws.write(
            &format!(".loopwright/agents/{name}.md"),
            &format!("---\nname: {name}\nrunner: command\ncommand: [\"sh\", \"{name}.sh\"]\n---\nYou answer.\n"),
        );
    }
    ws.write(
        ".loopwright/pipelines/best.yml",
        &format!(
            "name: best\ndescription: d\nversion: 1\nstages:\n  - id: pick\n    description: Write the answer\n    agent: right\n    mode: agent\n    candidates:\n      count: 3\n      agents: [{agents}]\n      select: [checks, smallest_diff]\n    checks:\n      - name: answer\n        type: test\n        command: grep -qx 42 answer.txt\n{extra}"
        ),
    );
}

#[test]
fn best_of_three_applies_the_passing_candidate_with_the_smallest_change_and_journals_all_three() {
    let Some(_) = bwrap() else { return };
    let ws = Ws::empty();
    best_of_three(&ws, "wordy, wrong, right", "");
    let (code, result, stderr) = ws.json(&["run", "best"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(ws.read("answer.txt"), "42\n");
    assert!(
        !ws.path().join("other.txt").exists() && !ws.path().join("extra.txt").exists(),
        "only the winner's change lands"
    );
    let journal = ws.journal(result["run_id"].as_str().expect("run id"));
    let ended: Vec<(u64, bool, Vec<String>)> = journal
        .iter()
        .filter(|e| e["event"]["type"] == "candidate_ended")
        .map(|e| {
            let r = &e["event"]["result"];
            let files =
                r["files"].as_array().expect("files").iter().map(|f| f.as_str().unwrap_or("").to_owned()).collect();
            (e["event"]["candidate"].as_u64().expect("candidate"), r["passed"].as_bool().expect("passed"), files)
        })
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        ended,
        vec![
            (0, true, vec!["answer.txt".to_owned(), "other.txt".to_owned()]),
            (1, false, vec!["answer.txt".to_owned(), "extra.txt".to_owned()]),
            (2, true, vec!["answer.txt".to_owned()]),
        ]
    );
    let chosen = journal.iter().find(|e| e["event"]["type"] == "candidate_chosen").expect("a choice");
    assert_eq!(chosen["event"]["winner"], 2);
    assert_eq!(
        chosen["event"]["why"],
        "candidate 3 (agent right): 1 of 1 check passed, 1 file changed, 41 tokens won on smallest_diff over candidate 1 (agent wordy): 1 of 1 check passed, 2 files changed, 43 tokens; 1 did not pass"
    );
    // Every candidate's agent was counted.
    let used = journal.iter().filter(|e| e["event"]["type"] == "usage_recorded").count();
    assert_eq!(used, 3);

    // The API and the run's page show the candidates side by side, the winner and why.
    let run = result["run_id"].as_str().expect("run id").to_owned();
    let daemon = crate::daemon::Daemon::start(&ws, &[]);
    let (code, attempts) = daemon.get(&format!("/api/runs/{run}/stages/pick/attempts"));
    assert_eq!(code, 200, "{attempts}");
    let shown: Vec<(String, bool, bool)> = attempts[0]["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .map(|c| {
            (
                c["agent"].as_str().unwrap_or_default().to_owned(),
                c["result"]["passed"].as_bool().unwrap_or_default(),
                c["won"].as_bool().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        vec![("wordy".into(), true, false), ("wrong".into(), false, false), ("right".into(), true, true)]
    );
    assert_eq!(attempts[0]["chosen"], chosen["event"]["why"]);
    let (_, page) = daemon.page(&format!("/runs/{run}"));
    for row in [
        "<tr class=\"candidate-passed\"><td>1</td><td>wordy</td><td class=\"status-passed\">passed</td><td>1 of 1</td><td>2</td><td>43</td><td></td></tr>",
        "<tr class=\"candidate-failed\"><td>2</td><td>wrong</td><td class=\"status-failed\">failed</td><td>0 of 1</td><td>2</td><td>41</td><td>check `answer` failed</td></tr>",
        "<tr class=\"candidate-won\"><td>3</td><td>right</td><td class=\"status-won\">★ won</td><td>1 of 1</td><td>1</td><td>41</td><td></td></tr>",
    ] {
        assert!(page.contains(row), "{row}\n{page}");
    }
}

#[test]
fn a_judge_stage_reads_the_passing_candidates_diffs_and_its_choice_wins_unless_unusable() {
    let Some(_) = bwrap() else { return };
    // The judge picks the candidate whose diff writes other.txt (wordy), which the selectors
    // would not; a judge naming a candidate that failed is not followed.
    for (answer, winner, why) in [
        (
            r#"case "$p" in *"+more"*) echo 'Looked at it. {"winner": 1, "why": "it also writes other.txt"}';; *) echo '{"winner": 3, "why": "no"}';; esac"#,
            0,
            "candidate 1 (agent wordy) won, chosen by judge `choose` among the 2 that passed: it also writes other.txt",
        ),
        (
            r#"echo '{"winner": 2, "why": "I like 41"}'"#,
            2,
            "candidate 3 (agent right): 1 of 1 check passed, 1 file changed, 41 tokens won on smallest_diff over candidate 1 (agent wordy): 1 of 1 check passed, 2 files changed, 43 tokens; 1 did not pass; judge `choose` gave no usable answer: it named candidate 2, which is not one of those that passed (1, 3)",
        ),
    ] {
        let ws = Ws::empty();
        best_of_three(&ws, "wordy, wrong, right", "");
        ws.write("judge.sh", &format!("p=$(cat)\n{answer}\n"));
        ws.write(
            ".loopwright/agents/judge.md",
            "---\nname: judge\nrunner: command\ncommand: [\"sh\", \"judge.sh\"]\nmodes: [plan]\n---\nYou judge.\n",
        );
        let text = ws
            .read(".loopwright/pipelines/best.yml")
            .replace("select: [checks, smallest_diff]", "select: {judge: choose}")
            + "  - id: choose\n    description: Choose the change that fits the task best\n    agent: judge\n    mode: plan\n";
        ws.write(".loopwright/pipelines/best.yml", &text);
        let (code, result, stderr) = ws.json(&["run", "best"]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(ws.path().join("other.txt").exists(), winner == 0, "only the winner's change lands");
        assert!(!ws.path().join("extra.txt").exists());
        let stages: Vec<(String, String)> =
            crate::support::stages(&result).into_iter().map(|(id, status, _, _)| (id, status)).collect();
        assert_eq!(stages, vec![("pick".into(), "success".into()), ("choose".into(), "skipped".into())]);
        assert_eq!(result["stages_executed"][1]["reason"], "judge");
        let run = result["run_id"].as_str().expect("run id").to_owned();
        let journal = ws.journal(&run);
        let chosen = journal.iter().find(|e| e["event"]["type"] == "candidate_chosen").expect("a choice");
        assert_eq!((chosen["event"]["winner"].as_u64(), chosen["event"]["why"].as_str()), (Some(winner), Some(why)));
        // The judge's agent is counted with the candidates'.
        assert_eq!(journal.iter().filter(|e| e["event"]["type"] == "usage_recorded").count(), 4);
        let asked =
            std::fs::read_to_string(ws.path().join(format!(".loopwright/state/runs/{run}/prompts/pick-1-judge.md")))
                .expect("the judge's prompt");
        assert!(asked.starts_with("You judge.\n"), "{asked}");
        assert!(asked.contains("Choose the change that fits the task best"), "{asked}");
        for shown in [
            "<candidate number=\"1\" agent=\"wordy\" files=\"2\" tokens=\"43\">\nchecks: answer: passed\n<diff>\n--- /dev/null\n+++ b/answer.txt\n@@ -0,0 +1 @@\n+42\n--- /dev/null\n+++ b/other.txt\n@@ -0,0 +1 @@\n+more\n</diff>",
            "<candidate number=\"3\" agent=\"right\" files=\"1\" tokens=\"41\">",
            "where N is one of 1, 3.",
        ] {
            assert!(asked.contains(shown), "{shown}\n---\n{asked}");
        }
        assert!(!asked.contains("<candidate number=\"2\""), "a candidate that failed is not offered: {asked}");
    }
}

#[test]
fn candidates_in_the_closed_loop_go_on_from_the_most_promising_failure_to_a_winner() {
    let Some(_) = bwrap() else { return };
    let ws = Ws::empty();
    best_of_three(&ws, "lost, wrong, learner", "    skill: closed-loop-execution\n");
    // Wrong until it is told what failed.
    ws.write(
        "learner.sh",
        "p=$(cat)\ncase \"$p\" in *retry_context*) echo 42 > answer.txt;; *) echo 39 > answer.txt;; esac\necho done\n",
    );
    ws.write(
        ".loopwright/agents/learner.md",
        "---\nname: learner\nrunner: command\ncommand: [\"sh\", \"learner.sh\"]\n---\nYou answer.\n",
    );
    let (code, result, stderr) = ws.json(&["run", "best"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(ws.read("answer.txt"), "42\n");
    assert!(!ws.path().join("extra.txt").exists(), "the failing rounds' other changes are dropped");
    let run = result["run_id"].as_str().expect("run id").to_owned();
    let journal = ws.journal(&run);
    let chosen: Vec<(u64, Option<u64>)> = journal
        .iter()
        .filter(|e| e["event"]["type"] == "candidate_chosen")
        .map(|e| (e["event"]["attempt"].as_u64().expect("attempt"), e["event"]["winner"].as_u64()))
        .collect();
    assert_eq!(chosen, vec![(1, None), (2, Some(2))]);
    // Round 1's most promising failure (candidate 1, the smallest change) stood for GENERATE;
    // EVALUATE found its check failing, and round 2 was told.
    let kept: Vec<String> = journal
        .iter()
        .filter(|e| e["event"]["type"] == "layer_made")
        .map(|e| e["event"]["layer"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(kept, vec!["pick-1-c0", "pick-2-c2"]);
    let checked: Vec<bool> = journal
        .iter()
        .filter(|e| e["event"]["type"] == "evaluated")
        .map(|e| e["event"]["checks"][0]["passed"].as_bool().expect("passed"))
        .collect();
    assert_eq!(checked, vec![false, true]);
    let prompt = std::fs::read_to_string(ws.path().join(format!(".loopwright/state/runs/{run}/prompts/pick-2-c2.md")))
        .expect("the second round's prompt");
    assert!(prompt.contains("<retry_context attempt=\"2\""), "{prompt}");
    assert!(prompt.contains("grep -qx 42 answer.txt"), "{prompt}");
}

#[test]
fn candidates_keep_to_their_providers_limit_one_at_a_time_without_waiting_out_a_lease() {
    let Some(_) = bwrap() else { return };
    let ws = Ws::empty();
    best_of_three(&ws, "wordy, wrong, right", "");
    // All three agents call one provider, which allows one stage at a time.
    for name in ["wordy", "wrong", "right"] {
        let path = format!(".loopwright/agents/{name}.md");
        let text = ws.read(&path).replace("runner: command\n", "runner: command\nmodel: claude-test\n");
        ws.write(&path, &text);
    }
    let config = ws.read(".loopwright/config.toml") + "\n[[limits]]\nprovider = \"anthropic\"\nconcurrent = 1\n";
    ws.write(".loopwright/config.toml", &config);
    let started = std::time::Instant::now();
    let (code, result, stderr) = ws.json(&["run", "best"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(ws.read("answer.txt"), "42\n");
    let journal = ws.journal(result["run_id"].as_str().expect("run id"));
    let order: Vec<(String, u64)> = journal
        .iter()
        .filter(|e| ["candidate_started", "candidate_ended"].contains(&e["event"]["type"].as_str().unwrap_or_default()))
        .map(|e| {
            (e["event"]["type"].as_str().unwrap_or_default().to_owned(), e["event"]["candidate"].as_u64().unwrap_or(9))
        })
        .collect();
    let expected: Vec<(String, u64)> =
        (0..3).flat_map(|c| [("candidate_started".to_owned(), c), ("candidate_ended".to_owned(), c)]).collect();
    assert_eq!(order, expected, "one candidate at a time");
    // The next candidate started when the one before ended, not when its slot's lease (a
    // minute) ran out.
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "took {:?}", started.elapsed());
}

#[test]
fn best_of_three_where_none_passes_retries_with_the_most_promising_failure() {
    let Some(_) = bwrap() else { return };
    let ws = Ws::empty();
    best_of_three(&ws, "lost, wrong, lost", "    retry: {max_attempts: 2, backoff: fixed, initial_delay_seconds: 1}\n");
    let (code, result, stderr) = ws.json(&["run", "best"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(!ws.path().join("answer.txt").exists(), "no candidate's change lands");
    let run = result["run_id"].as_str().expect("run id").to_owned();
    let journal = ws.journal(&run);
    let failed: Vec<String> = journal
        .iter()
        .filter(|e| e["event"]["type"] == "attempt_failed")
        .map(|e| e["event"]["error"]["message"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert_eq!(failed[0], "none of the 3 candidates passed (best: candidate 1 by lost: check `answer` failed)");
    let prompt = std::fs::read_to_string(ws.path().join(format!(".loopwright/state/runs/{run}/prompts/pick-2-c0.md")))
        .expect("the second round's prompt");
    assert!(
        prompt.contains("none of the 3 candidates passed (best: candidate 1 by lost: check `answer` failed)"),
        "{prompt}"
    );
}

#[test]
fn killed_mid_candidates_a_resume_keeps_the_candidates_that_ended_and_runs_the_one_in_flight_again() {
    let Some(_) = bwrap() else { return };
    let ws = Ws::empty();
    best_of_three(&ws, "right, slow", "");
    ws.write("slow.sh", "cat > /dev/null; sleep 2; echo 42 > answer.txt; echo late\n");
    ws.write(
        ".loopwright/agents/slow.md",
        "---\nname: slow\nrunner: command\ncommand: [\"sh\", \"slow.sh\"]\n---\nYou answer.\n",
    );
    let text = ws.read(".loopwright/pipelines/best.yml").replace("count: 3", "count: 2");
    ws.write(".loopwright/pipelines/best.yml", &text);
    let child = crate::support::spawn_group(&ws, &["run", "best", "--task-id", "task-kill"]);
    // Killed once the fast candidate's end is journaled, the slow one still running.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let run = loop {
        assert!(std::time::Instant::now() < deadline, "the fast candidate never ended");
        std::thread::sleep(std::time::Duration::from_millis(50));
        // Before the run is journaled there is none yet (and no JSON to read).
        let (_, out, _) = ws.run(&["status", "latest", "--json"]);
        let status: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        let Some(run) = status["run_id"].as_str().map(str::to_owned) else { continue };
        if ws.journal(&run).iter().any(|e| e["event"]["type"] == "candidate_ended") {
            break run;
        }
    };
    crate::support::kill_group(child);
    let (code, _, stderr) = ws.json(&["resume", &run]);
    assert_eq!(code, 0, "{stderr}");
    let journal = ws.journal(&run);
    let started = |candidate: u64| {
        journal
            .iter()
            .filter(|e| e["event"]["type"] == "candidate_started" && e["event"]["candidate"] == candidate)
            .count()
    };
    assert_eq!((started(0), started(1)), (1, 2), "the ended candidate is kept, the one in flight runs again");
    let ended: Vec<u64> = journal
        .iter()
        .filter(|e| e["event"]["type"] == "candidate_ended")
        .map(|e| e["event"]["candidate"].as_u64().expect("candidate"))
        .collect();
    assert_eq!(ended, vec![0, 1]);
    let chosen = journal.iter().filter(|e| e["event"]["type"] == "candidate_chosen").count();
    assert_eq!(chosen, 1);
    assert_eq!(ws.read("answer.txt"), "42\n");
}

#[test]
fn a_crash_after_the_winners_change_was_committed_adopts_it_and_runs_no_candidate_again() {
    let Some(_) = bwrap() else { return };
    let ws = Ws::empty();
    best_of_three(&ws, "wordy, wrong, right", "");
    ws.write("answer.txt", "0\n");
    ws.init_git();
    let sandbox = tempfile::tempdir().expect("sandbox dir");
    let dir = sandbox.path().join("sandbox");
    let loopwright = |args: &[&str]| {
        let out = ws.cmd().env("LOOPWRIGHT_SANDBOX_DIR", &dir).args(args).output().expect("loopwright");
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (code, out) = loopwright(&["run", "best", "--json"]);
    assert_eq!(code, 0, "{out}");
    let run: String =
        serde_json::from_str::<serde_json::Value>(&out).expect("json")["run_id"].as_str().expect("run id").to_owned();
    let head = ws.git(&["rev-parse", "HEAD"]).trim().to_owned();
    // What a crash leaves between the winner's layer copied, committed and removed and the
    // attempt's end journaled: the journal up to the choice, the commit made, no layer (the
    // run's layers folder still on this machine).
    {
        let conn = rusqlite::Connection::open(ws.path().join(".loopwright/state/state.db")).expect("db");
        let chosen: i64 = conn
            .query_row("SELECT seq FROM events WHERE run_id = ?1 AND kind = 'candidate_chosen'", [&run], |r| r.get(0))
            .expect("chosen");
        conn.execute("DELETE FROM events WHERE run_id = ?1 AND seq > ?2", rusqlite::params![run, chosen]).expect("cut");
        conn.execute("DELETE FROM feed WHERE run_id = ?1 AND seq > ?2", rusqlite::params![run, chosen]).expect("cut");
        conn.execute(
            "UPDATE runs SET status = 'running', last_seq = ?2 WHERE run_id = ?1",
            rusqlite::params![run, chosen],
        )
        .expect("row");
    }
    std::fs::create_dir_all(dir.join(&run).join("layers")).expect("layers folder");
    let (code, out) = loopwright(&["resume", &run, "--json"]);
    assert_eq!(code, 0, "{out}");
    let journal = ws.journal(&run);
    let count = |kind: &str| journal.iter().filter(|e| e["event"]["type"] == kind).count();
    assert_eq!((count("candidate_started"), count("candidate_chosen")), (3, 1), "{journal:#?}");
    // The commit the crash left is adopted, not made again.
    let committed: Vec<&serde_json::Value> =
        journal.iter().filter(|e| e["event"]["type"] == "changes_committed").map(|e| &e["event"]["commit"]).collect();
    assert_eq!(committed, [&serde_json::Value::String(head.clone())]);
    assert_eq!(ws.git(&["rev-parse", "HEAD"]).trim(), head);
    assert_eq!(ws.read("answer.txt"), "42\n");
}

#[test]
fn killed_at_twenty_moments_of_a_round_of_candidates_resume_never_starts_an_ended_candidate_again() {
    let Some(_) = bwrap() else { return };
    for round in 0..20u64 {
        let ws = Ws::empty();
        best_of_three(&ws, "right, slow, wordy", "");
        ws.write("slow.sh", "cat > /dev/null; sleep 0.4; echo 42 > answer.txt; echo late\n");
        ws.write(
            ".loopwright/agents/slow.md",
            "---\nname: slow\nrunner: command\ncommand: [\"sh\", \"slow.sh\"]\n---\nYou answer.\n",
        );
        let child = crate::support::spawn_group(&ws, &["run", "best", "--task-id", "task-kill"]);
        // Moments spread over the round's half second (and past it).
        std::thread::sleep(std::time::Duration::from_millis(30 + (round * 113) % 620));
        crate::support::kill_group(child);
        let (code, out, stderr) = ws.run(&["resume", "latest", "--json"]);
        if code != 0 && stderr.contains("no runs yet") {
            continue;
        }
        let result: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        assert!(code == 0 || result["status"] == "success", "round {round}: {stderr}");
        let (_, shown, _) = ws.json(&["status", "latest"]);
        assert_eq!(shown["status"], "success", "round {round}: {shown}");
        let journal = ws.journal(shown["run_id"].as_str().expect("run id"));
        for candidate in 0..3u64 {
            let of = |kind: &str| -> Vec<u64> {
                journal
                    .iter()
                    .filter(|e| e["event"]["type"] == kind && e["event"]["candidate"] == candidate)
                    .map(|e| e["seq"].as_u64().expect("seq"))
                    .collect()
            };
            let ended = of("candidate_ended");
            assert_eq!(ended.len(), 1, "round {round}, candidate {candidate}: {journal:#?}");
            assert!(
                of("candidate_started").iter().all(|s| *s < ended[0]),
                "round {round}: started again after it ended"
            );
        }
        assert_eq!(journal.iter().filter(|e| e["event"]["type"] == "candidate_chosen").count(), 1, "round {round}");
        assert_eq!(ws.read("answer.txt"), "42\n", "round {round}");
        assert!(!ws.path().join("other.txt").exists(), "round {round}: a loser's change landed");
    }
}
