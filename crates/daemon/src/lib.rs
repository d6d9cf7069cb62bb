//! `loopwright serve` (SPEC §9): one daemon per workspace serving the REST API under `/api/`,
//! live events as Server-Sent Events, and the dashboard at `/`, over the application layer
//! (`loopwright-app`) — the same operations the CLI performs.
//!
//! Modules: [`api`] (handlers, wire types, the error mapping, the access check, SSE),
//! [`runs`] (the queue, the scheduler and recovery), [`host`] (one thread per run driven
//! here), [`dashboard`] (the embedded pages). `serve` below wires them: the daemon's lock and
//! `serve.json`, the token, the journal watcher that feeds live streams, graceful shutdown.

pub mod api;
pub mod auto;
pub mod dashboard;
pub mod github;
pub mod host;
pub mod listen;
pub mod memory;
pub mod metrics;
pub mod notifications;
pub mod runs;
pub mod worker;

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use loopwright_app::Error;
use loopwright_app::workspace::Workspace;
use loopwright_engine::{FeedEntry, Store};
use loopwright_store::{Journal, SqliteStore};
use nix::fcntl::{Flock, FlockArg};
use tokio::sync::{broadcast, watch};

/// How `serve` is started.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to listen (`127.0.0.1:7878`; port 0 picks a free one).
    pub addr: SocketAddr,
    /// At most this many runs execute at once.
    pub max_runs: usize,
    /// Allow a non-loopback address.
    pub allow_remote: bool,
    /// How often an idle event stream sends a heartbeat comment.
    pub heartbeat: Duration,
    /// The URL people reach the daemon at through a reverse proxy (`--public-url`).
    pub public_url: Option<String>,
    /// At most this many connections are served at once (`--max-connections`).
    pub max_connections: usize,
    /// The header a trusted reverse proxy names its user in (`--trust-proxy-header`).
    pub trust_proxy_header: Option<String>,
    /// The addresses that proxy connects from (`--trust-proxy-from`, CIDRs).
    pub trust_proxy_from: Vec<String>,
    /// A loopback address serving `/metrics` without a token (`--metrics-addr`).
    pub metrics_addr: Option<SocketAddr>,
}

impl Default for Options {
    /// `127.0.0.1:7878`, 4 runs at once, loopback only, a heartbeat every 15 s.
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 7878)),
            max_runs: 4,
            allow_remote: false,
            heartbeat: Duration::from_secs(15),
            public_url: None,
            max_connections: 512,
            trust_proxy_header: None,
            trust_proxy_from: Vec::new(),
            metrics_addr: None,
        }
    }
}

/// What every request handler shares.
pub struct Shared {
    /// The workspace served.
    pub ws: Workspace,
    /// The API's connection to the journal.
    pub store: Journal,
    /// The runs' states as last read, so a read of a long run folds only its new events.
    pub folds: loopwright_app::ops::read::Folds,
    /// The bearer token.
    pub token: String,
    /// The address served.
    pub addr: SocketAddr,
    /// The runs driven here.
    pub runs: Arc<runs::Runs>,
    /// Every journaled event, as the watcher reads it.
    pub feed: broadcast::Sender<Arc<FeedEntry>>,
    /// Heartbeat interval of event streams.
    pub heartbeat: Duration,
    /// The auto loops supervised here.
    pub auto: Arc<auto::Loops>,
    /// The workspace's SQLite file as auto mode's reads and the notifications use it (a
    /// connection of its own: they are blocking), wherever the journal is.
    pub auto_store: Arc<SqliteStore>,
    /// True once the daemon is shutting down (event streams end).
    pub shutdown: watch::Receiver<bool>,
    /// The name of the dashboard's cookie (unique to this daemon).
    pub cookie: String,
    /// How long the dashboard's cookie lasts, in seconds (`[serve] session_days`).
    pub session_seconds: u64,
    /// `--public-url`, when given.
    pub public: Option<PublicUrl>,
    /// The people with tokens of their own.
    pub people: api::auth::People,
    /// The reverse proxy trusted to name its users (`--trust-proxy-header`, `--trust-proxy-from`).
    pub proxy: Option<api::auth::TrustedProxy>,
    /// Signs and checks the notifications' one-tap links.
    pub signer: Arc<notifications::Signer>,
    /// GitHub's delivery ids received lately.
    pub github_seen: github::Seen,
    /// The GitHub adapter webhooks are answered with, made at the first delivery (who
    /// loopwright is, and what conditional requests found, kept between deliveries).
    pub github: tokio::sync::OnceCell<loopwright_forge::github::GitHub>,
    /// What `/metrics` has counted of the journal's feed so far.
    pub metrics: metrics::Metrics,
}

/// The URL a reverse proxy serves the daemon at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl {
    /// As given, without a trailing slash (`https://loops.example.com`).
    pub url: String,
    /// Its origin (scheme, host and port).
    pub origin: String,
    /// Its host.
    pub host: String,
}

/// What is wrong with a `--public-url`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--public-url {text}: {why}")]
pub struct BadPublicUrl {
    /// The URL as given.
    pub text: String,
    /// What is wrong with it.
    pub why: String,
}

impl PublicUrl {
    /// Parses `--public-url`: an `http` or `https` URL with a host and no path, query or
    /// fragment other than `/`.
    pub fn parse(text: &str) -> Result<Self, BadPublicUrl> {
        let bad = |why: String| BadPublicUrl { text: text.to_owned(), why };
        let uri: axum::http::Uri = text.parse().map_err(|e: axum::http::uri::InvalidUri| bad(e.to_string()))?;
        let scheme = uri.scheme_str().unwrap_or_default().to_ascii_lowercase();
        if !matches!(scheme.as_str(), "http" | "https") {
            return Err(bad("expected an http:// or https:// URL".to_owned()));
        }
        let authority = uri.authority().ok_or_else(|| bad("no host".to_owned()))?;
        if authority.as_str().contains('@') || !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(bad("expected scheme://host[:port] only (the dashboard is served at /)".to_owned()));
        }
        let host = authority.host().to_ascii_lowercase();
        let default_port = if scheme == "https" { 443 } else { 80 };
        let origin = match authority.port_u16() {
            Some(p) if p != default_port => format!("{scheme}://{host}:{p}"),
            _ => format!("{scheme}://{host}"),
        };
        Ok(Self { url: origin.clone(), origin, host: host.trim_matches(['[', ']']).to_owned() })
    }
}

/// What the daemon tells its caller once it serves.
#[derive(Debug, Clone)]
pub struct Started {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The dashboard's URL, carrying the token once.
    pub url: String,
}

/// A daemon serving a workspace, as a client finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its bearer token.
    pub token: String,
    /// Its process.
    pub pid: u32,
    /// The dashboard's sign-in URL.
    pub url: String,
    /// `--public-url`, when it was given.
    pub public: Option<PublicUrl>,
    /// Its Unix socket (the owner's tools talk to it there), when it has one.
    pub socket: Option<std::path::PathBuf>,
}

/// The daemon's Unix socket, in the workspace's state folder.
pub const SOCKET: &str = "serve.sock";

impl Served {
    /// The sign-in link of another token (a person's) to this daemon's dashboard.
    pub fn sign_in_url(&self, token: &str) -> String {
        sign_in_url(self.public.as_ref(), self.addr, token)
    }
}

/// The daemon serving `ws`, if one is alive: `serve.json` names a live process, and the token
/// is readable. (Whether it answers is for the caller's first request to find out.)
pub fn serving(ws: &Workspace) -> Option<Served> {
    let info: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.state_dir().join("serve.json")).ok()?).ok()?;
    let pid = u32::try_from(info["pid"].as_u64()?).ok()?;
    let addr = info["addr"].as_str()?.parse().ok()?;
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(pid).ok()?), None).is_ok();
    let token = std::fs::read_to_string(ws.state_dir().join("serve.token")).ok()?.trim().to_owned();
    let public = info["public_url"].as_str().and_then(|u| PublicUrl::parse(u).ok());
    let url = sign_in_url(public.as_ref(), addr, &token);
    let socket = info["socket"].as_str().map(std::path::PathBuf::from).filter(|p| p.exists());
    (alive && !token.is_empty()).then_some(Served { addr, token, pid, url, public, socket })
}

/// The daemon's lock: held while it serves, so a second daemon of the workspace is refused.
fn take_lock(ws: &Workspace) -> Result<Flock<std::fs::File>, Error> {
    let path = ws.state_dir().join("serve.lock");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::usage(format!("cannot open {}: {e}", path.display())))?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|_| {
        let info = std::fs::read_to_string(ws.state_dir().join("serve.json")).unwrap_or_default();
        let info: serde_json::Value = serde_json::from_str(&info).unwrap_or_default();
        Error::conflict(format!(
            "a daemon already serves {} (process {}, at http://{}); stop it first, or use its API",
            ws.root.display(),
            info["pid"].as_u64().map_or_else(|| "?".into(), |p| p.to_string()),
            info["addr"].as_str().unwrap_or("?")
        ))
    })
}

/// The token: read from `serve.token`, or created (random, mode 0600) at the first start.
fn token_path(ws: &Workspace) -> PathBuf {
    ws.state_dir().join("serve.token")
}

/// True when the token file is there but others could read it (or it is a link, or not a
/// file): it may have been read, so a new token replaces it. Looked at before anything
/// tightens the state directory's modes.
fn token_exposed(ws: &Workspace) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(token_path(ws)).is_ok_and(|m| !m.is_file() || m.permissions().mode() & 0o077 != 0)
}

/// The workspace's token: the one kept in `serve.token`, else (or when `exposed`) a new one.
fn token(ws: &Workspace, exposed: bool) -> Result<String, Error> {
    let path = token_path(ws);
    if !exposed && let Ok(text) = std::fs::read_to_string(&path) {
        let text = text.trim().to_owned();
        if text.len() >= 32 && text.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Ok(text);
        }
    } else if exposed {
        eprintln!(
            "loopwright serve: {} could be read by others (or was not a plain file): a new token replaces it",
            path.display()
        );
    }
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(|e| Error::Internal(anyhow::anyhow!("cannot read /dev/urandom for the token: {e}")))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = path.with_extension("token.tmp");
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(token.as_bytes()).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    written.map_err(|e| Error::usage(format!("cannot write {}: {e}", path.display())))?;
    Ok(token)
}

/// The trusted proxy `options` name: both the header and at least one address, or neither.
fn trusted_proxy(options: &Options) -> Result<Option<api::auth::TrustedProxy>, Error> {
    match (&options.trust_proxy_header, options.trust_proxy_from.is_empty()) {
        (None, true) => Ok(None),
        (Some(_), true) | (None, false) => Err(Error::usage(
            "--trust-proxy-header and --trust-proxy-from go together: the header is believed only from those addresses",
        )),
        (Some(name), false) => {
            let header = axum::http::HeaderName::try_from(name.as_str())
                .map_err(|_| Error::usage(format!("--trust-proxy-header {name}: not a header name")))?;
            let from = options
                .trust_proxy_from
                .iter()
                .map(|cidr| {
                    cidr.parse::<ipnet::IpNet>()
                        .or_else(|_| cidr.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                        .map_err(|_| {
                            Error::usage(format!(
                                "--trust-proxy-from {cidr}: expected an address or a network such as 10.0.0.0/8"
                            ))
                        })
                })
                .collect::<Result<_, _>>()?;
            Ok(Some(api::auth::TrustedProxy { header, from }))
        }
    }
}

/// The longest a daemon takes to stop after SIGINT/SIGTERM: its runs are interrupted (their
/// process groups get TERM, then KILL after a grace of their own) well within it.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Serves the workspace until SIGINT/SIGTERM; `ready` is told the address once it serves.
pub async fn serve(ws: Workspace, options: Options, ready: impl FnOnce(&Started)) -> Result<(), Error> {
    if !options.addr.ip().is_loopback() && !options.allow_remote {
        return Err(Error::usage(format!(
            "--addr {}: not a loopback address; the API can start and stop agents, so serving it beyond this machine needs --allow-remote",
            options.addr
        )));
    }
    let public =
        options.public_url.as_deref().map(PublicUrl::parse).transpose().map_err(|e| Error::usage(e.to_string()))?;
    if public.is_some() && !options.allow_remote {
        return Err(Error::usage("--public-url: the daemon is reached through a proxy only with --allow-remote"));
    }
    if let Some(m) = options.metrics_addr.filter(|m| !m.ip().is_loopback()) {
        return Err(Error::usage(format!(
            "--metrics-addr {m}: not a loopback address; metrics are served without a token only on this machine (beyond it, scrape /metrics with a token)"
        )));
    }
    let proxy = trusted_proxy(&options)?;
    let exposed = token_exposed(&ws);
    let _store_created = loopwright_app::assemble::open_store(&ws)?;
    let _lock = take_lock(&ws)?;
    listen::raise_open_files();
    let token = token(&ws, exposed)?;
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|e| Error::usage(format!("cannot listen on {}: {e}", options.addr)))?;
    let addr = listener.local_addr().map_err(|e| Error::Internal(e.into()))?;
    // The owner's own way in: a Unix socket in the state folder (0700), which no other local
    // user can reach or crowd.
    let socket_path = ws.state_dir().join(SOCKET);
    let _ = std::fs::remove_file(&socket_path);
    let unix = match tokio::net::UnixListener::bind(&socket_path) {
        Ok(unix) => Some(unix),
        Err(e) => {
            // A state folder deeper than a socket's path may be (108 bytes) has none: the owner's
            // tools then use TCP like everyone else.
            eprintln!("loopwright serve: no Unix socket at {} ({e}); local tools use TCP", socket_path.display());
            None
        }
    };
    let mut info = serde_json::json!({"pid": std::process::id(), "addr": addr.to_string(), "started_at": jiff::Timestamp::now().to_string()});
    if unix.is_some() {
        info["socket"] = serde_json::Value::String(socket_path.display().to_string());
    }
    if let Some(p) = &public {
        info["public_url"] = serde_json::Value::String(p.url.clone());
    }
    loopwright_app::workspace::write_atomic_private(&ws.state_dir().join("serve.json"), &info.to_string())
        .map_err(|e| Error::usage(format!("cannot write serve.json: {e}")))?;

    let (stop, shutdown) = watch::channel(false);
    let dashboard = public.as_ref().map_or_else(|| format!("http://{addr}"), |p| p.url.clone());
    let runs = runs::Runs::new(ws.clone(), options.max_runs, shutdown.clone(), dashboard);
    let (feed, _) = broadcast::channel(1024);
    let open = || loopwright_app::assemble::open_existing_store(&ws);
    let local = || loopwright_app::assemble::open_existing_local_store(&ws);
    let loops = auto::Loops::new(ws.clone(), local()?);
    let shared = Arc::new(Shared {
        ws: ws.clone(),
        store: open()?,
        folds: loopwright_app::ops::read::Folds::new(64),
        token: token.clone(),
        addr,
        runs: Arc::clone(&runs),
        feed: feed.clone(),
        heartbeat: options.heartbeat,
        shutdown: shutdown.clone(),
        auto: Arc::clone(&loops),
        auto_store: Arc::new(local()?),
        cookie: api::auth::cookie_name(&token),
        session_seconds: u64::from(ws.config.serve.session_days) * 86_400,
        public: public.clone(),
        people: api::auth::People::new(loopwright_app::ops::people::path(&ws)),
        proxy,
        signer: Arc::new(notifications::Signer::load(&ws.state_dir())?),
        github_seen: github::Seen::default(),
        github: tokio::sync::OnceCell::new(),
        metrics: metrics::Metrics::default(),
    });
    // GitHub looked at every `[github] poll_seconds`, when set, besides its webhooks.
    let poller = ws
        .config
        .github
        .as_ref()
        .and_then(|g| g.poll_seconds)
        .map(|secs| tokio::spawn(github::poll_loop(Arc::clone(&shared), Duration::from_secs(secs))));
    // Notifications follow the journal as the live streams do, in a task of their own.
    let notifier = notifications::Notifier::new(Arc::clone(&shared), Arc::clone(&shared.signer))
        .map(|n| tokio::spawn(n.run(feed.subscribe())));
    // `[retention]`, applied a minute after the start and every day after.
    let retention = tokio::spawn(collect_daily(Arc::clone(&shared)));
    let written = journal_writes(&ws.state_dir());
    let watcher = tokio::spawn(watch_journal(open()?, feed, Arc::clone(&runs), written, shutdown.clone()));
    let scheduler = tokio::spawn(Arc::clone(&runs).run_scheduler(open()?));
    // Once quiet after work, what the requests' stores keep is given back, then the allocator's
    // free memory.
    let quiet = {
        let shared = Arc::clone(&shared);
        tokio::spawn(memory::give_back_when_quiet(move || {
            shared.store.release_memory();
            shared.auto_store.release_memory();
        }))
    };

    let (api, doc) = api::router();
    let doc = Arc::new(doc);
    let app = api
        .route("/openapi.json", axum::routing::get(move || async move { axum::Json((*doc).clone()) }))
        .route("/metrics", axum::routing::get(metrics::scrape))
        .merge(dashboard::router())
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&shared), api::auth::check))
        .with_state(Arc::clone(&shared));
    // Auto loops whose supervisor died (a daemon killed, a foreground `auto start` gone):
    // supervised here from now on; their agents kept running in their holders.
    for session in loops.take_over().await? {
        eprintln!("loopwright serve: took over the auto loop of session {session}");
    }
    let metrics_server = match options.metrics_addr {
        Some(at) => {
            let listener = tokio::net::TcpListener::bind(at)
                .await
                .map_err(|e| Error::usage(format!("--metrics-addr: cannot listen on {at}: {e}")))?;
            let bound = listener.local_addr().map_err(|e| Error::Internal(e.into()))?;
            eprintln!("loopwright serve: metrics on http://{bound}/metrics");
            let router = axum::Router::new()
                .route("/metrics", axum::routing::get(metrics::scrape))
                .with_state(Arc::clone(&shared));
            Some(tokio::spawn(async move { axum::serve(listener, router).await }))
        }
        None => None,
    };
    ready(&Started { addr, url: sign_in_url(public.as_ref(), addr, &token) });

    let signalled = async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
            return std::future::pending().await;
        };
        tokio::select! { _ = int.recv() => {}, _ = term.recv() => {} }
        let _ = stop.send(true);
        // Whatever hangs (a blocking call that never returns), the daemon ends within its grace.
        std::thread::spawn(|| {
            std::thread::sleep(SHUTDOWN_GRACE);
            eprintln!("loopwright serve: not stopped {} s after the signal; exiting", SHUTDOWN_GRACE.as_secs());
            std::process::exit(1);
        });
    };
    listen::serve(listener, unix, app, options.max_connections, signalled).await;
    let _ = std::fs::remove_file(&socket_path);
    // The runs driven here were told to stop: each ends its stage's process group and journals
    // the interruption (resumable; the next daemon takes them up).
    let hosts = Arc::clone(&runs);
    let _ = tokio::task::spawn_blocking(move || hosts.join_all()).await;
    // Auto loops are not ended: their agents keep working, the next daemon takes them over.
    loops.detach_all().await;
    watcher.abort();
    scheduler.abort();
    quiet.abort();
    retention.abort();
    if let Some(n) = notifier {
        n.abort();
    }
    if let Some(p) = poller {
        p.abort();
    }
    if let Some(m) = metrics_server {
        m.abort();
    }
    let _ = std::fs::remove_file(ws.state_dir().join("serve.json"));
    Ok(())
}

/// The dashboard's sign-in URL: it carries the token once (then a cookie keeps it).
pub fn sign_in_url(public: Option<&PublicUrl>, addr: SocketAddr, token: &str) -> String {
    match public {
        Some(p) => format!("{}/?token={token}", p.url),
        None => format!("http://{addr}/?token={token}"),
    }
}

/// The shortest and the longest pause between two looks at the journal's version: short
/// while it changes, doubling while it does not (an idle daemon wakes about once a second).
const JOURNAL_POLL_MIN: Duration = Duration::from_millis(20);
const JOURNAL_POLL_MAX: Duration = Duration::from_millis(1000);

/// Told when a file of the journal (`state.db`, its WAL) is written — by a CLI run, another
/// process — so the idle daemon need not poll often. `None` without a file watcher: the
/// polling alone finds the changes, at most a second late.
fn journal_writes(state: &std::path::Path) -> Option<(notify::RecommendedWatcher, Arc<tokio::sync::Notify>)> {
    use notify::Watcher;
    use notify::event::{AccessKind, AccessMode, EventKind};
    let written = Arc::new(tokio::sync::Notify::new());
    let tell = Arc::clone(&written);
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        let Ok(ev) = ev else { return };
        let write = matches!(ev.kind, EventKind::Modify(_) | EventKind::Create(_))
            || matches!(ev.kind, EventKind::Access(AccessKind::Close(AccessMode::Write)));
        if write && ev.paths.iter().any(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("state.db")))
        {
            tell.notify_one();
        }
    })
    .ok()?;
    watcher.watch(state, notify::RecursiveMode::NonRecursive).ok()?;
    Some((watcher, written))
}

/// True when the journal's data version moves from `version` within a few milliseconds.
async fn moved_soon(store: &Journal, version: u64) -> bool {
    for wait in [0, 1, 2, 4, 8] {
        tokio::time::sleep(Duration::from_millis(wait)).await;
        if store.data_version().await.unwrap_or(version) != version {
            return true;
        }
    }
    false
}

/// Follows the journal: whenever it changed (SQLite's `data_version`: a commit by any other
/// connection, this daemon's hosts or another process), or a host says it wrote, reads the
/// feed past the last position and broadcasts each event; then wakes the scheduler. It looks
/// when a host pokes it, when a journal file is written, and otherwise at a pause that grows
/// while nothing changes.
async fn watch_journal(
    store: Journal,
    feed: broadcast::Sender<Arc<FeedEntry>>,
    runs: Arc<runs::Runs>,
    written: Option<(notify::RecommendedWatcher, Arc<tokio::sync::Notify>)>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut cursor = store.feed_last().await.unwrap_or(0);
    let mut version = store.data_version().await.unwrap_or(0);
    let wrote = written.as_ref().map_or_else(|| Arc::new(tokio::sync::Notify::new()), |(_, n)| Arc::clone(n));
    // On PostgreSQL, other machines' commits are heard by `LISTEN` (the feed stays the truth).
    let listen = match store.postgres() {
        Some(pg) => pg.watch_feed().await.ok(),
        None => None,
    };
    let mut pause = JOURNAL_POLL_MIN;
    loop {
        let heard = async {
            match &listen {
                Some(watch) => {
                    watch.changed(JOURNAL_POLL_MAX).await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = runs.poke.notified() => {}
            () = heard => {
                if store.data_version().await.unwrap_or(0) == version {
                    continue;
                }
            }
            () = wrote.notified() => {
                // A file of the journal is written before its commit is seen by readers (the
                // WAL's frames, then its index): a version not moved yet is looked at again
                // shortly, not a poll period later.
                if !moved_soon(&store, version).await {
                    continue;
                }
            }
            () = tokio::time::sleep(pause) => {
                if store.data_version().await.unwrap_or(0) == version {
                    pause = (pause * 2).min(JOURNAL_POLL_MAX);
                    continue;
                }
            }
            _ = shutdown.changed() => return,
        }
        pause = JOURNAL_POLL_MIN;
        // The version before the read: a commit after it moves the version again, so the next
        // tick reads it; what this read sees is not read twice for a poke that preceded it.
        version = store.data_version().await.unwrap_or(version);
        let mut any = false;
        while let Ok(batch) = store.feed_since(cursor, 1000).await {
            let full = batch.len() == 1000;
            for entry in batch {
                cursor = entry.position;
                // The scheduler cares about runs whose status changed (queued, answered,
                // ended); a stage's progress is no reason for a pass over the runs table.
                any |= entry.record.event.run_status().is_some();
                let _ = feed.send(Arc::new(entry));
            }
            if !full {
                break;
            }
        }
        if any {
            runs.wake.notify_one();
        }
    }
}

/// Frees what finished runs no longer need (`loopwright gc`), a minute after the start and then
/// daily, until the daemon stops.
async fn collect_daily(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.clone();
    let mut wait = Duration::from_secs(60);
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return,
        }
        match loopwright_app::ops::gc::gc(&shared.ws, &shared.store, jiff::Timestamp::now(), false).await {
            Ok(freed) if freed.bytes > 0 => eprintln!(
                "loopwright: freed {:.1} MB of finished runs' snapshots and files ([retention])",
                freed.bytes as f64 / 1_000_000.0
            ),
            Ok(_) => {}
            Err(e) => eprintln!("loopwright: [retention] could not be applied: {}", e.message()),
        }
        wait = Duration::from_secs(24 * 3600);
    }
}
