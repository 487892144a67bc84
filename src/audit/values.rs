//! The offline table's values in the shape the online store's values are read in (Feast's
//! feature-server JSON: floats widened from their stored width, timestamps as epoch
//! seconds, bytes as base64), so that the two compare value for value, and the numeric
//! error measure of a pair.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    DataType, Float16Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type,
    TimeUnit, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use base64::Engine as _;
use serde_json::Value;

use crate::serving::feast_float;

/// Row `row` of `column` as the online store's value of the same feature reads.
pub fn table_value(column: &ArrayRef, row: usize) -> Value {
    if column.is_null(row) {
        return Value::Null;
    }
    match column.data_type() {
        DataType::Int8 => Value::from(column.as_primitive::<Int8Type>().value(row)),
        DataType::Int16 => Value::from(column.as_primitive::<Int16Type>().value(row)),
        DataType::Int32 => Value::from(column.as_primitive::<Int32Type>().value(row)),
        DataType::Int64 => Value::from(column.as_primitive::<Int64Type>().value(row)),
        DataType::UInt8 => Value::from(column.as_primitive::<UInt8Type>().value(row)),
        DataType::UInt16 => Value::from(column.as_primitive::<UInt16Type>().value(row)),
        DataType::UInt32 => Value::from(column.as_primitive::<UInt32Type>().value(row)),
        DataType::UInt64 => Value::from(column.as_primitive::<UInt64Type>().value(row)),
        DataType::Float16 => feast_float(f64::from(
            column.as_primitive::<Float16Type>().value(row).to_f32(),
        )),
        DataType::Float32 => {
            feast_float(f64::from(column.as_primitive::<Float32Type>().value(row)))
        }
        DataType::Float64 => feast_float(column.as_primitive::<Float64Type>().value(row)),
        DataType::Boolean => Value::Bool(column.as_boolean().value(row)),
        DataType::Utf8 => Value::from(column.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => Value::from(column.as_string::<i64>().value(row)),
        DataType::Utf8View => Value::from(column.as_string_view().value(row)),
        DataType::Binary => base64(column.as_binary::<i32>().value(row)),
        DataType::LargeBinary => base64(column.as_binary::<i64>().value(row)),
        DataType::FixedSizeBinary(_) => base64(column.as_fixed_size_binary().value(row)),
        DataType::Timestamp(unit, _) => Value::from(epoch_seconds(column, *unit, row)),
        DataType::List(_) => list(&column.as_list::<i32>().value(row)),
        DataType::LargeList(_) => list(&column.as_list::<i64>().value(row)),
        _ => {
            let options = FormatOptions::default().with_null("");
            ArrayFormatter::try_new(column.as_ref(), &options)
                .map_or(Value::Null, |f| Value::from(f.value(row).to_string()))
        }
    }
}

fn list(items: &ArrayRef) -> Value {
    Value::Array((0..items.len()).map(|i| table_value(items, i)).collect())
}

fn base64(raw: &[u8]) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(raw))
}

/// Epoch seconds, rounded down (as the Feast layout stores `unix_timestamp_val`).
fn epoch_seconds(column: &ArrayRef, unit: TimeUnit, row: usize) -> i64 {
    match unit {
        TimeUnit::Second => column.as_primitive::<TimestampSecondType>().value(row),
        TimeUnit::Millisecond => column
            .as_primitive::<TimestampMillisecondType>()
            .value(row)
            .div_euclid(1_000),
        TimeUnit::Microsecond => column
            .as_primitive::<TimestampMicrosecondType>()
            .value(row)
            .div_euclid(1_000_000),
        TimeUnit::Nanosecond => column
            .as_primitive::<TimestampNanosecondType>()
            .value(row)
            .div_euclid(1_000_000_000),
    }
}

/// A value as a number, when it is one (the Feast JSON's `"NaN"` and infinities included).
pub fn as_number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// The symmetric absolute percentage error of a pair, between 0 (equal) and 2 (opposite
/// signs, or one of them 0): `|a - b| / ((|a| + |b|) / 2)`; `None` for a pair that is not
/// finite.
pub fn symmetric_error(a: f64, b: f64) -> Option<f64> {
    if !a.is_finite() || !b.is_finite() {
        return None;
    }
    let scale = (a.abs() + b.abs()) / 2.0;
    if scale == 0.0 {
        return Some(0.0);
    }
    Some(((a - b).abs() / scale).min(2.0))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{
        BinaryArray, Float32Array, Float64Array, Int64Array, ListArray, StringArray,
        TimestampMicrosecondArray,
    };
    use arrow::datatypes::Int64Type as I64;
    use serde_json::json;

    use super::*;

    #[test]
    fn table_values_read_as_the_online_store_reads_them() {
        let floats: ArrayRef = Arc::new(Float32Array::from(vec![Some(0.1f32), None]));
        assert_eq!(table_value(&floats, 0), json!(f64::from(0.1f32)));
        assert_eq!(table_value(&floats, 1), Value::Null);
        let nan: ArrayRef = Arc::new(Float64Array::from(vec![f64::NAN]));
        assert_eq!(table_value(&nan, 0), json!("NaN"));
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![-3]));
        assert_eq!(table_value(&ints, 0), json!(-3));
        let text: ArrayRef = Arc::new(StringArray::from(vec!["x"]));
        assert_eq!(table_value(&text, 0), json!("x"));
        let bytes: ArrayRef = Arc::new(BinaryArray::from(vec![&[1u8, 2][..]]));
        assert_eq!(table_value(&bytes, 0), json!("AQI="));
        let times: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![1_700_000_000_999_999]).with_timezone("UTC"),
        );
        assert_eq!(table_value(&times, 0), json!(1_700_000_000));
        let lists: ArrayRef = Arc::new(ListArray::from_iter_primitive::<I64, _, _>(vec![Some(
            vec![Some(1), Some(2)],
        )]));
        assert_eq!(table_value(&lists, 0), json!([1, 2]));
    }

    #[test]
    fn symmetric_error_is_bounded_and_zero_for_equal_values() {
        assert_eq!(symmetric_error(2.0, 2.0), Some(0.0));
        assert_eq!(symmetric_error(0.0, 0.0), Some(0.0));
        assert_eq!(symmetric_error(1.0, 3.0), Some(1.0));
        assert_eq!(symmetric_error(-1.0, 1.0), Some(2.0));
        assert_eq!(symmetric_error(f64::NAN, 1.0), None);
        assert_eq!(as_number(&json!("NaN")).map(f64::is_nan), Some(true));
        assert_eq!(as_number(&json!(1.5)), Some(1.5));
        assert_eq!(as_number(&json!("x")), None);
    }
}
