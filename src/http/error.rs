//! The error body every listener answers: `{"error": "..."}` with its status, so that
//! clients and their logs see the reason, not a bare status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// A response of `status` whose JSON body names what was wrong.
pub fn json_error(status: StatusCode, message: &str) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}
