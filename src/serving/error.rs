//! Why a feature read was refused or failed. Every refusal is a status and a JSON body that
//! says what was wrong and, where a limit was hit, which setting sets it: clients and their
//! logs see the reason, not a bare status.
//!
//! `/v1/features` answers `{"error": "..."}`. Feast's endpoint answers what `feast serve`
//! does: a JSON string holding `{"module", "class", "message"}` (Feast's
//! `FeastError.to_error_detail`), from which Feast's client raises that class of
//! `feast.errors` with the message, instead of a bare `RuntimeError`.

use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

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
    /// A feature or route that does not exist (404).
    #[error("{0}")]
    NotFound(String),
    /// A feature service that is not configured (404).
    #[error("{0}")]
    UnknownFeatureService(String),
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
            ApiError::NotFound(_) | ApiError::UnknownFeatureService(_) => StatusCode::NOT_FOUND,
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

    /// The class of `feast.errors` a Feast client raises for this refusal: Feast's own where
    /// it has one (an unknown feature view or service, a refused token), else the nearest
    /// base class.
    pub fn feast_class(&self) -> &'static str {
        match self {
            ApiError::Query(QueryError::UnknownView(_)) => "FeatureViewNotFoundException",
            ApiError::UnknownFeatureService(_) => "FeatureServiceNotFoundException",
            ApiError::Query(QueryError::UnknownFeature { .. }) | ApiError::NotFound(_) => {
                "FeastObjectNotFoundException"
            }
            ApiError::Unauthorized => "FeastPermissionError",
            _ => "FeastError",
        }
    }

    /// The answer on Feast's endpoint: Feast's error detail as a JSON string.
    pub fn into_feast_response(self) -> Response {
        let detail = serde_json::json!({
            "module": "feast.errors",
            "class": self.feast_class(),
            "message": self.to_string(),
        });
        let response = (self.status(), Json(detail.to_string())).into_response();
        self.finish(response)
    }

    /// Logs a server error at debug and adds the headers some refusals carry.
    fn finish(self, mut response: Response) -> Response {
        // Debug only: during a Redis outage every read fails, and the sink already says why;
        // `serving_requests_total{code="503"}` counts them.
        if response.status().is_server_error() {
            tracing::debug!(error = %self, "feature read failed");
        }
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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let response = json_error(self.status(), &self.to_string());
        self.finish(response)
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

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    async fn feast_detail(error: ApiError) -> (u16, Value) {
        let response = error.into_feast_response();
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let detail: String = serde_json::from_slice(&body).unwrap();
        (status, serde_json::from_str(&detail).unwrap())
    }

    #[tokio::test]
    async fn feast_refusals_carry_the_class_feasts_client_raises() {
        let (status, detail) = feast_detail(QueryError::UnknownView("ghost".into()).into()).await;
        assert_eq!(status, 404);
        assert_eq!(
            detail,
            json!({"module": "feast.errors", "class": "FeatureViewNotFoundException", "message": "no online feature view `ghost`"})
        );
        let (status, detail) = feast_detail(ApiError::TooManyEntities {
            count: 1_001,
            limit: 1_000,
        })
        .await;
        assert_eq!(
            (status, detail["class"].as_str()),
            (413, Some("FeastError"))
        );
        assert!(detail["message"]
            .as_str()
            .is_some_and(|m| m.contains("at most 1000 (serving.max_entities_per_request)")));
        let unauthorized = ApiError::Unauthorized.into_feast_response();
        assert_eq!(
            unauthorized.headers().get(header::WWW_AUTHENTICATE),
            Some(&HeaderValue::from_static("Bearer"))
        );
        let (_, detail) = feast_detail(ApiError::UnknownFeatureService("s".into())).await;
        assert_eq!(detail["class"], "FeatureServiceNotFoundException");
    }
}
