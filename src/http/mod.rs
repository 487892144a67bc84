//! The HTTP endpoint: `/healthz` (alive), `/readyz` (lanes subscribed, stores answering),
//! `/metrics`.

use std::sync::Arc;

use std::collections::HashMap;

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::health::Health;
use crate::metrics::Metrics;
use crate::sink::redis::{OnlineReader, QueryError};

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// Process metrics.
    pub metrics: Arc<Metrics>,
    /// Lanes and dependencies `/readyz` reports on.
    pub health: Arc<Health>,
    /// Online feature reads; `None` when no pipeline has an online sink.
    pub reader: Option<Arc<OnlineReader>>,
}

/// The endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {bind}: {source}")]
pub struct HttpError {
    /// The address asked for.
    pub bind: String,
    /// Why.
    pub source: std::io::Error,
}

/// Binds `bind` and serves until `cancel` fires; also `GET /v1/features/{view}?key=v…` and
/// `POST /v1/features/{view}` (`{"entities": [{…}], "features": […]}`). Binding happens before this returns, so a
/// port in use is a start-up error.
pub async fn serve(
    bind: &str,
    state: AppState,
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
        .route("/v1/features/{view}", get(features_get).post(features_post))
        .with_state(state);
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

/// 200 `ready` or 503 with one line per problem (a lane not subscribed, a store down).
async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let problems = state.health.problems().await;
    if problems.is_empty() {
        (StatusCode::OK, "ready\n".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready\n{}\n", problems.join("\n")),
        )
    }
}

async fn metrics_text(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

/// `?user_id=1&user_id=2&features=a,b`: repeated keys are zipped into several entities.
async fn features_get(
    State(state): State<AppState>,
    Path(view): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let mut columns: Vec<(String, Vec<String>)> = Vec::new();
    let mut features: Option<Vec<String>> = None;
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if key == "features" {
            features.get_or_insert_with(Vec::new).extend(
                value
                    .split(',')
                    .filter(|f| !f.is_empty())
                    .map(str::to_string),
            );
            continue;
        }
        match columns.iter_mut().find(|(k, _)| *k == key) {
            Some((_, values)) => values.push(value.into_owned()),
            None => columns.push((key.into_owned(), vec![value.into_owned()])),
        }
    }
    let count = columns.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
    if count == 0 || columns.iter().any(|(_, v)| v.len() != count) {
        return error(
            StatusCode::BAD_REQUEST,
            "give each join key as a query parameter, the same number of times",
        );
    }
    let entities: Vec<HashMap<String, String>> = (0..count)
        .map(|i| {
            columns
                .iter()
                .map(|(k, v)| (k.clone(), v[i].clone()))
                .collect()
        })
        .collect();
    match query_features(&state, &view, &entities, features.as_deref()).await {
        Ok(mut results) if results.len() == 1 => Json(results.remove(0)).into_response(),
        Ok(results) => Json(serde_json::json!({ "results": results })).into_response(),
        Err(response) => response,
    }
}

#[derive(Deserialize)]
struct BatchRequest {
    entities: Vec<HashMap<String, serde_json::Value>>,
    #[serde(default)]
    features: Option<Vec<String>>,
}

async fn features_post(
    State(state): State<AppState>,
    Path(view): Path<String>,
    Json(request): Json<BatchRequest>,
) -> Response {
    let entities: Vec<HashMap<String, String>> = request
        .entities
        .into_iter()
        .map(|entity| {
            entity
                .into_iter()
                .map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_string)))
                .collect()
        })
        .collect();
    match query_features(&state, &view, &entities, request.features.as_deref()).await {
        Ok(results) => Json(serde_json::json!({ "results": results })).into_response(),
        Err(response) => response,
    }
}

async fn query_features(
    state: &AppState,
    view: &str,
    entities: &[HashMap<String, String>],
    features: Option<&[String]>,
) -> Result<Vec<serde_json::Value>, Response> {
    let Some(reader) = &state.reader else {
        return Err(error(
            StatusCode::NOT_FOUND,
            "no pipeline has an online sink",
        ));
    };
    reader
        .get(view, entities, features)
        .await
        .map_err(|e| match e {
            QueryError::UnknownView(_) => error(StatusCode::NOT_FOUND, &e.to_string()),
            e if e.is_client_error() => error(StatusCode::BAD_REQUEST, &e.to_string()),
            e => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
        })
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}
