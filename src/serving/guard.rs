//! What every feature read passes before its handler runs: the bearer token, then a request
//! slot. Rejections come first and cheaply: an unauthenticated client never takes a slot,
//! and a request over the slot limit is refused before its body is read, so the memory held
//! by requests in flight is bounded by `max_concurrent_requests` × (body limit + answer for
//! the entity limit).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::error::ApiError;
use crate::metrics::{Metrics, ServingLabels};

/// The guard's settings, shared by every request of the listener (no `Debug`: it holds the
/// token).
pub struct Guard {
    /// The bearer token requests must carry; `None` lets every request through.
    token: Option<String>,
    /// One permit per request being served.
    slots: Arc<Semaphore>,
    /// The number of permits, for the refusal's message.
    limit: usize,
    /// Time from a request's arrival to its last body byte.
    request_timeout: Duration,
    /// Where answers are counted.
    metrics: Arc<Metrics>,
}

/// When a request's body must have arrived (set by the guard, read by the body reader).
#[derive(Debug, Clone, Copy)]
pub struct Deadline(pub Instant);

impl Guard {
    /// A guard admitting `max_concurrent` requests at once, with `token` required if set;
    /// it counts every answer in `metrics`.
    pub fn new(
        token: Option<String>,
        max_concurrent: usize,
        request_timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            token,
            slots: Arc::new(Semaphore::new(max_concurrent)),
            limit: max_concurrent,
            request_timeout,
            metrics,
        }
    }

    /// Whether the request's `Authorization` header carries the token.
    fn admits(&self, request: &Request) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim);
        presented.is_some_and(|p| same_secret(p.as_bytes(), token.as_bytes()))
    }
}

/// Compares without stopping at the first differing byte, so the time taken does not tell
/// an attacker how much of a guess was right (only the length can leak).
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The middleware: token, then a slot held until the answer is built, then the handler;
/// every answer, refusals included, is counted.
pub async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let endpoint = endpoint(request.uri().path());
    let response = admit(&guard, request, next).await;
    guard
        .metrics
        .serving_requests
        .get_or_create(&ServingLabels {
            endpoint,
            code: response.status().as_u16(),
        })
        .inc();
    response
}

async fn admit(guard: &Guard, mut request: Request, next: Next) -> Response {
    // Feast's endpoint refuses in Feast's error shape, as its handler does.
    let feast = endpoint(request.uri().path()) == "get-online-features";
    let refuse = |error: ApiError| {
        if feast {
            error.into_feast_response()
        } else {
            error.into_response()
        }
    };
    if !guard.admits(&request) {
        return refuse(ApiError::Unauthorized);
    }
    let Ok(slot) = guard.slots.clone().try_acquire_owned() else {
        return refuse(ApiError::Busy { limit: guard.limit });
    };
    request
        .extensions_mut()
        .insert(Deadline(Instant::now() + guard.request_timeout));
    let response = next.run(request).await;
    drop(slot);
    response
}

/// The metric label of a path: a fixed set, so that clients cannot grow the series.
fn endpoint(path: &str) -> &'static str {
    if path == "/get-online-features" {
        "get-online-features"
    } else if path.starts_with("/v1/features/") {
        "v1-features"
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(authorization: Option<&str>) -> Request {
        let mut builder = Request::builder().uri("/get-online-features");
        if let Some(value) = authorization {
            builder = builder.header(header::AUTHORIZATION, value);
        }
        builder.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn token_is_checked_only_when_set() {
        let metrics = Arc::new(Metrics::new());
        let open = Guard::new(None, 1, Duration::from_secs(1), metrics.clone());
        assert!(open.admits(&request(None)));
        let guarded = Guard::new(Some("s3cret".into()), 1, Duration::from_secs(1), metrics);
        assert!(guarded.admits(&request(Some("Bearer s3cret"))));
        assert!(!guarded.admits(&request(None)));
        assert!(!guarded.admits(&request(Some("Bearer s3cre"))));
        assert!(!guarded.admits(&request(Some("Bearer s3cret2"))));
        assert!(!guarded.admits(&request(Some("Basic s3cret"))));
        assert!(!guarded.admits(&request(Some("s3cret"))));
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"ab"));
    }
}
