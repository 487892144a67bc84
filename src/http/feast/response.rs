//! Feast's `/get-online-features` answer, in the shape Feast's feature server writes
//! (`feast.feature_server_utils.convert_response_to_dict`) and its `remote` online store
//! reads back:
//!
//! ```json
//! {"metadata": {"feature_names": ["user_id", "purchases_30d"]},
//!  "results": [{"values": ["user-1"], "statuses": ["PRESENT"],
//!               "event_timestamps": ["1970-01-01T00:00:00Z"]},
//!              {"values": [42], "statuses": ["PRESENT"],
//!               "event_timestamps": ["2026-12-04T10:00:00.123Z"]}]}
//! ```
//!
//! One result per column (join keys first, echoed as given, then features view by view),
//! one entry per entity row. Statuses: `PRESENT`; `NOT_FOUND` when Redis holds nothing for
//! the entity in that view (never written, or expired by `online.ttl`); `NULL_VALUE` for a
//! feature whose last value was null; `OUTSIDE_MAX_AGE` when the event time is older than
//! the pipeline's `online.ttl` (the value is still given, as Feast does). Feast's own Redis
//! store says `PRESENT` with a null value for the first two; these say what happened.

use std::sync::Arc;

use chrono::SecondsFormat;
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::request::{output_name, Plan};
use crate::sink::redis::{Found, ValueStyle};

/// The answer body.
#[derive(Debug, Serialize)]
pub struct OnlineFeaturesResponse {
    metadata: Metadata,
    results: Vec<FeatureVector>,
}

#[derive(Debug, Serialize)]
struct Metadata {
    feature_names: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    feature_view_metadata: Vec<ViewMetadata>,
}

/// Feast writes `version` only when it is not 0, and our views have no versions.
#[derive(Debug, Serialize)]
struct ViewMetadata {
    name: String,
}

#[derive(Debug, Serialize)]
struct FeatureVector {
    values: Vec<Value>,
    statuses: Vec<&'static str>,
    /// A view's features share their rows' event times: formatted once, held by each.
    #[serde(serialize_with = "shared")]
    event_timestamps: Arc<[String]>,
}

fn shared<S: Serializer>(items: &Arc<[String]>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(items.iter())
}

impl OnlineFeaturesResponse {
    /// About the length of the answer's JSON: per value its status and its event time
    /// (~50 bytes) and the value itself.
    pub fn json_size_hint(&self) -> usize {
        let values: usize = self.results.iter().map(|r| r.values.len()).sum();
        256 + self.metadata.feature_names.len() * 32 + values * 64
    }
}

/// The timestamp Feast gives join key columns and entities not found.
const EPOCH: &str = "1970-01-01T00:00:00Z";

/// Builds the answer from what Redis held (`found`: per view of the plan, per row), judging
/// ages against `now_ms`.
pub fn build(
    plan: &Plan<'_>,
    found: Vec<Vec<Found>>,
    now_ms: i64,
    full_feature_names: bool,
    view_metadata: bool,
) -> OnlineFeaturesResponse {
    let mut feature_names = Vec::new();
    let mut results = Vec::new();
    let epochs: Arc<[String]> = vec![EPOCH.to_string(); plan.rows].into();
    for (name, values) in &plan.key_columns {
        feature_names.push((*name).to_string());
        results.push(FeatureVector {
            values: values.to_vec(),
            statuses: vec!["PRESENT"; values.len()],
            event_timestamps: if values.len() == plan.rows {
                epochs.clone()
            } else {
                vec![EPOCH.to_string(); values.len()].into()
            },
        });
    }
    for (view_plan, rows) in plan.views.iter().zip(found) {
        let view = view_plan.view;
        let max_age_ms = view
            .ttl
            .map(|ttl| i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        let timestamps: Arc<[String]> = rows
            .iter()
            .map(|row| {
                row.event_time_ms
                    .map_or_else(|| EPOCH.to_string(), timestamp)
            })
            .collect();
        let mut columns: Vec<FeatureVector> = view_plan
            .features
            .iter()
            .map(|_| FeatureVector {
                values: Vec::with_capacity(plan.rows),
                statuses: Vec::with_capacity(plan.rows),
                event_timestamps: Arc::clone(&timestamps),
            })
            .collect();
        for row in rows {
            let stale = match (row.event_time_ms, max_age_ms) {
                (Some(t), Some(max)) => now_ms.saturating_sub(t) > max,
                _ => false,
            };
            for ((column, &feature), raw) in
                columns.iter_mut().zip(&view_plan.features).zip(row.values)
            {
                let (value, status) = match (row.event_time_ms, raw) {
                    (None, _) => (Value::Null, "NOT_FOUND"),
                    (Some(_), None) => (Value::Null, "NULL_VALUE"),
                    (Some(_), Some(raw)) => match view.decode(feature, &raw, ValueStyle::Feast) {
                        Value::Null => (Value::Null, "NULL_VALUE"),
                        value if stale => (value, "OUTSIDE_MAX_AGE"),
                        value => (value, "PRESENT"),
                    },
                };
                column.values.push(value);
                column.statuses.push(status);
            }
        }
        for &feature in &view_plan.features {
            let name = view.features.get(feature).map_or("", |(f, _)| f.as_str());
            feature_names.push(output_name(&view.name, name, full_feature_names));
        }
        results.extend(columns);
    }
    let feature_view_metadata = if view_metadata {
        plan.views
            .iter()
            .map(|v| ViewMetadata {
                name: v.view.name.clone(),
            })
            .collect()
    } else {
        Vec::new()
    };
    OnlineFeaturesResponse {
        metadata: Metadata {
            feature_names,
            feature_view_metadata,
        },
        results,
    }
}

/// An event time as Feast writes timestamps: RFC 3339 in UTC with `Z`, milliseconds only
/// when there are some (`MessageToDict`'s adaptive precision).
pub fn timestamp(ms: i64) -> String {
    let Some(time) = chrono::DateTime::from_timestamp_millis(ms) else {
        return EPOCH.to_string();
    };
    // RFC 3339 written directly: a `format` string is parsed again on every call.
    let precision = if ms.rem_euclid(1000) == 0 {
        SecondsFormat::Secs
    } else {
        SecondsFormat::Millis
    };
    time.to_rfc3339_opts(precision, true)
}
