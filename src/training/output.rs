//! The training set as Arrow and Parquet: the spine's columns, then one column per
//! aggregated feature, typed as the online store serves it.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{
    ArrayBuilder, ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, ListBuilder, RecordBatch,
    StringBuilder,
};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::error::ArrowError;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::aggregate::{Datum, Output};

/// One column of a feature's values, one per row, of `data_type` (an aggregation's
/// output type).
pub fn feature_column(data_type: &DataType, values: &[&Output]) -> Result<ArrayRef, ArrowError> {
    let mut builder = builder_for(data_type)?;
    for value in values {
        append(builder.as_mut(), data_type, value)?;
    }
    Ok(builder.finish())
}

fn builder_for(data_type: &DataType) -> Result<Box<dyn ArrayBuilder>, ArrowError> {
    Ok(match data_type {
        DataType::Int64 => Box::new(Int64Builder::new()),
        DataType::Float64 => Box::new(Float64Builder::new()),
        DataType::List(item) => match item.data_type() {
            DataType::Int64 => Box::new(ListBuilder::new(Int64Builder::new())),
            DataType::Float64 => Box::new(ListBuilder::new(Float64Builder::new())),
            DataType::Utf8 => Box::new(ListBuilder::new(StringBuilder::new())),
            DataType::Boolean => Box::new(ListBuilder::new(BooleanBuilder::new())),
            other => return Err(unsupported(other)),
        },
        other => return Err(unsupported(other)),
    })
}

fn unsupported(data_type: &DataType) -> ArrowError {
    ArrowError::NotYetImplemented(format!("a feature column of type {data_type}"))
}

fn mismatch(data_type: &DataType, value: &Output) -> ArrowError {
    ArrowError::InvalidArgumentError(format!("value {value:?} in a column of type {data_type}"))
}

fn append(
    builder: &mut dyn ArrayBuilder,
    data_type: &DataType,
    value: &Output,
) -> Result<(), ArrowError> {
    let any = builder.as_any_mut();
    match (value, data_type) {
        (Output::Int(i), DataType::Int64) => downcast::<Int64Builder>(any)?.append_value(*i),
        (Output::Float(f), DataType::Float64) => downcast::<Float64Builder>(any)?.append_value(*f),
        (Output::Int(i), DataType::Float64) => {
            downcast::<Float64Builder>(any)?.append_value(*i as f64)
        }
        (Output::Null, DataType::Int64) => downcast::<Int64Builder>(any)?.append_null(),
        (Output::Null, DataType::Float64) => downcast::<Float64Builder>(any)?.append_null(),
        (Output::List(values), DataType::List(item)) => match item.data_type() {
            DataType::Int64 => {
                let list = downcast::<ListBuilder<Int64Builder>>(any)?;
                for d in values {
                    match d {
                        Datum::Int(i) => list.values().append_value(*i),
                        _ => list.values().append_null(),
                    }
                }
                list.append(true);
            }
            DataType::Float64 => {
                let list = downcast::<ListBuilder<Float64Builder>>(any)?;
                for d in values {
                    match d {
                        Datum::Float(f) => list.values().append_value(*f),
                        _ => list.values().append_null(),
                    }
                }
                list.append(true);
            }
            DataType::Utf8 => {
                let list = downcast::<ListBuilder<StringBuilder>>(any)?;
                for d in values {
                    match d {
                        Datum::Text(s) => list.values().append_value(s),
                        _ => list.values().append_null(),
                    }
                }
                list.append(true);
            }
            DataType::Boolean => {
                let list = downcast::<ListBuilder<BooleanBuilder>>(any)?;
                for d in values {
                    match d {
                        Datum::Bool(b) => list.values().append_value(*b),
                        _ => list.values().append_null(),
                    }
                }
                list.append(true);
            }
            other => return Err(unsupported(other)),
        },
        _ => return Err(mismatch(data_type, value)),
    }
    Ok(())
}

fn downcast<T: 'static>(any: &mut dyn std::any::Any) -> Result<&mut T, ArrowError> {
    any.downcast_mut::<T>().ok_or_else(|| {
        ArrowError::InvalidArgumentError("feature column builder of another type".into())
    })
}

/// `spine` with the feature columns `(name, column)` after its own.
pub fn with_features(
    spine: &RecordBatch,
    features: Vec<(String, ArrayRef)>,
) -> Result<RecordBatch, ArrowError> {
    let mut fields: Vec<Field> = spine
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    let mut columns: Vec<ArrayRef> = spine.columns().to_vec();
    for (name, column) in features {
        fields.push(Field::new(name, column.data_type().clone(), true));
        columns.push(column);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}

/// Writes `rows` to the Parquet file `path` (zstd).
pub fn write_parquet(path: &Path, rows: &RecordBatch) -> Result<(), parquet::errors::ParquetError> {
    let properties = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3)?))
        .build();
    let file = File::create(path)?;
    let mut writer = ArrowWriter::try_new(file, rows.schema(), Some(properties))?;
    writer.write(rows)?;
    writer.close()?;
    Ok(())
}
