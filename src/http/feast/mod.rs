//! Feast's feature-server API, `POST /get-online-features`, over both Redis layouts: a
//! Feast client moves to this server by pointing its `remote` online store here.

mod request;
mod response;
#[cfg(test)]
mod tests;

use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::body::read_json;
use super::error::ApiError;
use super::serving::ServingState;
pub use request::OnlineFeaturesRequest;
pub use response::OnlineFeaturesResponse;

/// `POST /get-online-features`.
pub async fn get_online_features(State(state): State<ServingState>, request: Request) -> Response {
    match answer(&state, request).await {
        Ok(answer) => Json(answer).into_response(),
        Err(e) => e.into_response(),
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
