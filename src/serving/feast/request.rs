//! Feast's `POST /get-online-features` request, as Feast's feature server
//! (`feast.feature_server.GetOnlineFeaturesRequest`) and its `remote` online store client
//! send it, and the plan that answers it: which views, features and entities to read.
//!
//! ```json
//! {"features": ["user_features:purchases_30d", …] | "feature_service": "ranking",
//!  "entities": {"user_id": ["user-1", "user-2"], …},
//!  "full_feature_names": false, "include_feature_view_version_metadata": false}
//! ```
//!
//! Checks follow Feast's where it has one (a feature asked twice, two features answering
//! to one name, entity columns of different lengths) and refuse with 4xx what Feast's server
//! answers with a 500; unknown keys in the body are ignored, as Feast's model does.

use std::borrow::Cow;
use std::collections::BTreeMap;

use arrow::datatypes::DataType;
use rustc_hash::FxHashSet;
use serde::Deserialize;
use serde_json::Value;

use crate::serving::{ApiError, FeatureView, Lookup, QueryError};

/// The request body.
#[derive(Debug, Deserialize)]
pub struct OnlineFeaturesRequest {
    /// Columns of join key values, one value per entity row.
    pub entities: BTreeMap<String, Vec<Value>>,
    /// `view:feature` references (used when no feature service is named).
    #[serde(default)]
    pub features: Vec<String>,
    /// A feature service configured in `serving.feature_services`.
    #[serde(default)]
    pub feature_service: Option<String>,
    /// Name features `view__feature` instead of `feature`.
    #[serde(default)]
    pub full_feature_names: bool,
    /// Add `metadata.feature_view_metadata` (each view's name).
    #[serde(default)]
    pub include_feature_view_version_metadata: bool,
}

/// What to read and how to name it.
#[derive(Debug)]
pub struct Plan<'a> {
    /// Entity rows.
    pub rows: usize,
    /// The join key columns echoed at the front of the answer (as Feast does), by name.
    pub key_columns: Vec<(&'a str, &'a [Value])>,
    /// Per view, in the order first asked for: its features and the rows' join keys.
    pub views: Vec<Lookup<'a>>,
}

/// Resolves `request` against the online views (`view_of`) and the configured feature
/// services; at most `max_entities` rows.
pub fn plan<'a, 'v>(
    request: &'a OnlineFeaturesRequest,
    view_of: impl Fn(&str) -> Result<&'v FeatureView, QueryError>,
    services: &BTreeMap<String, Vec<String>>,
    max_entities: usize,
) -> Result<Plan<'a>, ApiError>
where
    'v: 'a,
{
    let refs = feature_refs(request, services)?;
    let rows = entity_rows(&request.entities, max_entities)?;
    let mut views: Vec<Lookup<'a>> = Vec::new();
    let mut asked = FxHashSet::default();
    let mut names = FxHashSet::default();
    for &(view_name, feature) in &refs {
        let position = match views.iter().position(|v| v.view.name == view_name) {
            Some(position) => position,
            None => {
                let view = view_of(view_name)?;
                views.push(Lookup {
                    view,
                    features: Vec::new(),
                    entities: Vec::new(),
                });
                views.len() - 1
            }
        };
        let plan = &mut views[position];
        let view: &'a FeatureView = plan.view;
        let wanted = match feature {
            Some(feature) => {
                let index = view.feature_index(feature)?;
                index..index + 1
            }
            None => 0..view.features.len(),
        };
        for index in wanted {
            let feature = view.features[index].0.as_str();
            if !asked.insert((position, index)) {
                return Err(ApiError::BadRequest(format!(
                    "feature `{view_name}:{feature}` is asked for twice"
                )));
            }
            // Answers name features by name alone unless full names are asked for: two views'
            // features of one name would be one column (Feast's FeatureNameCollisionError).
            let name: Cow<'a, str> = if request.full_feature_names {
                Cow::Owned(output_name(view_name, feature, true))
            } else {
                Cow::Borrowed(feature)
            };
            if !names.insert(name.clone()) {
                return Err(ApiError::BadRequest(format!(
                    "two features answer to `{name}`; set \"full_feature_names\": true to name them `view__feature`"
                )));
            }
            plan.features.push(index);
        }
    }
    for plan in &mut views {
        plan.entities = entity_keys(plan.view, &request.entities, rows)?;
    }
    let key_columns = request
        .entities
        .iter()
        .filter(|(name, _)| {
            views
                .iter()
                .any(|v| v.view.keys.iter().any(|(k, _)| k == *name))
        })
        .map(|(name, values)| (name.as_str(), values.as_slice()))
        .collect();
    Ok(Plan {
        rows,
        key_columns,
        views,
    })
}

/// A feature's name in the answer.
pub fn output_name(view: &str, feature: &str, full: bool) -> String {
    if full {
        format!("{view}__{feature}")
    } else {
        feature.to_string()
    }
}

/// `(view, Some(feature))` per reference, `(view, None)` for a whole view of a service.
fn feature_refs<'r>(
    request: &'r OnlineFeaturesRequest,
    services: &'r BTreeMap<String, Vec<String>>,
) -> Result<Vec<(&'r str, Option<&'r str>)>, ApiError> {
    let written: &[String] =
        match &request.feature_service {
            Some(name) => services.get(name).ok_or_else(|| {
                ApiError::UnknownFeatureService(format!(
                    "no feature service `{name}` (serving.feature_services has: {})",
                    services.keys().cloned().collect::<Vec<_>>().join(", ")
                ))
            })?,
            None if request.features.is_empty() => return Err(ApiError::BadRequest(
                "name the features (\"features\": [\"view:feature\", …]) or a \"feature_service\""
                    .into(),
            )),
            None => &request.features,
        };
    written
        .iter()
        .map(|reference| match reference.split_once(':') {
            Some((view, feature)) if !view.is_empty() && !feature.is_empty() => {
                Ok((view, Some(feature)))
            }
            None if request.feature_service.is_some() && !reference.is_empty() => {
                Ok((reference.as_str(), None))
            }
            _ => Err(ApiError::BadRequest(format!(
                "feature reference `{reference}` is not `view:feature`"
            ))),
        })
        .collect()
}

/// The number of entity rows: every column as long, at most `max`.
fn entity_rows(entities: &BTreeMap<String, Vec<Value>>, max: usize) -> Result<usize, ApiError> {
    let rows = entities.values().map(Vec::len).max().unwrap_or(0);
    if let Some((name, values)) = entities.iter().find(|(_, v)| v.len() != rows) {
        return Err(ApiError::BadRequest(format!(
            "entity column `{name}` has {} values, another has {rows}: give every join key one value per entity",
            values.len()
        )));
    }
    if rows > max {
        return Err(ApiError::TooManyEntities {
            count: rows,
            limit: max,
        });
    }
    Ok(rows)
}

/// Per row, the view's join key values as the text its Redis keys are built from, each
/// checked against the key's type.
fn entity_keys(
    view: &FeatureView,
    entities: &BTreeMap<String, Vec<Value>>,
    rows: usize,
) -> Result<Vec<Vec<String>>, ApiError> {
    let columns = view
        .keys
        .iter()
        .map(|(key, data_type)| {
            let values = entities.get(key).ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "view `{}` is keyed by {}; the entities have no `{key}` column",
                    view.name,
                    view.key_names()
                ))
            })?;
            values
                .iter()
                .map(|value| key_text(view, key, data_type, value))
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut columns: Vec<_> = columns.into_iter().map(Vec::into_iter).collect();
    Ok((0..rows)
        .map(|_| columns.iter_mut().filter_map(Iterator::next).collect())
        .collect())
}

/// One join key value as text, if it is of the key's type: a JSON string for a string key,
/// a JSON integer in range for an integer key.
fn key_text(
    view: &FeatureView,
    key: &str,
    data_type: &DataType,
    value: &Value,
) -> Result<String, ApiError> {
    let wrong = |expected: &str| {
        ApiError::BadRequest(format!(
            "join key `{key}` of view `{}` takes {expected}; got {}",
            view.name,
            shorten(value)
        ))
    };
    match data_type {
        DataType::Int32 => value
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .map(|n| n.to_string())
            .ok_or_else(|| wrong("an integer (Int32)")),
        DataType::Int8 | DataType::Int16 | DataType::Int64 => value
            .as_i64()
            .map(|n| n.to_string())
            .ok_or_else(|| wrong("an integer (Int64)")),
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => value
            .as_u64()
            .map(|n| n.to_string())
            .ok_or_else(|| wrong("a non-negative integer")),
        _ => value
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| wrong("a string")),
    }
}

/// A value for an error message, cut so that a huge value does not make a huge message.
fn shorten(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(60) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}
