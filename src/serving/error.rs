//! Why a feature read was refused or failed. Every refusal is a status and a JSON body
//! `{"error": "..."}` that says what was wrong and, where a limit was hit, which setting
//! sets it: clients and their logs see the reason, not a bare status.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::QueryError;
use crate::http::json_error;

/// A request the serving listener does not answer with features.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed or names something wrongly (400).
    #[error("{0}")]
    BadRequest(String),
    /// No or a wrong bearer token (401).
    #[error("missing or wrong bearer token: send `Authorization: Bearer <serving token>`")]
    Unauthorized,
    /// A view, feature service or route that does not exist (404).
    #[error("{0}")]
    NotFound(String),
    /// A route that exists, with another method (405).
    #[error("{0}")]
    WrongMethod(String),
    /// The client did not send the whole body in time (408).
    #[error("the request body did not arrive within {} (serving.request_timeout)", humantime::format_duration(*.0))]
    BodyTimeout(Duration),
    /// The body is larger than allowed (413).
    #[error("request body over {limit} bytes (serving.max_body_bytes)")]
    BodyTooLarge {
        /// The limit.
        limit: usize,
    },
    /// More entity rows than one request may name (413).
    #[error("{count} entities in one request; at most {limit} (serving.max_entities_per_request): split the request")]
    TooManyEntities {
        /// Entities asked for.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// Every request slot is taken (429, with `Retry-After`).
    #[error("{limit} requests are already being served (serving.max_concurrent_requests); retry shortly")]
    Busy {
        /// The limit.
        limit: usize,
    },
    /// Online reads cannot be answered now (503).
    #[error("{0}")]
    Unavailable(String),
    /// The reader refused the query or Redis failed.
    #[error(transparent)]
    Query(#[from] QueryError),
}

impl ApiError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::WrongMethod(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::BodyTooLarge { .. } | ApiError::TooManyEntities { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            ApiError::Busy { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Query(QueryError::UnknownView(_)) => StatusCode::NOT_FOUND,
            ApiError::Query(e) if e.is_client_error() => StatusCode::BAD_REQUEST,
            ApiError::Query(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        // Debug only: during a Redis outage every read fails, and the sink already says why;
        // `serving_requests_total{code="503"}` counts them.
        if status.is_server_error() {
            tracing::debug!(error = %self, "feature read failed");
        }
        let mut response = json_error(status, &self.to_string());
        let headers = response.headers_mut();
        match self {
            ApiError::Unauthorized => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            // Feast's client retries 429 after `Retry-After` (urllib3 `Retry`).
            ApiError::Busy { .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}

/// Anything the serving listener has no route for: a JSON 404 like every other refusal.
pub async fn no_route() -> ApiError {
    ApiError::NotFound(
        "no such endpoint: POST /get-online-features, GET or POST /v1/features/{view}".into(),
    )
}

/// A known route asked with the wrong method.
pub async fn wrong_method() -> ApiError {
    ApiError::WrongMethod(
        "method not allowed: /get-online-features takes POST, /v1/features/{view} GET or POST"
            .into(),
    )
}
