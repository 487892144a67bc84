//! The HTTP endpoint: `/healthz` (alive), `/readyz` (every lane subscribed), `/metrics`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// The endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {bind}: {source}")]
pub struct HttpError {
    /// The address asked for.
    pub bind: String,
    /// Why.
    pub source: std::io::Error,
}

/// Binds `bind` and serves until `cancel` fires. Binding happens before this returns, so a
/// port in use is a start-up error.
pub async fn serve(
    bind: &str,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, HttpError> {
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|source| HttpError {
            bind: bind.to_string(),
            source,
        })?;
    tracing::info!(%bind, "HTTP endpoint listening");
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(metrics);
    Ok(tokio::spawn(async move {
        let shutdown = async move { cancel.cancelled().await };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "HTTP endpoint failed");
        }
    }))
}

async fn readyz(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    if metrics.ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
    }
}

async fn metrics_text(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.encode(),
    )
}
