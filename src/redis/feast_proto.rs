//! Feast's wire formats: the `feast.types.Value` and `google.protobuf.Timestamp` protobuf
//! messages (encoded and decoded by `prost`), and the entity key serialization (v3) that
//! names a Redis key, with one encoder for keys from Arrow rows and from text.

use prost::Message;

/// `feast.types.Value` (feast/protos/feast/types/Value.proto).
#[derive(Clone, PartialEq, Message)]
pub struct Value {
    /// The one value set.
    #[prost(
        oneof = "Val",
        tags = "1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 14, 15, 16, 17, 18, 19"
    )]
    pub val: Option<Val>,
}

/// The cases of `Value.val`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Val {
    /// `bytes bytes_val = 1`.
    #[prost(bytes, tag = "1")]
    Bytes(Vec<u8>),
    /// `string string_val = 2`.
    #[prost(string, tag = "2")]
    String(String),
    /// `int32 int32_val = 3`.
    #[prost(int32, tag = "3")]
    Int32(i32),
    /// `int64 int64_val = 4`.
    #[prost(int64, tag = "4")]
    Int64(i64),
    /// `double double_val = 5`.
    #[prost(double, tag = "5")]
    Double(f64),
    /// `float float_val = 6`.
    #[prost(float, tag = "6")]
    Float(f32),
    /// `bool bool_val = 7`.
    #[prost(bool, tag = "7")]
    Bool(bool),
    /// `int64 unix_timestamp_val = 8` (epoch seconds).
    #[prost(int64, tag = "8")]
    UnixTimestamp(i64),
    /// `BytesList bytes_list_val = 11`.
    #[prost(message, tag = "11")]
    BytesList(BytesList),
    /// `StringList string_list_val = 12`.
    #[prost(message, tag = "12")]
    StringList(StringList),
    /// `Int32List int32_list_val = 13`.
    #[prost(message, tag = "13")]
    Int32List(Int32List),
    /// `Int64List int64_list_val = 14`.
    #[prost(message, tag = "14")]
    Int64List(Int64List),
    /// `DoubleList double_list_val = 15`.
    #[prost(message, tag = "15")]
    DoubleList(DoubleList),
    /// `FloatList float_list_val = 16`.
    #[prost(message, tag = "16")]
    FloatList(FloatList),
    /// `BoolList bool_list_val = 17`.
    #[prost(message, tag = "17")]
    BoolList(BoolList),
    /// `Int64List unix_timestamp_list_val = 18`.
    #[prost(message, tag = "18")]
    UnixTimestampList(Int64List),
    /// `Null null_val = 19`.
    #[prost(int32, tag = "19")]
    Null(i32),
}

/// `repeated bytes val = 1`.
#[derive(Clone, PartialEq, Message)]
pub struct BytesList {
    /// Items.
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub val: Vec<Vec<u8>>,
}

/// `repeated string val = 1`.
#[derive(Clone, PartialEq, Message)]
pub struct StringList {
    /// Items.
    #[prost(string, repeated, tag = "1")]
    pub val: Vec<String>,
}

/// `repeated int32 val = 1`.
#[derive(Clone, PartialEq, Message)]
pub struct Int32List {
    /// Items.
    #[prost(int32, repeated, tag = "1")]
    pub val: Vec<i32>,
}

/// `repeated int64 val = 1`.
#[derive(Clone, PartialEq, Message)]
pub struct Int64List {
    /// Items.
    #[prost(int64, repeated, tag = "1")]
    pub val: Vec<i64>,
}

/// `repeated double val = 1`.
#[derive(Clone, PartialEq, Message)]
pub struct DoubleList {
    /// Items.
    #[prost(double, repeated, tag = "1")]
    pub val: Vec<f64>,
}

/// `repeated float val = 1`.
#[derive(Clone, PartialEq, Message)]
pub struct FloatList {
    /// Items.
    #[prost(float, repeated, tag = "1")]
    pub val: Vec<f32>,
}

/// `repeated bool val = 1`.
#[derive(Clone, PartialEq, Message)]
pub struct BoolList {
    /// Items.
    #[prost(bool, repeated, tag = "1")]
    pub val: Vec<bool>,
}

/// `google.protobuf.Timestamp`.
#[derive(Clone, PartialEq, Message)]
pub struct Timestamp {
    /// Seconds since the epoch.
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    /// Nanoseconds within the second.
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// A `google.protobuf.Timestamp` for epoch milliseconds.
pub fn encode_timestamp(ms: i64) -> Vec<u8> {
    Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
    .encode_to_vec()
}

/// Epoch milliseconds of a serialized `google.protobuf.Timestamp`.
pub fn decode_timestamp(bytes: &[u8]) -> Option<i64> {
    let t = Timestamp::decode(bytes).ok()?;
    Some(t.seconds * 1000 + i64::from(t.nanos) / 1_000_000)
}

/// A `feast.types.Value` as JSON (bytes as base64, timestamps as epoch seconds); `null` for
/// bytes that are not one, and for NaN and infinities (JSON has no number for them).
pub fn decode_value(bytes: &[u8]) -> serde_json::Value {
    decode_value_with(bytes, serde_json::Value::from)
}

/// [`decode_value`] with each float and double (lists' items too, widened to `f64`) turned
/// into JSON by `float`: Feast's feature server writes NaN and infinities as strings.
pub fn decode_value_with(bytes: &[u8], float: fn(f64) -> serde_json::Value) -> serde_json::Value {
    use base64::Engine;
    use serde_json::Value as J;
    let b64 = |b: &[u8]| J::String(base64::engine::general_purpose::STANDARD.encode(b));
    let Ok(Value { val: Some(val) }) = Value::decode(bytes) else {
        return J::Null;
    };
    match val {
        Val::Bytes(b) => b64(&b),
        Val::String(s) => J::String(s),
        Val::Int32(n) => J::from(n),
        Val::Int64(n) | Val::UnixTimestamp(n) => J::from(n),
        Val::Double(x) => float(x),
        Val::Float(x) => float(f64::from(x)),
        Val::Bool(b) => J::Bool(b),
        Val::BytesList(l) => J::Array(l.val.iter().map(|b| b64(b)).collect()),
        Val::StringList(l) => J::Array(l.val.into_iter().map(J::String).collect()),
        Val::Int32List(l) => J::Array(l.val.into_iter().map(J::from).collect()),
        Val::Int64List(l) | Val::UnixTimestampList(l) => {
            J::Array(l.val.into_iter().map(J::from).collect())
        }
        Val::DoubleList(l) => J::Array(l.val.into_iter().map(float).collect()),
        Val::FloatList(l) => J::Array(l.val.into_iter().map(|x| float(f64::from(x))).collect()),
        Val::BoolList(l) => J::Array(l.val.into_iter().map(J::Bool).collect()),
        Val::Null(_) => J::Null,
    }
}

/// A stored `feast.types.Value` that is one scalar, for readers that type values themselves.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// `int32_val` or `int64_val`.
    Int(i64),
    /// `float_val` (widened) or `double_val`.
    Float(f64),
    /// `bool_val`.
    Bool(bool),
    /// `string_val`.
    Text(String),
    /// `bytes_val`.
    Bytes(Vec<u8>),
    /// `unix_timestamp_val`, epoch seconds.
    Seconds(i64),
    /// `null_val`, an empty message, or bytes that are not a `Value`.
    Null,
    /// A list.
    List,
}

/// The scalar a stored `feast.types.Value` holds.
pub fn decode_scalar(bytes: &[u8]) -> Scalar {
    let Ok(Value { val: Some(val) }) = Value::decode(bytes) else {
        return Scalar::Null;
    };
    match val {
        Val::Int32(n) => Scalar::Int(i64::from(n)),
        Val::Int64(n) => Scalar::Int(n),
        Val::Float(x) => Scalar::Float(f64::from(x)),
        Val::Double(x) => Scalar::Float(x),
        Val::Bool(b) => Scalar::Bool(b),
        Val::String(s) => Scalar::Text(s),
        Val::Bytes(b) => Scalar::Bytes(b),
        Val::UnixTimestamp(n) => Scalar::Seconds(n),
        Val::Null(_) => Scalar::Null,
        Val::BytesList(_)
        | Val::StringList(_)
        | Val::Int32List(_)
        | Val::Int64List(_)
        | Val::UnixTimestampList(_)
        | Val::DoubleList(_)
        | Val::FloatList(_)
        | Val::BoolList(_) => Scalar::List,
    }
}

/// One join key value as Feast's key serialization types it.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyValue<'a> {
    /// `STRING` (type 2).
    String(&'a [u8]),
    /// `INT32` (type 3).
    Int32(i32),
    /// `INT64` (type 4).
    Int64(i64),
}

/// Entity key serialization v3 followed by the project name: `u32 n`, per join key sorted by
/// name `u32 2, u32 len, name`, then per value `u32 type, u32 len, bytes` (little-endian).
/// `keys` must already be sorted by name.
pub fn entity_key(project: &str, keys: &[(&str, KeyValue<'_>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&u32_le(keys.len()));
    for (name, _) in keys {
        out.extend_from_slice(&2u32.to_le_bytes());
        out.extend_from_slice(&u32_le(name.len()));
        out.extend_from_slice(name.as_bytes());
    }
    for (_, value) in keys {
        let (kind, bytes): (u32, Vec<u8>) = match value {
            KeyValue::String(s) => (2, s.to_vec()),
            KeyValue::Int32(n) => (3, n.to_le_bytes().to_vec()),
            KeyValue::Int64(n) => (4, n.to_le_bytes().to_vec()),
        };
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&u32_le(bytes.len()));
        out.extend_from_slice(&bytes);
    }
    out.extend_from_slice(project.as_bytes());
    out
}

/// The join keys (name, value as text) of a key `entity_key` made for `project`; `None`
/// for a key of another project or not in that serialization.
pub fn decode_entity_key(key: &[u8], project: &str) -> Option<Vec<(String, String)>> {
    let serialized = key.strip_suffix(project.as_bytes())?;
    decode_entity_key_parts(serialized)
}

fn decode_entity_key_parts(mut rest: &[u8]) -> Option<Vec<(String, String)>> {
    fn u32_at(rest: &mut &[u8]) -> Option<usize> {
        let (head, tail) = rest.split_first_chunk::<4>()?;
        *rest = tail;
        usize::try_from(u32::from_le_bytes(*head)).ok()
    }
    fn bytes_at<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, tail) = (rest.get(..n)?, rest.get(n..)?);
        *rest = tail;
        Some(head)
    }
    let count = u32_at(&mut rest)?;
    let mut names = Vec::with_capacity(count.min(16));
    for _ in 0..count {
        let _kind = u32_at(&mut rest)?;
        let len = u32_at(&mut rest)?;
        names.push(String::from_utf8(bytes_at(&mut rest, len)?.to_vec()).ok()?);
    }
    let mut keys = Vec::with_capacity(names.len());
    for name in names {
        let kind = u32_at(&mut rest)?;
        let len = u32_at(&mut rest)?;
        let raw = bytes_at(&mut rest, len)?;
        let value = match kind {
            2 => String::from_utf8(raw.to_vec()).ok()?,
            3 => i32::from_le_bytes(raw.try_into().ok()?).to_string(),
            4 => i64::from_le_bytes(raw.try_into().ok()?).to_string(),
            _ => return None,
        };
        keys.push((name, value));
    }
    rest.is_empty().then_some(keys)
}

fn u32_le(n: usize) -> [u8; 4] {
    u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_keys_decode_back_to_their_join_keys() {
        let key = entity_key(
            "proj",
            &[
                ("driver", KeyValue::Int64(-7)),
                ("zone", KeyValue::String(b"a:b")),
            ],
        );
        assert_eq!(
            decode_entity_key(&key, "proj"),
            Some(vec![
                ("driver".to_string(), "-7".to_string()),
                ("zone".to_string(), "a:b".to_string())
            ])
        );
        assert_eq!(decode_entity_key(&key, "other"), None);
        assert_eq!(decode_entity_key(b"junkproj", "proj"), None);
    }

    #[test]
    fn timestamps_round_trip_and_match_the_hand_checked_bytes() {
        let bytes = encode_timestamp(1_700_000_000_123);
        assert_eq!(decode_timestamp(&bytes), Some(1_700_000_000_123));
        assert_eq!(bytes[0], 0x08);
        assert_eq!(encode_timestamp(0), Vec::<u8>::new());
    }

    #[test]
    fn unpacked_repeated_fields_decode_whole() {
        // Int64List written unpacked (each item its own tag), as older writers may do.
        let unpacked = [0x72, 0x05, 0x08, 0x01, 0x08, 0xac, 0x02];
        assert_eq!(decode_value(&unpacked), serde_json::json!([1, 300]));
        // The same list packed.
        let packed = [0x72, 0x05, 0x0a, 0x03, 0x01, 0xac, 0x02];
        assert_eq!(decode_value(&packed), serde_json::json!([1, 300]));
        // Unpacked doubles and bools.
        let doubles = Value {
            val: Some(Val::DoubleList(DoubleList {
                val: vec![0.5, -1.0],
            })),
        };
        assert_eq!(
            decode_value(&doubles.encode_to_vec()),
            serde_json::json!([0.5, -1.0])
        );
        let bools_unpacked = [0x8a, 0x01, 0x04, 0x08, 0x01, 0x08, 0x00];
        assert_eq!(
            decode_value(&bools_unpacked),
            serde_json::json!([true, false])
        );
    }

    #[test]
    fn garbage_is_null_not_a_panic() {
        assert_eq!(decode_value(&[0xff, 0xff, 0xff]), serde_json::Value::Null);
        assert_eq!(decode_value(&[]), serde_json::Value::Null);
    }
}
