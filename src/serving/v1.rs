//! `/v1/features/{view}`: the connector's typed read API, the JSON `get` prints.
//! `GET ?user_id=1&user_id=2&features=a,b` (repeated keys are zipped into several entities)
//! and `POST {"entities": [{…}], "features": […]}`.

use std::collections::HashMap;

use axum::extract::{Path, RawQuery, Request, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::body::read_json;
use super::coverage;
use super::error::ApiError;
use super::state::ServingState;

/// `GET /v1/features/{view}?key=v…`: one object for one entity, `{"results": […]}` for
/// several.
pub async fn features_get(
    State(state): State<ServingState>,
    Path(view): Path<String>,
    RawQuery(raw_query): RawQuery,
) -> Response {
    let mut columns: Vec<(String, Vec<String>)> = Vec::new();
    let mut features: Option<Vec<String>> = None;
    for (key, value) in url::form_urlencoded::parse(raw_query.unwrap_or_default().as_bytes()) {
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
        return ApiError::BadRequest(
            "give each join key as a query parameter, the same number of times".into(),
        )
        .into_response();
    }
    if let Err(e) = state.check_entities(count) {
        return e.into_response();
    }
    let entities: Vec<HashMap<String, String>> = (0..count)
        .map(|i| {
            columns
                .iter()
                .map(|(k, v)| (k.clone(), v[i].clone()))
                .collect()
        })
        .collect();
    match query(&state, &view, &entities, features.as_deref()).await {
        Ok(mut results) if results.len() == 1 => Json(results.remove(0)).into_response(),
        Ok(results) => Json(serde_json::json!({ "results": results })).into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
struct BatchRequest {
    entities: Vec<HashMap<String, serde_json::Value>>,
    #[serde(default)]
    features: Option<Vec<String>>,
}

/// `POST /v1/features/{view}`: `{"results": […]}`, one per entity.
pub async fn features_post(
    State(state): State<ServingState>,
    Path(view): Path<String>,
    request: Request,
) -> Response {
    let request: BatchRequest = match read_json(request, state.body).await {
        Ok(request) => request,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = state.check_entities(request.entities.len()) {
        return e.into_response();
    }
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
    match query(&state, &view, &entities, request.features.as_deref()).await {
        Ok(results) => Json(serde_json::json!({ "results": results })).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn query(
    state: &ServingState,
    view: &str,
    entities: &[HashMap<String, String>],
    features: Option<&[String]>,
) -> Result<Vec<serde_json::Value>, ApiError> {
    if let Some(names) = features {
        // A feature named twice would be read twice: refused, so that the answer's size
        // stays bounded by the view's features.
        let mut seen = std::collections::HashSet::with_capacity(names.len());
        if let Some(twice) = names.iter().find(|name| !seen.insert(name.as_str())) {
            return Err(ApiError::BadRequest(format!(
                "feature `{twice}` is named twice"
            )));
        }
    }
    let results = state.reader()?.get(view, entities, features).await?;
    let found = results
        .iter()
        .filter(|result| result["found"] == serde_json::Value::Bool(true))
        .count();
    coverage::count_v1_rows(&state.metrics, view, found as u64, results.len() as u64);
    Ok(results)
}
