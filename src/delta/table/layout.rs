//! From decoded rows to the table's columns: Delta types, the event time as a UTC timestamp,
//! the Pulsar publish time, and the `dt`/`hr` partition columns.
//!
//! Delta has fewer types than Arrow and Avro: enums become strings, `fixed` and `uuid` bytes
//! become binary, `time-millis`/`time-micros` become the int/long count of the day, every
//! timestamp with a zone becomes Delta's `timestamp` (microseconds, UTC). Every column of the
//! table is nullable, so that a field added to the pipeline schema later can be added to the
//! table without rewriting older files (they read as null).

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Date32Array, Int32Array, RecordBatch, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Int64Type, SchemaRef, TimeUnit};
use arrow::error::ArrowError;

use crate::delta::{Granularity, PartitionTime};
use crate::record::event_time_millis;

/// The column holding each row's Pulsar publish time (Feast's `created_timestamp_column`).
pub const PUBLISH_TIME_COLUMN: &str = "pulsar_publish_time";
/// The day partition column (`date`).
pub const DATE_COLUMN: &str = "dt";
/// The hour partition column (`integer`, 0–23).
pub const HOUR_COLUMN: &str = "hr";
/// Column names the connector adds to every table.
pub const RESERVED_COLUMNS: &[&str] = &[PUBLISH_TIME_COLUMN, DATE_COLUMN, HOUR_COLUMN];

pub(crate) const UTC: &str = "UTC";

/// A pipeline schema the table cannot take.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// A field's type has no Delta equivalent.
    #[error("field `{field}` ({data_type}) has no Delta Lake type: {why}")]
    Unsupported {
        /// Field path.
        field: String,
        /// Its Arrow type.
        data_type: DataType,
        /// What to do instead.
        why: &'static str,
    },
    /// A field uses a name the connector adds itself.
    #[error("field `{0}` clashes with a column the offline table adds (`pulsar_publish_time`, `dt`, `hr`); rename the field")]
    Reserved(String),
    /// The existing table cannot take the pipeline schema.
    #[error("field `{field}`: {why}")]
    Incompatible {
        /// Field path.
        field: String,
        /// Why.
        why: String,
    },
    /// Arrow or the Delta kernel refused a schema.
    #[error("{0}")]
    Schema(String),
}

/// How rows of one pipeline become rows of its table.
#[derive(Debug, Clone)]
pub struct TableLayout {
    table: SchemaRef,
    event_time: String,
    partition_by: PartitionTime,
    granularity: Granularity,
}

impl TableLayout {
    /// The layout for a table whose (Arrow) schema is `table`; see
    /// [`super::schema::desired_schema`].
    pub fn new(
        table: SchemaRef,
        event_time: &str,
        partition_by: PartitionTime,
        granularity: Granularity,
    ) -> Self {
        Self {
            table,
            event_time: event_time.to_string(),
            partition_by,
            granularity,
        }
    }

    /// The table's columns, partition columns last.
    pub fn table_schema(&self) -> &SchemaRef {
        &self.table
    }

    /// Turns decoded rows into table rows: casts to the table's types, converts the event
    /// time, adds the publish times (`publish_ms[row]`; null when not known) and the partition
    /// columns. Table columns the rows lack (a field the pipeline schema dropped) are null.
    pub fn to_table_rows(
        &self,
        rows: &RecordBatch,
        publish_ms: Option<&[u64]>,
        now_ms: i64,
    ) -> Result<RecordBatch, ArrowError> {
        let event_time = rows.column_by_name(&self.event_time).ok_or_else(|| {
            ArrowError::SchemaError(format!("rows lack the event time `{}`", self.event_time))
        })?;
        let partition_ms: Vec<i64> = (0..rows.num_rows())
            .map(|row| match self.partition_by {
                PartitionTime::EventTime => event_time_millis(event_time, row).unwrap_or(now_ms),
                PartitionTime::IngestTime => now_ms,
            })
            .collect();
        let mut columns = Vec::with_capacity(self.table.fields().len());
        for field in self.table.fields() {
            let column: ArrayRef = match field.name().as_str() {
                name if name == self.event_time => timestamp_micros(event_time)?,
                PUBLISH_TIME_COLUMN => match publish_ms {
                    Some(publish_ms) => Arc::new(
                        TimestampMicrosecondArray::from_iter_values(
                            publish_ms
                                .iter()
                                .map(|ms| i64::try_from(*ms).unwrap_or(i64::MAX / 1000) * 1000),
                        )
                        .with_timezone(UTC),
                    ),
                    None => arrow::array::new_null_array(field.data_type(), rows.num_rows()),
                },
                DATE_COLUMN => Arc::new(Date32Array::from_iter_values(
                    partition_ms.iter().map(|ms| day_of(*ms)),
                )),
                HOUR_COLUMN if self.granularity == Granularity::Hour => Arc::new(
                    Int32Array::from_iter_values(partition_ms.iter().map(|ms| hour_of(*ms))),
                ),
                name => match rows.column_by_name(name) {
                    Some(column) if column.data_type() == field.data_type() => column.clone(),
                    Some(column) => arrow::compute::cast(column, field.data_type())?,
                    None => arrow::array::new_null_array(field.data_type(), rows.num_rows()),
                },
            };
            columns.push(column);
        }
        if let Some(publish_ms) = publish_ms.filter(|p| p.len() != rows.num_rows()) {
            return Err(ArrowError::InvalidArgumentError(format!(
                "{} publish times for {} rows",
                publish_ms.len(),
                rows.num_rows()
            )));
        }
        RecordBatch::try_new(self.table.clone(), columns)
    }
}

/// Days since the epoch of `ms`.
pub fn day_of(ms: i64) -> i32 {
    i32::try_from(ms.div_euclid(86_400_000)).unwrap_or(i32::MAX)
}

/// Hour of the day (UTC) of `ms`.
pub fn hour_of(ms: i64) -> i32 {
    i32::try_from(ms.div_euclid(3_600_000).rem_euclid(24)).unwrap_or(0)
}

fn timestamp_micros(column: &ArrayRef) -> Result<ArrayRef, ArrowError> {
    match column.data_type() {
        DataType::Int64 => {
            let millis = column.as_primitive::<Int64Type>();
            let micros: TimestampMicrosecondArray =
                arrow::compute::kernels::arity::unary(millis, |ms| ms.saturating_mul(1000));
            Ok(Arc::new(micros.with_timezone(UTC)))
        }
        _ => arrow::compute::cast(
            column,
            &DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
        ),
    }
}

/// The partition columns for `granularity`.
pub fn partition_columns(granularity: Granularity) -> Vec<String> {
    match granularity {
        Granularity::Day => vec![DATE_COLUMN.into()],
        Granularity::Hour => vec![DATE_COLUMN.into(), HOUR_COLUMN.into()],
    }
}

#[cfg(test)]
mod tests {
    use super::super::schema::desired_schema;
    use super::super::schema::tests::rows_schema;
    use arrow::array::{DictionaryArray, FixedSizeBinaryArray, Int64Array, StringArray};
    use arrow::datatypes::Int32Type;

    use super::*;

    #[test]
    fn long_millis_become_utc_micros_and_partitions_follow_the_event_time() {
        let schema = Arc::new(rows_schema());
        let table = desired_schema(&schema, "event_time", Granularity::Hour).unwrap();
        let names: Vec<&str> = table.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(
            names,
            [
                "user_id",
                "event_time",
                "colour",
                "uuid",
                PUBLISH_TIME_COLUMN,
                "dt",
                "hr"
            ]
        );
        assert!(table.fields().iter().all(|f| f.is_nullable()));
        let colours: DictionaryArray<Int32Type> = vec!["RED", "BLUE"].into_iter().collect();
        let rows = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["a", "b"])),
                // 2025-12-02T10:59:59.999Z and 11:00:00.000Z
                Arc::new(Int64Array::from(vec![1_764_673_199_999, 1_764_673_200_000])),
                Arc::new(colours),
                Arc::new(
                    FixedSizeBinaryArray::try_from_iter(vec![b"ab", b"cd"].into_iter()).unwrap(),
                ),
            ],
        )
        .unwrap();
        let layout = TableLayout::new(
            table.clone(),
            "event_time",
            PartitionTime::EventTime,
            Granularity::Hour,
        );
        let out = layout.to_table_rows(&rows, Some(&[5, 6]), 0).unwrap();
        assert_eq!(out.schema(), table);
        let micros = out
            .column(1)
            .as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
        assert_eq!(micros.value(0), 1_764_673_199_999_000);
        assert_eq!(out.column(2).as_string::<i32>().value(1), "BLUE");
        let published = out
            .column(4)
            .as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
        assert_eq!(published.value(1), 6_000);
        let hours = out.column(6).as_primitive::<Int32Type>();
        assert_eq!((hours.value(0), hours.value(1)), (10, 11));
        let days = out.column(5).as_primitive::<arrow::datatypes::Date32Type>();
        assert_eq!(days.value(0), 20_424);
    }
}
