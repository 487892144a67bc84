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
//!
//! The answer borrows what it can (the request's join keys, cached rows' JSON text) and is
//! written out by hand: a 50-entity answer is ~500 cells, most of them text already.

use std::rc::Rc;

use serde::Serialize;
use serde_json::Value;

use super::json::{feast_timestamp, FEAST_EPOCH};
use super::request::{output_name, Plan};
use crate::serving::aggregated::output_json;
use crate::serving::{Found, ValueStyle};

/// The answer, borrowing from the plan and from what Redis held.
#[derive(Debug)]
pub struct OnlineFeaturesResponse<'a> {
    feature_names: Vec<String>,
    /// `feature_view_metadata`'s names, when asked for.
    view_names: Vec<&'a str>,
    /// How many of `columns` are join keys (the first ones).
    key_columns: usize,
    columns: Vec<Column<'a>>,
}

#[derive(Debug)]
struct Column<'a> {
    values: Vec<Cell<'a>>,
    statuses: Vec<&'static str>,
    /// A view's features share their rows' event times: worked out once, held by each.
    event_timestamps: Rc<[Cell<'a>]>,
}

/// One JSON value of the answer.
#[derive(Debug, Clone)]
enum Cell<'a> {
    /// Decoded for this answer.
    Owned(Value),
    /// The request's own (a join key value).
    Borrowed(&'a Value),
    /// JSON text already (a cached row's value or event time).
    Text(&'a str),
    /// A string that needs no escaping.
    Plain(&'static str),
    /// `null`.
    Null,
}

impl OnlineFeaturesResponse<'_> {
    /// Per feature column (the views' features, one view after the other, without the join
    /// key columns), each row's status: what the feature log records.
    pub fn into_feature_statuses(self) -> Vec<Vec<&'static str>> {
        let keys = self.key_columns;
        self.columns
            .into_iter()
            .skip(keys)
            .map(|column| column.statuses)
            .collect()
    }

    /// The answer's JSON.
    pub fn to_json(&self) -> Vec<u8> {
        let values: usize = self.columns.iter().map(|c| c.values.len()).sum();
        // Per value its status and its event time (~50 bytes) and the value itself.
        let mut out = Vec::with_capacity(256 + self.feature_names.len() * 32 + values * 64);
        out.extend_from_slice(b"{\"metadata\":{\"feature_names\":");
        write_serialized(&mut out, &self.feature_names);
        if !self.view_names.is_empty() {
            // Feast writes `version` only when it is not 0, and our views have no versions.
            out.extend_from_slice(b",\"feature_view_metadata\":[");
            for (i, name) in self.view_names.iter().enumerate() {
                separate(&mut out, i);
                out.extend_from_slice(b"{\"name\":");
                write_serialized(&mut out, name);
                out.push(b'}');
            }
            out.push(b']');
        }
        out.extend_from_slice(b"},\"results\":[");
        for (i, column) in self.columns.iter().enumerate() {
            separate(&mut out, i);
            out.extend_from_slice(b"{\"values\":");
            write_cells(&mut out, &column.values);
            out.extend_from_slice(b",\"statuses\":[");
            for (i, status) in column.statuses.iter().enumerate() {
                separate(&mut out, i);
                write_plain(&mut out, status);
            }
            out.extend_from_slice(b"],\"event_timestamps\":");
            write_cells(&mut out, &column.event_timestamps);
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
        out
    }
}

fn separate(out: &mut Vec<u8>, index: usize) {
    if index > 0 {
        out.push(b',');
    }
}

fn write_plain(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    out.extend_from_slice(text.as_bytes());
    out.push(b'"');
}

fn write_serialized(out: &mut Vec<u8>, value: &(impl Serialize + ?Sized)) {
    // Strings and JSON values into a Vec: serde_json has nothing here that can fail.
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.extend_from_slice(b"null");
    }
}

fn write_cells(out: &mut Vec<u8>, cells: &[Cell<'_>]) {
    out.push(b'[');
    for (i, cell) in cells.iter().enumerate() {
        separate(out, i);
        match cell {
            Cell::Owned(value) => write_serialized(out, value),
            Cell::Borrowed(value) => write_serialized(out, *value),
            Cell::Text(json) => out.extend_from_slice(json.as_bytes()),
            Cell::Plain(text) => write_plain(out, text),
            Cell::Null => out.extend_from_slice(b"null"),
        }
    }
    out.push(b']');
}

/// Builds the answer from what Redis held (`found`: per view of the plan, per row), judging
/// ages against `now_ms`.
pub fn build<'a>(
    plan: &'a Plan<'_>,
    found: &'a [Vec<Found>],
    now_ms: i64,
    full_feature_names: bool,
    view_metadata: bool,
) -> OnlineFeaturesResponse<'a> {
    let mut feature_names = Vec::new();
    let mut columns = Vec::new();
    let epochs: Rc<[Cell<'a>]> = vec![Cell::Plain(FEAST_EPOCH); plan.rows].into();
    for (name, values) in &plan.key_columns {
        feature_names.push((*name).to_string());
        columns.push(Column {
            values: values.iter().map(Cell::Borrowed).collect(),
            statuses: vec!["PRESENT"; values.len()],
            event_timestamps: if values.len() == plan.rows {
                Rc::clone(&epochs)
            } else {
                vec![Cell::Plain(FEAST_EPOCH); values.len()].into()
            },
        });
    }
    for (view_plan, rows) in plan.views.iter().zip(found) {
        let view = view_plan.view;
        let max_age_ms = view
            .ttl
            .map(|ttl| i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        let rendered: Vec<_> = rows.iter().map(|row| row.feast_json(view)).collect();
        let timestamps: Rc<[Cell<'a>]> = rows
            .iter()
            .zip(&rendered)
            .map(|(row, rendered)| match (row.event_time_ms, rendered) {
                (None, _) => Cell::Plain(FEAST_EPOCH),
                (Some(_), Some(json)) => json.event_time().map_or(Cell::Null, Cell::Text),
                (Some(ms), None) => Cell::Owned(Value::String(feast_timestamp(ms))),
            })
            .collect();
        let mut view_columns: Vec<Column<'a>> = view_plan
            .features
            .iter()
            .map(|_| Column {
                values: Vec::with_capacity(plan.rows),
                statuses: Vec::with_capacity(plan.rows),
                event_timestamps: Rc::clone(&timestamps),
            })
            .collect();
        for (row, rendered) in rows.iter().zip(rendered) {
            let stale = match (row.event_time_ms, max_age_ms) {
                (Some(t), Some(max)) => now_ms.saturating_sub(t) > max,
                _ => false,
            };
            for (asked, (column, &feature)) in
                view_columns.iter_mut().zip(&view_plan.features).enumerate()
            {
                if let Some(output) = row.aggregated(asked) {
                    let value = output_json(output, ValueStyle::Feast);
                    let status = if value.is_null() {
                        "NULL_VALUE"
                    } else {
                        "PRESENT"
                    };
                    column.values.push(Cell::Owned(value));
                    column.statuses.push(status);
                    continue;
                }
                let value = match (row.event_time_ms, rendered) {
                    (None, _) => None,
                    (Some(_), Some(json)) => json.value(feature).map(Cell::Text),
                    (Some(_), None) => row
                        .value(asked, feature)
                        .map(|raw| view.decode(feature, raw, ValueStyle::Feast))
                        .filter(|value| !value.is_null())
                        .map(Cell::Owned),
                };
                let status = match (row.event_time_ms, &value) {
                    (None, _) => "NOT_FOUND",
                    (Some(_), None) => "NULL_VALUE",
                    (Some(_), Some(_)) if stale => "OUTSIDE_MAX_AGE",
                    (Some(_), Some(_)) => "PRESENT",
                };
                column.values.push(value.unwrap_or(Cell::Null));
                column.statuses.push(status);
            }
        }
        for &feature in &view_plan.features {
            let name = view.features.get(feature).map_or("", |(f, _)| f.as_str());
            feature_names.push(output_name(&view.name, name, full_feature_names));
        }
        columns.extend(view_columns);
    }
    let view_names = if view_metadata {
        plan.views.iter().map(|v| v.view.name.as_str()).collect()
    } else {
        Vec::new()
    };
    OnlineFeaturesResponse {
        feature_names,
        view_names,
        key_columns: plan.key_columns.len(),
        columns,
    }
}
