//! Hive-style partitions (`dt=YYYY-MM-DD/hr=HH`) by event or ingest time, so pyarrow,
//! DuckDB, Spark and Polars discover them without being told.

use std::collections::BTreeMap;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::error::ArrowError;
use chrono::{TimeZone, Utc};
use serde::Deserialize;

use crate::record::event_time_millis;

/// Which time places a row in a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PartitionTime {
    /// The row's event time (what training jobs filter on).
    #[default]
    EventTime,
    /// When the file was written.
    IngestTime,
}

/// How fine the partitions are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    /// `dt=YYYY-MM-DD`.
    Day,
    /// `dt=YYYY-MM-DD/hr=HH`.
    #[default]
    Hour,
}

fn directory(ms: i64, granularity: Granularity) -> String {
    let time = Utc.timestamp_millis_opt(ms).single().unwrap_or_default();
    match granularity {
        Granularity::Day => time.format("dt=%Y-%m-%d").to_string(),
        Granularity::Hour => time.format("dt=%Y-%m-%d/hr=%H").to_string(),
    }
}

/// Splits `rows` into one batch per partition directory, in directory order.
pub fn split(
    rows: &RecordBatch,
    event_time: &str,
    by: PartitionTime,
    granularity: Granularity,
    now_ms: i64,
) -> Result<Vec<(String, RecordBatch)>, ArrowError> {
    if by == PartitionTime::IngestTime {
        return Ok(vec![(directory(now_ms, granularity), rows.clone())]);
    }
    let column = rows.column_by_name(event_time).ok_or_else(|| {
        ArrowError::SchemaError(format!("rows lack the event time `{event_time}`"))
    })?;
    // Group by the partition's number (hours or days since the epoch) and format each
    // directory once: formatting a date per row cost more than the rest of the split.
    let span = match granularity {
        Granularity::Day => 86_400_000,
        Granularity::Hour => 3_600_000,
    };
    let mut groups: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
    for row in 0..rows.num_rows() {
        let ms = event_time_millis(column, row).unwrap_or(now_ms);
        groups
            .entry(ms.div_euclid(span))
            .or_default()
            .push(u32::try_from(row).map_err(|e| ArrowError::ComputeError(e.to_string()))?);
    }
    let dir = |bucket: i64| directory(bucket.saturating_mul(span), granularity);
    if groups.len() == 1 {
        return Ok(groups
            .into_keys()
            .map(|bucket| (dir(bucket), rows.clone()))
            .collect());
    }
    groups
        .into_iter()
        .map(|(bucket, indices)| {
            Ok((
                dir(bucket),
                arrow::compute::take_record_batch(rows, &UInt32Array::from(indices))?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array};

    use super::*;

    #[test]
    fn rows_go_to_their_hour() {
        // 2025-12-02T10:59:59.999Z, 11:00:00.000Z, 10:30:00Z
        let times = vec![1_764_673_199_999_i64, 1_764_673_200_000, 1_764_671_400_000];
        let rows =
            RecordBatch::try_from_iter(vec![("t", Arc::new(Int64Array::from(times)) as ArrayRef)])
                .unwrap();
        let parts = split(&rows, "t", PartitionTime::EventTime, Granularity::Hour, 0).unwrap();
        let summary: Vec<(String, usize)> = parts
            .iter()
            .map(|(d, b)| (d.clone(), b.num_rows()))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("dt=2025-12-02/hr=10".into(), 2),
                ("dt=2025-12-02/hr=11".into(), 1)
            ]
        );
        let days = split(&rows, "t", PartitionTime::EventTime, Granularity::Day, 0).unwrap();
        assert_eq!(days.len(), 1);
        assert_eq!(days[0].0, "dt=2025-12-02");
    }
}
