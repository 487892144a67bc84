//! The probes listener (`http.bind`): `/healthz` (alive), `/readyz` (lanes subscribed,
//! stores answering) and `/metrics`. Nothing here reveals a feature value, so it can be
//! exposed to kubelet and Prometheus; feature reads have their own listener.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio_util::sync::CancellationToken;

use super::listener::{self, ConnectionLimits, HttpError};
use crate::health::Health;
use crate::metrics::Metrics;

/// What the probe handlers share.
#[derive(Clone)]
pub struct ProbeState {
    /// Process metrics.
    pub metrics: Arc<Metrics>,
    /// Lanes and dependencies `/readyz` reports on.
    pub health: Arc<Health>,
}

/// Probes answer in milliseconds; a scrape or probe that has not sent its headers within
/// this long is not coming.
const PROBE_LIMITS: ConnectionLimits = ConnectionLimits {
    header_timeout: Duration::from_secs(10),
    max_connections: 64,
};

/// Binds `bind` and serves the probes until `cancel` fires.
pub async fn serve_probes(
    bind: &str,
    state: ProbeState,
    cancel: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, HttpError> {
    let listener = listener::bind(bind, "http.bind").await?;
    tracing::info!(%bind, "probes and metrics listening");
    let router = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(state);
    Ok(listener::spawn(listener, router, PROBE_LIMITS, cancel))
}

/// 200 `ready` or 503 with one line per problem (a lane not subscribed, a store down);
/// either followed by a `degraded:` line per lane whose sink has kept it from acknowledging
/// for longer than normal. A stall alone leaves the process ready: the model service beside
/// it still reads what the online store holds.
async fn readyz(State(state): State<ProbeState>) -> impl IntoResponse {
    let problems = state.health.problems().await;
    let degraded: String = state
        .health
        .degraded()
        .iter()
        .map(|stall| format!("degraded: {stall}\n"))
        .collect();
    if problems.is_empty() {
        (StatusCode::OK, format!("ready\n{degraded}"))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready\n{}\n{degraded}", problems.join("\n")),
        )
    }
}

async fn metrics_text(State(state): State<ProbeState>) -> impl IntoResponse {
    state.health.record(&state.metrics);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}
