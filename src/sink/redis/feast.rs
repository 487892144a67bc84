//! The `feast` layout: the bytes Feast's own Redis online store writes and reads, so
//! `FeatureStore.get_online_features()` returns our rows (checked against Feast 0.67).
//!
//! Key: entity key serialization v3 (`u32 n`, per join key sorted by name `u32 2, u32 len,
//! name`, then per value `u32 type, u32 len, bytes`; little-endian) followed by the project
//! name. Fields: MurmurHash3 x86 32-bit (seed 0) of `"{view}:{feature}"`, 4 bytes LE, holding
//! a `feast.types.Value` protobuf; `_ts:{view}` holds a `google.protobuf.Timestamp`.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float32Type, Float64Type, Int32Type, Int64Type, TimeUnit};
use arrow::error::ArrowError;

use super::calls::EntityWrites;
use super::layout::{column, newest_per_entity};
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

    /// The Redis key of the entity with these join key values (name → column, row).
    pub fn key(&self, rows: &RecordBatch, row: usize) -> Result<Option<Vec<u8>>, ArrowError> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&u32_le(self.sorted_keys.len()));
        for name in &self.sorted_keys {
            out.extend_from_slice(&2u32.to_le_bytes());
            out.extend_from_slice(&u32_le(name.len()));
            out.extend_from_slice(name.as_bytes());
        }
        for name in &self.sorted_keys {
            let values = column(rows, name)?;
            if values.is_null(row) {
                return Ok(None);
            }
            let (kind, bytes): (u32, Vec<u8>) = match values.data_type() {
                DataType::Utf8 => (2, values.as_string::<i32>().value(row).as_bytes().to_vec()),
                DataType::LargeUtf8 => {
                    (2, values.as_string::<i64>().value(row).as_bytes().to_vec())
                }
                DataType::Int64 => (
                    4,
                    values
                        .as_primitive::<Int64Type>()
                        .value(row)
                        .to_le_bytes()
                        .to_vec(),
                ),
                DataType::Int32 => (
                    3,
                    values
                        .as_primitive::<Int32Type>()
                        .value(row)
                        .to_le_bytes()
                        .to_vec(),
                ),
                other => {
                    return Err(ArrowError::SchemaError(format!(
                        "join key `{name}` of type {other} has no Feast encoding"
                    )))
                }
            };
            out.extend_from_slice(&kind.to_le_bytes());
            out.extend_from_slice(&u32_le(bytes.len()));
            out.extend_from_slice(&bytes);
        }
        out.extend_from_slice(self.project.as_bytes());
        Ok(Some(out))
    }

    /// Hands `out` one write per entity, with Feast's field names and `Value` bytes.
    pub fn write_entities(
        &self,
        rows: &RecordBatch,
        out: &mut dyn EntityWrites,
    ) -> Result<(), ArrowError> {
        let mut keys: Vec<Option<Vec<u8>>> = (0..rows.num_rows())
            .map(|row| self.key(rows, row))
            .collect::<Result<_, _>>()?;
        let newest = newest_per_entity(rows, &self.layout, |row| keys[row].take())?;
        let features = self
            .layout
            .features
            .iter()
            .map(|name| column(rows, name))
            .collect::<Result<Vec<_>, _>>()?;
        for (key, event_time_ms, row) in newest {
            let sets = features.iter().filter(|c| !c.is_null(row)).count();
            out.entity(&key, event_time_ms, &encode_timestamp(event_time_ms), sets);
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
pub fn key_from_text(
    project: &str,
    values: &[(String, String, DataType)],
) -> Result<Vec<u8>, String> {
    let mut sorted: Vec<&(String, String, DataType)> = values.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&u32_le(sorted.len()));
    for (name, _, _) in &sorted {
        out.extend_from_slice(&2u32.to_le_bytes());
        out.extend_from_slice(&u32_le(name.len()));
        out.extend_from_slice(name.as_bytes());
    }
    for (name, text, data_type) in &sorted {
        let (kind, bytes): (u32, Vec<u8>) = match data_type {
            DataType::Int64 => (
                4,
                text.parse::<i64>()
                    .map_err(|e| format!("`{name}`: {e}"))?
                    .to_le_bytes()
                    .to_vec(),
            ),
            DataType::Int32 => (
                3,
                text.parse::<i32>()
                    .map_err(|e| format!("`{name}`: {e}"))?
                    .to_le_bytes()
                    .to_vec(),
            ),
            _ => (2, text.as_bytes().to_vec()),
        };
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&u32_le(bytes.len()));
        out.extend_from_slice(&bytes);
    }
    out.extend_from_slice(project.as_bytes());
    Ok(out)
}

/// Epoch milliseconds of a serialized `google.protobuf.Timestamp`.
pub fn decode_timestamp(bytes: &[u8]) -> Option<i64> {
    let (mut seconds, mut nanos) = (0i64, 0i64);
    let mut reader = ProtoReader { bytes, at: 0 };
    while let Some((field, wire)) = reader.tag() {
        let value = reader.scalar(wire)?;
        match field {
            1 => seconds = value as i64,
            2 => nanos = value as i64,
            _ => {}
        }
    }
    Some(seconds * 1000 + nanos / 1_000_000)
}

/// A `feast.types.Value` protobuf as JSON (bytes as base64, timestamps as epoch seconds).
pub fn decode_value(bytes: &[u8]) -> serde_json::Value {
    use base64::Engine;
    use serde_json::Value as J;
    let mut reader = ProtoReader { bytes, at: 0 };
    let Some((field, wire)) = reader.tag() else {
        return J::Null;
    };
    let b64 = |b: &[u8]| J::String(base64::engine::general_purpose::STANDARD.encode(b));
    match (field, wire) {
        (1, 2) => reader.chunk().map_or(J::Null, b64),
        (2, 2) => reader.chunk().map_or(J::Null, |b| {
            J::String(String::from_utf8_lossy(b).into_owned())
        }),
        (3, 0) => reader
            .scalar(0)
            .map_or(J::Null, |v| J::from(v as i64 as i32)),
        (4, 0) | (8, 0) => reader.scalar(0).map_or(J::Null, |v| J::from(v as i64)),
        (5, 1) => reader
            .scalar(1)
            .map_or(J::Null, |v| J::from(f64::from_bits(v))),
        (6, 5) => reader
            .scalar(5)
            .map_or(J::Null, |v| J::from(f64::from(f32::from_bits(v as u32)))),
        (7, 0) => reader.scalar(0).map_or(J::Null, |v| J::Bool(v != 0)),
        (11..=18, 2) => {
            let Some(inner) = reader.chunk() else {
                return J::Null;
            };
            let mut items = Vec::new();
            let mut list = ProtoReader {
                bytes: inner,
                at: 0,
            };
            while let Some((_, item_wire)) = list.tag() {
                let Some(chunk) = (if item_wire == 2 { list.chunk() } else { None }) else {
                    break;
                };
                if field == 11 || field == 12 {
                    items.push(if field == 11 {
                        b64(chunk)
                    } else {
                        J::String(String::from_utf8_lossy(chunk).into_owned())
                    });
                    continue;
                }
                let mut packed = ProtoReader {
                    bytes: chunk,
                    at: 0,
                };
                let element_wire = match field {
                    15 => 1,
                    16 => 5,
                    _ => 0,
                };
                while packed.at < packed.bytes.len() {
                    let Some(v) = packed.scalar(element_wire) else {
                        break;
                    };
                    items.push(match field {
                        13 => J::from(v as i64 as i32),
                        15 => J::from(f64::from_bits(v)),
                        16 => J::from(f64::from(f32::from_bits(v as u32))),
                        17 => J::Bool(v != 0),
                        _ => J::from(v as i64),
                    });
                }
            }
            J::Array(items)
        }
        _ => J::Null,
    }
}

struct ProtoReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> ProtoReader<'a> {
    fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *self.bytes.get(self.at)?;
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Some(value);
            }
        }
        None
    }

    fn tag(&mut self) -> Option<(u64, u64)> {
        if self.at >= self.bytes.len() {
            return None;
        }
        let tag = self.varint()?;
        Some((tag >> 3, tag & 7))
    }

    fn scalar(&mut self, wire: u64) -> Option<u64> {
        match wire {
            0 => self.varint(),
            1 => {
                let chunk: [u8; 8] = self.bytes.get(self.at..self.at + 8)?.try_into().ok()?;
                self.at += 8;
                Some(u64::from_le_bytes(chunk))
            }
            5 => {
                let chunk: [u8; 4] = self.bytes.get(self.at..self.at + 4)?.try_into().ok()?;
                self.at += 4;
                Some(u64::from(u32::from_le_bytes(chunk)))
            }
            _ => None,
        }
    }

    fn chunk(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.varint()?).ok()?;
        let chunk = self.bytes.get(self.at..self.at.checked_add(len)?)?;
        self.at += len;
        Some(chunk)
    }
}

/// MurmurHash3 x86 32-bit, seed 0, of `"{view}:{feature}"`, as Feast names hash fields.
pub fn field_hash(view: &str, feature: &str) -> [u8; 4] {
    let text = format!("{view}:{feature}");
    murmur3::murmur3_32(&mut std::io::Cursor::new(text.as_bytes()), 0)
        .unwrap_or(0)
        .to_le_bytes()
}

/// A `google.protobuf.Timestamp` (seconds, nanos) for epoch milliseconds.
pub fn encode_timestamp(ms: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    let (seconds, nanos) = (ms.div_euclid(1000), ms.rem_euclid(1000) * 1_000_000);
    if seconds != 0 {
        out.push(0x08);
        varint(&mut out, seconds as u64);
    }
    if nanos != 0 {
        out.push(0x10);
        varint(&mut out, nanos as u64);
    }
    out
}

/// The `feast.types.Value` protobuf of one cell (never null: callers delete those fields).
pub fn encode_value(values: &ArrayRef, row: usize) -> Result<Vec<u8>, ArrowError> {
    let mut out = Vec::with_capacity(16);
    match values.data_type() {
        DataType::List(_) | DataType::LargeList(_) => {
            let items = match values.data_type() {
                DataType::List(_) => values.as_list::<i32>().value(row),
                _ => values.as_list::<i64>().value(row),
            };
            let field = list_field(items.data_type())?;
            let mut inner = Vec::new();
            encode_repeated(&items, &mut inner)?;
            tag(&mut out, field, 2);
            varint(&mut out, inner.len() as u64);
            out.extend_from_slice(&inner);
        }
        _ => encode_scalar(values, row, &mut out)?,
    }
    Ok(out)
}

fn encode_scalar(values: &ArrayRef, row: usize, out: &mut Vec<u8>) -> Result<(), ArrowError> {
    match values.data_type() {
        DataType::Binary => len_delimited(out, 1, values.as_binary::<i32>().value(row)),
        DataType::LargeBinary => len_delimited(out, 1, values.as_binary::<i64>().value(row)),
        DataType::Utf8 => len_delimited(out, 2, values.as_string::<i32>().value(row).as_bytes()),
        DataType::LargeUtf8 => {
            len_delimited(out, 2, values.as_string::<i64>().value(row).as_bytes())
        }
        DataType::Int32 => {
            tag(out, 3, 0);
            varint(
                out,
                i64::from(values.as_primitive::<Int32Type>().value(row)) as u64,
            );
        }
        DataType::Int64 => {
            tag(out, 4, 0);
            varint(out, values.as_primitive::<Int64Type>().value(row) as u64);
        }
        DataType::Float64 => {
            tag(out, 5, 1);
            out.extend_from_slice(
                &values
                    .as_primitive::<Float64Type>()
                    .value(row)
                    .to_le_bytes(),
            );
        }
        DataType::Float32 => {
            tag(out, 6, 5);
            out.extend_from_slice(
                &values
                    .as_primitive::<Float32Type>()
                    .value(row)
                    .to_le_bytes(),
            );
        }
        DataType::Boolean => {
            tag(out, 7, 0);
            out.push(u8::from(values.as_boolean().value(row)));
        }
        DataType::Timestamp(_, _) => {
            tag(out, 8, 0);
            varint(out, epoch_seconds(values, row) as u64);
        }
        other => {
            return Err(ArrowError::SchemaError(format!(
                "{other} has no Feast encoding"
            )))
        }
    }
    Ok(())
}

fn list_field(item: &DataType) -> Result<u32, ArrowError> {
    Ok(match item {
        DataType::Binary | DataType::LargeBinary => 11,
        DataType::Utf8 | DataType::LargeUtf8 => 12,
        DataType::Int32 => 13,
        DataType::Int64 => 14,
        DataType::Float64 => 15,
        DataType::Float32 => 16,
        DataType::Boolean => 17,
        DataType::Timestamp(_, _) => 18,
        other => {
            return Err(ArrowError::SchemaError(format!(
                "list of {other} has no Feast encoding"
            )))
        }
    })
}

/// `repeated T val = 1`: strings and bytes one by one, numbers packed.
fn encode_repeated(items: &ArrayRef, out: &mut Vec<u8>) -> Result<(), ArrowError> {
    let n = items.len();
    let mut packed = Vec::new();
    for i in 0..n {
        match items.data_type() {
            DataType::Binary => len_delimited(out, 1, items.as_binary::<i32>().value(i)),
            DataType::LargeBinary => len_delimited(out, 1, items.as_binary::<i64>().value(i)),
            DataType::Utf8 => len_delimited(out, 1, items.as_string::<i32>().value(i).as_bytes()),
            DataType::LargeUtf8 => {
                len_delimited(out, 1, items.as_string::<i64>().value(i).as_bytes())
            }
            DataType::Int32 => varint(
                &mut packed,
                i64::from(items.as_primitive::<Int32Type>().value(i)) as u64,
            ),
            DataType::Int64 => varint(
                &mut packed,
                items.as_primitive::<Int64Type>().value(i) as u64,
            ),
            DataType::Float64 => packed
                .extend_from_slice(&items.as_primitive::<Float64Type>().value(i).to_le_bytes()),
            DataType::Float32 => packed
                .extend_from_slice(&items.as_primitive::<Float32Type>().value(i).to_le_bytes()),
            DataType::Boolean => packed.push(u8::from(items.as_boolean().value(i))),
            DataType::Timestamp(_, _) => varint(&mut packed, epoch_seconds(items, i) as u64),
            other => {
                return Err(ArrowError::SchemaError(format!(
                    "list of {other} has no Feast encoding"
                )))
            }
        }
    }
    if !packed.is_empty() {
        len_delimited(out, 1, &packed);
    }
    Ok(())
}

fn epoch_seconds(values: &ArrayRef, row: usize) -> i64 {
    match values.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) | DataType::Timestamp(_, _) => {
            event_time_millis(values, row).unwrap_or(0).div_euclid(1000)
        }
        _ => 0,
    }
}

fn tag(out: &mut Vec<u8>, field: u32, wire_type: u32) {
    varint(out, u64::from(field << 3 | wire_type));
}

fn len_delimited(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    tag(out, field, 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn u32_le(n: usize) -> [u8; 4] {
    u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes()
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
        assert_eq!(encode_timestamp(1_700_000_000_123), {
            let mut t = vec![0x08];
            varint(&mut t, 1_700_000_000);
            t.push(0x10);
            varint(&mut t, 123_000_000);
            t
        });
    }
}
