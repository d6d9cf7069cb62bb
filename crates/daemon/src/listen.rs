//! Serving connections within limits (SPEC §9 "Limits"): at most `max_connections` at once
//! (more wait in the kernel's queue until one closes), and a connection must send a request's
//! headers within [`HEADER_TIMEOUT`] — from when it opens and whenever it waits for its next
//! request — or it is closed: idle keep-alive connections and slow senders give their place
//! back instead of holding it. Responses in progress (an event stream) are not timed. hyper
//! does the HTTP; this loop only accepts, counts and times.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How long a connection may take to send a request's headers, and stay idle between requests.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long connections are given to finish their requests once the daemon stops.
const DRAIN: Duration = Duration::from_secs(5);

/// Serves `app` on `listener` until `stop` completes, then lets the open connections finish
/// (at most [`DRAIN`]).
pub async fn serve(listener: TcpListener, app: Router, max_connections: usize, stop: impl Future<Output = ()>) {
    let permits = Arc::new(Semaphore::new(max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut stop => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors or a connection reset before it was accepted: wait a
                // little (the others go on) and accept again.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let (stream, peer) = stream;
        let _ = stream.set_nodelay(true);
        // The peer's address goes with each request (a trusted proxy is known by it).
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
            tower_service::Service::call(&mut app.clone(), request.map(axum::body::Body::new))
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_TIMEOUT)
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(DRAIN, graceful.shutdown()).await;
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
