//! One HTTP/1.1 listener: binds before `run` goes on (a port in use is a start-up error),
//! serves a router until cancelled, then lets requests in flight finish.
//!
//! Its own accept loop rather than `axum::serve` because slow clients must be cut off:
//! `axum::serve` gives hyper no timer, so hyper's header read timeout never fires and a
//! client that sends its headers a byte at a time (or keeps an idle connection) holds it
//! forever. Here a connection must deliver each request's headers within `header_timeout`,
//! and at most `max_connections` are open at once (beyond that, new ones wait in the
//! kernel's backlog), which also bounds the answers held for clients that do not read them.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// A listener could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {bind} ({key}): {source}")]
pub struct HttpError {
    /// The address asked for.
    pub bind: String,
    /// The config key that names it.
    pub key: &'static str,
    /// Why.
    pub source: std::io::Error,
}

/// How a listener treats its connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Time a connection has to send a request's headers (idle keep-alive included).
    pub header_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
}

/// How long a shutdown waits for requests in flight before dropping their connections.
const DRAIN: Duration = Duration::from_secs(5);

/// Binds `bind` (named by config key `key` in errors).
pub async fn bind(bind: &str, key: &'static str) -> Result<TcpListener, HttpError> {
    TcpListener::bind(bind).await.map_err(|source| HttpError {
        bind: bind.to_string(),
        key,
        source,
    })
}

/// Serves `router` on `listener` until `cancel` fires.
pub fn spawn(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let graceful = GracefulShutdown::new();
        let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
        loop {
            // A connection slot first, then accept: at the cap, new clients wait in the
            // backlog instead of being accepted and starved.
            let slot = tokio::select! {
                slot = open.clone().acquire_owned() => slot,
                () = cancel.cancelled() => break,
            };
            let Ok(slot) = slot else { break };
            let stream = tokio::select! {
                accepted = listener.accept() => accepted,
                () = cancel.cancelled() => break,
            };
            let stream = match stream {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(
                    TokioIo::new(stream),
                    TowerToHyperService::new(router.clone()),
                );
            let connection = graceful.watch(connection);
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(error = %e, "HTTP connection ended with an error");
                }
                drop(slot);
            });
        }
        drop(listener);
        if tokio::time::timeout(DRAIN, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("HTTP requests still in flight after {DRAIN:?}; dropping them");
        }
    })
}
