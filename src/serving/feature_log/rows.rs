//! The logged table of a view: its columns, and served rows turned into them.
//!
//! Values are the ones the answer gave (Feast's JSON of the stored value, see
//! [`ValueStyle::Feast`]; an aggregated feature's value worked out from its tiles at the
//! request's time), typed as the view's offline table types the feature: numbers, booleans
//! and strings as such, bytes decoded from base64, timestamps from the answer's epoch
//! seconds, lists and records through their JSON.

use std::sync::Arc;

use arrow::array::{
    new_null_array, ArrayRef, BinaryBuilder, BooleanBuilder, Float64Builder, Int32Array,
    Int64Array, Int64Builder, RecordBatch, StringBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::error::ArrowError;
use base64::Engine;
use serde_json::Value;

use super::LoggedRequest;
use crate::delta::{canonical, column_type, LayoutError};
use crate::redis::feast::{decode_scalar, Scalar};
use crate::redis::LayoutKind;
use crate::serving::aggregated::output_json;
use crate::serving::{FeatureView, ValueStyle};

/// The request time (microseconds, UTC).
pub const LOG_TIMESTAMP: &str = "__log_timestamp";
/// The request time's day: the partition column.
pub const LOG_DATE: &str = "__log_date";
/// One id per request.
pub const REQUEST_ID: &str = "__request_id";
/// Event time of the served row; null when the entity was not found.
pub const EVENT_TIMESTAMP: &str = "__event_timestamp";
/// Suffix of each feature's status column.
pub const STATUS_SUFFIX: &str = "__status";

const MICROS_PER_DAY: i64 = 86_400_000_000;

fn utc_micros() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// The logged table's columns for `view`: the request's time, day and id, the join keys,
/// the served row's event time, then per feature its value and its status.
pub fn log_schema(view: &FeatureView) -> Result<SchemaRef, LayoutError> {
    let mut fields = vec![
        Field::new(LOG_TIMESTAMP, utc_micros(), true),
        Field::new(LOG_DATE, DataType::Date32, true),
        Field::new(REQUEST_ID, DataType::Utf8, true),
    ];
    for (name, data_type) in &view.keys {
        fields.push(Field::new(name, column_type(name, data_type)?, true));
    }
    fields.push(Field::new(EVENT_TIMESTAMP, utc_micros(), true));
    for (name, data_type) in &view.features {
        fields.push(Field::new(name, column_type(name, data_type)?, true));
        fields.push(Field::new(
            format!("{name}{STATUS_SUFFIX}"),
            DataType::Utf8,
            true,
        ));
    }
    canonical(&Schema::new(fields))
}

/// The columns whose statistics the log keeps (the ones reads filter on).
pub fn stats_columns(view: &FeatureView) -> Vec<String> {
    let mut columns = vec![LOG_TIMESTAMP.to_string(), REQUEST_ID.to_string()];
    columns.extend(view.keys.iter().map(|(name, _)| name.clone()));
    columns.push(EVENT_TIMESTAMP.to_string());
    columns
}

/// The rows of `requests` (all of `view`) as one batch of `schema` (from [`log_schema`]).
pub fn to_batch(
    view: &FeatureView,
    schema: &SchemaRef,
    requests: &[LoggedRequest],
) -> Result<RecordBatch, ArrowError> {
    let rows: usize = requests.iter().map(|r| r.rows.len()).sum();
    let mut times = Vec::with_capacity(rows);
    let mut ids = StringBuilder::with_capacity(rows, rows * 36);
    let mut keys: Vec<StringBuilder> = view.keys.iter().map(|_| StringBuilder::new()).collect();
    let mut events = Int64Builder::with_capacity(rows);
    let mut features: Vec<(Staged, StringBuilder)> = view
        .features
        .iter()
        .enumerate()
        .map(|(i, _)| {
            (
                Staged::for_type(field_type(schema, value_column(view, i))),
                StringBuilder::new(),
            )
        })
        .collect();
    for request in requests {
        // Per feature of the view, its position among the features asked, if asked.
        let asked: Vec<Option<usize>> = (0..view.features.len())
            .map(|f| request.features.iter().position(|&a| a == f))
            .collect();
        for row in &request.rows {
            times.push(request.log_time_us);
            ids.append_value(&request.request_id);
            for (builder, value) in keys.iter_mut().zip(&row.keys) {
                builder.append_value(value);
            }
            events.append_option(row.found.event_time_ms.map(|ms| ms.saturating_mul(1000)));
            for (feature, (values, statuses)) in features.iter_mut().enumerate() {
                let Some(position) = asked[feature] else {
                    values.append(None);
                    statuses.append_null();
                    continue;
                };
                let stored = row
                    .found
                    .event_time_ms
                    .and(row.found.value(position, feature));
                match (row.found.aggregated(position), stored) {
                    (Some(output), _) => {
                        // Worked out from the tiles at the request's time, as answered.
                        let value = Some(output_json(output, ValueStyle::Typed))
                            .filter(|value| !value.is_null());
                        values.append(value.as_ref());
                    }
                    (None, None) => values.append(None),
                    (None, Some(raw)) => {
                        let stored_type = view.features.get(feature).map(|(_, t)| t);
                        if !values.append_stored(view.layout, stored_type, raw) {
                            let value = Some(view.decode(feature, raw, ValueStyle::Feast))
                                .filter(|value| !value.is_null());
                            values.append(value.as_ref());
                        }
                    }
                }
                let status = request
                    .statuses
                    .get(position)
                    .and_then(|column| column.get(row.index));
                statuses.append_option(status.copied());
            }
        }
    }
    let times = Int64Array::from(times);
    let days = Int32Array::from_iter_values(
        times
            .values()
            .iter()
            .map(|us| i32::try_from(us.div_euclid(MICROS_PER_DAY)).unwrap_or(i32::MAX)),
    );
    let mut columns: Vec<ArrayRef> = vec![Arc::new(times), Arc::new(days), Arc::new(ids.finish())];
    for mut builder in keys {
        columns.push(Arc::new(builder.finish()));
    }
    columns.push(Arc::new(events.finish()));
    for (values, mut statuses) in features {
        columns.push(values.finish(field_type(schema, columns.len()), rows)?);
        columns.push(Arc::new(statuses.finish()));
    }
    let columns = columns
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| arrow::compute::cast(column, field.data_type()))
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(schema.clone(), columns)
}

/// The column of feature `feature`'s values: after the three request columns, the keys and
/// the event time, two per feature.
fn value_column(view: &FeatureView, feature: usize) -> usize {
    3 + view.keys.len() + 1 + 2 * feature
}

fn field_type(schema: &Schema, column: usize) -> &DataType {
    schema
        .fields()
        .get(column)
        .map_or(&DataType::Utf8, |f| f.data_type())
}

/// A feature's values gathered in the simplest Arrow type that holds them, cast to the
/// table's type at the end.
enum Staged {
    Ints(Int64Builder),
    Floats(Float64Builder),
    Bools(BooleanBuilder),
    Texts(StringBuilder),
    Bytes(BinaryBuilder),
    /// Epoch microseconds.
    Micros(Int64Builder),
    /// Each value's JSON, for lists and records.
    Json(Vec<Option<String>>),
}

impl Staged {
    fn for_type(data_type: &DataType) -> Self {
        match data_type {
            DataType::Boolean => Self::Bools(BooleanBuilder::new()),
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64 => Self::Ints(Int64Builder::new()),
            DataType::Float16 | DataType::Float32 | DataType::Float64 => {
                Self::Floats(Float64Builder::new())
            }
            DataType::Binary | DataType::LargeBinary => Self::Bytes(BinaryBuilder::new()),
            DataType::Timestamp(_, _) => Self::Micros(Int64Builder::new()),
            DataType::List(_)
            | DataType::LargeList(_)
            | DataType::Struct(_)
            | DataType::Map(_, _) => Self::Json(Vec::new()),
            // Strings, dates and decimals: from their text.
            _ => Self::Texts(StringBuilder::new()),
        }
    }

    /// Appends a stored value straight from its bytes, as [`Staged::append`] would its
    /// answer's JSON; `false` (nothing appended) where only the JSON path knows how (lists,
    /// records, native timestamps, a value of another kind than the column's).
    fn append_stored(
        &mut self,
        layout: LayoutKind,
        stored_type: Option<&DataType>,
        raw: &[u8],
    ) -> bool {
        match layout {
            LayoutKind::Feast => self.append_scalar(decode_scalar(raw)),
            LayoutKind::Native => {
                let Ok(text) = std::str::from_utf8(raw) else {
                    return matches!(self, Self::Bytes(_)) && {
                        self.append_scalar(Scalar::Bytes(raw.to_vec()))
                    };
                };
                let scalar = match (&*self, stored_type) {
                    (Self::Ints(_), _) => text.parse().map(Scalar::Int).ok(),
                    // Parsed at the stored width, as the answer reads it.
                    (Self::Floats(_), Some(DataType::Float32 | DataType::Float16)) => text
                        .parse::<f32>()
                        .map(|x| Scalar::Float(f64::from(x)))
                        .ok(),
                    (Self::Floats(_), _) => text.parse().map(Scalar::Float).ok(),
                    (Self::Bools(_), _) => text.parse().map(Scalar::Bool).ok(),
                    (Self::Texts(_), _) => Some(Scalar::Text(text.to_string())),
                    (Self::Bytes(_), _) => Some(Scalar::Bytes(raw.to_vec())),
                    (Self::Micros(_) | Self::Json(_), _) => None,
                };
                scalar.is_some_and(|scalar| self.append_scalar(scalar))
            }
        }
    }

    /// Appends `scalar` when it fits the column's kind.
    fn append_scalar(&mut self, scalar: Scalar) -> bool {
        match (self, scalar) {
            (_, Scalar::Null) | (Self::Json(_), _) => return false,
            (Self::Ints(b), Scalar::Int(n)) => b.append_value(n),
            (Self::Floats(b), Scalar::Float(x)) => b.append_value(x),
            (Self::Floats(b), Scalar::Int(n)) => b.append_value(n as f64),
            (Self::Bools(b), Scalar::Bool(v)) => b.append_value(v),
            (Self::Texts(b), Scalar::Text(text)) => b.append_value(text),
            (Self::Bytes(b), Scalar::Bytes(bytes)) => b.append_value(bytes),
            (Self::Micros(b), Scalar::Seconds(s)) => b.append_value(s.saturating_mul(1_000_000)),
            _ => return false,
        }
        true
    }

    fn append(&mut self, value: Option<&Value>) {
        match self {
            Self::Ints(b) => b.append_option(value.and_then(int)),
            Self::Floats(b) => b.append_option(value.and_then(float)),
            Self::Bools(b) => b.append_option(value.and_then(Value::as_bool)),
            Self::Texts(b) => match value {
                Some(Value::String(text)) => b.append_value(text),
                Some(other) => b.append_value(other.to_string()),
                None => b.append_null(),
            },
            Self::Bytes(b) => b.append_option(
                value
                    .and_then(Value::as_str)
                    .and_then(|text| base64::engine::general_purpose::STANDARD.decode(text).ok()),
            ),
            Self::Micros(b) => b.append_option(value.and_then(micros)),
            Self::Json(texts) => texts.push(value.map(Value::to_string)),
        }
    }

    fn finish(self, data_type: &DataType, rows: usize) -> Result<ArrayRef, ArrowError> {
        Ok(match self {
            Self::Ints(mut b) | Self::Micros(mut b) => Arc::new(b.finish()),
            Self::Floats(mut b) => Arc::new(b.finish()),
            Self::Bools(mut b) => Arc::new(b.finish()),
            Self::Texts(mut b) => Arc::new(b.finish()),
            Self::Bytes(mut b) => Arc::new(b.finish()),
            Self::Json(texts) => match from_json(data_type, &texts) {
                Ok(array) => array,
                Err(e) => {
                    tracing::warn!(error = %e, %data_type, "feature log: values of a list or record column could not be typed; logged as null");
                    new_null_array(data_type, rows)
                }
            },
        })
    }
}

fn int(value: &Value) -> Option<i64> {
    value
        .as_i64()
        .or_else(|| value.as_u64().and_then(|n| i64::try_from(n).ok()))
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
}

/// A number, or the strings Feast writes for NaN and the infinities.
fn float(value: &Value) -> Option<f64> {
    match value {
        Value::String(text) => match text.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            other => other.parse().ok(),
        },
        other => other.as_f64(),
    }
}

/// Epoch seconds (as Feast answers timestamps) or RFC 3339 text, as epoch microseconds.
fn micros(value: &Value) -> Option<i64> {
    match value {
        Value::String(text) => chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.timestamp_micros()),
        other => other.as_i64().map(|s| s.saturating_mul(1_000_000)),
    }
}

/// Values given as JSON, typed as `data_type` by Arrow's JSON reader.
fn from_json(data_type: &DataType, texts: &[Option<String>]) -> Result<ArrayRef, ArrowError> {
    let schema = Arc::new(Schema::new(vec![Field::new("v", data_type.clone(), true)]));
    let mut lines = String::new();
    for text in texts {
        match text {
            Some(json) => {
                lines.push_str("{\"v\":");
                lines.push_str(json);
                lines.push_str("}\n");
            }
            None => lines.push_str("{}\n"),
        }
    }
    let mut decoder = arrow_json::ReaderBuilder::new(schema)
        .with_batch_size(texts.len().max(1))
        .build_decoder()?;
    decoder.decode(lines.as_bytes())?;
    match decoder.flush()? {
        Some(batch) => Ok(batch.column(0).clone()),
        None => Ok(new_null_array(data_type, texts.len())),
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, AsArray, BinaryArray, Float32Array, Int64Array, StringArray};
    use arrow::datatypes::{Float64Type, Int64Type};

    use super::*;
    use crate::redis::feast::encode_value;

    /// A value stored by the Feast layout, appended straight from its bytes and through the
    /// answer's JSON, gives the same column.
    #[test]
    fn stored_values_append_as_their_json_would() {
        let cases: Vec<(ArrayRef, DataType)> = vec![
            (Arc::new(Int64Array::from(vec![-3])), DataType::Int64),
            (
                Arc::new(Float32Array::from(vec![0.1f32])),
                DataType::Float32,
            ),
            (Arc::new(StringArray::from(vec!["x"])), DataType::Utf8),
            (
                Arc::new(BinaryArray::from(vec![&[1u8, 2][..]])),
                DataType::Binary,
            ),
        ];
        for (array, data_type) in cases {
            let raw = encode_value(&array, 0).unwrap();
            let mut direct = Staged::for_type(&data_type);
            assert!(direct.append_stored(LayoutKind::Feast, Some(&data_type), &raw));
            let mut via_json = Staged::for_type(&data_type);
            let json = crate::redis::feast::decode_value_with(&raw, crate::serving::feast_float);
            via_json.append(Some(&json));
            let (a, b) = (
                direct.finish(&data_type, 1).unwrap(),
                via_json.finish(&data_type, 1).unwrap(),
            );
            assert_eq!(a.to_data(), b.to_data(), "{data_type}");
        }
        let mut native = Staged::for_type(&DataType::Float64);
        assert!(native.append_stored(LayoutKind::Native, Some(&DataType::Float32), b"0.1"));
        let floats = native.finish(&DataType::Float64, 1).unwrap();
        assert_eq!(
            floats.as_primitive::<Float64Type>().value(0),
            f64::from(0.1f32)
        );
        let mut ints = Staged::for_type(&DataType::Int64);
        assert!(!ints.append_stored(LayoutKind::Native, None, b"not a number"));
        ints.append(None);
        assert!(ints
            .finish(&DataType::Int64, 1)
            .unwrap()
            .as_primitive::<Int64Type>()
            .is_null(0));
    }
}
