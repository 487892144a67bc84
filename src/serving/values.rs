//! Stored feature values back to JSON, in the two shapes readers ask for: `get` and
//! `/v1/features` (values typed by the feature's Arrow type, the native layout's text kept
//! for what JSON has no type for) and Feast's feature server (what
//! `feast.feature_server_utils.convert_response_to_dict` writes: bytes as base64, timestamps
//! as epoch seconds, lists as arrays, NaN and infinities as the strings `"NaN"`,
//! `"Infinity"`, `"-Infinity"`), so that a Feast client gets the same Python values from
//! either layout.

use arrow::datatypes::DataType;
use base64::Engine;
use serde_json::Value;

use crate::redis::feast::{decode_value, decode_value_with};
use crate::redis::LayoutKind;

/// Which JSON shape values take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueStyle {
    /// `get` and `/v1/features`: numbers, booleans, strings, bytes as base64; in the native
    /// layout timestamps and lists stay the stored text.
    Typed,
    /// Feast's feature-server JSON.
    Feast,
}

/// One stored value (a hash field's bytes) of a feature of type `data_type` as JSON.
pub fn decode(layout: LayoutKind, data_type: &DataType, raw: &[u8], style: ValueStyle) -> Value {
    match (layout, style) {
        (LayoutKind::Feast, ValueStyle::Typed) => decode_value(raw),
        (LayoutKind::Feast, ValueStyle::Feast) => decode_value_with(raw, feast_float),
        (LayoutKind::Native, ValueStyle::Typed) => typed(data_type, raw),
        (LayoutKind::Native, ValueStyle::Feast) => native_as_feast(data_type, raw),
    }
}

/// A float as Feast's feature server writes it: a number, or the protobuf JSON mapping's
/// strings for the values JSON has no number for.
pub fn feast_float(x: f64) -> Value {
    if x.is_nan() {
        Value::String("NaN".into())
    } else if x.is_infinite() {
        Value::String(if x > 0.0 { "Infinity" } else { "-Infinity" }.into())
    } else {
        Value::from(x)
    }
}

fn base64(raw: &[u8]) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(raw))
}

fn is_binary(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Binary | DataType::LargeBinary | DataType::FixedSizeBinary(_)
    )
}

/// Native-layout text back to a JSON value of the feature's type.
fn typed(data_type: &DataType, raw: &[u8]) -> Value {
    if is_binary(data_type) {
        return base64(raw);
    }
    let text = String::from_utf8_lossy(raw);
    let or_text = |parsed: Option<Value>| parsed.unwrap_or_else(|| Value::String(text.to_string()));
    match data_type {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            or_text(text.parse::<i64>().ok().map(Value::from))
        }
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            or_text(text.parse::<u64>().ok().map(Value::from))
        }
        DataType::Float16 | DataType::Float32 | DataType::Float64 => or_text(
            text.parse::<f64>()
                .ok()
                .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number)),
        ),
        DataType::Boolean => or_text(text.parse::<bool>().ok().map(Value::Bool)),
        _ => Value::String(text.into_owned()),
    }
}

/// Native-layout text as Feast's feature server would write the same value read from the
/// Feast layout. Lists are stored as `[a, b, c]`: string items that themselves hold `", "`
/// cannot be told apart there (the Feast layout keeps them exact).
fn native_as_feast(data_type: &DataType, raw: &[u8]) -> Value {
    if is_binary(data_type) {
        return base64(raw);
    }
    let text = String::from_utf8_lossy(raw);
    match data_type {
        DataType::List(item) | DataType::LargeList(item) => {
            let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) else {
                return Value::String(text.into_owned());
            };
            if inner.is_empty() {
                return Value::Array(Vec::new());
            }
            Value::Array(
                inner
                    .split(", ")
                    .map(|item_text| native_scalar_as_feast(item.data_type(), item_text))
                    .collect(),
            )
        }
        other => native_scalar_as_feast(other, &text),
    }
}

fn native_scalar_as_feast(data_type: &DataType, text: &str) -> Value {
    let or_text = |parsed: Option<Value>| parsed.unwrap_or_else(|| Value::String(text.into()));
    match data_type {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            or_text(text.parse::<i64>().ok().map(Value::from))
        }
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            or_text(text.parse::<u64>().ok().map(Value::from))
        }
        // Parsed at the stored width and widened, as Feast widens a stored `float_val`: the
        // text of 0.1f32 is "0.1", which as a double would be a different number.
        DataType::Float32 | DataType::Float16 => {
            or_text(text.parse::<f32>().ok().map(|x| feast_float(f64::from(x))))
        }
        DataType::Float64 => or_text(text.parse::<f64>().ok().map(feast_float)),
        DataType::Boolean => or_text(text.parse::<bool>().ok().map(Value::Bool)),
        DataType::Timestamp(_, _) => or_text(epoch_seconds(text).map(Value::from)),
        _ => Value::String(text.into()),
    }
}

/// Epoch seconds (rounded down, as the Feast layout stores `unix_timestamp_val`) of the
/// native layout's timestamp text: RFC 3339, or without an offset for a zone-less column.
fn epoch_seconds(text: &str) -> Option<i64> {
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Some(time.timestamp());
    }
    chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
        .ok()
        .map(|time| time.and_utc().timestamp())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Float32Array, ListArray, TimestampMillisecondArray};
    use arrow::datatypes::{Field, Int64Type, TimeUnit};
    use arrow::util::display::{ArrayFormatter, FormatOptions};
    use serde_json::json;

    use super::*;

    /// The text the native layout stores for row 0 of `values`.
    fn stored(values: &ArrayRef) -> String {
        let options = FormatOptions::default().with_null("");
        ArrayFormatter::try_new(values.as_ref(), &options)
            .unwrap()
            .value(0)
            .to_string()
    }

    #[test]
    fn text_values_become_typed_json() {
        assert_eq!(typed(&DataType::Int64, b"42"), json!(42));
        assert_eq!(typed(&DataType::Float32, b"0.5"), json!(0.5));
        assert_eq!(typed(&DataType::Boolean, b"true"), json!(true));
        assert_eq!(typed(&DataType::Utf8, b"x"), json!("x"));
        assert_eq!(typed(&DataType::Binary, &[1, 2]), json!("AQI="));
    }

    #[test]
    fn native_text_reads_as_the_feast_layout_does() {
        let f32_type = DataType::Float32;
        let tenth: ArrayRef = Arc::new(Float32Array::from(vec![0.1f32]));
        assert_eq!(
            native_as_feast(&f32_type, stored(&tenth).as_bytes()),
            json!(f64::from(0.1f32))
        );
        let nan: ArrayRef = Arc::new(Float32Array::from(vec![f32::NAN]));
        assert_eq!(
            native_as_feast(&f32_type, stored(&nan).as_bytes()),
            json!("NaN")
        );
        let minus_inf: ArrayRef = Arc::new(Float32Array::from(vec![f32::NEG_INFINITY]));
        assert_eq!(
            native_as_feast(&f32_type, stored(&minus_inf).as_bytes()),
            json!("-Infinity")
        );

        for tz in [Some("+00:00".to_string()), None] {
            let ts: ArrayRef = Arc::new(
                TimestampMillisecondArray::from(vec![1_700_000_000_999]).with_timezone_opt(tz),
            );
            assert_eq!(
                native_as_feast(ts.data_type(), stored(&ts).as_bytes()),
                json!(1_700_000_000),
                "{}",
                stored(&ts)
            );
        }

        let longs: ArrayRef = Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
            Some(vec![Some(1), Some(-300)]),
        ]));
        assert_eq!(
            native_as_feast(longs.data_type(), stored(&longs).as_bytes()),
            json!([1, -300])
        );
        let strings = DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)));
        assert_eq!(
            native_as_feast(&strings, b"[tags-1, tags-2]"),
            json!(["tags-1", "tags-2"])
        );
        assert_eq!(native_as_feast(&strings, b"[]"), json!([]));
        let micros = DataType::Timestamp(TimeUnit::Microsecond, None);
        assert_eq!(native_as_feast(&micros, b"not a time"), json!("not a time"));
    }

    #[test]
    fn feast_style_writes_non_finite_floats_as_text() {
        assert_eq!(feast_float(f64::INFINITY), json!("Infinity"));
        assert_eq!(feast_float(1.5), json!(1.5));
        // 6: float_val 0.5 (f32 bits 0x3f000000).
        let half = [0x35, 0, 0, 0, 0x3f];
        assert_eq!(
            decode(
                LayoutKind::Feast,
                &DataType::Float32,
                &half,
                ValueStyle::Feast
            ),
            json!(0.5)
        );
        let nan = [0x35, 0, 0, 0xc0, 0x7f];
        assert_eq!(
            decode(
                LayoutKind::Feast,
                &DataType::Float32,
                &nan,
                ValueStyle::Feast
            ),
            json!("NaN")
        );
        assert_eq!(
            decode(
                LayoutKind::Feast,
                &DataType::Float32,
                &nan,
                ValueStyle::Typed
            ),
            Value::Null
        );
    }
}
