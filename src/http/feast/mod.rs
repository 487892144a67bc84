//! Feast's feature-server API, `POST /get-online-features`, over both Redis layouts: a
//! Feast client moves to this server by pointing its `remote` online store here.

mod request;
mod response;
#[cfg(test)]
mod tests;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::body::read_json;
use super::error::ApiError;
use super::serving::ServingState;
pub use request::OnlineFeaturesRequest;
pub use response::OnlineFeaturesResponse;

/// `POST /get-online-features`.
pub async fn get_online_features(State(state): State<ServingState>, request: Request) -> Response {
    match answer(&state, request).await {
        Ok(answer) => json(&answer),
        Err(e) => e.into_response(),
    }
}

/// The answer as JSON, written into a buffer of about its size (`axum::Json` starts at 128
/// bytes and grows by copying, which a 50-entity answer of ~40 KB pays a dozen times).
fn json(answer: &OnlineFeaturesResponse) -> Response {
    let mut body = Vec::with_capacity(answer.json_size_hint());
    match serde_json::to_writer(&mut body, answer) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn answer(
    state: &ServingState,
    request: Request,
) -> Result<OnlineFeaturesResponse, ApiError> {
    let body: OnlineFeaturesRequest = read_json(request, state.body).await?;
    let reader = state.reader()?;
    let plan = request::plan(
        &body,
        |name| reader.view(name),
        &state.services,
        state.max_entities,
    )?;
    let found = reader.lookup(&plan.views).await?;
    Ok(response::build(
        &plan,
        found,
        chrono::Utc::now().timestamp_millis(),
        body.full_feature_names,
        body.include_feature_view_version_metadata,
    ))
}
