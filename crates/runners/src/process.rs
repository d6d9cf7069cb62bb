//! Running one program in its own process group, with a deadline and capped output.
//!
//! The program is the leader of a new process group, so a timeout (or the end of the stage)
//! reaches its children and grandchildren too: TERM to the whole group, a grace period, then
//! KILL. stdout and stderr are read concurrently so neither pipe can fill and block it.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::time::Instant;

use crate::live::LiveSink;

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEnd {
    /// It exited with this code.
    Exited(i32),
    /// A signal killed it.
    Signaled(i32),
    /// The deadline passed; the group was ended.
    TimedOut,
    /// It could not be started.
    SpawnFailed(String),
}

/// What a process printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessResult {
    /// How it ended.
    pub end: ProcessEnd,
    /// Its standard output (the last `cap` bytes when longer).
    pub stdout: String,
    /// Its standard error (likewise).
    pub stderr: String,
}

/// A program to run.
#[derive(Debug, Clone)]
pub struct Spawn<'a> {
    /// Program and arguments.
    pub argv: &'a [String],
    /// Text written to its stdin (then closed); `None` gives it no stdin.
    pub stdin: Option<&'a str>,
    /// Extra environment.
    pub env: &'a [(String, String)],
    /// Whether it inherits loopwright's environment besides `env` (false: `env` is all it
    /// gets, as in a sandbox).
    pub inherit: bool,
    /// Working directory.
    pub cwd: &'a Path,
    /// When to end it.
    pub deadline: Instant,
    /// Time between TERM and KILL.
    pub grace: Duration,
    /// Bytes of each output kept.
    pub output_cap: usize,
}

/// loopwright's own credentials in its environment, which no process it starts is given,
/// sandboxed or not: the store's URL (with its password).
pub const CREDENTIALS: &[&str] = &["LOOPWRIGHT_STORE"];

/// Runs a program to its end. `on_start` gets its process group id and start time as soon as
/// it runs.
pub async fn run(spawn: Spawn<'_>, on_start: impl FnOnce(i32, Option<u64>)) -> ProcessResult {
    run_live(spawn, on_start, None).await
}

/// [`run`], also handing what the program prints (stdout, stderr) to `live` as it is read.
pub async fn run_live(
    spawn: Spawn<'_>,
    on_start: impl FnOnce(i32, Option<u64>),
    live: Option<(&mut LiveSink<'_>, &mut LiveSink<'_>)>,
) -> ProcessResult {
    let Some((program, args)) = spawn.argv.split_first() else {
        return failed("empty command".into());
    };
    let mut cmd = Command::new(resolve(program));
    // The program sees the name it was given (`sh`, not `/usr/bin/sh`), so its messages read
    // as usual.
    cmd.arg0(program);
    if !spawn.inherit {
        cmd.env_clear();
    }
    for name in CREDENTIALS {
        cmd.env_remove(name);
    }
    cmd.args(args)
        .current_dir(spawn.cwd)
        .envs(spawn.env.iter().map(|(k, v)| (k, v)))
        .stdin(if spawn.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let before = boot_ticks();
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return failed(format!("cannot start `{program}`: program not found (is it installed and on PATH?)"));
        }
        Err(e) => return failed(format!("cannot start `{program}`: {e}")),
    };
    let after = boot_ticks();
    let pgid = child.id().and_then(|id| i32::try_from(id).ok()).unwrap_or(0);
    // The kernel stamps a process's start time while creating it, between these two readings
    // of its clock: when both fall in the same tick, that tick is the start time, and /proc
    // need not be read (a read that waits for the new process's exec to finish).
    let started = match (before, after) {
        (Some(b), Some(a)) if a == b => Some(b),
        _ => child.id().and_then(start_time),
    };
    on_start(pgid, started);

    // Feed stdin, read both outputs and wait for the exit, all in this task.
    let stdin_text = spawn.stdin.map(str::to_owned);
    let stdin_pipe = child.stdin.take();
    let feed = async move {
        if let (Some(mut pipe), Some(text)) = (stdin_pipe, stdin_text) {
            // A program that does not read its stdin closes the pipe: that is fine.
            let _ = pipe.write_all(text.as_bytes()).await;
            let _ = pipe.shutdown().await;
        }
    };
    let (live_out, live_err) = live.map_or((None, None), |(o, e)| (Some(o), Some(e)));
    let read_out = read_capped(child.stdout.take(), spawn.output_cap, live_out);
    let read_err = read_capped(child.stderr.take(), spawn.output_cap, live_err);
    let wait = async {
        tokio::select! {
            status = child.wait() => match status {
                Ok(s) => status_end(s),
                Err(e) => ProcessEnd::SpawnFailed(format!("waiting for `{program}` failed: {e}")),
            },
            () = tokio::time::sleep_until(spawn.deadline) => {
                signal_group(pgid, Signal::SIGTERM);
                if tokio::time::timeout(spawn.grace, child.wait()).await.is_err() {
                    signal_group(pgid, Signal::SIGKILL);
                    let _ = child.wait().await;
                }
                ProcessEnd::TimedOut
            }
        }
    };
    tokio::pin!(feed, read_out, read_err, wait);
    let (mut fed, mut stdout, mut stderr) = (false, None, None);
    let end = loop {
        tokio::select! {
            end = &mut wait => break end,
            () = &mut feed, if !fed => fed = true,
            text = &mut read_out, if stdout.is_none() => stdout = Some(text),
            text = &mut read_err, if stderr.is_none() => stderr = Some(text),
        }
    };
    // Whatever the leader left running in its group goes with it, so no output pipe stays
    // open and nothing of this stage outlives it.
    signal_group(pgid, Signal::SIGKILL);
    // A process that left the group (setsid) may hold a pipe open: do not wait forever.
    let rest = async {
        let out = match stdout.take() {
            Some(text) => text,
            None => (&mut read_out).await,
        };
        let err = match stderr.take() {
            Some(text) => text,
            None => (&mut read_err).await,
        };
        (out, err)
    };
    let (stdout, stderr) = tokio::time::timeout(Duration::from_secs(2), rest).await.unwrap_or_default();
    ProcessResult { end, stdout, stderr }
}

/// The full path of a program named without a `/`, looked up on PATH once per process
/// (so each spawn execs directly instead of trying every PATH entry).
pub fn resolve(program: &str) -> std::path::PathBuf {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, std::path::PathBuf>>> = OnceLock::new();
    if program.contains('/') {
        return program.into();
    }
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut cache = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(path) = cache.get(program) {
        return path.clone();
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).map(|dir| dir.join(program)).find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    });
    match found {
        Some(path) => {
            cache.insert(program.to_owned(), path.clone());
            path
        }
        // Not found: let the spawn fail with the usual error.
        None => program.into(),
    }
}

fn failed(message: String) -> ProcessResult {
    ProcessResult { end: ProcessEnd::SpawnFailed(message), stdout: String::new(), stderr: String::new() }
}

fn status_end(status: std::process::ExitStatus) -> ProcessEnd {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ProcessEnd::Exited(code),
        (None, Some(sig)) => ProcessEnd::Signaled(sig),
        (None, None) => ProcessEnd::Exited(-1),
    }
}

/// Sends a signal to a whole process group; a group that is already gone is fine.
pub fn signal_group(pgid: i32, signal: Signal) {
    if pgid > 1 {
        let _ = killpg(Pid::from_raw(pgid), signal);
    }
}

/// True while any process of the group is alive. A zombie (exited, not yet reaped: under an
/// init that does not reap orphans, it stays one) is not alive: it runs nothing and cannot
/// race anyone.
pub fn group_alive(pgid: i32) -> bool {
    if pgid <= 1 || killpg(Pid::from_raw(pgid), None).is_err() {
        return false;
    }
    // No /proc to look in: trust the signal check.
    let Some(mut pids) = pids() else { return true };
    pids.any(|pid| state_and_group(pid).is_some_and(|(state, group)| group == pgid && state != 'Z'))
}

/// The ids of the processes in `/proc`, or `None` when it cannot be read.
pub fn pids() -> Option<impl Iterator<Item = u32>> {
    let entries = std::fs::read_dir("/proc").ok()?;
    Some(entries.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok())))
}

/// A process's state letter (`R`, `S`, `Z`, …) and process group, from `/proc/PID/stat`.
fn state_and_group(pid: u32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces: count from the ')'.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let group = fields.nth(1)?.parse().ok()?;
    Some((state, group))
}

/// CPU time (clock ticks, user + system, with reaped children's) used by the processes that
/// descend from `pid`, not counting `pid` itself: a build or a test run an agent started shows
/// here while the agent's own screen stands still. 0 when `/proc` cannot be read.
pub fn descendants_cpu_ticks(pid: u32) -> u64 {
    let Some(pids) = pids().filter(|_| pid != 0) else { return 0 };
    let procs: Vec<(u32, u32, u64)> = pids
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            // Fields after the command name: state, ppid, …, utime (12th), stime, cutime, cstime.
            let f: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            Some((p, u32::try_from(num(1)).ok()?, num(11) + num(12) + num(13) + num(14)))
        })
        .collect();
    let mut total = 0;
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for &(p, ppid, ticks) in &procs {
            if ppid == parent {
                total += ticks;
                frontier.push(p);
            }
        }
    }
    total
}

/// The process groups of live processes whose environment has all of `vars` (Linux /proc;
/// processes of other users, whose environment cannot be read, are never matched).
pub fn groups_with_env(vars: &[(&str, &str)]) -> Vec<i32> {
    let wanted: Vec<Vec<u8>> = vars.iter().map(|(k, v)| format!("{k}={v}").into_bytes()).collect();
    let Some(pids) = pids() else { return Vec::new() };
    let mut groups = Vec::new();
    for pid in pids.filter(|pid| *pid != std::process::id()) {
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
        if !wanted.iter().all(|w| vars.contains(&w.as_slice())) {
            continue;
        }
        if let Some((_, pgid)) = state_and_group(pid).filter(|(_, g)| *g > 1 && !groups.contains(g)) {
            groups.push(pgid);
        }
    }
    groups
}

/// Now, in the clock and unit of `/proc/PID/stat`'s start time: ticks (`CLK_TCK`, 100 on
/// Linux) of `CLOCK_BOOTTIME`. `None` where a tick is not a whole number of nanoseconds (the
/// kernel then rounds differently, and /proc is the only source).
fn boot_ticks() -> Option<u64> {
    static NS_PER_TICK: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let ns_per_tick = (*NS_PER_TICK.get_or_init(|| {
        let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten()?;
        let ticks = u64::try_from(ticks).ok().filter(|t| *t > 0 && 1_000_000_000 % *t == 0)?;
        Some(1_000_000_000 / ticks)
    }))?;
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).ok()?;
    let ns = u64::try_from(now.tv_sec()).ok()? * 1_000_000_000 + u64::try_from(now.tv_nsec()).ok()?;
    Some(ns / ns_per_tick)
}

/// This machine, as journals name it beside a pid: its host name and machine id
/// (`/etc/machine-id`), so that machines cloned from one image still differ by name, and one
/// machine renamed or reinstalled is another. Read once.
pub fn machine() -> &'static str {
    static MACHINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MACHINE.get_or_init(|| {
        let read = |path: &str| std::fs::read_to_string(path).map(|s| s.trim().to_owned()).unwrap_or_default();
        let name = read("/proc/sys/kernel/hostname");
        let id = read("/etc/machine-id");
        let id = if id.is_empty() { read("/var/lib/dbus/machine-id") } else { id };
        match (name.is_empty(), id.get(..12)) {
            (false, Some(id)) => format!("{name}/{id}"),
            (false, None) => name,
            (true, Some(id)) => id.to_owned(),
            (true, None) => "localhost".to_owned(),
        }
    })
}

/// True when `host` (as journaled; none in older journals) is this machine.
pub fn is_this_machine(host: Option<&str>) -> bool {
    host.is_none_or(|h| h == machine())
}

/// A process's start time in clock ticks since boot (`/proc/PID/stat` field 22), on Linux.
pub fn start_time(pid: u32) -> Option<u64> {
    use std::io::Read;
    // One read of a stack buffer: the line is well under 1 KB (`read_to_string` would stat the
    // file and read it in growing pieces, for every stage).
    let mut buf = [0u8; 2048];
    let mut file = std::fs::File::open(format!("/proc/{pid}/stat")).ok()?;
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..]).ok()? {
            0 => break,
            n => len += n,
        }
    }
    let stat = std::str::from_utf8(&buf[..len]).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces: count from the ')'.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// True when the process `pid` is alive and, when `start` is known, is the same process that
/// started then (not a later process that reused the id).
pub fn same_process_alive(pid: u32, start: Option<u64>) -> bool {
    let Ok(raw) = i32::try_from(pid) else { return false };
    if nix::sys::signal::kill(Pid::from_raw(raw), None).is_err() {
        return false;
    }
    if state_and_group(pid).is_some_and(|(state, _)| state == 'Z') {
        return false;
    }
    match (start, start_time(pid)) {
        (Some(expected), Some(actual)) => expected == actual,
        // No /proc to compare with: trust the pid.
        _ => true,
    }
}

/// Drops all but the last `cap` bytes; returns how many went.
fn keep_last(kept: &mut Vec<u8>, cap: usize) -> usize {
    let excess = kept.len().saturating_sub(cap);
    kept.drain(..excess);
    excess
}

/// Reads a pipe to its end, keeping at most the last `cap` bytes.
async fn read_capped(pipe: Option<impl AsyncRead + Unpin>, cap: usize, mut live: Option<&mut LiveSink<'_>>) -> String {
    let Some(mut pipe) = pipe else { return String::new() };
    // Read straight into what is kept (it grows as output comes): most stages print little,
    // and a process that prints nothing costs no buffer at all.
    let mut kept: Vec<u8> = Vec::new();
    let mut dropped = 0usize;
    loop {
        if !kept.is_empty() && kept.capacity() - kept.len() < 1024 {
            // Room for the next read (the vector doubles as the output grows).
            kept.reserve(4096);
        }
        let before = kept.len();
        let read = pipe.read_buf(&mut kept).await;
        if let Some(live) = live.as_deref_mut() {
            live.feed(&kept[before..]);
        }
        match read {
            Ok(0) | Err(_) => break,
            // The front is dropped only once twice the cap has built up, so each byte of a
            // long output is moved at most once (dropping on every read moved the whole cap).
            Ok(_) if kept.len() >= cap.saturating_mul(2) => dropped += keep_last(&mut kept, cap),
            Ok(_) => {}
        }
    }
    if let Some(live) = live {
        live.finish();
    }
    dropped += keep_last(&mut kept, cap);
    let text = String::from_utf8_lossy(&kept).into_owned();
    if dropped > 0 { format!("[... {dropped}{}{text}", crate::secrets::CUT_MARKER_END) } else { text }
}
