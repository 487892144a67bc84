//! Latest-wins inside one batch: per entity, the row a layout writes.

use arrow::array::{ArrayRef, RecordBatch};
use arrow::error::ArrowError;
use rustc_hash::FxHashMap;

use super::ties::RowTies;
use crate::record::{event_time_millis, RowLayout};

/// A column of `rows` by name.
pub fn column<'a>(rows: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef, ArrowError> {
    rows.column_by_name(name)
        .ok_or_else(|| ArrowError::SchemaError(format!("row batch lacks `{name}`")))
}

/// For each entity (by `key_of`), the row with the greatest event time; ties go to the row
/// with the greater or equal tie value when `ties` are given (as the latest-wins script
/// breaks them), else to the later row. Rows without a key or event time are skipped (the
/// decoder rejects them already).
pub fn newest_per_entity(
    rows: &RecordBatch,
    layout: &RowLayout,
    ties: Option<&RowTies<'_>>,
    mut key_of: impl FnMut(usize) -> Option<Vec<u8>>,
) -> Result<Vec<(Vec<u8>, i64, usize)>, ArrowError> {
    let time_column = column(rows, &layout.event_time)?;
    // A fast hash: this map sees every row of every batch (SipHash was 2-3 % of the
    // connector's CPU); a batch holds at most `max_batch_messages` keys.
    let mut newest: FxHashMap<Vec<u8>, (i64, usize)> =
        FxHashMap::with_capacity_and_hasher(rows.num_rows(), Default::default());
    for row in 0..rows.num_rows() {
        let (Some(key), Some(ts)) = (key_of(row), event_time_millis(time_column, row)) else {
            continue;
        };
        match newest.get_mut(&key) {
            Some(current) if current.0 > ts => {}
            Some(current)
                if current.0 == ts && ties.is_some_and(|t| t.row(current.1) > t.row(row)) => {}
            Some(current) => *current = (ts, row),
            None => {
                newest.insert(key, (ts, row));
            }
        }
    }
    let mut out: Vec<(Vec<u8>, i64, usize)> = newest
        .into_iter()
        .map(|(k, (ts, row))| (k, ts, row))
        .collect();
    // Keys are unique here, so an unstable sort is as deterministic and cheaper.
    out.sort_unstable();
    Ok(out)
}
