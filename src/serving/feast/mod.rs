//! Feast's feature-server API, `POST /get-online-features`, over both Redis layouts: a
//! Feast client moves to this server by pointing its `remote` online store here.

mod json;
mod request;
mod response;
#[cfg(test)]
mod tests;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};

use super::body::read_json;
use super::coverage;
use super::error::ApiError;
use super::state::ServingState;
pub use json::FeastJson;
pub use request::OnlineFeaturesRequest;
pub use response::OnlineFeaturesResponse;

/// `POST /get-online-features`.
pub async fn get_online_features(State(state): State<ServingState>, request: Request) -> Response {
    match answer(&state, request).await {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response(),
        Err(e) => e.into_feast_response(),
    }
}

/// The answer's JSON.
async fn answer(state: &ServingState, request: Request) -> Result<Vec<u8>, ApiError> {
    let body: OnlineFeaturesRequest = read_json(request, state.body).await?;
    let reader = state.reader()?;
    let plan = request::plan(
        &body,
        |name| reader.view(name),
        &state.services,
        state.max_entities,
    )?;
    let found = reader.lookup(&plan.views).await?;
    let now_us = chrono::Utc::now().timestamp_micros();
    let now_ms = now_us.div_euclid(1000);
    coverage::count_feast_rows(&state.metrics, &plan.views, &found, now_ms);
    let answer = response::build(
        &plan,
        &found,
        now_ms,
        body.full_feature_names,
        body.include_feature_view_version_metadata,
    );
    let json = answer.to_json();
    if let Some(log) = state.log.as_ref().filter(|log| log.logs_any(&plan.views)) {
        // After the answer is written: its statuses, the keys and what Redis held move to
        // the log, nothing is copied.
        let statuses = answer.into_feature_statuses();
        log.offer(plan.views, found, statuses, now_us);
    }
    Ok(json)
}
