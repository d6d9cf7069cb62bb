//! Sandboxed processes (SPEC §12), built with bubblewrap: the program `bwrap` is called, not
//! reimplemented.
//!
//! A stage's process sees a private mount view. The host's file system is read-only, with a
//! fresh `/dev`, `/proc`, `/tmp` and an empty home of its own. In the workspace it may write:
//!
//! - nothing (plan mode): the workspace is read-only like the rest;
//! - straight into it (a sandboxed process that must change the real files);
//! - into a **layer**: a kernel overlay over the workspace whose upper directory collects the
//!   attempt's writes, copied back through the path guard only once the attempt passed
//!   ([`copy_back`]), or dropped by removing the directory. bubblewrap 0.8 (Debian 12's) has no
//!   overlay option, so the overlay is mounted by `unshare -Urm` in a user and mount namespace
//!   of its own, and bubblewrap runs inside it (nested user namespaces are allowed).
//!
//! `.git/` and `.loopwright/` are read-only whatever the stage may write. The process runs in
//! a PID namespace of its own and dies with its parent (nothing it starts outlives the
//! attempt), and, with no network allowed, in a network namespace with only loopback.
//!
//! [`probe`] finds out what this machine allows (`loopwright doctor` shows it): bubblewrap and
//! its version, user namespaces, the overlay in a user namespace.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where a sandboxed process may write in the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Nowhere (plan mode).
    ReadOnly,
    /// Into the workspace itself (`.git/` and `.loopwright/` still read-only).
    Direct,
    /// Into a layer over the workspace: writes land in `upper` (`work` is the overlay's own).
    Layer {
        /// The overlay's upper directory: the attempt's changes.
        upper: PathBuf,
        /// The overlay's work directory (same file system as `upper`).
        work: PathBuf,
        /// What mounts it.
        overlay: Overlay,
    },
}

/// What mounts a layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlay {
    /// The kernel's overlay file system, mounted in a user namespace (Linux 5.11 and later).
    Kernel,
    /// `fuse-overlayfs` (this program), where the kernel's cannot be mounted without
    /// privileges. It marks deletions with `.wh.NAME` files and a replaced folder with a
    /// `.wh..wh..opq` file when it cannot make the kernel's character devices.
    Fuse(PathBuf),
}

impl Overlay {
    /// In words, for `doctor` and the journal.
    pub fn describe(&self) -> &'static str {
        match self {
            Overlay::Kernel => "a kernel overlay in a user namespace",
            Overlay::Fuse(_) => "fuse-overlayfs in a user namespace",
        }
    }
}

/// How a sandboxed process is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The workspace (absolute); the process starts there.
    pub workspace: PathBuf,
    /// Where it may write.
    pub write: Write,
    /// Its home folder (an empty one of the attempt's, created by the caller).
    pub home: PathBuf,
    /// Host folders bound read-only at the same path in its home (an agent's own
    /// configuration: `~/.claude`, `~/.codex`, …), as (host path, path under its home).
    pub config: Vec<(PathBuf, String)>,
    /// Whether it may use the network of the machine. Without it the process has only
    /// loopback, and, with `proxy`, the hosts the proxy allows.
    pub network: bool,
    /// The allow-list proxy it reaches the network through (with `network` false): the host
    /// socket of [`crate::proxy::start`], and the loopwright program that forwards a loopback
    /// port to it inside the sandbox (`loopwright sandbox-exec`).
    pub proxy: Option<ProxyPlan>,
    /// The user's home as the process sees it: hidden but for the toolchains it runs with.
    pub user_home: Option<UserHome>,
    /// Kernel limits set on it (with util-linux `prlimit`).
    pub limits: Option<Limits>,
    /// Host paths it may read, bound read-only at the same path (the attempt's prompt file,
    /// the repository a worktree belongs to, the programs it runs that live under `/tmp`:
    /// [`exposed`]), where the private `/tmp` or the hidden home would hide them. Bound after
    /// `hidden`, so a run's prompts show through its hidden state folder.
    pub read_only: Vec<PathBuf>,
    /// Folders it must not see at all, an empty one over each: loopwright's state folders.
    pub hidden: Vec<PathBuf>,
    /// Host Unix sockets it may connect to (`network: [unix:/path]`), bound at their path.
    pub sockets: Vec<PathBuf>,
}

/// What a process in `workspace` needs to read besides it: for a git worktree, the repository
/// it belongs to (its `.git` file names `…/.git/worktrees/NAME`).
pub fn worktree_repository(workspace: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(workspace.join(".git")).ok()?;
    let gitdir = PathBuf::from(text.strip_prefix("gitdir:")?.trim());
    let common = gitdir.parent()?.parent()?;
    (common.file_name().is_some_and(|n| n == ".git") && common.is_dir()).then(|| common.to_path_buf())
}

/// Kernel limits on a sandboxed process and everything it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The `prlimit` program.
    pub prlimit: PathBuf,
    /// The largest file it may write, in bytes.
    pub file_size: u64,
    /// Processes its user may have at once.
    pub processes: u64,
}

/// What of the user's home a sandboxed process sees: an empty folder, but for the toolchains
/// and programs it runs with, bound back read-only (an allow list: `~/.ssh`, shell histories,
/// other tools' tokens stay out of sight, by their absolute paths too).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserHome {
    /// The user's home.
    pub path: PathBuf,
    /// What is bound back read-only: toolchain folders found there, the `PATH` entries under
    /// it, and the folder of each program the stage runs that lives there.
    pub expose: Vec<PathBuf>,
    /// Files inside those hidden again (the registry tokens a toolchain keeps).
    pub conceal: Vec<PathBuf>,
    /// Variables that point a toolchain at its folder, where it would look under `HOME`
    /// (`CARGO_HOME`, `RUSTUP_HOME`, …), for those the environment does not set.
    pub env: Vec<(String, String)>,
}

/// Toolchain folders under a home, with the variable that locates each (if one does).
const TOOLCHAINS: &[(&str, &str)] = &[
    ("CARGO_HOME", ".cargo"),
    ("RUSTUP_HOME", ".rustup"),
    ("NVM_DIR", ".nvm"),
    ("PYENV_ROOT", ".pyenv"),
    ("BUN_INSTALL", ".bun"),
    ("VOLTA_HOME", ".volta"),
    ("ASDF_DATA_DIR", ".asdf"),
    ("GOPATH", "go"),
    ("DENO_INSTALL", ".deno"),
    ("", ".local/bin"),
    ("", ".local/lib"),
    ("", ".local/share/pipx"),
    ("", ".local/pipx"),
    ("", ".local/share/claude"),
    ("", ".npm-global"),
];

/// Registry tokens kept inside toolchain folders.
const TOOLCHAIN_SECRETS: &[&str] = &[".cargo/credentials.toml", ".cargo/credentials"];

/// What of the user's home `home` a sandboxed process sees, given `PATH` and the programs the
/// stage runs (as written; found on `PATH`).
pub fn user_home(home: &Path, path: Option<&std::ffi::OsStr>, programs: &[&str]) -> UserHome {
    let mut expose: Vec<PathBuf> = Vec::new();
    let mut env = Vec::new();
    for (var, rel) in TOOLCHAINS {
        let dir = home.join(rel);
        if dir.is_dir() {
            add_exposed(home, dir.clone(), &mut expose);
            if !var.is_empty() && std::env::var_os(var).is_none() {
                env.push(((*var).to_owned(), dir.display().to_string()));
            }
        }
    }
    for dir in exposed(home, path, programs) {
        add_exposed(home, dir, &mut expose);
    }
    expose.sort();
    let conceal = TOOLCHAIN_SECRETS.iter().map(|f| home.join(f)).filter(|f| f.is_file()).collect();
    UserHome { path: home.to_path_buf(), expose, conceal, env }
}

/// What under `root` (a folder the sandbox hides: the user's home, `/tmp`) a process needs to
/// run the programs it runs: the `PATH` entries under it, with their install prefix (the
/// parent of a `bin` or `.bin` folder: `…/node/v22`, a virtualenv, `node_modules`) unless that
/// is `root` itself or `~/.local`, and the folder of each of `programs` (found on `PATH`,
/// links followed) that lives there.
pub fn exposed(root: &Path, path: Option<&std::ffi::OsStr>, programs: &[&str]) -> Vec<PathBuf> {
    let mut expose = Vec::new();
    let entries: Vec<PathBuf> = path.map(|p| std::env::split_paths(p).collect()).unwrap_or_default();
    for entry in &entries {
        add_exposed(root, entry.clone(), &mut expose);
        if entry.file_name().is_some_and(|n| n == "bin" || n == ".bin")
            && let Some(prefix) = entry.parent()
            && prefix != root
            && prefix != root.join(".local")
        {
            add_exposed(root, prefix.to_path_buf(), &mut expose);
        }
    }
    for program in programs {
        let found = if program.contains('/') {
            Some(PathBuf::from(program))
        } else {
            entries.iter().map(|d| d.join(program)).find(|p| p.is_file())
        };
        if let Some(real) = found.and_then(|p| p.canonicalize().ok())
            && let Some(dir) = real.parent()
        {
            add_exposed(root, dir.to_path_buf(), &mut expose);
        }
    }
    expose.sort();
    expose
}

/// Adds `path` to what is bound back under `root`, unless it is `root`, lies outside it, is
/// missing, or is inside what is bound already (what it contains is then dropped).
fn add_exposed(root: &Path, path: PathBuf, expose: &mut Vec<PathBuf>) {
    if path != root && path.starts_with(root) && path.exists() && !expose.iter().any(|e| path.starts_with(e)) {
        expose.retain(|e| !e.starts_with(&path));
        expose.push(path);
    }
}

/// How a sandboxed process reaches the allow-list proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyPlan {
    /// The proxy's Unix socket on the host.
    pub socket: PathBuf,
    /// The loopwright program (its `sandbox-exec` forwards a port and runs the process).
    pub helper: PathBuf,
    /// Loopback addresses allowed as written (`127.0.0.1:8080`): inside, each is listened on
    /// and tunnelled through the proxy, and left out of the proxy settings (`NO_PROXY`).
    pub tunnels: Vec<(String, u16)>,
}

/// Variables of loopwright's environment every sandboxed process is given (SPEC §12): where
/// it runs and how it speaks (`PATH`, `LANG`, `LC_*`, `TERM`, `TZ`), who it is, the trace it
/// belongs to, and where the toolchains it builds with live. `HOME`, `TMPDIR` and the proxy's
/// variables are set by the sandbox itself, loopwright's own `LOOPWRIGHT_*` by the runner.
const ENVIRONMENT: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "USER",
    "LOGNAME",
    "TRACEPARENT",
    "TRACESTATE",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "NVM_DIR",
    "NVM_BIN",
    "PYENV_ROOT",
    "PYENV_VERSION",
    "VIRTUAL_ENV",
    "GOPATH",
    "GOROOT",
    "JAVA_HOME",
    "BUN_INSTALL",
    "VOLTA_HOME",
    "ASDF_DATA_DIR",
    "DENO_INSTALL",
];

/// The environment a sandboxed process starts with, from loopwright's (`vars`): an allow list
/// — [`ENVIRONMENT`], `LC_*`, and the names in `also` (a stage's `env:`; an agent's key) — so
/// no other secret, store URL or daemon token enters. Variables whose name or value is not
/// text are left out.
pub fn environment(
    vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    also: &[String],
) -> Vec<(String, String)> {
    vars.filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| ENVIRONMENT.contains(&k.as_str()) || k.starts_with("LC_") || also.contains(k))
        .collect()
}

/// Where the proxy's socket is inside the sandbox.
pub const PROXY_SOCKET: &str = "/run/loopwright/proxy.sock";
/// The loopback address the forwarder listens on inside the sandbox (`HTTPS_PROXY`).
pub const PROXY_LISTEN: &str = "127.0.0.1:3128";

/// Where loopwright reads pipelines and agents from, relative to a workspace (and git's own
/// folder): read-only in every sandbox and never copied back from a layer (SPEC §12).
pub const CONFIGURATION: &[&str] =
    &[".git", ".loopwright", "configurations/pipelines", ".claude/agents", ".cursor/agents"];

/// Host folders every sandbox gets an empty one of its own over: where host services keep
/// their Unix sockets (`/run`, `/var/run`), shared temporary folders, and shared memory.
const PRIVATE: &[&str] = &["/tmp", "/var/tmp", "/run", "/var/run", "/dev/shm"];

/// The argv that runs `argv` in the sandbox `plan` describes: `bwrap …` (or, for a layer,
/// `unshare -Urm sh -c 'mount the overlay; exec bwrap …'`). `bwrap` is the program's path.
///
/// Whatever the process is, it holds no capability: bubblewrap makes a user namespace of its
/// own inside any the layer was mounted in (mapped back to the caller's user and group),
/// drops every capability there, forbids further user namespaces (`--disable-userns`, so
/// nothing inside can gain capabilities over a namespace of its own) and sets
/// `no_new_privs`. So a process inside can neither unmount what hides the host nor remount
/// anything writable, as root or not.
pub fn command(bwrap: &Path, plan: &Plan, argv: &[String]) -> Vec<String> {
    let ws = plan.workspace.display().to_string();
    let (uid, gid) = (nix::unistd::getuid().as_raw().to_string(), nix::unistd::getgid().as_raw().to_string());
    let mut b: Vec<String> = vec![bwrap.display().to_string()];
    let mut add = |items: &[&str]| b.extend(items.iter().map(|s| (*s).to_owned()));
    add(&["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]);
    for dir in PRIVATE {
        // `/var/run` is usually a link to `/run`, made private with it.
        if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            add(&["--tmpfs", dir]);
        }
    }
    add(&["--unshare-user", "--uid", &uid, "--gid", &gid, "--disable-userns", "--cap-drop", "ALL"]);
    add(&["--unshare-pid", "--die-with-parent", "--unshare-ipc", "--unshare-uts"]);
    if let Some(user) = plan.user_home.as_ref().filter(|u| u.path.is_absolute() && u.path != Path::new("/")) {
        let path = user.path.display().to_string();
        add(&["--tmpfs", &path]);
        for dir in &user.expose {
            let dir = dir.display().to_string();
            add(&["--ro-bind", &dir, &dir]);
        }
        for file in &user.conceal {
            add(&["--ro-bind", "/dev/null", &file.display().to_string()]);
        }
        for (var, value) in &user.env {
            add(&["--setenv", var, value]);
        }
    }
    if !plan.network {
        add(&["--unshare-net"]);
    }
    let home = plan.home.display().to_string();
    add(&["--bind", &home, &home, "--setenv", "HOME", &home, "--setenv", "TMPDIR", "/tmp"]);
    if let Some(proxy) = &plan.proxy {
        let url = format!("http://{PROXY_LISTEN}");
        add(&["--bind", &proxy.socket.display().to_string(), PROXY_SOCKET]);
        // The helper may live under /tmp (a build in a temporary clone), which the private
        // /tmp hides.
        let helper = proxy.helper.display().to_string();
        add(&["--ro-bind", &helper, &helper]);
        for var in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
            add(&["--setenv", var, &url]);
        }
        let direct: Vec<&str> = proxy.tunnels.iter().map(|(host, _)| host.as_str()).collect();
        let direct = direct.join(",");
        for var in ["NO_PROXY", "no_proxy"] {
            if direct.is_empty() {
                add(&["--unsetenv", var]);
            } else {
                add(&["--setenv", var, &direct]);
            }
        }
    }
    // Programs find their configuration under the attempt's home, not where the user's
    // environment points.
    for var in ["XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR"] {
        add(&["--unsetenv", var]);
    }
    for (host, under) in &plan.config {
        let inside = plan.home.join(under).display().to_string();
        add(&["--ro-bind-try", &host.display().to_string(), &inside]);
    }
    // loopwright's state (the journal, the daemon's token, auto mode's sockets) is not there at
    // all. A state folder the workspace lies in (a worktree's) is hidden before the workspace
    // is bound back in it; the workspace's own after it, which would show it again.
    let (around, inside): (Vec<&PathBuf>, Vec<&PathBuf>) =
        plan.hidden.iter().partition(|h| plan.workspace.starts_with(h));
    for dir in around {
        add(&["--tmpfs", &dir.display().to_string()]);
    }
    // Bound again after the private /tmp, which would hide a workspace under /tmp. A layer's
    // overlay was mounted over the workspace's own path before bubblewrap starts: binding it
    // keeps it writable in the read-only root.
    match &plan.write {
        Write::ReadOnly => add(&["--ro-bind", &ws, &ws]),
        Write::Direct | Write::Layer { .. } => add(&["--bind", &ws, &ws]),
    }
    if !matches!(plan.write, Write::ReadOnly) {
        for control in CONFIGURATION {
            let path = plan.workspace.join(control);
            // Only a real folder is bound: a link the workspace holds there would be followed.
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                let path = path.display().to_string();
                add(&["--ro-bind", &path, &path]);
            }
        }
    }
    for dir in inside.into_iter().filter(|d| std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir())) {
        add(&["--tmpfs", &dir.display().to_string()]);
    }
    for path in &plan.read_only {
        let path = path.display().to_string();
        add(&["--ro-bind-try", &path, &path]);
    }
    for socket in &plan.sockets {
        let socket = socket.display().to_string();
        add(&["--bind-try", &socket, &socket]);
    }
    add(&["--chdir", &ws, "--"]);
    if let Some(proxy) = &plan.proxy {
        let forward = format!("{PROXY_LISTEN}={PROXY_SOCKET}");
        b.extend([proxy.helper.display().to_string(), "sandbox-exec".into(), "--forward".into(), forward]);
        for (host, port) in &proxy.tunnels {
            let at = if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
            b.extend(["--tunnel".into(), at]);
        }
        b.push("--".into());
    }
    b.extend(argv.iter().cloned());
    if let Some(limits) = &plan.limits {
        // Set before bubblewrap starts: it and everything in the sandbox inherit them.
        let mut limited = vec![
            limits.prlimit.display().to_string(),
            format!("--fsize={}", limits.file_size),
            format!("--nproc={}", limits.processes),
            "--".to_owned(),
        ];
        limited.extend(b);
        b = limited;
    }
    layer_mount(&plan.workspace, &plan.write, b)
}

/// `inner` as it runs over the layer `write` names, mounted over `workspace` in a user and mount
/// namespace of its own (`inner` unchanged for other writes).
fn layer_mount(workspace: &Path, write: &Write, b: Vec<String>) -> Vec<String> {
    let ws = workspace.display().to_string();
    match write {
        Write::Layer { upper, work, overlay: Overlay::Kernel } => {
            // `$0` is the workspace, `$1` the upper and `$2` the work directory; then bwrap's
            // argv. No path is pasted into the script.
            let script = "ws=$0 upper=$1 work=$2; shift 2; \
                mount -t overlay overlay -o \"lowerdir=$ws,upperdir=$upper,workdir=$work,userxattr\" \"$ws\" && exec \"$@\"";
            let mut out: Vec<String> =
                ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private", "sh", "-c", script]
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect();
            out.extend([ws, upper.display().to_string(), work.display().to_string()]);
            out.extend(b);
            out
        }
        Write::Layer { upper, work, overlay: Overlay::Fuse(fuse) } => {
            // fuse-overlayfs serves the mount from a process of its own: the shell starts it,
            // waits for the mount, runs bubblewrap, then ends it. Both the shell and the server
            // are killed when their parent dies (`setpriv --pdeathsig`), so a `kill -9` of
            // loopwright leaves neither behind; bubblewrap dies with the shell.
            let script = "ws=$0 upper=$1 work=$2 fuse=$3; shift 3; \
                setpriv --pdeathsig KILL \"$fuse\" -f -o \"lowerdir=$ws,upperdir=$upper,workdir=$work\" \"$ws\" 2>/dev/null & f=$!; \
                i=0; until mountpoint -q \"$ws\"; do i=$((i+1)); \
                  if [ $i -gt 500 ] || ! kill -0 $f 2>/dev/null; then echo 'loopwright: fuse-overlayfs did not mount the layer' >&2; kill $f 2>/dev/null; exit 125; fi; \
                  sleep 0.01; done; \
                \"$@\"; s=$?; kill $f 2>/dev/null; wait $f 2>/dev/null; exit $s";
            let mut out: Vec<String> = [
                "unshare",
                "--user",
                "--map-root-user",
                "--mount",
                "--propagation",
                "private",
                "setpriv",
                "--pdeathsig",
                "KILL",
                "sh",
                "-c",
                script,
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
            out.extend([ws, upper.display().to_string(), work.display().to_string(), fuse.display().to_string()]);
            out.extend(b);
            out
        }
        _ => b,
    }
}

/// What this machine offers for sandboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The `bwrap` program and its version, or why there is none.
    pub bwrap: Result<(PathBuf, String), Unavailable>,
    /// Whether bubblewrap can make its namespaces here (user namespaces), or why not.
    pub namespaces: Result<(), Unavailable>,
    /// What a process inside holds, read from its own `/proc/self/status` in a sandbox made
    /// as stages' are: `Ok` when it holds no capability and has `no_new_privs`, else why not.
    pub capabilities: Result<(), Unavailable>,
    /// What mounts layers here (an overlay in a user namespace), or why none can.
    pub overlay: Result<Overlay, Unavailable>,
}

/// Written as its words (`loopwright doctor --json`).
impl serde::Serialize for Unavailable {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Why a piece of the sandbox cannot be used here, in words that say what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// bubblewrap is not installed.
    #[error("bubblewrap (`bwrap`) is not installed: `apt-get install bubblewrap`")]
    NoBwrap,
    /// Not tried: a piece it needs is missing.
    #[error("not tried: no {0}")]
    NotTried(&'static str),
    /// A program the trial needs could not be started.
    #[error("{program} could not be run: {reason}")]
    NotRun {
        /// The program.
        program: &'static str,
        /// Why.
        reason: String,
    },
    /// A scratch folder for the trial could not be made, or its output read.
    #[error("{0}")]
    Scratch(String),
    /// The trial ran and failed: what cannot be done here, and what the machine said.
    #[error("{0}")]
    Failed(String),
}

impl Probe {
    /// Why no sandbox can be made here, if one cannot: the first missing piece, in words.
    pub fn missing(&self) -> Option<String> {
        self.usable().err().map(|why| why.to_string())
    }

    /// The `bwrap` to make sandboxes with, or why none can be made here.
    pub fn usable(&self) -> Result<&Path, Unavailable> {
        match (&self.bwrap, &self.namespaces, &self.capabilities) {
            (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => Err(why.clone()),
            (Ok((path, _)), Ok(()), Ok(())) => Ok(path),
        }
    }
}

/// Finds `bwrap` on `PATH`.
fn find_bwrap() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("bwrap")).find(|p| p.is_file())
}

fn stderr_line(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("no message").trim().to_owned()
}

/// Tries what sandboxes need: bubblewrap's version, a sandbox that runs `true`, and an
/// overlay mounted in a user namespace (in a temporary folder under `scratch`).
pub fn probe(scratch: &Path) -> Probe {
    let Some(bwrap) = find_bwrap() else {
        return Probe {
            bwrap: Err(Unavailable::NoBwrap),
            namespaces: Err(Unavailable::NotTried("bubblewrap")),
            capabilities: Err(Unavailable::NotTried("bubblewrap")),
            overlay: Err(Unavailable::NotTried("bubblewrap")),
        };
    };
    let version = Command::new(&bwrap)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().trim_start_matches("bubblewrap ").to_owned())
        .unwrap_or_default();
    let tried = Command::new(&bwrap)
        .args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-net"])
        .args(["--die-with-parent", "--", "true"])
        .output();
    let namespaces = match tried {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(Unavailable::Failed(format!(
            "bubblewrap cannot make its namespaces here ({}): user namespaces may be off (sysctl kernel.unprivileged_userns_clone, user.max_user_namespaces)",
            stderr_line(&o)
        ))),
        Err(e) => Err(Unavailable::NotRun { program: "bubblewrap", reason: e.to_string() }),
    };
    let capabilities = match &namespaces {
        Ok(()) => probe_capabilities(&bwrap),
        Err(_) => Err(Unavailable::NotTried("namespaces")),
    };
    let overlay = probe_overlay(scratch);
    Probe { bwrap: Ok((bwrap, version)), namespaces, capabilities, overlay }
}

/// The file in the sandbox state folder ([`state_dir`]) that keeps a probe that found every
/// piece working, with what it depends on.
const KEPT_PROBE: &str = "probe.json";

/// A probe that found every piece working, as kept in [`KEPT_PROBE`].
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    /// What the result depends on ([`machine_state`]); another value means probe again.
    key: String,
    bwrap: PathBuf,
    version: String,
    /// `None`: the kernel's overlay; else the `fuse-overlayfs` program.
    fuse: Option<PathBuf>,
}

/// What a probe's result depends on, read without starting a process: the `bwrap` found on
/// `PATH` (its path, size, change time and inode), the kernel (its release and build), the
/// user (real and effective ids), the sysctls that turn user namespaces off, the overlay
/// asked for (`LOOPWRIGHT_OVERLAY`) and the `fuse-overlayfs` found. `None` without `bwrap`.
fn machine_state() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let identity = |path: &Path| {
        std::fs::metadata(path).map_or_else(
            |_| format!("{} missing", path.display()),
            |m| format!("{} {} {}.{} {}", path.display(), m.len(), m.ctime(), m.ctime_nsec(), m.ino()),
        )
    };
    let bwrap = find_bwrap()?;
    let kernel = nix::sys::utsname::uname()
        .map(|u| format!("{} {}", u.release().to_string_lossy(), u.version().to_string_lossy()))
        .unwrap_or_default();
    let sysctls: Vec<String> = ["/proc/sys/kernel/unprivileged_userns_clone", "/proc/sys/user/max_user_namespaces"]
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap_or_default().trim().to_owned())
        .collect();
    let fuse = crate::process::resolve("fuse-overlayfs");
    Some(format!(
        "{}|{kernel}|{} {}|{}|{}|{}",
        identity(&bwrap),
        nix::unistd::getuid(),
        nix::unistd::geteuid(),
        sysctls.join(" "),
        std::env::var("LOOPWRIGHT_OVERLAY").unwrap_or_default(),
        if fuse.is_absolute() { identity(&fuse) } else { String::new() },
    ))
}

/// [`probe`], found out once per machine state: a probe that found every piece working is
/// kept in `state` (the user's private [`state_dir`]) with what it depends on, and read back
/// while that is the same; anything missing, changed or unreadable probes again. A sandbox
/// that then fails to start is said with [`forget_probe`].
pub fn probe_kept(state: &Path) -> Probe {
    let key = machine_state();
    let file = state.join(KEPT_PROBE);
    let kept = std::fs::read(&file).ok().and_then(|text| serde_json::from_slice::<Kept>(&text).ok());
    if let (Some(kept), Some(key)) = (kept, &key)
        && kept.key == *key
    {
        return Probe {
            bwrap: Ok((kept.bwrap, kept.version)),
            namespaces: Ok(()),
            capabilities: Ok(()),
            overlay: Ok(kept.fuse.map_or(Overlay::Kernel, Overlay::Fuse)),
        };
    }
    let probe = probe(state);
    if let (Some(key), Ok((bwrap, version)), Ok(()), Ok(()), Ok(overlay)) =
        (key, &probe.bwrap, &probe.namespaces, &probe.capabilities, &probe.overlay)
    {
        let fuse = match overlay {
            Overlay::Kernel => None,
            Overlay::Fuse(path) => Some(path.clone()),
        };
        let kept = Kept { key, bwrap: bwrap.clone(), version: version.clone(), fuse };
        // Written whole or not at all: a reader sees the old file or the new one.
        if let Ok(text) = serde_json::to_vec(&kept) {
            let tmp = state.join(format!("{KEPT_PROBE}.{}", std::process::id()));
            if std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &file)).is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
        }
    }
    probe
}

/// Forgets the probe kept in `state` (a sandbox failed to start): the next run probes again.
pub fn forget_probe(state: &Path) {
    let _ = std::fs::remove_file(state.join(KEPT_PROBE));
}

/// Starts a sandbox as stages get one and reads, inside, what its process holds: every
/// capability dropped (`CapEff` 0, `CapBnd` 0) and `no_new_privs` set, or why not.
fn probe_capabilities(bwrap: &Path) -> Result<(), Unavailable> {
    let scratch = std::env::temp_dir();
    let plan = Plan {
        workspace: scratch.clone(),
        write: Write::ReadOnly,
        home: scratch,
        config: Vec::new(),
        network: false,
        proxy: None,
        user_home: None,
        limits: None,
        read_only: Vec::new(),
        hidden: Vec::new(),
        sockets: Vec::new(),
    };
    let argv = command(bwrap, &plan, &["cat".to_owned(), "/proc/self/status".to_owned()]);
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .map_err(|e| Unavailable::NotRun { program: "bubblewrap", reason: e.to_string() })?;
    if !out.status.success() {
        return Err(Unavailable::Failed(format!(
            "bubblewrap cannot drop a process's capabilities here ({}); bubblewrap 0.8 or later is needed",
            stderr_line(&out)
        )));
    }
    let status = String::from_utf8_lossy(&out.stdout);
    let field =
        |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or("unknown").to_owned();
    let (effective, bounding, nnp) = (field("CapEff:"), field("CapBnd:"), field("NoNewPrivs:"));
    let none = |v: &str| v.chars().all(|c| c == '0') && !v.is_empty();
    if none(&effective) && none(&bounding) && nnp == "1" {
        Ok(())
    } else {
        Err(Unavailable::Failed(format!(
            "a process in the sandbox would keep capabilities (CapEff {effective}, CapBnd {bounding}, NoNewPrivs {nnp})"
        )))
    }
}

/// Whether `program` (an agent CLI, found on `PATH`) starts in a sandbox as a stage's process
/// gets one — the user's home hidden but for its toolchains and the program's own folder, an
/// empty home, no network, the environment's allow list with `env` added — by running it with
/// `--version`: its first line, or why it did not start (the last line it printed).
pub fn try_program(bwrap: &Path, program: &str, env: &[String]) -> Result<String, Unavailable> {
    let scratch =
        tempfile::tempdir().map_err(|e| Unavailable::Scratch(format!("cannot make a scratch folder: {e}")))?;
    let (workspace, home) = (scratch.path().join("workspace"), scratch.path().join("home"));
    for dir in [&workspace, &home] {
        std::fs::create_dir_all(dir)
            .map_err(|e| Unavailable::Scratch(format!("cannot create {}: {e}", dir.display())))?;
    }
    let path = std::env::var_os("PATH");
    let user_home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .map(|h| user_home(&h, path.as_deref(), &[program]));
    let plan = Plan {
        workspace,
        write: Write::ReadOnly,
        home,
        config: Vec::new(),
        network: false,
        proxy: None,
        user_home,
        limits: None,
        read_only: exposed(Path::new("/tmp"), path.as_deref(), &[program]),
        hidden: Vec::new(),
        sockets: Vec::new(),
    };
    let argv = command(bwrap, &plan, &[program.to_owned(), "--version".to_owned()]);
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(environment(std::env::vars_os(), env))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| Unavailable::NotRun { program: "bubblewrap", reason: e.to_string() })?;
    // A CLI that waits for something (a sign-in, the network) is not left running.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().ok().flatten().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Unavailable::Failed("`--version` did not answer within 30 s in the sandbox".to_owned()));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().map_err(|e| Unavailable::Scratch(format!("cannot read its output: {e}")))?;
    let first =
        String::from_utf8_lossy(&out.stdout).lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_owned();
    if out.status.success() && !first.is_empty() {
        Ok(first)
    } else {
        Err(Unavailable::Failed(format!(
            "`{program} --version` failed in the sandbox ({}: {})",
            out.status,
            stderr_line(&out)
        )))
    }
}

/// What mounts layers here: the kernel's overlay in a user namespace, else `fuse-overlayfs`,
/// each tried for real over a scratch folder. `LOOPWRIGHT_OVERLAY=kernel` or `fuse` tries only
/// that one (to use fuse-overlayfs where both work).
fn probe_overlay(scratch: &Path) -> Result<Overlay, Unavailable> {
    let only = std::env::var("LOOPWRIGHT_OVERLAY").ok();
    let mut why = Vec::new();
    if only.as_deref() != Some("fuse") {
        match try_overlay(scratch, &Overlay::Kernel) {
            Ok(()) => return Ok(Overlay::Kernel),
            Err(e) => why.push(e.to_string()),
        }
    }
    if only.as_deref() != Some("kernel") {
        match crate::process::resolve("fuse-overlayfs") {
            fuse if fuse.is_absolute() => match try_overlay(scratch, &Overlay::Fuse(fuse.clone())) {
                Ok(()) => return Ok(Overlay::Fuse(fuse)),
                Err(e) => why.push(e.to_string()),
            },
            _ => why.push("fuse-overlayfs is not installed (`apt-get install fuse-overlayfs`)".to_owned()),
        }
    }
    Err(Unavailable::Failed(why.join("; ")))
}

/// Mounts a layer with `overlay` in a user namespace over a scratch folder and writes through
/// it: whether `overlay` works here, or why not.
pub fn try_overlay(scratch: &Path, overlay: &Overlay) -> Result<(), Unavailable> {
    let dir = scratch.join(format!("loopwright-overlay-probe-{}", std::process::id()));
    let (lower, upper, work) = (dir.join("lower"), dir.join("upper"), dir.join("work"));
    for d in [&lower, &upper, &work] {
        std::fs::create_dir_all(d).map_err(|e| Unavailable::Scratch(format!("cannot create {}: {e}", d.display())))?;
    }
    let write = Write::Layer { upper: upper.clone(), work: work.clone(), overlay: overlay.clone() };
    // The layer's own mount, without bubblewrap, and a write through it.
    let inner = ["sh", "-c", "echo ok > \"$0/probe\""].iter().map(|s| (*s).to_owned());
    let argv = layer_mount(&lower, &write, inner.chain([lower.display().to_string()]).collect());
    let out = Command::new(&argv[0]).args(&argv[1..]).output();
    let wrote = upper.join("probe").is_file() && !lower.join("probe").exists();
    let _ = remove_tree(&dir);
    let what = match overlay {
        Overlay::Kernel => "the kernel's overlay cannot be mounted in a user namespace here",
        Overlay::Fuse(_) => "fuse-overlayfs cannot mount a layer in a user namespace here",
    };
    match out {
        Ok(o) if o.status.success() && wrote => Ok(()),
        Ok(o) => Err(Unavailable::Failed(format!("{what} ({})", stderr_line(&o)))),
        Err(e) => Err(Unavailable::NotRun { program: "`unshare`", reason: e.to_string() }),
    }
}

/// What copying a layer back did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CopiedBack {
    /// Files written (created or changed), relative to the workspace.
    pub written: Vec<String>,
    /// Files and folders deleted.
    pub deleted: Vec<String>,
    /// What the path guard refused, and why (nothing of these reached the workspace).
    pub refused: Vec<(String, String)>,
}

/// Copies a layer's changes into the workspace through the path guard: its files and
/// symbolic links written, its whiteouts (a character device 0/0) deleted, an opaque folder
/// (`user.overlay.opaque` = `y`) emptied of what the layer does not hold first. What the
/// guard refuses (`.git/`, `.loopwright/`, through a link) is left out and reported.
pub fn copy_back(upper: &Path, workspace: &Path) -> std::io::Result<CopiedBack> {
    copy_back_marked(upper, workspace, Marks::Kernel)
}

/// [`copy_back`] for a layer whose deletions are marked as `marks` says: the layer's entries
/// as [`list`] gives them (parents before children), each carried into the workspace.
///
/// Every write goes through folder handles ([`crate::at`]): no component of a workspace path is
/// followed if it is a link, whatever the attempt planted there, and each file is made under a
/// fresh name exclusively before it is renamed into place. Nothing is written under `.git/`,
/// loopwright's configuration ([`CONFIGURATION`]) or through a link; set-id and sticky bits are
/// dropped; sparse files stay sparse.
fn copy_back_marked(upper: &Path, workspace: &Path, marks: Marks) -> std::io::Result<CopiedBack> {
    use crate::at::{Folder, Kind, Walk};
    let mut entries = Vec::new();
    list(upper, upper, marks, &mut entries)?;
    let (layer, ws) = (Folder::open(upper)?, Folder::open(workspace)?);
    let mut out = CopiedBack::default();
    let mut refused_folders: Vec<String> = Vec::new();
    for (rel, what) in entries {
        // What lies in a folder that was refused is left out with it.
        if refused_folders.iter().any(|f| Path::new(&rel).starts_with(f)) {
            continue;
        }
        let mut refuse = |why: String, out: &mut CopiedBack| {
            if matches!(what, Entry::Dir { .. }) {
                refused_folders.push(rel.clone());
            }
            out.refused.push((rel.clone(), why));
        };
        let parts = match crate::guard::components(&rel) {
            Ok(parts) => parts,
            Err(refused) => {
                refuse(refused.to_string(), &mut out);
                continue;
            }
        };
        // A deletion, a replaced folder or a file over a folder that holds configuration would
        // remove it too.
        let replaces = matches!(what, Entry::Whiteout | Entry::File | Entry::Dir { opaque: true });
        if let Some(dir) = configuration(&rel, replaces) {
            refuse(format!("`{rel}` is inside `{dir}/`, where loopwright reads pipelines and agents from"), &mut out);
            continue;
        }
        let (name, folders) = parts.split_last().expect("components gives at least one");
        let name = std::ffi::OsStr::new(name);
        let make = !matches!(what, Entry::Whiteout | Entry::Mark);
        let parent = match ws.walk(folders, make)? {
            Walk::Found(parent) => parent,
            // Nothing there to delete.
            Walk::Missing => continue,
            Walk::Link(i) => {
                let link = parts[..=i].join("/");
                refuse(crate::guard::Refused::Link { path: rel.clone(), link }.to_string(), &mut out);
                continue;
            }
            Walk::NotFolder(i) => {
                let at = parts[..=i].join("/");
                refuse(crate::guard::Refused::Kind { path: rel.clone(), at, expected: "folder" }.to_string(), &mut out);
                continue;
            }
        };
        match what {
            Entry::Mark => {}
            Entry::Whiteout => {
                // The attempt deleted it.
                if parent.remove(name)? {
                    out.deleted.push(rel);
                }
            }
            Entry::Dir { opaque } => {
                // An opaque folder: the attempt replaced it, and what the lower layer had there
                // is gone.
                if opaque && parent.remove(name)? {
                    out.deleted.push(rel.clone());
                }
                parent.make_folder(name)?;
            }
            Entry::File => {
                let Walk::Found(source) = layer.walk(folders, false)? else { continue };
                match source.kind(name)? {
                    Some(Kind::Link) => {
                        parent.write_link(name, &source.read_link(name)?)?;
                        out.written.push(rel);
                    }
                    Some(Kind::File) => {
                        let file = source.open_file(name)?;
                        let mode =
                            file.metadata().map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()))?;
                        parent.write_copy(name, &file, mode)?;
                        out.written.push(rel);
                    }
                    // Sockets, pipes and devices made by the attempt are not carried back.
                    _ => {}
                }
            }
        }
    }
    out.written.sort();
    out.deleted.sort();
    Ok(out)
}

/// The configuration folder `rel` (a workspace path) lies in, if it lies in one; with
/// `or_holds`, also one it holds.
pub(crate) fn configuration(rel: &str, or_holds: bool) -> Option<&'static str> {
    let rel = Path::new(rel);
    CONFIGURATION.iter().copied().find(|c| rel.starts_with(c) || (or_holds && Path::new(c).starts_with(rel)))
}

/// How a layer marks what the attempt deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marks {
    /// The kernel's: a character device 0/0 for a deletion, an extended attribute on a
    /// replaced folder.
    Kernel,
    /// fuse-overlayfs's, besides the kernel's where it can make them: a `.wh.NAME` file for
    /// a deletion, a `.wh..wh..opq` file in a replaced folder.
    Fuse,
}

/// What a layer holds at a path.
pub(crate) enum Entry {
    /// A file or a symbolic link, written by the attempt.
    File,
    /// A folder; opaque when the attempt replaced it.
    Dir { opaque: bool },
    /// A deletion of the path.
    Whiteout,
    /// The overlay's own bookkeeping.
    Mark,
}

/// What `path` (in a layer) is, and the workspace path it is about (a `.wh.NAME` mark is about
/// `NAME`).
fn classify(path: &Path, rel: String, marks: Marks) -> std::io::Result<(String, Entry)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::symlink_metadata(path)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if marks == Marks::Fuse {
        if name == ".wh..wh..opq" || name == ".wh..opq" {
            return Ok((rel, Entry::Mark));
        }
        if let Some(deleted) = name.strip_prefix(".wh.") {
            let about = Path::new(&rel).with_file_name(deleted).to_string_lossy().into_owned();
            return Ok((about, Entry::Whiteout));
        }
    }
    Ok(if meta.file_type().is_char_device() && meta.rdev() == 0 {
        (rel, Entry::Whiteout)
    } else if meta.is_dir() {
        let opaque = opaque(path) || (marks == Marks::Fuse && path.join(".wh..wh..opq").exists());
        (rel, Entry::Dir { opaque })
    } else {
        (rel, Entry::File)
    })
}

/// Removes a file, link or folder; true when something was there.
fn remove_any(path: &Path) -> std::io::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => remove_tree(path).map(|()| true),
        Ok(_) => std::fs::remove_file(path).map(|()| true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Removes the folder `path` and all in it, also where an overlay left folders nobody may
/// read: the kernel's overlay makes its work folder's `work/` with mode 000, which its owner
/// cannot list (root can), so a plain removal fails for every user but root and leaves the
/// layer behind. Such a folder of the caller's is given `rwx` for its owner first; links are
/// never followed.
pub fn remove_tree(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            open_up(path);
            std::fs::remove_dir_all(path)
        }
        done => done,
    }
}

/// Gives every folder under `path` (itself included, links not followed) `rwx` for its owner,
/// where the caller may.
fn open_up(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return };
    if !meta.is_dir() {
        return;
    }
    let mode = meta.permissions().mode();
    if mode & 0o700 != 0o700 {
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode | 0o700));
    }
    for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            open_up(&entry.path());
        }
    }
}

/// True when an overlay marked the folder opaque (in a user namespace: `user.overlay.opaque`).
fn opaque(dir: &Path) -> bool {
    ["user.overlay.opaque", "trusted.overlay.opaque"].iter().any(|name| {
        let mut value = [0u8; 4];
        rustix::fs::lgetxattr(dir, *name, &mut value[..]).is_ok_and(|n| n >= 1 && value[0] == b'y')
    })
}

/// Where the sandboxes of runs keep their state (each attempt's home and layer): outside every
/// workspace, so that a layer over the workspace never holds itself and a home is not under
/// the workspace's read-only `.loopwright/`. `$LOOPWRIGHT_SANDBOX_DIR`, else
/// `/var/tmp/loopwright-UID` (on disk, kept across a reboot so `resume` finds a layer again).
/// Made 0700; an existing one must be a folder of this user's that nobody else may enter, or
/// another local user could have planted it.
pub fn state_dir() -> Result<PathBuf, Unavailable> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let uid = nix::unistd::getuid().as_raw();
    let dir = match std::env::var_os("LOOPWRIGHT_SANDBOX_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let base = Path::new("/var/tmp");
            let base = if base.is_dir() { base.to_path_buf() } else { std::env::temp_dir() };
            base.join(format!("loopwright-{uid}"))
        }
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Unavailable::Scratch(format!("cannot create {}: {e}", dir.display()))),
    }
    let meta = std::fs::symlink_metadata(&dir)
        .map_err(|e| Unavailable::Scratch(format!("cannot read {}: {e}", dir.display())))?;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(Unavailable::Failed(format!(
            "{} is not a private folder of this user (a folder, owned by uid {uid}, mode 0700); remove it or set LOOPWRIGHT_SANDBOX_DIR",
            dir.display()
        )));
    }
    Ok(dir)
}

/// An attempt's layer: `upper` (what the attempt wrote) and `work` (the overlay's own), and,
/// while it is copied into the workspace, `before/` (what the workspace held at the paths it
/// changes), `created` (the paths it held nothing at) and `copying` (the commit the repository
/// was at), so that a copy a crash cut short can be undone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// The layer's folder.
    pub dir: PathBuf,
}

impl Layer {
    /// The layer's folder, as errors name it.
    pub fn shown(&self) -> String {
        self.dir.display().to_string()
    }

    /// Layer `name` of run `run` under the sandbox state folder `state`.
    pub fn of(state: &Path, run: &str, name: &str) -> Self {
        Self { dir: state.join(run).join("layers").join(name) }
    }

    /// The overlay's upper folder.
    pub fn upper(&self) -> PathBuf {
        self.dir.join("upper")
    }

    /// The overlay's work folder.
    pub fn work(&self) -> PathBuf {
        self.dir.join("work")
    }

    /// Makes it empty (an old layer of the same name is removed first), for `overlay` to mount.
    pub fn make(&self, overlay: &Overlay) -> std::io::Result<()> {
        remove_any(&self.dir)?;
        std::fs::create_dir_all(self.upper())?;
        std::fs::create_dir_all(self.work())?;
        let kind = match overlay {
            Overlay::Kernel => "kernel",
            Overlay::Fuse(_) => "fuse",
        };
        std::fs::write(self.dir.join("kind"), kind)
    }

    /// How its upper folder marks deletions (by what mounted it).
    pub(crate) fn marks(&self) -> Marks {
        match std::fs::read_to_string(self.dir.join("kind")) {
            Ok(kind) if kind == "fuse" => Marks::Fuse,
            _ => Marks::Kernel,
        }
    }

    /// True when it exists.
    pub fn exists(&self) -> bool {
        self.upper().is_dir()
    }

    /// What it changes in `workspace`: (modified, created, deleted), relative paths, sorted.
    pub fn changes(&self, workspace: &Path) -> std::io::Result<(Vec<String>, Vec<String>, Vec<String>)> {
        let mut entries = Vec::new();
        list(&self.upper(), &self.upper(), self.marks(), &mut entries)?;
        let (mut modified, mut created, mut deleted) = (Vec::new(), Vec::new(), Vec::new());
        for (rel, kind) in entries {
            let there = std::fs::symlink_metadata(workspace.join(&rel)).ok();
            match kind {
                Entry::Whiteout => deleted.push(rel),
                Entry::Dir { opaque } => {
                    if opaque && there.is_some() {
                        deleted.push(rel);
                    }
                }
                Entry::File => match there {
                    Some(m) if !m.is_dir() => modified.push(rel),
                    _ => created.push(rel),
                },
                Entry::Mark => {}
            }
        }
        Ok((modified, created, deleted))
    }

    /// What it changes in `workspace` as a unified diff, cut at about `max_bytes`: a text file
    /// line by line, a link, a binary or a large file named only. Neither side is read through a
    /// link (an agent's layer or workspace may hold links to anywhere).
    pub fn diff(&self, workspace: &Path, max_bytes: usize) -> std::io::Result<String> {
        let (modified, created, deleted) = self.changes(workspace)?;
        let mut paths: Vec<&String> = modified.iter().chain(&created).chain(&deleted).collect();
        paths.sort_unstable();
        let (upper, work) = (crate::at::Folder::open(&self.upper())?, crate::at::Folder::open(workspace)?);
        let mut out = String::new();
        for (i, path) in paths.iter().enumerate() {
            if out.len() >= max_bytes {
                out.push_str(&format!("… {} more file(s) not shown\n", paths.len() - i));
                break;
            }
            let before = if created.contains(path) { Side::Absent } else { read_side(&work, path) };
            let after = if deleted.contains(path) { Side::Absent } else { read_side(&upper, path) };
            out.push_str(&file_diff(path, &before, &after));
        }
        if out.len() > max_bytes {
            let mut end = max_bytes;
            while !out.is_char_boundary(end) {
                end -= 1;
            }
            out.truncate(end);
            out.push_str("\n… cut here\n");
        }
        Ok(out)
    }

    /// Merges into its file at `path` what the workspace's file there gained since `base` (the
    /// file's text when the layer was made; `None`: there was none), keeping the layer's own
    /// changes, line by line. True when the merge is clean and the layer's file now holds both;
    /// false when both changed the same lines, or either side is not a text file here. Neither
    /// side is read, nor the result written, through a link.
    pub fn merge(&self, workspace: &Path, path: &str, base: Option<&[u8]>) -> std::io::Result<bool> {
        use std::io::Write;
        let (upper, work) = (crate::at::Folder::open(&self.upper())?, crate::at::Folder::open(workspace)?);
        let (Side::Text(ours), Side::Text(theirs)) = (read_side(&work, path), read_side(&upper, path)) else {
            return Ok(false);
        };
        let scratch = tempfile::tempdir()?;
        let write = |name: &str, bytes: &[u8]| -> std::io::Result<PathBuf> {
            let at = scratch.path().join(name);
            std::fs::write(&at, bytes)?;
            Ok(at)
        };
        let (o, b, t) = (
            write("ours", ours.as_bytes())?,
            write("base", base.unwrap_or_default())?,
            write("theirs", theirs.as_bytes())?,
        );
        let merged = match crate::git::merge_file(&o, &b, &t) {
            Ok(Some(merged)) => merged,
            Ok(None) => return Ok(false),
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        };
        let parts: Vec<&str> = path.split('/').collect();
        let Some((name, folders)) = parts.split_last() else { return Ok(false) };
        let crate::at::Walk::Found(folder) = upper.walk(folders, false)? else { return Ok(false) };
        let name = std::ffi::OsStr::new(name);
        let Some(stat) = folder.stat(name)? else { return Ok(false) };
        let mut file = tempfile::tempfile_in(scratch.path())?;
        file.write_all(&merged)?;
        file.flush()?;
        use std::io::Seek;
        file.seek(std::io::SeekFrom::Start(0))?;
        folder.write_copy(name, &file, stat.st_mode & 0o7777)?;
        Ok(true)
    }

    /// How many files, links, folders and deletions it holds.
    pub fn count(&self) -> usize {
        let mut entries = Vec::new();
        list(&self.upper(), &self.upper(), self.marks(), &mut entries).map_or(0, |()| entries.len())
    }

    /// True when the attempt wrote nothing into it (its upper folder holds no entry): a look
    /// at one folder, where [`Layer::count`] lists every entry.
    pub fn is_empty(&self) -> bool {
        std::fs::read_dir(self.upper()).is_ok_and(|mut entries| entries.next().is_none())
    }

    /// True when a copy of it into the workspace has begun.
    pub fn copying(&self) -> bool {
        self.dir.join("copying").exists()
    }

    /// Copies it into `workspace` (see [`copy_back`]), after keeping what the workspace held at
    /// each path it changes; `head` is the repository's commit now, if any.
    pub fn copy_into(&self, workspace: &Path, head: Option<&str>, max_bytes: u64) -> std::io::Result<CopiedBack> {
        use crate::at::{Folder, Walk};
        let held = self.size()?;
        if held > max_bytes {
            return Err(std::io::Error::other(format!(
                "the attempt wrote {} MiB, more than the {} MiB a layer may hold ([sandbox_limits] max_layer_mb)",
                held.div_ceil(1024 * 1024),
                max_bytes / (1024 * 1024)
            )));
        }
        let marker = self.dir.join("copying");
        if !marker.exists() {
            // A copy cut short by a crash is done again over the same `before/`: it holds the
            // workspace as it was before the first try.
            let before = self.dir.join("before");
            remove_any(&before)?;
            std::fs::create_dir(&before)?;
            let (ws, kept) = (Folder::open(workspace)?, Folder::open(&before)?);
            let mut entries = Vec::new();
            list(&self.upper(), &self.upper(), self.marks(), &mut entries)?;
            let mut created = String::new();
            for (rel, kind) in entries {
                if matches!(kind, Entry::Dir { opaque: false }) {
                    continue;
                }
                // What the copy-back refuses is not kept either.
                let Ok(parts) = crate::guard::components(&rel) else { continue };
                let (name, folders) = parts.split_last().expect("components gives at least one");
                let name = std::ffi::OsStr::new(name);
                match ws.walk(folders, false)? {
                    Walk::Found(parent) if parent.kind(name)?.is_some() => {
                        let Walk::Found(into) = kept.walk(folders, true)? else { continue };
                        keep(&parent, &into, name)?;
                    }
                    Walk::Found(_) | Walk::Missing => {
                        created.push_str(&rel);
                        created.push('\0');
                    }
                    // Behind a link or a file: the copy-back writes nothing there.
                    Walk::Link(_) | Walk::NotFolder(_) => {}
                }
            }
            std::fs::write(self.dir.join("created"), created)?;
            let tmp = self.dir.join("copying.tmp");
            std::fs::write(&tmp, head.unwrap_or_default())?;
            std::fs::rename(&tmp, &marker)?;
        }
        copy_back_marked(&self.upper(), workspace, self.marks())
    }

    /// What its files take on disk, in bytes (a sparse file counts for the data it holds).
    pub fn size(&self) -> std::io::Result<u64> {
        fn under(dir: &Path) -> std::io::Result<u64> {
            use std::os::unix::fs::MetadataExt;
            let mut total = 0u64;
            for entry in std::fs::read_dir(dir)? {
                let entry = entry?;
                let meta = entry.metadata()?;
                total = total.saturating_add(meta.blocks().saturating_mul(512));
                if meta.is_dir() {
                    total = total.saturating_add(under(&entry.path())?);
                }
            }
            Ok(total)
        }
        under(&self.upper())
    }

    /// Removes it. When a copy into `workspace` had begun and the repository is still at the
    /// commit it was (`head`: nothing was committed since), the copy is undone first: the
    /// workspace is as it was before. Returns how many entries the layer held.
    pub fn discard(&self, workspace: &Path, head: Option<&str>) -> std::io::Result<usize> {
        use crate::at::{Folder, Walk};
        let held = self.count();
        if let Ok(was) = std::fs::read_to_string(self.dir.join("copying"))
            && was == head.unwrap_or_default()
        {
            let ws = Folder::open(workspace)?;
            let created = std::fs::read_to_string(self.dir.join("created")).unwrap_or_default();
            for rel in created.split('\0').filter(|r| !r.is_empty()) {
                let Ok(parts) = crate::guard::components(rel) else { continue };
                let (name, folders) = parts.split_last().expect("components gives at least one");
                if let Walk::Found(parent) = ws.walk(folders, false)? {
                    parent.remove(std::ffi::OsStr::new(name))?;
                }
            }
            let before = self.dir.join("before");
            if before.is_dir() {
                copy_back(&before, workspace)?;
            }
        }
        remove_any(&self.dir)?;
        Ok(held)
    }
}

/// Every entry under `dir` (relative to `upper`), parents before children; the overlay's own
/// marks left out.
pub(crate) fn list(dir: &Path, upper: &Path, marks: Marks, out: &mut Vec<(String, Entry)>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let path = entry.path();
        let rel = path.strip_prefix(upper).unwrap_or(&path).to_string_lossy().into_owned();
        let (rel, what) = classify(&path, rel, marks)?;
        match what {
            Entry::Mark => {}
            Entry::Dir { .. } => {
                out.push((rel, what));
                list(&path, upper, marks, out)?;
            }
            _ => out.push((rel, what)),
        }
    }
    Ok(())
}

/// Copies the file, link or folder (recursively) `name` of `from` into `to`, keeping links as
/// links, never following one.
fn keep(from: &crate::at::Folder, to: &crate::at::Folder, name: &std::ffi::OsStr) -> std::io::Result<()> {
    use crate::at::Kind;
    match from.kind(name)? {
        Some(Kind::Link) => to.write_link(name, &from.read_link(name)?),
        Some(Kind::File) => {
            let file = from.open_file(name)?;
            let mode = std::os::unix::fs::PermissionsExt::mode(&file.metadata()?.permissions());
            to.write_copy(name, &file, mode)
        }
        Some(Kind::Folder) => {
            let (inner, into) = (from.child(name)?, to.make_folder(name)?);
            for (entry, _) in inner.entries()? {
                keep(&inner, &into, entry.as_os_str())?;
            }
            Ok(())
        }
        Some(Kind::Other) | None => Ok(()),
    }
}

/// One side of a file's diff.
enum Side {
    /// Nothing there.
    Absent,
    /// A text file.
    Text(String),
    /// Something not shown line by line, and what.
    Other(&'static str),
}

/// The largest file a diff shows line by line.
const DIFF_FILE_MAX: u64 = 256 * 1024;

/// `path` under `root`, read without following a link at any component.
fn read_side(root: &crate::at::Folder, path: &str) -> Side {
    use std::io::Read;
    let parts: Vec<&str> = path.split('/').collect();
    let Some((name, folders)) = parts.split_last() else { return Side::Absent };
    let folder = match root.walk(folders, false) {
        Ok(crate::at::Walk::Found(f)) => f,
        Ok(crate::at::Walk::Link(_)) => return Side::Other("under a symbolic link"),
        _ => return Side::Absent,
    };
    match folder.kind(std::ffi::OsStr::new(name)) {
        Ok(Some(crate::at::Kind::File)) => {}
        Ok(Some(crate::at::Kind::Link)) => return Side::Other("a symbolic link"),
        Ok(Some(crate::at::Kind::Folder)) => return Side::Other("a folder"),
        Ok(Some(crate::at::Kind::Other)) => return Side::Other("a special file"),
        Ok(None) | Err(_) => return Side::Absent,
    }
    let Ok(file) = folder.open_file(std::ffi::OsStr::new(name)) else { return Side::Other("unreadable") };
    if file.metadata().map_or(true, |m| m.len() > DIFF_FILE_MAX) {
        return Side::Other("a large file");
    }
    let mut bytes = Vec::new();
    if file.take(DIFF_FILE_MAX).read_to_end(&mut bytes).is_err() {
        return Side::Other("unreadable");
    }
    match String::from_utf8(bytes) {
        Ok(text) if !text.contains('\0') => Side::Text(text),
        _ => Side::Other("a binary file"),
    }
}

/// The unified diff of one file, or a line saying what changed when it is not text.
fn file_diff(path: &str, before: &Side, after: &Side) -> String {
    let text = |side: &Side| match side {
        Side::Absent => Some(String::new()),
        Side::Text(t) => Some(t.clone()),
        Side::Other(_) => None,
    };
    match (text(before), text(after)) {
        (Some(a), Some(b)) => {
            let (from, to) = match (before, after) {
                (Side::Absent, _) => ("/dev/null".to_owned(), format!("b/{path}")),
                (_, Side::Absent) => (format!("a/{path}"), "/dev/null".to_owned()),
                _ => (format!("a/{path}"), format!("b/{path}")),
            };
            similar::TextDiff::from_lines(&a, &b).unified_diff().context_radius(3).header(&from, &to).to_string()
        }
        _ => {
            let what = |side: &Side| match side {
                Side::Absent => "nothing",
                Side::Text(_) => "a text file",
                Side::Other(w) => w,
            };
            format!("--- {path}: {} before, {} after (not shown)\n", what(before), what(after))
        }
    }
}
