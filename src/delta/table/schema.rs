//! The table's schema: Delta types for decoded fields, and how an existing table takes a
//! changed pipeline schema (added fields become nullable columns; type changes are refused).

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use arrow::error::ArrowError;
use deltalake::kernel::engine::arrow_conversion::{TryIntoArrow, TryIntoKernel};
use deltalake::kernel::StructType;

use super::layout::{
    LayoutError, DATE_COLUMN, HOUR_COLUMN, PUBLISH_TIME_COLUMN, RESERVED_COLUMNS, UTC,
};
use crate::delta::Granularity;

/// The table schema a pipeline's decoded rows call for (in Delta's canonical Arrow form).
pub fn desired_schema(
    rows: &Schema,
    event_time: &str,
    granularity: Granularity,
) -> Result<SchemaRef, LayoutError> {
    let mut fields = Vec::with_capacity(rows.fields().len() + 3);
    for field in rows.fields() {
        if RESERVED_COLUMNS.contains(&field.name().as_str()) {
            return Err(LayoutError::Reserved(field.name().clone()));
        }
        let data_type = if field.name() == event_time {
            DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into()))
        } else {
            delta_type(field.name(), field.data_type())?
        };
        fields.push(Field::new(field.name(), data_type, true));
    }
    let timestamp = DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into()));
    fields.push(Field::new(PUBLISH_TIME_COLUMN, timestamp, true));
    fields.push(Field::new(DATE_COLUMN, DataType::Date32, true));
    if granularity == Granularity::Hour {
        fields.push(Field::new(HOUR_COLUMN, DataType::Int32, true));
    }
    canonical(&Schema::new(fields))
}

/// `schema` as Delta stores it, converted back to Arrow: list items, map entries and
/// timestamps get the names and zones every Delta reader uses.
pub fn canonical(schema: &Schema) -> Result<SchemaRef, LayoutError> {
    let kernel = kernel_schema(schema)?;
    let arrow: Schema = (&kernel)
        .try_into_arrow()
        .map_err(|e: ArrowError| LayoutError::Schema(e.to_string()))?;
    Ok(Arc::new(arrow))
}

/// The Delta (kernel) schema of an Arrow schema.
pub fn kernel_schema(schema: &Schema) -> Result<StructType, LayoutError> {
    schema
        .try_into_kernel()
        .map_err(|e: ArrowError| LayoutError::Schema(e.to_string()))
}

/// The type the table gives a decoded field `name` of type `data_type` (as every pipeline's
/// table types its columns), for other tables of the same values: the feature log's.
pub fn column_type(name: &str, data_type: &DataType) -> Result<DataType, LayoutError> {
    delta_type(name, data_type)
}

/// The Delta-compatible Arrow type of a decoded field (nested fields made nullable).
fn delta_type(path: &str, data_type: &DataType) -> Result<DataType, LayoutError> {
    let unsupported = |why| LayoutError::Unsupported {
        field: path.to_string(),
        data_type: data_type.clone(),
        why,
    };
    Ok(match data_type {
        DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::Float32
        | DataType::Float64
        | DataType::Utf8
        | DataType::Binary
        | DataType::Date32 => data_type.clone(),
        DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::LargeBinary | DataType::BinaryView | DataType::FixedSizeBinary(_) => {
            DataType::Binary
        }
        DataType::Decimal128(precision, scale) if *precision <= 38 && *scale >= 0 => {
            data_type.clone()
        }
        DataType::Timestamp(_, Some(_)) => {
            DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into()))
        }
        DataType::Timestamp(_, None) => {
            return Err(unsupported(
                "a local timestamp (no zone) would need Delta's timestampNtz table feature; use timestamp-millis or timestamp-micros",
            ))
        }
        DataType::Time32(_) => DataType::Int32,
        DataType::Time64(_) => DataType::Int64,
        DataType::Dictionary(_, value) if value.as_ref() == &DataType::Utf8 => DataType::Utf8,
        DataType::List(item) | DataType::LargeList(item) => DataType::List(Arc::new(
            Field::new(
                "element",
                delta_type(&format!("{path}[]"), item.data_type())?,
                true,
            ),
        )),
        DataType::Struct(fields) => DataType::Struct(
            fields
                .iter()
                .map(|f| {
                    Ok(Field::new(
                        f.name(),
                        delta_type(&format!("{path}.{}", f.name()), f.data_type())?,
                        true,
                    ))
                })
                .collect::<Result<Fields, LayoutError>>()?,
        ),
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return Err(unsupported("a map without key/value entries"));
            };
            let (Some(key), Some(value)) = (kv.first(), kv.get(1)) else {
                return Err(unsupported("a map without key/value entries"));
            };
            let key_type = delta_type(&format!("{path}.key"), key.data_type())?;
            let value_type = delta_type(&format!("{path}.value"), value.data_type())?;
            DataType::Map(
                Arc::new(Field::new(
                    "key_value",
                    DataType::Struct(Fields::from(vec![
                        Field::new("key", key_type, false),
                        Field::new("value", value_type, true),
                    ])),
                    false,
                )),
                false,
            )
        }
        _ => {
            return Err(unsupported(
                "Delta Lake has no such column type; use a long, double, string, bytes, timestamp or record field",
            ))
        }
    })
}

/// The schema an existing table must move to for `desired` (fields it lacks appended, nested
/// struct fields too), or why it cannot. `None` when the table already takes `desired`.
pub fn evolve(existing: &Schema, desired: &Schema) -> Result<Option<SchemaRef>, LayoutError> {
    let merged = merge_fields("", existing.fields(), desired.fields())?;
    if merged == *existing.fields() {
        return Ok(None);
    }
    canonical(&Schema::new(merged)).map(Some)
}

fn merge_fields(prefix: &str, existing: &Fields, desired: &Fields) -> Result<Fields, LayoutError> {
    let mut merged: Vec<Field> = existing.iter().map(|f| f.as_ref().clone()).collect();
    for wanted in desired {
        let path = format!("{prefix}{}", wanted.name());
        match existing.find(wanted.name()) {
            None => merged.push(wanted.as_ref().clone().with_nullable(true)),
            Some((index, current)) => {
                let data_type = merge_type(&path, current.data_type(), wanted.data_type())?;
                merged[index] = current.as_ref().clone().with_data_type(data_type);
            }
        }
    }
    Ok(Fields::from(merged))
}

fn merge_type(path: &str, current: &DataType, wanted: &DataType) -> Result<DataType, LayoutError> {
    match (current, wanted) {
        (DataType::Struct(have), DataType::Struct(want)) => Ok(DataType::Struct(merge_fields(
            &format!("{path}."),
            have,
            want,
        )?)),
        (DataType::List(have), DataType::List(want)) => {
            let item = merge_type(&format!("{path}[]"), have.data_type(), want.data_type())?;
            Ok(DataType::List(Arc::new(
                have.as_ref().clone().with_data_type(item),
            )))
        }
        (DataType::Map(have, sorted), DataType::Map(want, _)) => {
            let entries = merge_type(path, have.data_type(), want.data_type())?;
            Ok(DataType::Map(
                Arc::new(have.as_ref().clone().with_data_type(entries)),
                *sorted,
            ))
        }
        (have, want) if have == want => Ok(have.clone()),
        (have, want) => Err(LayoutError::Incompatible {
            field: path.to_string(),
            why: format!(
                "the table stores it as {have} but the pipeline schema gives {want}; a Delta table cannot change a column's type (write to a new offline url, or keep the type)"
            ),
        }),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Decoded rows of a test pipeline: a key, a long event time and two types Delta lacks.
    pub(in crate::delta) fn rows_schema() -> Schema {
        Schema::new(vec![
            Field::new("user_id", DataType::Utf8, false),
            Field::new("event_time", DataType::Int64, false),
            Field::new(
                "colour",
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                false,
            ),
            Field::new("uuid", DataType::FixedSizeBinary(2), false),
        ])
    }

    #[test]
    fn added_fields_evolve_the_table_and_type_changes_are_refused() {
        let base = desired_schema(&rows_schema(), "event_time", Granularity::Day).unwrap();
        let mut wider = rows_schema().fields().iter().cloned().collect::<Vec<_>>();
        wider.push(Arc::new(Field::new("score", DataType::Float64, true)));
        let wider = desired_schema(&Schema::new(wider), "event_time", Granularity::Day).unwrap();
        assert_eq!(evolve(&base, &base).unwrap(), None);
        let evolved = evolve(&base, &wider).unwrap().expect("a new column");
        assert_eq!(evolved.fields().last().unwrap().name(), "score");
        // Dropping a field keeps the table's column.
        assert_eq!(evolve(&wider, &base).unwrap(), None);
        let mut changed = rows_schema().fields().iter().cloned().collect::<Vec<_>>();
        changed[3] = Arc::new(Field::new("uuid", DataType::Int64, false));
        let changed =
            desired_schema(&Schema::new(changed), "event_time", Granularity::Day).unwrap();
        let refused = evolve(&base, &changed).unwrap_err().to_string();
        assert!(
            refused.starts_with("field `uuid`: the table stores it as Binary"),
            "{refused}"
        );
    }

    #[test]
    fn reserved_names_and_local_timestamps_are_refused() {
        let reserved = Schema::new(vec![Field::new("dt", DataType::Utf8, false)]);
        assert!(matches!(
            desired_schema(&reserved, "t", Granularity::Hour),
            Err(LayoutError::Reserved(_))
        ));
        let local = Schema::new(vec![Field::new(
            "seen",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        )]);
        let error = desired_schema(&local, "t", Granularity::Hour).unwrap_err();
        assert!(error.to_string().contains("field `seen`"), "{error}");
    }
}
