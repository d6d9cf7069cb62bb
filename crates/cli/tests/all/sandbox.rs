//! `loopwright doctor`: what the machine offers for sandboxes and which agent CLIs it has.

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
               "namespaces": "not tried: no bubblewrap", "overlay": "not tried: no bubblewrap"})
    );
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
        }),
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
fn a_sandboxed_plan_stage_is_refused_by_the_mount_and_writes_nothing_anywhere() {
    let Some(_) = bwrap() else { return };
    let marker = std::env::temp_dir().join(format!("loopwright-plan-escape-{}", std::process::id()));
    let pipeline = format!(
        "name: p\ndescription: d\nversion: 1\nstages:\n  - id: look\n    description: d\n    agent: shell\n    mode: plan\n    run: \"echo z > {}; echo y > $HOME/h; echo x > new.txt\"\n",
        marker.display()
    );
    for (mode, host_written) in [("auto", false), ("off", true)] {
        let ws = Ws::empty();
        ws.write(".loopwright/config.toml", &format!("sandbox = \"{mode}\"\n"));
        ws.write(".loopwright/pipelines/p.yml", &pipeline);
        let _ = std::fs::remove_file(&marker);
        let (_, result, err) = ws.json(&["run", "p"]);
        // Sandboxed, the write into the workspace fails at the mount (the stage fails, there is
        // nothing to restore) and the host's /tmp is not the one written; unsandboxed, the
        // watcher catches the workspace write and restores it, but the host's /tmp is written.
        assert!(!ws.path().join("new.txt").exists(), "{mode}: {result}\n{err}");
        assert_eq!(marker.exists(), host_written, "{mode}: {err}");
        if mode == "auto" {
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
    // Its home was its own, under the run's folder.
    assert!(logs.contains("/.loopwright/state/runs/") && logs.contains("/homes/work-1"), "{logs}");
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
