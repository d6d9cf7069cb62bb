//! The sandbox with the real `bwrap` (and the kernel's overlay in a user namespace): what a
//! process inside may and may not do, and a layer's changes copied back through the path
//! guard. Without bubblewrap these tests say so and pass, unless `LOOPWRIGHT_REQUIRE_SANDBOX`
//! is set (`scripts/sandbox-test.sh` installs bubblewrap and sets it; CI runs that).

use std::path::{Path, PathBuf};
use std::process::Command;

use loopwright_runners::sandbox::{self, Overlay, Plan, Write};
use pretty_assertions::assert_eq;

/// The `bwrap` to test with, if this machine has one that works.
fn bwrap() -> Option<PathBuf> {
    let scratch = tempfile::tempdir().expect("tempdir");
    match sandbox::probe(scratch.path()).usable() {
        Ok(path) => Some(path.to_path_buf()),
        Err(why) => {
            assert!(std::env::var_os("LOOPWRIGHT_REQUIRE_SANDBOX").is_none(), "no sandbox here: {why}");
            eprintln!("skipped: no sandbox here ({why})");
            None
        }
    }
}

/// Every way of mounting a layer that works here: the kernel's overlay, and fuse-overlayfs
/// where it is installed and works (CI installs it).
fn overlays() -> Vec<Overlay> {
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut all = vec![Overlay::Kernel];
    let fuse = loopwright_runners::process::resolve("fuse-overlayfs");
    if fuse.is_absolute() {
        match sandbox::try_overlay(scratch.path(), &Overlay::Fuse(fuse.clone())) {
            Ok(()) => all.push(Overlay::Fuse(fuse)),
            Err(why) => {
                eprintln!("note: fuse-overlayfs does not work here ({why}): only the kernel's overlay is tested")
            }
        }
    }
    all
}

struct Case {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    home: PathBuf,
    layer: PathBuf,
}

fn case() -> Case {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    let home = dir.path().join("home");
    let layer = dir.path().join("layer");
    for d in [ws.join(".git/hooks"), ws.join(".loopwright/pipelines"), ws.join("src/old"), home.clone(), layer.clone()]
    {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    std::fs::write(ws.join("keep.txt"), "keep\n").expect("write");
    std::fs::write(ws.join("change.txt"), "before\n").expect("write");
    std::fs::write(ws.join("gone.txt"), "bye\n").expect("write");
    std::fs::write(ws.join("src/old/a.rs"), "old\n").expect("write");
    Case { _dir: dir, ws, home, layer }
}

fn plan(c: &Case, write: Write) -> Plan {
    Plan {
        workspace: c.ws.clone(),
        write,
        home: c.home.clone(),
        config: vec![],
        network: false,
        proxy: None,
        user_home: None,
        limits: None,
        read_only: vec![],
        hidden: vec![],
        sockets: vec![],
    }
}

/// Runs `script` with `sh -c` in the sandbox: (exit code, stdout, stderr).
fn run(bwrap: &Path, plan: &Plan, script: &str) -> (i32, String, String) {
    let argv = sandbox::command(bwrap, plan, &["sh".into(), "-c".into(), script.into()]);
    let out = Command::new(&argv[0]).args(&argv[1..]).output().expect("run the sandbox");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("read").map(|e| e.expect("entry")) {
            let rel = e.path().strip_prefix(root).expect("inside").display().to_string();
            if e.file_type().expect("type").is_dir() {
                stack.push(e.path());
                out.push(format!("{rel}/"));
            } else {
                out.push(format!("{rel}: {}", std::fs::read_to_string(e.path()).unwrap_or_default().trim()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn plan_mode_cannot_write_the_workspace_the_host_or_the_control_folders() {
    let Some(bwrap) = bwrap() else { return };
    let c = case();
    let before = tree(&c.ws);
    let host_tmp = std::env::temp_dir().join(format!("loopwright-sandbox-escape-{}", std::process::id()));
    let script = format!(
        "for f in new.txt .git/hooks/post-commit .loopwright/pipelines/x.yml ../outside.txt {tmp}; do \
           if echo x > $f 2>/dev/null; then echo wrote $f; fi; done; echo home > $HOME/in-home; cat $HOME/in-home",
        tmp = host_tmp.display()
    );
    let (code, out, err) = run(&bwrap, &plan(&c, Write::ReadOnly), &script);
    // Only its own /tmp and home took a write (the test's workspace lies under /tmp, so its
    // parent is in the private /tmp too).
    let expected = format!("wrote ../outside.txt\nwrote {}\nhome", host_tmp.display());
    assert_eq!((code, out.trim()), (0, expected.as_str()), "{err}");
    assert_eq!(tree(&c.ws), before);
    assert!(!host_tmp.exists(), "the host's /tmp was written");
    assert!(!c.ws.parent().expect("parent").join("outside.txt").exists());
}

#[test]
fn a_layer_takes_every_write_and_copies_back_only_what_the_guard_allows() {
    let Some(bwrap) = bwrap() else { return };
    for overlay in overlays() {
        let c = case();
        let layer = sandbox::Layer::of(&c.layer, "run-1", "s-1");
        layer.make(&overlay).expect("make");
        let before = tree(&c.ws);
        let script = "echo after > change.txt && rm gone.txt && mkdir -p src/new && echo n > src/new/b.rs && \
                  rm -r src/old && mkdir src/old && echo fresh > src/old/c.rs && ln -s keep.txt link && \
                  (echo hook > .git/hooks/post-commit 2>/dev/null || echo git-refused) && \
                  (echo p > .loopwright/pipelines/x.yml 2>/dev/null || echo loopwright-refused)";
        let write = Write::Layer { upper: layer.upper(), work: layer.work(), overlay: overlay.clone() };
        let (code, out, err) = run(&bwrap, &plan(&c, write), script);
        assert_eq!((code, out.trim()), (0, "git-refused\nloopwright-refused"), "{overlay:?}: {err}");
        // Nothing reached the workspace while the attempt ran.
        assert_eq!(tree(&c.ws), before);
        let copied = layer.copy_into(&c.ws, None, u64::MAX).expect("copy back");
        assert_eq!(copied.written, ["change.txt", "link", "src/new/b.rs", "src/old/c.rs"], "{overlay:?}");
        assert_eq!(copied.deleted, ["gone.txt", "src/old"], "{overlay:?}");
        assert_eq!(copied.refused, Vec::<(String, String)>::new());
        assert_eq!(
            tree(&c.ws),
            [
                ".git/",
                ".git/hooks/",
                ".loopwright/",
                ".loopwright/pipelines/",
                "change.txt: after",
                "keep.txt: keep",
                "link: keep",
                "src/",
                "src/new/",
                "src/new/b.rs: n",
                "src/old/",
                "src/old/c.rs: fresh",
            ]
        );
        assert_eq!(std::fs::read_link(c.ws.join("link")).expect("a link"), Path::new("keep.txt"));
    }
}

#[test]
fn a_layer_dropped_leaves_the_workspace_as_it_was() {
    let Some(bwrap) = bwrap() else { return };
    for overlay in overlays() {
        let c = case();
        let layer = sandbox::Layer::of(&c.layer, "run-1", "s-1");
        layer.make(&overlay).expect("make");
        let before = tree(&c.ws);
        let write = Write::Layer { upper: layer.upper(), work: layer.work(), overlay: overlay.clone() };
        let (code, _, err) = run(&bwrap, &plan(&c, write), "rm -rf src keep.txt; echo x > new; exit 3");
        assert_eq!(code, 3, "{overlay:?}: {err}");
        assert_eq!(
            layer.discard(&c.ws, None).expect("drop the layer"),
            3,
            "{overlay:?}: the src and keep.txt whiteouts, new"
        );
        assert_eq!(tree(&c.ws), before);
    }
}

#[test]
fn copy_back_refuses_control_folders_and_never_writes_through_a_link() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (upper, ws) = (dir.path().join("upper"), dir.path().join("ws"));
    std::fs::create_dir_all(upper.join(".git/hooks")).expect("mkdir");
    std::fs::create_dir_all(upper.join("out")).expect("mkdir");
    std::fs::create_dir_all(ws.join(".git/hooks")).expect("mkdir");
    std::fs::write(upper.join(".git/hooks/post-commit"), "evil").expect("write");
    std::fs::write(upper.join("out/x"), "x").expect("write");
    std::fs::write(upper.join("fine.txt"), "ok").expect("write");
    // In the workspace `out` is a link out of it; the layer says it is a folder: the link is
    // replaced by a real folder, never written through.
    std::os::unix::fs::symlink(dir.path(), ws.join("out")).expect("link");
    let copied = sandbox::copy_back(&upper, &ws).expect("copy back");
    assert_eq!(copied.written, ["fine.txt", "out/x"]);
    let refused: Vec<&str> = copied.refused.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(refused, [".git"]);
    assert!(!ws.join(".git/hooks/post-commit").exists() && !dir.path().join("x").exists());
    assert!(std::fs::symlink_metadata(ws.join("out")).expect("out").is_dir());
    // Deeper too: a link the layer goes through is replaced before anything is written below it.
    let upper2 = dir.path().join("upper2");
    std::fs::create_dir_all(upper2.join("via/deep")).expect("mkdir");
    std::fs::write(upper2.join("via/deep/y"), "y").expect("write");
    std::fs::create_dir_all(dir.path().join("elsewhere/deep")).expect("mkdir");
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), ws.join("via")).expect("link");
    let copied = sandbox::copy_back(&upper2, &ws).expect("copy back");
    assert_eq!(copied.written, ["via/deep/y"]);
    assert!(!dir.path().join("elsewhere/deep/y").exists());
    assert!(std::fs::symlink_metadata(ws.join("via")).expect("via").is_dir());
}

#[test]
fn nothing_started_inside_outlives_the_sandbox_and_the_network_is_closed() {
    let Some(bwrap) = bwrap() else { return };
    let c = case();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let marker = format!("loopwright-sandbox-orphan-{}", std::process::id());
    // A daemon that double-forks, calls setsid and clears its environment; then a connection
    // to a server on the host's loopback.
    let script = format!(
        "(setsid env -i sh -c 'exec -a {marker} sleep 300' &) ; sleep 0.3; \
         if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo connected; else echo refused; fi"
    );
    let bash = |s: &str| vec!["bash".to_owned(), "-c".to_owned(), s.to_owned()];
    let argv = sandbox::command(&bwrap, &plan(&c, Write::ReadOnly), &bash(&script));
    let out = Command::new(&argv[0]).args(&argv[1..]).output().expect("run");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "refused", "{}", String::from_utf8_lossy(&out.stderr));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let survivors: Vec<String> = std::fs::read_dir("/proc")
        .expect("proc")
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&marker))
        .collect();
    assert_eq!(survivors, Vec::<String>::new());
    drop(listener);
}

/// Asks the proxy at `socket` for a tunnel to `target`; the status line it answered, and the
/// stream (for the tunnel).
async fn connect_via(socket: &Path, target: &str) -> (String, tokio::net::UnixStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::UnixStream::connect(socket).await.expect("connect to the proxy");
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes()).await.expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await.expect("read") == 0 {
            break;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    (head.lines().next().unwrap_or_default().to_owned(), s)
}

#[tokio::test]
async fn the_proxy_tunnels_to_allowed_hosts_only_and_keeps_what_it_refused() {
    use loopwright_runners::proxy::{self, Allowed, Refused};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // An echo server on the host's loopback.
    let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = server.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = server.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                while let Ok(n) = conn.read(&mut buf).await {
                    if n == 0 || conn.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let allow = vec![
        Allowed::parse(&format!("127.0.0.1:{port}")).expect("allowed"),
        Allowed::parse(&format!("localhost:{port}")).expect("allowed"),
    ];
    let running = proxy::start(&dir.path().join("proxy.sock"), allow).expect("proxy");
    // Allowed as written: the tunnel carries bytes both ways.
    let (status, mut tunnel) = connect_via(&running.socket, &format!("127.0.0.1:{port}")).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    tunnel.write_all(b"ping").await.expect("write");
    let mut echoed = [0u8; 4];
    tunnel.read_exact(&mut echoed).await.expect("echo");
    assert_eq!(&echoed, b"ping");
    // Another port; a name that leads inside; a plain request.
    let (status, _) = connect_via(&running.socket, &format!("127.0.0.1:{}", port.wrapping_add(1))).await;
    assert_eq!(status, "HTTP/1.1 403 Forbidden");
    let (status, _) = connect_via(&running.socket, &format!("localhost:{port}")).await;
    assert_eq!(status, "HTTP/1.1 403 Forbidden");
    let mut plain = tokio::net::UnixStream::connect(&running.socket).await.expect("connect");
    plain.write_all(b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n").await.expect("write");
    let mut answer = vec![0u8; 12];
    plain.read_exact(&mut answer).await.expect("read");
    assert_eq!(String::from_utf8_lossy(&answer), "HTTP/1.1 405");
    let refused = running.refused();
    let targets: Vec<(&str, &str)> =
        refused.iter().map(|Refused { target, why }| (target.as_str(), why.as_str())).collect();
    assert_eq!(targets[0], (format!("127.0.0.1:{}", port.wrapping_add(1)).as_str(), "not a host this stage may reach"));
    assert_eq!(targets[1].0, format!("localhost:{port}"));
    assert!(
        targets[1].1.starts_with("the name resolves to ")
            && targets[1].1.ends_with("an address inside this machine's networks"),
        "{targets:?}"
    );
    assert_eq!(targets[2], ("GET http://example.com/", "only HTTPS tunnels (CONNECT) go through"));
}

#[test]
fn a_copy_a_crash_cut_short_is_undone_when_its_layer_is_dropped_and_kept_once_committed() {
    let Some(bwrap) = bwrap() else { return };
    let state = tempfile::tempdir().expect("state");
    for (overlay, committed) in overlays().into_iter().flat_map(|o| [(o.clone(), false), (o, true)]) {
        let c = case();
        let layer = sandbox::Layer::of(state.path(), "run-1", if committed { "s-2" } else { "s-1" });
        layer.make(&overlay).expect("make");
        let before = tree(&c.ws);
        let script = "echo after > change.txt && rm gone.txt && rm -r src/old && mkdir src/old && echo fresh > src/old/c.rs && echo n > new.txt";
        let write = Write::Layer { upper: layer.upper(), work: layer.work(), overlay: overlay.clone() };
        let (code, _, err) = run(&bwrap, &plan(&c, write), script);
        assert_eq!(code, 0, "{overlay:?}: {err}");
        let (modified, created, deleted) = layer.changes(&c.ws).expect("changes");
        assert_eq!(
            (modified, created, deleted),
            (
                vec!["change.txt".to_owned()],
                vec!["new.txt".to_owned(), "src/old/c.rs".to_owned()],
                vec!["gone.txt".to_owned(), "src/old".to_owned()]
            )
        );
        // The copy ran (as far as a crash let it), then loopwright died before its journal
        // entry; on resume the layer is dropped. Until a commit moved the repository on, the
        // workspace is put back as it was; after one, the copy stands.
        layer.copy_into(&c.ws, Some("commit-a"), u64::MAX).expect("copy");
        let after = tree(&c.ws);
        assert_ne!(after, before);
        let head_now = if committed { "commit-b" } else { "commit-a" };
        let held = layer.discard(&c.ws, Some(head_now)).expect("discard");
        assert_eq!(held, 6, "{overlay:?}: change.txt, the gone.txt whiteout, src/, src/old (opaque), c.rs, new.txt");
        assert_eq!(tree(&c.ws), if committed { after } else { before }, "committed: {committed}");
        assert!(!layer.dir.exists());
    }
}
