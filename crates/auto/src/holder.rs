//! The PTY holder: a small process of loopwright's own that starts the agent in a
//! pseudo-terminal, keeps a terminal model of its screen, answers the terminal queries TUIs
//! wait for, and serves the screen, input and exit status on a Unix socket. It is started in a
//! process group of its own, so a supervisor (the daemon or a foreground `auto start`) can
//! die and come back and find the agent still running; when the agent exits the holder writes
//! `exit.json` (status and last screen) before it goes, so the exit is known even to a
//! supervisor that was not there to see it.
//!
//! Protocol: one JSON request per line, one JSON response per line.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{CommandBuilder, PtySize, native_pty_system};
use serde::{Deserialize, Serialize};

use crate::screen::{Colour, Face};

/// The socket the holder serves.
pub const SOCKET: &str = "holder.sock";
/// What to start (written by the supervisor, read by the holder).
pub const SPAWN: &str = "spawn.json";
/// The agent's exit, written by the holder when it sees it.
pub const EXIT: &str = "exit.json";
/// The holder's own pid and the agent's.
pub const PIDS: &str = "holder.json";

/// What the holder starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spawn {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Terminal rows.
    pub rows: u16,
    /// Terminal columns.
    pub cols: u16,
    /// How long the holder stays after the agent exited (seconds), so the supervisor can read
    /// the last screen.
    pub linger_seconds: f64,
}

/// The agent's exit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    /// The exit code (0 when ended by a signal).
    pub code: u32,
    /// The signal that ended it, if one did.
    pub signal: Option<String>,
    /// The screen at exit (with the exit banner, where the CLI prints one).
    pub screen: String,
    /// When the holder saw it.
    pub at: String,
}

/// Rows the terminal model keeps above the screen.
const SCROLLBACK_KEPT: usize = 400;
/// Rows of them sent with each screen.
pub const SCROLLBACK_READ: usize = 200;

/// Between typed text and the Enter that submits it (see [`Request::Send`]).
const SUBMIT_DELAY: Duration = Duration::from_millis(150);

/// A request to the holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The status and the visible screen.
    Screen,
    /// Type these bytes into the terminal.
    Send {
        /// The text (keys as the terminal sends them: `\r` is Enter, `\u{1b}` Esc).
        text: String,
        /// Then press Enter, a moment later: a TUI that reads a burst of input as a paste
        /// (Claude Code does) takes an Enter inside the burst for a newline, not a submit.
        #[serde(default)]
        submit: bool,
    },
    /// The status and the screen once output came after `after` and then paused for
    /// `quiet_ms` (a frame drawn whole), or the agent exited, or `timeout_ms` passed: how the
    /// supervisor reads a prompt as it appears instead of at its next heartbeat.
    Settled {
        /// The output offset already seen.
        after: u64,
        /// Milliseconds without output that count as settled.
        quiet_ms: u64,
        /// The longest wait.
        timeout_ms: u64,
    },
    /// Signal the agent's process group (`TERM`, `KILL`, `INT`).
    Signal {
        /// The signal's name.
        signal: String,
    },
    /// End the holder (and the agent, if still running).
    Quit,
}

impl Request {
    /// Typing `text`, then Enter when `enter`: after text, as a keystroke of its own a moment
    /// later (see [`Request::Send`]); alone, at once.
    pub fn keys(text: &str, enter: bool) -> Self {
        if text.is_empty() && enter {
            Request::Send { text: "\r".into(), submit: false }
        } else {
            Request::Send { text: text.to_owned(), submit: enter }
        }
    }
}

/// The holder's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Response {
    /// The agent's pid (its process group).
    pub pid: u32,
    /// Bytes the agent has written so far.
    pub output_bytes: u64,
    /// Milliseconds since the agent last wrote.
    pub quiet_ms: u64,
    /// The visible screen, one line per row.
    pub screen: String,
    /// Per row of `screen`: the output offset from which its text has been on screen without
    /// interruption (0 for a blank row). A row whose age is not past the output offset of the
    /// supervisor's last keystroke was already there when it typed: old text, not a new
    /// prompt — even when output below it keeps coming, or it scrolled up.
    #[serde(default)]
    pub row_ages: Vec<u64>,
    /// Per row of `screen`: how its characters are drawn (see [`Face`]).
    #[serde(default)]
    pub row_faces: Vec<Face>,
    /// The rows that scrolled off the top of the screen, oldest first, at most
    /// [`SCROLLBACK_READ`] of them: where the beginning of a long command a prompt asks about is.
    #[serde(default)]
    pub above: String,
    /// The agent's exit, once it exited.
    pub exit: Option<Exit>,
    /// What went wrong with the request.
    pub error: Option<String>,
}

/// Answers the terminal queries a TUI may block on (cursor position, device status and
/// attributes): vt100 hands them to the callbacks and the holder writes the replies back.
#[derive(Default)]
struct Queries {
    replies: Vec<u8>,
}

impl vt100::Callbacks for Queries {
    fn unhandled_csi(
        &mut self,
        screen: &mut vt100::Screen,
        i1: Option<u8>,
        _i2: Option<u8>,
        params: &[&[u16]],
        c: char,
    ) {
        let first = params.first().and_then(|p| p.first()).copied().unwrap_or(0);
        match (i1, c, first) {
            (None, 'n', 6) => {
                let (row, col) = screen.cursor_position();
                self.replies.extend_from_slice(format!("\x1b[{};{}R", row + 1, col + 1).as_bytes());
            }
            (None, 'n', 5) => self.replies.extend_from_slice(b"\x1b[0n"),
            (None, 'c', 0) => self.replies.extend_from_slice(b"\x1b[?1;2c"),
            (Some(b'>'), 'c', 0) => self.replies.extend_from_slice(b"\x1b[>0;0;0c"),
            _ => {}
        }
    }
}

struct Term {
    parser: vt100::Parser<Queries>,
    output_bytes: u64,
    last_output: Instant,
    exit: Option<Exit>,
    /// Each visible row's text and which of the rows with that text it is, counted from the
    /// top → its age (see [`Response::row_ages`]), as of the last stamp. The count tells a
    /// line repeated below an old one (a second identical limit message) from the old one.
    ages: HashMap<(String, usize), u64>,
    /// The output offset at the last stamp, and when it was taken.
    stamped: u64,
    stamped_at: Instant,
}

impl Term {
    /// Records which rows' texts are on screen now. A text not on screen at the last stamp
    /// gets the age `stamped + 1`: it appeared after that offset (the earliest it can have,
    /// so a prompt seen before a keystroke never reads as newer than the keystroke). Taken
    /// when the agent's output pauses (between frames, not in the middle of a redraw that
    /// erases and rewrites a row) and before every keystroke typed.
    fn stamp(&mut self) {
        if self.output_bytes == self.stamped && !self.ages.is_empty() {
            return;
        }
        let mut old = std::mem::take(&mut self.ages);
        for key in self.row_keys().into_iter().flatten() {
            let age = old.remove(&key).unwrap_or(self.stamped + 1);
            self.ages.insert(key, age);
        }
        self.stamped = self.output_bytes;
        self.stamped_at = Instant::now();
    }

    /// Stamps when the output has paused (the stamper thread would, within 40 ms).
    fn stamp_if_paused(&mut self) {
        if self.output_bytes != self.stamped && self.last_output.elapsed() >= Duration::from_millis(30) {
            self.stamp();
        }
    }

    /// Each visible row's key: its text and its rank among the rows with that text (`None`
    /// for a blank row).
    fn row_keys(&self) -> Vec<Option<(String, usize)>> {
        let (_, cols) = self.parser.screen().size();
        let mut seen: HashMap<String, usize> = HashMap::new();
        self.parser
            .screen()
            .rows(0, cols.get())
            .map(|row| {
                let text = row.trim_end();
                if text.trim().is_empty() {
                    return None;
                }
                let rank = seen.entry(text.to_owned()).or_insert(0);
                *rank += 1;
                Some((text.to_owned(), *rank - 1))
            })
            .collect()
    }

    /// The age of each row of [`screen_text`].
    fn row_ages(&self) -> Vec<u64> {
        self.row_keys()
            .into_iter()
            .map(|key| key.map_or(0, |k| self.ages.get(&k).copied().unwrap_or(self.stamped + 1)))
            .collect()
    }
}

struct Shared {
    term: Mutex<Term>,
    /// Notified when the agent writes or exits.
    changed: Condvar,
    writer: Mutex<Box<dyn Write + Send>>,
    pid: u32,
}

impl Shared {
    fn term(&self) -> std::sync::MutexGuard<'_, Term> {
        self.term.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn response(&self) -> Response {
        let mut t = self.term();
        Response {
            pid: self.pid,
            output_bytes: t.output_bytes,
            quiet_ms: u64::try_from(t.last_output.elapsed().as_millis()).unwrap_or(u64::MAX),
            screen: screen_text(t.parser.screen()),
            above: scrollback_text(&mut t.parser, SCROLLBACK_READ),
            row_ages: t.row_ages(),
            row_faces: row_faces(t.parser.screen()),
            exit: t.exit.clone(),
            error: None,
        }
    }

    /// Waits until output came after `after` and then paused for `quiet`, or the agent
    /// exited, or `timeout` passed; then the response.
    fn settled(&self, after: u64, quiet: Duration, timeout: Duration) -> Response {
        let deadline = Instant::now() + timeout;
        let mut t = self.term();
        loop {
            let now = Instant::now();
            if t.exit.is_some() || now >= deadline {
                break;
            }
            let wait = if t.output_bytes > after {
                let paused = t.last_output.elapsed();
                if paused >= quiet {
                    break;
                }
                quiet - paused
            } else {
                deadline - now
            };
            t = self
                .changed
                .wait_timeout(t, wait.min(deadline - now))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        drop(t);
        // The rows' ages are stamped when output pauses: take the stamp now, not a moment later.
        self.term().stamp_if_paused();
        self.response()
    }

    fn send(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut w = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        w.write_all(bytes)?;
        w.flush()
    }
}

/// The visible screen as text, trailing blanks trimmed per row.
pub fn screen_text(screen: &vt100::Screen) -> String {
    let (_, cols) = screen.size();
    let rows: Vec<String> = screen.rows(0, cols.get()).map(|r| r.trim_end().to_owned()).collect();
    rows.join("\n")
}

/// How each visible row's characters are drawn: the colour and intensity they share, if they
/// do (blanks are not counted: a space takes no colour a reader sees).
pub fn row_faces(screen: &vt100::Screen) -> Vec<Face> {
    let (rows, cols) = screen.size();
    (0..rows.get())
        .map(|row| {
            let mut face = Face::Unknown;
            for col in 0..cols.get() {
                let Some(cell) = screen.cell(row, col).filter(|c| !c.contents().trim().is_empty()) else { continue };
                let colour = match cell.fgcolor() {
                    vt100::Color::Default => Colour::Default,
                    vt100::Color::Idx(i) => Colour::Indexed(i),
                    vt100::Color::Rgb(r, g, b) => Colour::Rgb(r, g, b),
                };
                let this = Face::Uniform { colour, dim: cell.dim() };
                face = match face {
                    Face::Unknown => this,
                    same if same == this => same,
                    _ => return Face::Mixed,
                };
            }
            face
        })
        .collect()
}

/// The last `max` rows above the screen, oldest first (the view is put back after).
fn scrollback_text<CB: vt100::Callbacks>(parser: &mut vt100::Parser<CB>, max: usize) -> String {
    let screen = parser.screen_mut();
    let (rows, cols) = screen.size();
    let (rows, cols) = (usize::from(rows.get()), cols.get());
    let want = screen.scrollback_len().min(max);
    let mut out: Vec<String> = Vec::with_capacity(want);
    let mut offset = want;
    while offset > 0 {
        screen.set_scrollback(offset);
        let take = offset.min(rows);
        out.extend(screen.rows(0, cols).take(take).map(|r| r.trim_end().to_owned()));
        offset -= take;
    }
    screen.set_scrollback(0);
    out.join("\n")
}

/// Runs the holder for the session directory `dir` (reads `spawn.json`); returns when the
/// agent has exited and the linger passed, or on `quit`.
pub fn run(dir: &Path) -> Result<(), String> {
    let spawn: Spawn = serde_json::from_slice(&std::fs::read(dir.join(SPAWN)).map_err(|e| format!("{SPAWN}: {e}"))?)
        .map_err(|e| format!("{SPAWN}: {e}"))?;
    let size = PtySize { rows: spawn.rows.max(2), cols: spawn.cols.max(20), pixel_width: 0, pixel_height: 0 };
    let pair = native_pty_system().openpty(size).map_err(|e| format!("cannot open a pseudo-terminal: {e}"))?;
    let (program, args) = spawn.argv.split_first().ok_or("nothing to run: the argv is empty")?;
    let mut cmd = CommandBuilder::new(program);
    cmd.args(args);
    cmd.cwd(&spawn.cwd);
    // This terminal draws 256 colours, and how a row is drawn is read (a command's rows from
    // the grey description under them): the agent is told so, whatever the environment it was
    // started from says (`CI=true` alone turns colours off in Node's supports-color).
    cmd.env("TERM", "xterm-256color");
    cmd.env("FORCE_COLOR", "2");
    cmd.env_remove("NO_COLOR");
    for name in loopwright_runners::process::CREDENTIALS {
        cmd.env_remove(name);
    }
    for (k, v) in &spawn.env {
        cmd.env(k, v);
    }
    let mut child = pair.slave.spawn_command(cmd).map_err(|e| format!("cannot start {program}: {e}"))?;
    drop(pair.slave);
    let pid = child.process_id().unwrap_or(0);
    let mut reader = pair.master.try_clone_reader().map_err(|e| e.to_string())?;
    let writer = pair.master.take_writer().map_err(|e| e.to_string())?;
    let rows = std::num::NonZeroU16::new(size.rows).ok_or("zero rows")?;
    let cols = std::num::NonZeroU16::new(size.cols).ok_or("zero columns")?;
    let shared = Arc::new(Shared {
        term: Mutex::new(Term {
            parser: vt100::Parser::new_with_callbacks(rows, cols, SCROLLBACK_KEPT, Queries::default()),
            output_bytes: 0,
            last_output: Instant::now(),
            exit: None,
            ages: HashMap::new(),
            stamped: 0,
            stamped_at: Instant::now(),
        }),
        changed: Condvar::new(),
        writer: Mutex::new(writer),
        pid,
    });
    let pids = serde_json::json!({ "holder": std::process::id(), "agent": pid });
    crate::module::write_private(&dir.join(PIDS), &pids.to_string()).map_err(|e| e.to_string())?;

    // The terminal: every byte the agent writes goes through the model; queries are answered.
    let term = Arc::clone(&shared);
    let reading = std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let replies = {
                        let mut t = term.term();
                        t.parser.process(&buf[..n]);
                        t.output_bytes += n as u64;
                        t.last_output = Instant::now();
                        std::mem::take(&mut t.parser.callbacks_mut().replies)
                    };
                    term.changed.notify_all();
                    if !replies.is_empty() {
                        let _ = term.send(&replies);
                    }
                }
            }
        }
    });

    // Row ages: stamped when the output pauses for a moment, or at least twice a second.
    let stamper = Arc::downgrade(&shared);
    std::thread::spawn(move || {
        while let Some(shared) = stamper.upgrade() {
            {
                let mut t = shared.term();
                if t.stamped_at.elapsed() >= Duration::from_millis(500) && t.output_bytes != t.stamped {
                    t.stamp();
                } else {
                    t.stamp_if_paused();
                }
            }
            drop(shared);
            std::thread::sleep(Duration::from_millis(40));
        }
    });

    let sock = dir.join(SOCKET);
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).map_err(|e| format!("{}: {e}", sock.display()))?;
    // The socket this holder made: a holder started after it (a restart of the agent) binds a
    // new one at the same path, which this one must not remove when it goes.
    let ours = std::fs::metadata(&sock).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).ok();
    let server = Arc::clone(&shared);
    let quit = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let quitting = Arc::clone(&quit);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let s = Arc::clone(&server);
            let q = Arc::clone(&quitting);
            std::thread::spawn(move || serve(stream, &s, &q));
        }
    });

    // The exit: wait for the agent, let the reader drain, record it, linger, go.
    let status = child.wait();
    let _ = reading.join();
    let exit = {
        let mut t = shared.term();
        let (code, signal) = match &status {
            Ok(s) => (s.exit_code(), s.signal().map(str::to_owned)),
            Err(e) => (u32::MAX, Some(e.to_string())),
        };
        let exit =
            Exit { code, signal, screen: screen_text(t.parser.screen()), at: jiff::Timestamp::now().to_string() };
        t.exit = Some(exit.clone());
        exit
    };
    shared.changed.notify_all();
    // The file keeps the last screen after the holder is gone: without the secrets the
    // agent may have printed (those of the environment it was started with).
    let secrets = loopwright_runners::secrets::Redactor::from_env(&[]);
    let kept = Exit { screen: secrets.redact(&exit.screen).into_owned(), ..exit };
    crate::module::write_private(&dir.join(EXIT), &serde_json::to_string(&kept).unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let until = Instant::now() + Duration::from_secs_f64(spawn.linger_seconds.max(0.0));
    while Instant::now() < until && !quit.load(std::sync::atomic::Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
    if std::fs::metadata(&sock).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).ok() == ours {
        let _ = std::fs::remove_file(&sock);
    }
    Ok(())
}

fn serve(stream: UnixStream, shared: &Shared, quit: &std::sync::atomic::AtomicBool) {
    let Ok(mut out) = stream.try_clone() else { return };
    let reader = BufReader::new(stream);
    for line in reader.lines() {
        let Ok(line) = line else { return };
        let response = match serde_json::from_str::<Request>(&line) {
            Err(e) => Response { error: Some(format!("bad request: {e}")), ..Response::default() },
            Ok(Request::Screen) => shared.response(),
            Ok(Request::Settled { after, quiet_ms, timeout_ms }) => {
                shared.settled(after, Duration::from_millis(quiet_ms), Duration::from_millis(timeout_ms.min(4000)))
            }
            Ok(Request::Send { text, submit }) => {
                // What is on screen now is older than this keystroke.
                shared.term().stamp();
                let mut r = shared.response();
                let sent = if r.exit.is_some() {
                    Err("the agent has exited".to_owned())
                } else {
                    shared.send(text.as_bytes()).map_err(|e| e.to_string())
                };
                let sent = sent.and_then(|()| {
                    if submit {
                        std::thread::sleep(SUBMIT_DELAY);
                        shared.send(b"\r").map_err(|e| e.to_string())
                    } else {
                        Ok(())
                    }
                });
                r.error = sent.err();
                r
            }
            Ok(Request::Signal { signal }) => {
                let mut r = shared.response();
                if let Err(e) = signal_group(shared.pid, &signal) {
                    r.error = Some(e);
                }
                r
            }
            Ok(Request::Quit) => {
                if shared.term().exit.is_none() {
                    let _ = signal_group(shared.pid, "KILL");
                }
                quit.store(true, std::sync::atomic::Ordering::SeqCst);
                shared.response()
            }
        };
        let mut text = serde_json::to_string(&response).unwrap_or_else(|_| "{}".into());
        text.push('\n');
        if out.write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}

/// Sends `signal` (`TERM`, `KILL`, `INT`, `HUP`) to the process group led by `pid`.
fn signal_group(pid: u32, signal: &str) -> Result<(), String> {
    use nix::sys::signal::Signal;
    let sig = match signal {
        "TERM" => Signal::SIGTERM,
        "KILL" => Signal::SIGKILL,
        "INT" => Signal::SIGINT,
        "HUP" => Signal::SIGHUP,
        other => return Err(format!("unknown signal {other:?}")),
    };
    let pgid = i32::try_from(pid).map_err(|_| "bad pid".to_owned())?;
    if pgid <= 1 {
        return Err("no agent process".into());
    }
    loopwright_runners::process::signal_group(pgid, sig);
    Ok(())
}

/// Talks to a holder.
#[derive(Debug, Clone)]
pub struct Client {
    dir: PathBuf,
}

/// A holder could not be reached or refused.
#[derive(Debug, thiserror::Error)]
pub enum HolderError {
    /// Nothing listens: the holder is gone (see `exit.json`).
    #[error("the holder of {0} is gone")]
    Gone(String),
    /// It answered with an error.
    #[error("{0}")]
    Refused(String),
}

impl Client {
    /// A client for the holder of the session directory `dir`.
    pub fn new(dir: &Path) -> Self {
        Self { dir: dir.to_owned() }
    }

    /// The session directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sends one request and reads the answer (blocking, with a 5 s limit).
    pub fn request(&self, request: &Request) -> Result<Response, HolderError> {
        let gone = |_| HolderError::Gone(self.dir.display().to_string());
        let mut stream = UnixStream::connect(self.dir.join(SOCKET)).map_err(gone)?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).map_err(gone)?;
        let mut line = serde_json::to_string(request).map_err(|e| HolderError::Refused(e.to_string()))?;
        line.push('\n');
        stream.write_all(line.as_bytes()).map_err(gone)?;
        let mut answer = String::new();
        BufReader::new(stream).read_line(&mut answer).map_err(gone)?;
        let response: Response = serde_json::from_str(&answer).map_err(|e| HolderError::Refused(e.to_string()))?;
        match response.error {
            Some(e) => Err(HolderError::Refused(e)),
            None => Ok(response),
        }
    }

    /// The exit the holder recorded, if the agent exited.
    pub fn recorded_exit(&self) -> Option<Exit> {
        serde_json::from_slice(&std::fs::read(self.dir.join(EXIT)).ok()?).ok()
    }
}

/// Starts a holder for `spawn` in the session directory `dir` with `exe` (the loopwright
/// binary: `exe auto hold DIR`), in a process group of its own, and waits until it serves.
pub fn start(exe: &Path, dir: &Path, spawn: &Spawn) -> Result<Client, String> {
    // Private: whoever can connect to the socket types into the agent's terminal.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    for stale in [SOCKET, EXIT, PIDS] {
        let _ = std::fs::remove_file(dir.join(stale));
    }
    crate::module::write_private(&dir.join(SPAWN), &serde_json::to_string_pretty(spawn).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let log = std::fs::File::create(dir.join("holder.log")).map_err(|e| e.to_string())?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["auto", "hold"]).arg(dir);
    cmd.stdin(std::process::Stdio::null()).stdout(log).stderr(log2);
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().map_err(|e| format!("cannot start the holder {}: {e}", exe.display()))?;
    let client = Client::new(dir);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if client.request(&Request::Screen).is_ok() || client.recorded_exit().is_some() {
            // Reap it when it ends (the supervisor may outlive many holders).
            std::thread::spawn(move || child.wait());
            return Ok(client);
        }
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(dir.join("holder.log")).unwrap_or_default();
            return Err(format!("the holder ended at once ({status}): {}", log.trim()));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("the holder did not start serving within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_faces_say_how_each_row_is_drawn() {
        let size = |n: u16| std::num::NonZeroU16::new(n).expect("not zero");
        let mut parser = vt100::Parser::new(size(5), size(30), 0);
        parser.process(b"   sort notes.txt\r\n\x1b[38;5;246m   Run shell command\x1b[0m\r\n");
        parser.process(b"plain \x1b[2mfaint\x1b[0m\r\n\x1b[2m  all faint  \x1b[0m\r\n\x1b[38;2;1;2;3mrgb\x1b[0m");
        let plain = |colour, dim| Face::Uniform { colour, dim };
        assert_eq!(
            row_faces(parser.screen()),
            [
                plain(Colour::Default, false),
                plain(Colour::Indexed(246), false),
                Face::Mixed,
                plain(Colour::Default, true),
                plain(Colour::Rgb(1, 2, 3), false),
            ]
        );
        let blank = vt100::Parser::new(size(2), size(10), 0);
        assert_eq!(row_faces(blank.screen()), [Face::Unknown, Face::Unknown]);
    }
}
