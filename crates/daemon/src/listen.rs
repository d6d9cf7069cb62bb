//! Serving connections within limits (SPEC §9 "Limits"), on TCP and on the workspace's own
//! Unix socket.
//!
//! TCP: at most `max_connections` at once, and a connection must send a request's headers
//! within [`HEADER_TIMEOUT`] — from when it opens and whenever it waits for its next request —
//! or it is closed. When every place is taken, the oldest idle connection (one waiting for a
//! request, not answering one nor streaming events) gives its place to the new one, as a web
//! server reuses keep-alive connections: many idle connections, however often they are made
//! again, cannot keep a new request from being answered. Responses in progress (an event
//! stream) are not timed.
//!
//! The Unix socket (`state/serve.sock`, in the owner's 0700 state folder) is for the owner's
//! own tools: no other local user can reach it, so its connections are not counted against
//! the TCP limit. hyper does the HTTP; this loop only accepts, counts, times and evicts.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{Notify, Semaphore, watch};

/// How long a connection may take to send a request's headers, and stay idle between requests.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long connections are given to finish their requests once the daemon stops.
const DRAIN: Duration = Duration::from_secs(5);

/// A connection being served, as the eviction sees it.
#[derive(Default)]
struct Conn {
    /// Requests being answered now.
    busy: AtomicUsize,
    /// It streams events (a live page): never idle.
    streaming: AtomicBool,
    /// Told to close once its request in flight, if any, is answered.
    close: Notify,
}

/// The TCP connections being served, oldest first.
#[derive(Default)]
struct Conns {
    next: AtomicU64,
    all: Mutex<BTreeMap<u64, Arc<Conn>>>,
}

impl Conns {
    fn add(&self) -> (u64, Arc<Conn>) {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let conn = Arc::new(Conn::default());
        self.lock().insert(id, Arc::clone(&conn));
        (id, conn)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Tells the oldest idle connection to close; false when none is idle.
    fn evict_oldest_idle(&self) -> bool {
        let all = self.lock();
        let idle = all.values().find(|c| c.busy.load(Ordering::SeqCst) == 0 && !c.streaming.load(Ordering::SeqCst));
        idle.map(|c| c.close.notify_one()).is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Conn>>> {
        self.all.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Serves `app` on `listener` (and `unix`, when given) until `stop` completes, then lets the
/// open connections finish (at most [`DRAIN`]).
pub async fn serve(
    listener: TcpListener,
    unix: Option<UnixListener>,
    app: Router,
    max_connections: usize,
    stop: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(max_connections.max(1)));
    let conns = Arc::new(Conns::default());
    let (stopping, stopped) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else {
                    // Out of file descriptors or a connection reset before it was accepted: wait
                    // a little (the others go on) and accept again.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                let permit = match Arc::clone(&permits).try_acquire_owned() {
                    Ok(permit) => permit,
                    Err(_) => {
                        // Every place is taken: the oldest idle connection gives its place.
                        conns.evict_oldest_idle();
                        tokio::select! {
                            permit = Arc::clone(&permits).acquire_owned() => match permit {
                                Ok(permit) => permit,
                                Err(_) => break,
                            },
                            () = &mut stop => break,
                        }
                    }
                };
                let _ = stream.set_nodelay(true);
                let (id, conn) = conns.add();
                let (app, conns, stopped) = (app.clone(), Arc::clone(&conns), stopped.clone());
                tasks.spawn(async move {
                    serve_connection(TokioIo::new(stream), peer, app, Some(&conn), stopped).await;
                    conns.remove(id);
                    drop(permit);
                });
            }
            accepted = accept_unix(unix.as_ref()) => {
                let Ok(stream) = accepted else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                // The owner's own: no place to take, nothing to evict.
                let peer = SocketAddr::from(([127, 0, 0, 1], 0));
                let (app, stopped) = (app.clone(), stopped.clone());
                tasks.spawn(async move { serve_connection(TokioIo::new(stream), peer, app, None, stopped).await });
            }
            () = &mut stop => break,
        }
        // Connections that ended are reaped as the loop goes.
        while tasks.try_join_next().is_some() {}
    }
    drop(listener);
    drop(unix);
    let _ = stopping.send(true);
    let _ = tokio::time::timeout(DRAIN, async { while tasks.join_next().await.is_some() {} }).await;
}

/// The next connection on `unix`, or never when there is none.
async fn accept_unix(unix: Option<&UnixListener>) -> std::io::Result<tokio::net::UnixStream> {
    match unix {
        Some(listener) => listener.accept().await.map(|(stream, _)| stream),
        None => std::future::pending().await,
    }
}

/// Serves one connection until it closes, is evicted (`tracked`'s close), or the daemon stops
/// (`stopped`): then it is closed once the request in flight is answered.
async fn serve_connection<I>(
    io: TokioIo<I>,
    peer: SocketAddr,
    app: Router,
    tracked: Option<&Arc<Conn>>,
    mut stopped: watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let seen = tracked.cloned();
    // The peer's address goes with each request (a trusted proxy is known by it).
    let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
        crate::memory::worked();
        let busy = seen.clone();
        if let Some(conn) = &busy {
            conn.busy.fetch_add(1, Ordering::SeqCst);
            let stream = request
                .headers()
                .get(hyper::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.contains("text/event-stream"));
            if stream {
                conn.streaming.store(true, Ordering::SeqCst);
            }
        }
        let answer = tower_service::Service::call(&mut app.clone(), request.map(axum::body::Body::new));
        async move {
            let response = answer.await;
            if let Some(conn) = &busy {
                conn.busy.fetch_sub(1, Ordering::SeqCst);
            }
            response
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(true)
        .serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let evicted = async {
        match tracked {
            Some(c) => c.close.notified().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = conn.as_mut() => return,
        () = evicted => {}
        _ = stopped.wait_for(|s| *s) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// Raises this process's limit of open files to its hard limit (connections, the journal, the
/// agents' terminals all take one), so the cap on connections is what limits them.
pub fn raise_open_files() -> Option<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).ok()?;
    }
    Some(hard)
}
