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
    let probe = loopwright_runners::sandbox::probe(scratch.path());
    match (probe.missing(), probe.bwrap) {
        (None, Ok((path, _))) => Some(path),
        (why, _) => {
            let why = why.unwrap_or_default();
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
