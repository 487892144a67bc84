//! Reading a JSON request body within the serving limits: at most `max_body_bytes` (a
//! declared length over it is refused before a byte is read, a chunked body as soon as it
//! passes it), by the request's deadline (a client that trickles its body gets 408 instead
//! of holding a request slot), and parsed into the handler's type with the parser's message
//! on failure.

use std::time::Duration;

use axum::extract::Request;
use axum::http::header;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::error::ApiError;
use super::guard::Deadline;

/// The size and time limits of a request body.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Largest body in bytes.
    pub max_bytes: usize,
    /// Time from the request's arrival to its last body byte.
    pub timeout: Duration,
}

/// The request's body as `T`.
pub async fn read_json<T: DeserializeOwned>(
    request: Request,
    limits: BodyLimits,
) -> Result<T, ApiError> {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_bytes as u64) {
        return Err(ApiError::BodyTooLarge {
            limit: limits.max_bytes,
        });
    }
    let deadline = request
        .extensions()
        .get::<Deadline>()
        .map_or_else(|| Instant::now() + limits.timeout, |d| d.0);
    let body = Limited::new(request.into_body(), limits.max_bytes);
    let bytes = match tokio::time::timeout_at(deadline, body.collect()).await {
        Err(_) => return Err(ApiError::BodyTimeout(limits.timeout)),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return Err(ApiError::BodyTooLarge {
                limit: limits.max_bytes,
            })
        }
        Ok(Err(e)) => {
            return Err(ApiError::BadRequest(format!(
                "cannot read the request body: {e}"
            )))
        }
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("the body is not the JSON expected: {e}")))
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use serde_json::Value;

    use super::*;

    const LIMITS: BodyLimits = BodyLimits {
        max_bytes: 16,
        timeout: Duration::from_secs(1),
    };

    async fn read(body: &'static str, declared: Option<usize>) -> Result<Value, ApiError> {
        let mut builder = Request::builder().method("POST").uri("/");
        if let Some(n) = declared {
            builder = builder.header(header::CONTENT_LENGTH, n);
        }
        read_json(builder.body(Body::from(body)).unwrap(), LIMITS).await
    }

    #[tokio::test]
    async fn limits_and_parse_errors_are_clear() {
        assert_eq!(read(r#"{"a": 1}"#, None).await.unwrap()["a"], 1);
        let too_large = read(r#"{"a": "0123456789abcdef"}"#, None)
            .await
            .unwrap_err();
        assert!(
            matches!(too_large, ApiError::BodyTooLarge { limit: 16 }),
            "{too_large}"
        );
        let declared = read("{}", Some(1_000_000)).await.unwrap_err();
        assert!(
            matches!(declared, ApiError::BodyTooLarge { .. }),
            "{declared}"
        );
        let malformed = read(r#"{"a": "#, None).await.unwrap_err();
        assert_eq!(malformed.status(), axum::http::StatusCode::BAD_REQUEST);
        assert!(malformed.to_string().contains("EOF"), "{malformed}");
    }
}
