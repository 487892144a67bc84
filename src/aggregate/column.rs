//! An aggregated column of decoded rows as the functions see it: each row's value as a
//! [`Datum`], or `None` when null.

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array, StringArray};
use arrow::compute::cast;
use arrow::datatypes::DataType;
use arrow::error::ArrowError;

use super::function::Datum;

/// What an aggregation can do with a column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Signed integers and unsigned ones that fit an `i64`.
    Int,
    /// Floating point.
    Float,
    /// Strings.
    Text,
    /// Booleans.
    Bool,
    /// Anything else: no aggregation takes it.
    Other,
}

impl Kind {
    /// The kind of a column of `data_type`.
    pub fn of(data_type: &DataType) -> Kind {
        match data_type {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32 => Kind::Int,
            DataType::Float16 | DataType::Float32 | DataType::Float64 => Kind::Float,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Kind::Text,
            DataType::Boolean => Kind::Bool,
            _ => Kind::Other,
        }
    }
}

/// An aggregated column cast to the type its kind is read as; each row's value as a
/// [`Datum`] on demand, so a batch's values are not copied before they are needed.
#[derive(Debug, Clone)]
pub enum ColumnValues {
    /// Integers, as `i64`.
    Int(Int64Array),
    /// Floating point, as `f64`.
    Float(Float64Array),
    /// Strings.
    Text(StringArray),
    /// Booleans.
    Bool(BooleanArray),
}

impl ColumnValues {
    /// `column` read as its kind; an error for a type no aggregation takes.
    pub fn of(column: &ArrayRef) -> Result<ColumnValues, ArrowError> {
        Ok(match Kind::of(column.data_type()) {
            Kind::Int => ColumnValues::Int(cast(column, &DataType::Int64)?.as_primitive().clone()),
            Kind::Float => {
                ColumnValues::Float(cast(column, &DataType::Float64)?.as_primitive().clone())
            }
            Kind::Text => ColumnValues::Text(cast(column, &DataType::Utf8)?.as_string().clone()),
            Kind::Bool => ColumnValues::Bool(column.as_boolean().clone()),
            Kind::Other => {
                return Err(ArrowError::InvalidArgumentError(format!(
                    "no aggregation takes a column of type {}",
                    column.data_type()
                )))
            }
        })
    }

    /// The values as an Arrow array.
    pub fn array(&self) -> &dyn Array {
        match self {
            ColumnValues::Int(v) => v,
            ColumnValues::Float(v) => v,
            ColumnValues::Text(v) => v,
            ColumnValues::Bool(v) => v,
        }
    }

    /// Row `row`'s value (`None` for a null or a row past the end).
    pub fn datum(&self, row: usize) -> Option<Datum> {
        fn present<A: Array>(values: &A, row: usize) -> bool {
            row < values.len() && values.is_valid(row)
        }
        match self {
            ColumnValues::Int(v) => present(v, row).then(|| Datum::Int(v.value(row))),
            ColumnValues::Float(v) => present(v, row).then(|| Datum::Float(v.value(row))),
            ColumnValues::Text(v) => present(v, row).then(|| Datum::Text(v.value(row).to_string())),
            ColumnValues::Bool(v) => present(v, row).then(|| Datum::Bool(v.value(row))),
        }
    }
}

/// Every row's value of `column` (`None` for a null), as the functions take them.
pub fn datums(column: &ArrayRef) -> Result<Vec<Option<Datum>>, ArrowError> {
    let values = ColumnValues::of(column)?;
    Ok((0..column.len()).map(|row| values.datum(row)).collect())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{BooleanArray, Float32Array, StringArray, UInt32Array};

    use super::*;

    #[test]
    fn every_kind_reads_with_its_nulls() {
        let ints: ArrayRef = Arc::new(UInt32Array::from(vec![Some(7), None]));
        assert_eq!(datums(&ints).expect("ints"), [Some(Datum::Int(7)), None]);
        let floats: ArrayRef = Arc::new(Float32Array::from(vec![None, Some(0.5)]));
        assert_eq!(
            datums(&floats).expect("floats"),
            [None, Some(Datum::Float(0.5))]
        );
        let text: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None]));
        assert_eq!(
            datums(&text).expect("text"),
            [Some(Datum::Text("a".into())), None]
        );
        let bools: ArrayRef = Arc::new(BooleanArray::from(vec![Some(true)]));
        assert_eq!(datums(&bools).expect("bools"), [Some(Datum::Bool(true))]);
        let bytes: ArrayRef = Arc::new(arrow::array::BinaryArray::from(vec![&b"x"[..]]));
        assert!(datums(&bytes).is_err());
    }
}
