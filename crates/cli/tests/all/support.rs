//! Temporary workspaces and helpers to run the real binary in them.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

/// The repository's `examples/` folder.
pub fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// What a test workspace's `config.toml` starts with unless the test sets `sandbox` itself:
/// stages run unsandboxed, as the user. Most tests talk to their stages through files in `/tmp`
/// and process ids, which a sandbox makes private; the sandbox's own tests say what they use,
/// and `a_sandboxed_plan_stage_is_refused_by_the_mount_and_writes_nothing_anywhere` tests the real
/// default (`auto`).
pub const UNSANDBOXED: &str = "sandbox = \"off\"\n";

/// A workspace in a temporary directory.
pub struct Ws {
    pub dir: tempfile::TempDir,
}

impl Ws {
    /// An empty workspace (with `.loopwright/`, its config saying [`UNSANDBOXED`]).
    pub fn empty() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join(".loopwright/pipelines")).expect("mkdir");
        std::fs::write(dir.path().join(".loopwright/config.toml"), UNSANDBOXED).expect("config");
        Self { dir }
    }

    /// A workspace with the seed pipelines (full-feature, bug-fix, example) and their agents.
    pub fn seed() -> Self {
        let ws = Self::empty();
        for (from, to) in [("seed/agents", ".loopwright/agents"), ("seed/pipelines", ".loopwright/pipelines")] {
            let target = ws.path().join(to);
            std::fs::create_dir_all(&target).expect("mkdir");
            for entry in std::fs::read_dir(examples().join(from)).expect("examples") {
                let entry = entry.expect("entry");
                std::fs::copy(entry.path(), target.join(entry.file_name())).expect("copy");
            }
        }
        ws
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file (creating folders); a `.loopwright/config.toml` that does not set
    /// `sandbox` starts with [`UNSANDBOXED`].
    pub fn write(&self, rel: &str, text: &str) {
        let path = self.path().join(rel);
        let sets_sandbox =
            text.lines().any(|l| l.trim_start().starts_with("sandbox ") || l.trim_start().starts_with("sandbox="));
        let text =
            if rel == ".loopwright/config.toml" && !sets_sandbox { &format!("{UNSANDBOXED}{text}") } else { text };
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    }

    /// The binary, run in this workspace, without colour.
    pub fn cmd(&self) -> Command {
        let mut cmd = assert_cmd::cargo::cargo_bin_cmd!("loopwright");
        cmd.current_dir(self.path()).env("NO_COLOR", "1").env("USER", "tester");
        cmd
    }

    /// Runs the binary with `args`; returns (exit code, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.cmd().args(args).output().expect("run loopwright");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// A run's journal as `logs RUN --json` prints it: one `{seq, at, event}` per line.
    pub fn journal(&self, run: &str) -> Vec<Value> {
        let (_, logs, stderr) = self.run(&["logs", run, "--json"]);
        logs.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("journal line ({e}): {l}\nstderr:\n{stderr}")))
            .collect()
    }

    /// Runs with `--json` and parses stdout.
    pub fn json(&self, args: &[&str]) -> (i32, Value, String) {
        let mut all = args.to_vec();
        all.push("--json");
        let (code, stdout, stderr) = self.run(&all);
        let value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{stdout}\nstderr:\n{stderr}"));
        (code, value, stderr)
    }

    /// Runs git in the workspace; panics with git's message when it fails.
    pub fn git(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("git").args(args).current_dir(self.path()).output().expect("git");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Makes the workspace a git repository on `main` with everything in it committed.
    pub fn init_git(&self) {
        self.git(&["init", "--quiet", "-b", "main"]);
        self.git(&["config", "user.name", "Test"]);
        self.git(&["config", "user.email", "test@example.com"]);
        self.git(&["add", "-A"]);
        self.git(&["commit", "--quiet", "-m", "initial"]);
    }

    /// Runs `loopwright ARGS` on a pseudo-terminal (util-linux `script`) with `input` typed in;
    /// `None` (with a note) where `script` is not installed.
    pub fn on_terminal(&self, args: &str, input: &str) -> Option<(i32, String)> {
        use std::io::Write;
        if std::process::Command::new("script").arg("--version").output().is_err() {
            eprintln!("skipped: `script` (util-linux) is not installed, so no terminal can be simulated");
            return None;
        }
        let exe = assert_cmd::cargo::cargo_bin!("loopwright").display().to_string();
        let mut child = std::process::Command::new("script")
            .args(["-qec", &format!("{exe} {args}"), "/dev/null"])
            .current_dir(self.path())
            .env("USER", "tester")
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("script");
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("type");
        let out = child.wait_with_output().expect("wait");
        Some((out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n")))
    }

    /// True when the journal exists.
    pub fn has_store(&self) -> bool {
        self.path().join(".loopwright/state/state.db").exists()
    }
}

/// `[(id, status, attempts, reason)]` of a result's stages.
pub fn stages(result: &Value) -> Vec<(String, String, u64, Option<String>)> {
    result["stages_executed"]
        .as_array()
        .expect("stages_executed")
        .iter()
        .map(|s| {
            (
                s["id"].as_str().expect("id").to_owned(),
                s["status"].as_str().expect("status").to_owned(),
                s["attempts"].as_u64().expect("attempts"),
                s["reason"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

/// A stage tuple for comparisons.
pub fn st(id: &str, status: &str, attempts: u64, reason: Option<&str>) -> (String, String, u64, Option<String>) {
    (id.to_owned(), status.to_owned(), attempts, reason.map(str::to_owned))
}

/// Every regular file under `dir`, recursively.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Starts `loopwright ARGS` in `ws` without waiting (stdout and stderr piped).
pub fn spawn(ws: &Ws, args: &[&str]) -> std::process::Child {
    spawn_env(ws, args, &[])
}

/// [`spawn`] with more environment variables.
pub fn spawn_env(ws: &Ws, args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin!("loopwright"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(ws.path())
        .env("NO_COLOR", "1")
        .env("USER", "tester")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn loopwright")
}

/// Starts `loopwright ARGS` in `ws` in a process group of its own (nothing read or written on
/// its standard streams), to be killed whole with [`kill_group`].
pub fn spawn_group(ws: &Ws, args: &[&str]) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    std::process::Command::new(assert_cmd::cargo::cargo_bin!("loopwright"))
        .args(args)
        .current_dir(ws.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn loopwright")
}

/// SIGKILL to the whole process group of a child of [`spawn_group`] (loopwright and what it
/// started), then reaps it.
pub fn kill_group(child: std::process::Child) {
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait_with_output();
}

/// Waits for a child of [`spawn`]: (exit code, stdout, stderr).
pub fn finish(child: std::process::Child) -> (i32, String, String) {
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits (up to 30 s) until `path` exists.
pub fn wait_for(path: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !path.exists() {
        assert!(std::time::Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Pids of live (not zombie) processes whose command line contains `token`.
pub fn processes_with(token: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let zombie = std::fs::read_to_string(entry.path().join("stat")).map(|s| s.contains(") Z ")).unwrap_or(true);
        if !zombie && String::from_utf8_lossy(&cmdline).contains(token) {
            pids.push(pid);
        }
    }
    pids
}
