//! The table's newest committed row per sampled entity: the active files of one snapshot,
//! each read with only the key, event-time and feature columns, files outside the wanted
//! time range skipped by their partition values, several files at once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use std::fmt::Write as _;

use arrow::array::{ArrayRef, BooleanArray, BooleanBuilder, RecordBatch};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use futures::StreamExt;
use object_store::ObjectStore;

use super::classify::{EntityKey, OfflineRow};
use super::sample::{Offered, SampleFilter, Sampler};
use super::values::table_value;
use super::{AuditError, TableRead};
use crate::delta::ops::partition_end_ms;
use crate::delta::read::{fold_file, partition_start_ms, RowsWanted};
use crate::delta::{ActiveFile, Table};
use crate::record::entity_hash;
use crate::record::KeyHasher;
use crate::record::{event_time_millis, RowLayout};

/// Files read at once.
const FILES_AT_ONCE: usize = 4;

/// Reads into `rows` the newest row of every entity `sampler` takes from `files` of
/// `table`, leaving out files whose partition ended before `since_ms`; counts the files
/// and rows in `read`.
pub async fn read_recent(
    table: &Table,
    files: Vec<ActiveFile>,
    layout: &RowLayout,
    sampler: &mut Sampler,
    since_ms: Option<i64>,
    rows: &mut HashMap<EntityKey, OfflineRow>,
    read: &mut TableRead,
) -> Result<(), AuditError> {
    let (recent, old): (Vec<ActiveFile>, Vec<ActiveFile>) = files.into_iter().partition(|file| {
        since_ms.is_none_or(|since| partition_end_ms(&file.partition).is_none_or(|end| end > since))
    });
    read.files_skipped += old.len();
    read.files_read += recent.len();
    read.rows_read += read_newest(table.store(), recent, layout, sampler, rows).await?;
    Ok(())
}

/// Reads `files` of `store`, folding the newest row of each entity `sampler` takes into
/// `rows` (evicted entities leave it); returns the rows read. Only the key columns are
/// decoded for rows whose entity is not taken.
pub async fn read_newest(
    store: &Arc<dyn ObjectStore>,
    files: Vec<ActiveFile>,
    layout: &RowLayout,
    sampler: &mut Sampler,
    rows: &mut HashMap<EntityKey, OfflineRow>,
) -> Result<u64, AuditError> {
    let layout = Arc::new(layout.clone());
    let filter = sampler.filter();
    let mut reads = futures::stream::iter(files)
        .map(|file| {
            let (layout, filter) = (layout.clone(), filter.clone());
            fold_file(
                store.clone(),
                file.path,
                layout.columns(),
                KeyFilter {
                    keys: layout.keys.clone(),
                    filter: filter.clone(),
                }
                .rows_wanted(),
                HashMap::new(),
                move |batch, rows| newest_in_batch(batch, &layout, &filter, rows),
            )
        })
        .buffer_unordered(FILES_AT_ONCE);
    let mut rows_read = 0;
    while let Some(read) = reads.next().await {
        let (file_rows, read) = read?;
        rows_read += read;
        for (key, (hash, row)) in file_rows {
            match sampler.offer(&key, hash) {
                Offered::Refused => continue,
                Offered::KeptEvicting(evicted) => {
                    rows.remove(&evicted);
                }
                Offered::Kept => {}
            }
            match rows.get_mut(&key) {
                Some(newest) => newest.merge(row),
                None => {
                    rows.insert(key, row);
                }
            }
        }
    }
    Ok(rows_read)
}

/// Which rows of a file are worth decoding whole: those whose entity the sample may take,
/// judged from the key columns alone.
pub(super) struct KeyFilter {
    /// The key columns.
    pub keys: Vec<String>,
    /// The sample's filter.
    pub filter: Arc<SampleFilter>,
}

impl KeyFilter {
    /// The rows a file read decodes whole; `None` when the sample takes every entity.
    fn rows_wanted(self) -> Option<RowsWanted> {
        if self.filter.admits_all() {
            return None;
        }
        Some(RowsWanted {
            columns: self.keys.clone(),
            keep: Box::new(move |batch| self.admitted(batch)),
        })
    }

    /// For each row of `batch` (holding the key columns), whether its entity may be taken.
    fn admitted(&self, batch: &RecordBatch) -> Result<BooleanArray, arrow::error::ArrowError> {
        let columns = self
            .keys
            .iter()
            .map(|name| required(batch, name))
            .collect::<Result<Vec<_>, _>>()?;
        let formatters = key_columns(batch, &self.keys)?;
        let mut text = String::new();
        let mut admitted = BooleanBuilder::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            let mut hasher = KeyHasher::new();
            for (column, formatter) in columns.iter().zip(&formatters) {
                hash_key_value(&mut hasher, column, formatter, row, &mut text);
            }
            let hash = hasher.finish();
            let keep = match self.filter.admits_hash(hash) {
                Some(keep) => keep,
                None => {
                    let key: EntityKey = formatters
                        .iter()
                        .map(|f| f.value(row).to_string())
                        .collect();
                    self.filter.admits(&key, hash)
                }
            };
            admitted.append_value(keep);
        }
        Ok(admitted.finish())
    }
}

/// Adds a key value's text to `hasher`: strings as they are, integers written into `text`
/// (reused), anything else through its formatter; the same text the key's string form has.
fn hash_key_value(
    hasher: &mut KeyHasher,
    column: &ArrayRef,
    formatter: &ArrayFormatter<'_>,
    row: usize,
    text: &mut String,
) {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{DataType, Int32Type, Int64Type};
    if column.is_null(row) {
        hasher.value(b"");
        return;
    }
    text.clear();
    match column.data_type() {
        DataType::Utf8 => return hasher.value(column.as_string::<i32>().value(row).as_bytes()),
        DataType::LargeUtf8 => {
            return hasher.value(column.as_string::<i64>().value(row).as_bytes())
        }
        DataType::Utf8View => return hasher.value(column.as_string_view().value(row).as_bytes()),
        DataType::Int64 => {
            let _ = write!(text, "{}", column.as_primitive::<Int64Type>().value(row));
        }
        DataType::Int32 => {
            let _ = write!(text, "{}", column.as_primitive::<Int32Type>().value(row));
        }
        _ => {
            let _ = write!(text, "{}", formatter.value(row));
        }
    }
    hasher.value(text.as_bytes());
}

/// Every row (event time, values) of `entities` with an event time up to `until_ms`, per
/// entity in event-time order; files of partitions that start after `until_ms` are not read.
pub async fn history_rows(
    table: &Table,
    layout: &RowLayout,
    entities: Arc<HashSet<EntityKey>>,
    until_ms: i64,
) -> Result<(HashMap<EntityKey, Vec<(i64, Vec<serde_json::Value>)>>, u64), AuditError> {
    let files: Vec<ActiveFile> = table
        .active_files()
        .await?
        .into_iter()
        .filter(|file| partition_start_ms(&file.partition).is_none_or(|start| start <= until_ms))
        .collect();
    let layout = Arc::new(layout.clone());
    let mut reads = futures::stream::iter(files)
        .map(|file| {
            let (layout, entities) = (layout.clone(), entities.clone());
            fold_file(
                table.store().clone(),
                file.path,
                layout.columns(),
                None,
                HashMap::new(),
                move |batch, rows: &mut HashMap<EntityKey, Vec<(i64, Vec<serde_json::Value>)>>| {
                    let (keys, time, features) = row_columns(batch, &layout)?;
                    for row in 0..batch.num_rows() {
                        let key: EntityKey =
                            keys.iter().map(|f| f.value(row).to_string()).collect();
                        if !entities.contains(&key) {
                            continue;
                        }
                        if let Some(at) = event_time_millis(time, row).filter(|at| *at <= until_ms)
                        {
                            rows.entry(key)
                                .or_default()
                                .push((at, feature_values(&features, row)));
                        }
                    }
                    Ok(())
                },
            )
        })
        .buffer_unordered(FILES_AT_ONCE);
    let mut history: HashMap<EntityKey, Vec<(i64, Vec<serde_json::Value>)>> = HashMap::new();
    let mut read_total = 0;
    while let Some(read) = reads.next().await {
        let (rows, read) = read?;
        read_total += read;
        for (key, mut events) in rows {
            history.entry(key).or_default().append(&mut events);
        }
    }
    for events in history.values_mut() {
        events.sort_by_key(|(at, _)| *at);
    }
    Ok((history, read_total))
}

/// Formatters of `batch`'s key columns: row `i`'s entity is their values as text.
pub(super) fn key_columns<'a>(
    batch: &'a RecordBatch,
    keys: &[String],
) -> Result<Vec<ArrayFormatter<'a>>, arrow::error::ArrowError> {
    let options = FormatOptions::default().with_null("");
    keys.iter()
        .map(|name| {
            let column = batch.column_by_name(name).ok_or_else(|| {
                arrow::error::ArrowError::SchemaError(format!(
                    "the table has no key column `{name}`"
                ))
            })?;
            ArrayFormatter::try_new(column.as_ref(), &options)
        })
        .collect()
}

/// The key formatters, the event-time column and the feature columns (`None` for one the
/// file lacks) of `batch`.
type RowColumns<'a> = (
    Vec<ArrayFormatter<'a>>,
    &'a ArrayRef,
    Vec<Option<&'a ArrayRef>>,
);

fn row_columns<'a>(
    batch: &'a RecordBatch,
    layout: &RowLayout,
) -> Result<RowColumns<'a>, arrow::error::ArrowError> {
    let features = layout
        .features
        .iter()
        .map(|name| batch.column_by_name(name))
        .collect();
    Ok((
        key_columns(batch, &layout.keys)?,
        required(batch, &layout.event_time)?,
        features,
    ))
}

/// A required column of `batch`.
pub(super) fn required<'a>(
    batch: &'a RecordBatch,
    name: &str,
) -> Result<&'a ArrayRef, arrow::error::ArrowError> {
    batch.column_by_name(name).ok_or_else(|| {
        arrow::error::ArrowError::SchemaError(format!("the table has no column `{name}`"))
    })
}

/// Row `row`'s values of `features` (null for a column the file lacks).
pub(super) fn feature_values(features: &[Option<&ArrayRef>], row: usize) -> Vec<serde_json::Value> {
    features
        .iter()
        .map(|column| column.map_or(serde_json::Value::Null, |c| table_value(c, row)))
        .collect()
}

/// Folds `batch`'s rows of admitted entities into `rows`.
fn newest_in_batch(
    batch: &RecordBatch,
    layout: &RowLayout,
    filter: &SampleFilter,
    rows: &mut HashMap<EntityKey, (u64, OfflineRow)>,
) -> Result<(), arrow::error::ArrowError> {
    let (keys, time, features) = row_columns(batch, layout)?;
    let values_of = |row: usize| feature_values(&features, row);
    for row in 0..batch.num_rows() {
        let key: EntityKey = keys.iter().map(|f| f.value(row).to_string()).collect();
        let hash = entity_hash(&key);
        if !filter.admits(&key, hash) {
            continue;
        }
        let Some(at) = event_time_millis(time, row) else {
            continue;
        };
        match rows.get_mut(&key) {
            Some((_, newest)) => newest.offer(at, || values_of(row)),
            None => {
                let newest = OfflineRow {
                    event_time_ms: at,
                    candidates: vec![values_of(row)],
                };
                rows.insert(key, (hash, newest));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::audit::sample::Selection;

    #[test]
    fn the_key_filter_hashes_keys_as_their_text_does() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("user", DataType::Utf8, true),
            Field::new("shop", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec![Some("a"), Some("b"), None])),
                Arc::new(Int64Array::from(vec![Some(-7), Some(42), Some(3)])),
            ],
        )
        .unwrap();
        let named = |key: [&str; 2]| {
            let key: EntityKey = key.iter().map(|v| (*v).to_string()).collect();
            Sampler::new(Selection::Named([key].into_iter().collect()))
        };
        for (key, row) in [(["a", "-7"], 0), (["b", "42"], 1), (["", "3"], 2)] {
            let sampler = named(key);
            let filter = KeyFilter {
                keys: vec!["user".into(), "shop".into()],
                filter: sampler.filter(),
            };
            let admitted = filter.admitted(&batch).unwrap();
            let owned: Vec<String> = key.iter().map(|v| (*v).to_string()).collect();
            let hash = entity_hash(&owned);
            let mut hasher = KeyHasher::new();
            let columns = [batch.column(0).clone(), batch.column(1).clone()];
            let formatters = key_columns(&batch, &filter.keys).unwrap();
            let mut text = String::new();
            for (column, formatter) in columns.iter().zip(&formatters) {
                hash_key_value(&mut hasher, column, formatter, row, &mut text);
            }
            assert_eq!(hasher.finish(), hash, "row {row}");
            assert!(admitted.value(row), "row {row}");
            assert_eq!(admitted.true_count(), 1);
        }
    }
}
