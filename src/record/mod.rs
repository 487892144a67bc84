//! Decoded rows as they travel to the sinks: an Arrow batch plus the messages behind it.

mod key_text;
mod sample;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use arrow::datatypes::{
    DataType, Int64Type, TimeUnit, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType,
};

use crate::source::MessagePosition;

pub use key_text::KeyText;
pub use sample::{entity_hash, KeyHasher, SampleRate};

/// One processing batch handed to a sink.
#[derive(Debug, Clone)]
pub struct RowBatch {
    /// Rows of the messages that decoded: entity keys, event time, then features.
    pub rows: RecordBatch,
    /// Every message of the batch in receive order, including those that went to the
    /// dead-letter topic: a sink reports them durable together with its rows.
    pub positions: Vec<MessagePosition>,
    /// For each row, the index of its message in `positions`.
    pub row_positions: Vec<usize>,
    /// Broker publish time (epoch ms) of each message in `positions`.
    pub publish_times_ms: Vec<u64>,
}

impl RowBatch {
    /// This batch followed by `rest`, as one batch (their rows must share a schema).
    pub fn append(self, rest: Vec<RowBatch>) -> Result<RowBatch, arrow::error::ArrowError> {
        let schema = self.rows.schema();
        let rows = arrow::compute::concat_batches(
            &schema,
            std::iter::once(&self.rows).chain(rest.iter().map(|part| &part.rows)),
        )?;
        let mut merged = RowBatch { rows, ..self };
        for part in rest {
            let first = merged.positions.len();
            merged
                .row_positions
                .extend(part.row_positions.iter().map(|index| first + index));
            merged.positions.extend(part.positions);
            merged.publish_times_ms.extend(part.publish_times_ms);
        }
        Ok(merged)
    }
}

/// Where the entity key, event time and feature columns are in a row batch.
#[derive(Debug, Clone)]
pub struct RowLayout {
    /// Entity key column names, in key order.
    pub keys: Vec<String>,
    /// Event-time column name.
    pub event_time: String,
    /// Feature column names.
    pub features: Vec<String>,
}

impl RowLayout {
    /// All columns of the row batch, in order: keys, event time, features.
    pub fn columns(&self) -> Vec<String> {
        let mut columns = self.keys.clone();
        columns.push(self.event_time.clone());
        columns.extend(self.features.iter().cloned());
        columns
    }
}

/// Drops the rows whose message (`row_messages[row]`, an index into the batch's messages)
/// `keep` refuses; the messages themselves stay. Returns how many rows went.
pub fn drop_rows(
    rows: &mut RecordBatch,
    row_messages: &mut Vec<usize>,
    keep: impl Fn(usize) -> bool,
) -> Result<usize, arrow::error::ArrowError> {
    let row_keep: Vec<bool> = row_messages.iter().map(|&m| keep(m)).collect();
    let dropped = row_keep.iter().filter(|k| !**k).count();
    if dropped > 0 {
        *rows = arrow::compute::filter_record_batch(rows, &BooleanArray::from(row_keep.clone()))?;
        let mut flags = row_keep.iter();
        row_messages.retain(|_| *flags.next().unwrap_or(&false));
    }
    Ok(dropped)
}

/// Event time of `row` in epoch milliseconds, from a `long` (millis) or timestamp column.
pub fn event_time_millis(column: &ArrayRef, row: usize) -> Option<i64> {
    if column.is_null(row) {
        return None;
    }
    Some(match column.data_type() {
        DataType::Int64 => column.as_primitive::<Int64Type>().value(row),
        DataType::Timestamp(TimeUnit::Second, _) => column
            .as_primitive::<TimestampSecondType>()
            .value(row)
            .saturating_mul(1000),
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            column.as_primitive::<TimestampMillisecondType>().value(row)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            column.as_primitive::<TimestampMicrosecondType>().value(row) / 1000
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            column.as_primitive::<TimestampNanosecondType>().value(row) / 1_000_000
        }
        _ => return None,
    })
}

/// Newest event time of `column` in epoch milliseconds (nulls skipped), one vectorised
/// pass over the batch; `None` when it holds no event time.
pub fn max_event_time_millis(column: &ArrayRef) -> Option<i64> {
    use arrow::compute::max;
    match column.data_type() {
        DataType::Int64 => max(column.as_primitive::<Int64Type>()),
        DataType::Timestamp(TimeUnit::Second, _) => {
            max(column.as_primitive::<TimestampSecondType>()).map(|s| s.saturating_mul(1000))
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            max(column.as_primitive::<TimestampMillisecondType>())
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            max(column.as_primitive::<TimestampMicrosecondType>()).map(|us| us / 1000)
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            max(column.as_primitive::<TimestampNanosecondType>()).map(|ns| ns / 1_000_000)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, TimestampMicrosecondArray};

    use super::*;

    #[test]
    fn event_time_from_long_and_timestamps() {
        let longs: ArrayRef = Arc::new(Int64Array::from(vec![Some(1_700_000_000_123), None]));
        assert_eq!(event_time_millis(&longs, 0), Some(1_700_000_000_123));
        assert_eq!(event_time_millis(&longs, 1), None);
        let micros: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![1_700_000_000_123_456]).with_timezone("+00:00"),
        );
        assert_eq!(event_time_millis(&micros, 0), Some(1_700_000_000_123));
    }

    #[test]
    fn newest_event_time_of_a_column_skips_nulls() {
        let longs: ArrayRef = Arc::new(Int64Array::from(vec![Some(5), None, Some(9), Some(7)]));
        assert_eq!(max_event_time_millis(&longs), Some(9));
        let micros: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![
            1_700_000_000_123_456,
            1_600_000_000_000_000,
        ]));
        assert_eq!(max_event_time_millis(&micros), Some(1_700_000_000_123));
        let nulls: ArrayRef = Arc::new(Int64Array::from(vec![None::<i64>]));
        assert_eq!(max_event_time_millis(&nulls), None);
        let text: ArrayRef = Arc::new(arrow::array::StringArray::from(vec!["1"]));
        assert_eq!(max_event_time_millis(&text), None);
    }
}
