//! The `feast` layout: the bytes Feast's own Redis online store writes and reads, so
//! `FeatureStore.get_online_features()` returns our rows (checked against Feast 0.67).
//!
//! Key: entity key serialization v3 (`u32 n`, per join key sorted by name `u32 2, u32 len,
//! name`, then per value `u32 type, u32 len, bytes`; little-endian) followed by the project
//! name. Fields: MurmurHash3 x86 32-bit (seed 0) of `"{view}:{feature}"`, 4 bytes LE, holding
//! a `feast.types.Value` protobuf; `_ts:{view}` holds a `google.protobuf.Timestamp`. The wire
//! formats themselves are in `feast_proto.rs`.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float32Type, Float64Type, Int32Type, Int64Type};
use arrow::error::ArrowError;
use prost::Message;

use super::entity_write::EntityWrites;
pub use super::feast_proto::{
    decode_entity_key, decode_scalar, decode_timestamp, decode_value, decode_value_with,
    encode_timestamp, Scalar,
};
use super::feast_proto::{
    entity_key, BoolList, BytesList, DoubleList, FloatList, Int32List, Int64List, KeyValue,
    StringList, Val, Value,
};
use super::newest::{column, newest_per_entity};
use super::ties::{RowTies, TIE_FIELD};
use crate::record::{event_time_millis, RowLayout};

/// Builds Redis writes in Feast's layout for one feature view.
#[derive(Debug, Clone)]
pub struct FeastLayout {
    project: String,
    view: String,
    layout: RowLayout,
    /// Join keys sorted by name, as Feast serializes them.
    sorted_keys: Vec<String>,
    field_names: Vec<Vec<u8>>,
}

/// Whether Feast's `Value` has a representation for this Arrow type.
pub fn supported(data_type: &DataType) -> bool {
    match data_type {
        DataType::List(item) | DataType::LargeList(item) => {
            !matches!(item.data_type(), DataType::List(_) | DataType::LargeList(_))
                && supported(item.data_type())
        }
        DataType::Int32
        | DataType::Int64
        | DataType::Float32
        | DataType::Float64
        | DataType::Boolean
        | DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::Timestamp(_, _) => true,
        _ => false,
    }
}

impl FeastLayout {
    /// Feature view `view` of Feast project `project`.
    pub fn new(project: &str, view: &str, layout: RowLayout) -> Self {
        let mut sorted_keys = layout.keys.clone();
        sorted_keys.sort();
        let field_names = layout
            .features
            .iter()
            .map(|f| field_hash(view, f).to_vec())
            .collect();
        Self {
            project: project.to_string(),
            view: view.to_string(),
            layout,
            sorted_keys,
            field_names,
        }
    }

    /// `_ts:{view}`.
    pub fn time_field(&self) -> Vec<u8> {
        format!("_ts:{}", self.view).into_bytes()
    }

    /// `_tie:{view}`: Feast reads only `_ts:{view}` and its hashed feature fields.
    pub fn tie_field(&self) -> Vec<u8> {
        format!("{TIE_FIELD}:{}", self.view).into_bytes()
    }

    /// The Redis key of the entity with these join key values (name → column, row).
    pub fn key(&self, rows: &RecordBatch, row: usize) -> Result<Option<Vec<u8>>, ArrowError> {
        let mut keys = Vec::with_capacity(self.sorted_keys.len());
        for name in &self.sorted_keys {
            let values = column(rows, name)?;
            if values.is_null(row) {
                return Ok(None);
            }
            let value = match values.data_type() {
                DataType::Utf8 => KeyValue::String(values.as_string::<i32>().value(row).as_bytes()),
                DataType::LargeUtf8 => {
                    KeyValue::String(values.as_string::<i64>().value(row).as_bytes())
                }
                DataType::Int64 => KeyValue::Int64(values.as_primitive::<Int64Type>().value(row)),
                DataType::Int32 => KeyValue::Int32(values.as_primitive::<Int32Type>().value(row)),
                other => {
                    return Err(ArrowError::SchemaError(format!(
                        "join key `{name}` of type {other} has no Feast encoding"
                    )))
                }
            };
            keys.push((name.as_str(), value));
        }
        Ok(Some(entity_key(&self.project, &keys)))
    }

    /// Hands `out` one write per entity, with Feast's field names and `Value` bytes.
    pub fn write_entities(
        &self,
        rows: &RecordBatch,
        ties: Option<&RowTies<'_>>,
        out: &mut dyn EntityWrites,
    ) -> Result<(), ArrowError> {
        let mut keys: Vec<Option<Vec<u8>>> = (0..rows.num_rows())
            .map(|row| self.key(rows, row))
            .collect::<Result<_, _>>()?;
        let newest = newest_per_entity(rows, &self.layout, ties, |row| keys[row].take())?;
        let features = self
            .layout
            .features
            .iter()
            .map(|name| column(rows, name))
            .collect::<Result<Vec<_>, _>>()?;
        for (key, event_time_ms, row) in newest {
            let sets = features.iter().filter(|c| !c.is_null(row)).count();
            let (time_value, tie) = (encode_timestamp(event_time_ms), ties.map(|t| t.row(row)));
            out.entity(&key, event_time_ms, &time_value, tie, sets);
            for (values, field) in features.iter().zip(&self.field_names) {
                if !values.is_null(row) {
                    out.set(field, &encode_value(values, row)?);
                }
            }
            for (values, field) in features.iter().zip(&self.field_names) {
                if values.is_null(row) {
                    out.delete(field);
                }
            }
        }
        Ok(())
    }
}

/// The Redis key for join key values given as text, typed by `types` (name → Arrow type).
pub fn key_from_text(project: &str, values: &[(&str, &str, &DataType)]) -> Result<Vec<u8>, String> {
    let mut sorted: Vec<&(&str, &str, &DataType)> = values.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut keys = Vec::with_capacity(sorted.len());
    for &&(name, text, data_type) in &sorted {
        let value = match data_type {
            DataType::Int64 => KeyValue::Int64(text.parse().map_err(|e| format!("`{name}`: {e}"))?),
            DataType::Int32 => KeyValue::Int32(text.parse().map_err(|e| format!("`{name}`: {e}"))?),
            _ => KeyValue::String(text.as_bytes()),
        };
        keys.push((name, value));
    }
    Ok(entity_key(project, &keys))
}

/// MurmurHash3 x86 32-bit, seed 0, of `"{view}:{feature}"`, as Feast names hash fields.
pub fn field_hash(view: &str, feature: &str) -> [u8; 4] {
    let text = format!("{view}:{feature}");
    murmur3::murmur3_32(&mut std::io::Cursor::new(text.as_bytes()), 0)
        .unwrap_or(0)
        .to_le_bytes()
}

/// The `feast.types.Value` protobuf of one cell (never null: callers delete those fields).
pub fn encode_value(values: &ArrayRef, row: usize) -> Result<Vec<u8>, ArrowError> {
    let val = match values.data_type() {
        DataType::List(_) => list_value(&values.as_list::<i32>().value(row))?,
        DataType::LargeList(_) => list_value(&values.as_list::<i64>().value(row))?,
        _ => scalar_value(values, row)?,
    };
    Ok(Value { val: Some(val) }.encode_to_vec())
}

fn scalar_value(values: &ArrayRef, row: usize) -> Result<Val, ArrowError> {
    Ok(match values.data_type() {
        DataType::Binary => Val::Bytes(values.as_binary::<i32>().value(row).to_vec()),
        DataType::LargeBinary => Val::Bytes(values.as_binary::<i64>().value(row).to_vec()),
        DataType::Utf8 => Val::String(values.as_string::<i32>().value(row).to_string()),
        DataType::LargeUtf8 => Val::String(values.as_string::<i64>().value(row).to_string()),
        DataType::Int32 => Val::Int32(values.as_primitive::<Int32Type>().value(row)),
        DataType::Int64 => Val::Int64(values.as_primitive::<Int64Type>().value(row)),
        DataType::Float64 => Val::Double(values.as_primitive::<Float64Type>().value(row)),
        DataType::Float32 => Val::Float(values.as_primitive::<Float32Type>().value(row)),
        DataType::Boolean => Val::Bool(values.as_boolean().value(row)),
        DataType::Timestamp(_, _) => Val::UnixTimestamp(epoch_seconds(values, row)),
        other => {
            return Err(ArrowError::SchemaError(format!(
                "{other} has no Feast encoding"
            )))
        }
    })
}

/// A list cell as Feast's `*List` value (nulls inside a list have no Feast encoding and
/// are written as the type's zero, as Feast's own Python conversion does).
fn list_value(items: &ArrayRef) -> Result<Val, ArrowError> {
    let n = items.len();
    Ok(match items.data_type() {
        DataType::Binary => Val::BytesList(BytesList {
            val: (0..n)
                .map(|i| items.as_binary::<i32>().value(i).to_vec())
                .collect(),
        }),
        DataType::LargeBinary => Val::BytesList(BytesList {
            val: (0..n)
                .map(|i| items.as_binary::<i64>().value(i).to_vec())
                .collect(),
        }),
        DataType::Utf8 => Val::StringList(StringList {
            val: (0..n)
                .map(|i| items.as_string::<i32>().value(i).to_string())
                .collect(),
        }),
        DataType::LargeUtf8 => Val::StringList(StringList {
            val: (0..n)
                .map(|i| items.as_string::<i64>().value(i).to_string())
                .collect(),
        }),
        DataType::Int32 => Val::Int32List(Int32List {
            val: items.as_primitive::<Int32Type>().values().to_vec(),
        }),
        DataType::Int64 => Val::Int64List(Int64List {
            val: items.as_primitive::<Int64Type>().values().to_vec(),
        }),
        DataType::Float64 => Val::DoubleList(DoubleList {
            val: items.as_primitive::<Float64Type>().values().to_vec(),
        }),
        DataType::Float32 => Val::FloatList(FloatList {
            val: items.as_primitive::<Float32Type>().values().to_vec(),
        }),
        DataType::Boolean => Val::BoolList(BoolList {
            val: (0..n).map(|i| items.as_boolean().value(i)).collect(),
        }),
        DataType::Timestamp(_, _) => Val::UnixTimestampList(Int64List {
            val: (0..n).map(|i| epoch_seconds(items, i)).collect(),
        }),
        other => {
            return Err(ArrowError::SchemaError(format!(
                "list of {other} has no Feast encoding"
            )))
        }
    })
}

fn epoch_seconds(values: &ArrayRef, row: usize) -> i64 {
    event_time_millis(values, row).unwrap_or(0).div_euclid(1000)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{BooleanArray, Float32Array, Int64Array, ListArray, StringArray};
    use arrow::datatypes::Int64Type as I64;

    use super::*;

    #[test]
    fn matches_feasts_bytes() {
        assert_eq!(
            field_hash("driver_stats", "conv_rate"),
            [0xfa, 0x73, 0x10, 0x14]
        );
        let rows = RecordBatch::try_from_iter(vec![(
            "driver_id",
            Arc::new(Int64Array::from(vec![1001])) as ArrayRef,
        )])
        .unwrap();
        let layout = FeastLayout::new(
            "demo",
            "driver_stats",
            RowLayout {
                keys: vec!["driver_id".into()],
                event_time: "t".into(),
                features: vec![],
            },
        );
        let mut expected = vec![1, 0, 0, 0, 2, 0, 0, 0, 9, 0, 0, 0];
        expected.extend_from_slice(b"driver_id");
        expected.extend_from_slice(&[4, 0, 0, 0, 8, 0, 0, 0, 0xe9, 0x03, 0, 0, 0, 0, 0, 0]);
        expected.extend_from_slice(b"demo");
        assert_eq!(layout.key(&rows, 0).unwrap(), Some(expected));

        let float: ArrayRef = Arc::new(Float32Array::from(vec![0.5]));
        assert_eq!(encode_value(&float, 0).unwrap(), vec![0x35, 0, 0, 0, 0x3f]);
        let zero: ArrayRef = Arc::new(Int64Array::from(vec![0]));
        assert_eq!(encode_value(&zero, 0).unwrap(), vec![0x20, 0]);
        let yes: ArrayRef = Arc::new(BooleanArray::from(vec![true]));
        assert_eq!(encode_value(&yes, 0).unwrap(), vec![0x38, 1]);
        let strings: ArrayRef = Arc::new(ListArray::from_iter_primitive::<I64, _, _>(vec![Some(
            vec![Some(1), Some(300)],
        )]));
        assert_eq!(
            encode_value(&strings, 0).unwrap(),
            vec![0x72, 0x05, 0x0a, 0x03, 0x01, 0xac, 0x02]
        );
        let _ = StringArray::from(vec!["a"]);
        assert_eq!(
            decode_value(&encode_value(&strings, 0).unwrap()),
            serde_json::json!([1, 300])
        );
        assert_eq!(decode_value(&[0x35, 0, 0, 0, 0x3f]), serde_json::json!(0.5));
        assert_eq!(
            decode_value(&[0x62, 0x06, 0x0a, 0x01, b'a', 0x0a, 0x01, b'b']),
            serde_json::json!(["a", "b"])
        );
        assert_eq!(
            decode_timestamp(&encode_timestamp(1_700_000_000_123)),
            Some(1_700_000_000_123)
        );
        assert_eq!(
            encode_timestamp(1_700_000_000_123),
            vec![0x08, 0x80, 0xe2, 0xcf, 0xaa, 0x06, 0x10, 0xc0, 0xa9, 0xd3, 0x3a]
        );
    }
}
