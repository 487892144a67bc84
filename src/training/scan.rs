//! The table's events that a training set needs: the active files whose partitions can
//! hold events the windows cover at the spine's times, only the key, time and aggregated
//! columns, and only the rows of the spine's entities in that time range; per entity, one
//! event per aggregation per row.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanBuilder, RecordBatch};
use arrow::error::ArrowError;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use futures::StreamExt;

use crate::aggregate::{AggregatedColumns, Aggregation, Event};
use crate::delta::read::{fold_file, partition_start_ms, FileReadError, RowsWanted};
use crate::delta::{ops::partition_end_ms, ActiveFile, Table, PUBLISH_TIME_COLUMN};
use crate::record::event_time_millis;

/// Files read at once.
const FILES_AT_ONCE: usize = 4;

/// An entity's join key values as text.
pub type EntityKey = Vec<String>;

/// Per entity, its rows as events: one per aggregation per row.
pub type EntityEvents = HashMap<EntityKey, Vec<Vec<Event>>>;

/// What the scan needs to know of the pipeline and the spine.
pub struct ScanPlan {
    /// Join key columns.
    pub keys: Vec<String>,
    /// Event-time column.
    pub event_time: String,
    /// The aggregations, in the pipeline's order.
    pub aggregations: Vec<Aggregation>,
    /// The spine's entities.
    pub entities: HashSet<EntityKey>,
    /// Event times worth reading: `[from, until)`.
    pub event_times: (i64, i64),
    /// Files whose partition (by ingest time, not event time) ended before this hold no
    /// event worth reading; `None` when partitions are by event time.
    pub ingested_after: Option<i64>,
}

/// What the scan read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanCount {
    /// Active files read.
    pub files_read: usize,
    /// Active files left out by their partition.
    pub files_skipped: usize,
    /// Rows the reads decoded (after the key and time filter).
    pub rows_read: u64,
}

/// Reads the events `plan` asks for from `files` of `table`.
pub async fn scan_events(
    table: &Table,
    files: Vec<ActiveFile>,
    plan: Arc<ScanPlan>,
) -> Result<(EntityEvents, ScanCount), FileReadError> {
    let (from, until) = plan.event_times;
    let (wanted, skipped): (Vec<ActiveFile>, Vec<ActiveFile>) =
        files
            .into_iter()
            .partition(|file| match plan.ingested_after {
                Some(after) => partition_end_ms(&file.partition).is_none_or(|end| end > after),
                None => {
                    partition_end_ms(&file.partition).is_none_or(|end| end > from)
                        && partition_start_ms(&file.partition).is_none_or(|start| start < until)
                }
            });
    let mut count = ScanCount {
        files_read: wanted.len(),
        files_skipped: skipped.len(),
        rows_read: 0,
    };
    let mut columns = plan.keys.clone();
    columns.push(plan.event_time.clone());
    columns.push(PUBLISH_TIME_COLUMN.to_string());
    for aggregation in &plan.aggregations {
        if let Some(column) = &aggregation.column {
            if !columns.contains(column) {
                columns.push(column.clone());
            }
        }
    }
    let mut reads = futures::stream::iter(wanted)
        .map(|file| {
            let (plan, judge) = (plan.clone(), plan.clone());
            let mut judged = plan.keys.clone();
            judged.push(plan.event_time.clone());
            fold_file(
                table.store().clone(),
                file.path,
                columns.clone(),
                Some(RowsWanted {
                    columns: judged,
                    keep: Box::new(move |batch| wanted_rows(batch, &judge)),
                }),
                EntityEvents::new(),
                move |batch, events| fold_events(batch, &plan, events),
            )
        })
        .buffer_unordered(FILES_AT_ONCE);
    let mut all = EntityEvents::new();
    while let Some(read) = reads.next().await {
        let (events, rows) = read?;
        count.rows_read += rows;
        for (key, mut rows) in events {
            all.entry(key).or_default().append(&mut rows);
        }
    }
    Ok((all, count))
}

/// The rows of a spine entity with an event time in the plan's range.
fn wanted_rows(
    batch: &RecordBatch,
    plan: &ScanPlan,
) -> Result<arrow::array::BooleanArray, ArrowError> {
    let keys = key_formatters(batch, &plan.keys)?;
    let time = column(batch, &plan.event_time)?;
    let (from, until) = plan.event_times;
    let mut keep = BooleanBuilder::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let in_range = event_time_millis(time, row).is_some_and(|at| (from..until).contains(&at));
        keep.append_value(in_range && plan.entities.contains(&key_of(&keys, row)));
    }
    Ok(keep.finish())
}

/// Folds a batch of wanted rows into per-entity events.
fn fold_events(
    batch: &RecordBatch,
    plan: &ScanPlan,
    events: &mut EntityEvents,
) -> Result<(), ArrowError> {
    let keys = key_formatters(batch, &plan.keys)?;
    let time = column(batch, &plan.event_time)?;
    let published = batch.column_by_name(PUBLISH_TIME_COLUMN);
    let values = AggregatedColumns::read(&plan.aggregations, |c| column(batch, c))?;
    for row in 0..batch.num_rows() {
        let Some(event_time) = event_time_millis(time, row) else {
            continue;
        };
        // Rows written before the table kept publish times count from their event time.
        let publish_time = published
            .and_then(|c| event_time_millis(c, row))
            .unwrap_or(event_time);
        let row_events = values.events(row, event_time, publish_time);
        events
            .entry(key_of(&keys, row))
            .or_default()
            .push(row_events);
    }
    Ok(())
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef, ArrowError> {
    batch
        .column_by_name(name)
        .ok_or_else(|| ArrowError::SchemaError(format!("the table has no column `{name}`")))
}

fn key_formatters<'a>(
    batch: &'a RecordBatch,
    keys: &[String],
) -> Result<Vec<(&'a ArrayRef, ArrayFormatter<'a>)>, ArrowError> {
    let options = FormatOptions::default().with_null("");
    keys.iter()
        .map(|name| {
            let c = column(batch, name)?;
            Ok((c, ArrayFormatter::try_new(c.as_ref(), &options)?))
        })
        .collect()
}

fn key_of(keys: &[(&ArrayRef, ArrayFormatter<'_>)], row: usize) -> EntityKey {
    keys.iter()
        .map(|(c, f)| {
            if c.is_null(row) {
                String::new()
            } else {
                f.value(row).to_string()
            }
        })
        .collect()
}
