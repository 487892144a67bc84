//! The serving listener (`serving.bind`): online feature reads, Feast's
//! `POST /get-online-features` and our `/v1/features/{view}`, behind the guard (bearer
//! token, request slots) and the request limits. Apart from the probes so that kubelet and
//! Prometheus can reach those without reaching feature values.

use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;
use tokio_util::sync::CancellationToken;

use super::error;
use super::guard::{self, Guard};
use super::state::{Reads, ServingState};
use super::{feast, v1, FeatureLog, ServingConfig};
use crate::http::listener::{self, ConnectionLimits, HttpError};
use crate::metrics::Metrics;

/// The serving routes with their guard, without a listener (tests drive it directly).
pub fn router(state: ServingState, guard: Guard) -> Router {
    Router::new()
        .route("/get-online-features", post(feast::get_online_features))
        .route(
            "/v1/features/{view}",
            get(v1::features_get).post(v1::features_post),
        )
        .fallback(error::no_route)
        .method_not_allowed_fallback(error::wrong_method)
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(guard),
            guard::guard,
        ))
}

/// Binds `config.bind` and serves feature reads until `cancel` fires; `token` (when set) is
/// required of every request; answers are counted in `metrics`, and their rows offered to
/// `log` when given.
pub async fn serve_reads(
    config: &ServingConfig,
    token: Option<String>,
    reads: Reads,
    log: Option<FeatureLog>,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, HttpError> {
    let listener = listener::bind(&config.bind, "serving.bind").await?;
    tracing::info!(
        bind = %config.bind,
        token = token.is_some(),
        "feature reads listening (POST /get-online-features, /v1/features)"
    );
    let state = ServingState::new(config, reads, Arc::clone(&metrics));
    let guard = Guard::new(
        token,
        config.max_concurrent_requests,
        config.request_timeout,
        metrics,
    );
    let router = router(state.with_log(log), guard);
    // Connections beyond the requests in flight are idle keep-alives and clients between
    // requests; four per slot leaves room for those without letting them grow unbounded.
    let limits = ConnectionLimits {
        header_timeout: config.request_timeout,
        max_connections: config.max_concurrent_requests.saturating_mul(4),
    };
    on_own_runtime(config, listener, router, limits, cancel)
}

/// Serves the reads on a runtime of their own (`serving.threads` threads named
/// `feature-reads`), where the reader's Redis connection is made too. A read is then never
/// queued behind the pipelines' decoding and writes on the main runtime's workers, and one
/// thread (the default) spares the wake-ups of idle workers that cost most of a request's
/// CPU at a few thousand requests/s (docs/performance.md, serving). The handle finishes once
/// the runtime has drained.
fn on_own_runtime(
    config: &ServingConfig,
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ConnectionLimits,
    cancel: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, HttpError> {
    let failed = |source: std::io::Error| HttpError {
        bind: config.bind.clone(),
        key: "serving.bind",
        source,
    };
    let listener = listener.into_std().map_err(failed)?;
    let mut builder = if config.threads > 1 {
        let mut workers = tokio::runtime::Builder::new_multi_thread();
        workers
            .worker_threads(config.threads)
            .thread_name("feature-reads");
        workers
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = builder.enable_all().build().map_err(failed)?;
    // Registered with the new runtime's reactor here, so that a failure is a start-up error.
    let listener = {
        let _entered = runtime.enter();
        tokio::net::TcpListener::from_std(listener).map_err(failed)?
    };
    let (finished, drained) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("feature-reads".to_string())
        .spawn(move || {
            runtime.block_on(async move {
                let _ = listener::spawn(listener, router, limits, cancel).await;
            });
            let _ = finished.send(());
        })
        .map_err(failed)?;
    Ok(tokio::spawn(async move {
        let _ = drained.await;
    }))
}
