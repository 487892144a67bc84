//! The table's events that a training set needs: the active files whose partitions can
//! hold events the windows cover at the spine's times, only the key, time and aggregated
//! columns, and only the rows of the spine's entities in that time range, each tagged with
//! its entity's number.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, UInt32Array};
use arrow::error::ArrowError;
use futures::StreamExt;
use rustc_hash::FxHashMap;

use super::spine::KEY_SEPARATOR;
use crate::aggregate::{AggregatedColumns, Aggregation, Event};
use crate::delta::read::{fold_file, partition_start_ms, FileReadError};
use crate::delta::{ops::partition_end_ms, ActiveFile, Table, PUBLISH_TIME_COLUMN};
use crate::record::{event_time_millis, KeyText};

/// Files read at once.
const FILES_AT_ONCE: usize = 4;

/// The spine's entities, numbered from 0 in order of first appearance.
#[derive(Debug, Default)]
pub struct EntityIndex {
    numbers: FxHashMap<String, u32>,
}

impl EntityIndex {
    /// The entities of `keys` (key text as [`Spine`](super::spine::Spine) joins it), and
    /// each key's entity number.
    pub fn of(keys: &[String]) -> (EntityIndex, Vec<u32>) {
        let mut index = EntityIndex::default();
        let numbers = keys
            .iter()
            .map(|key| {
                let next = u32::try_from(index.numbers.len()).unwrap_or(u32::MAX);
                *index.numbers.entry(key.clone()).or_insert(next)
            })
            .collect();
        (index, numbers)
    }

    /// How many entities.
    pub fn len(&self) -> usize {
        self.numbers.len()
    }

    fn number(&self, key: &str) -> Option<u32> {
        self.numbers.get(key).copied()
    }
}

/// What the scan needs to know of the pipeline and the spine.
pub struct ScanPlan {
    /// Join key columns.
    pub keys: Vec<String>,
    /// Event-time column.
    pub event_time: String,
    /// The aggregations, in the pipeline's order.
    pub aggregations: Vec<Aggregation>,
    /// The spine's entities.
    pub entities: EntityIndex,
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
    /// Rows the reads decoded.
    pub rows_read: u64,
}

/// The wanted rows of one record batch, as compact as the file had them: per row its
/// entity's number and times, and the aggregated columns of those rows only.
pub struct EventRows {
    /// Per row, its entity's number in the plan's [`EntityIndex`] (none once gathered).
    pub entity: Vec<u32>,
    /// Per row, its publish time (its event time for rows written before the table kept
    /// publish times), in ms.
    pub publish_time: Vec<i64>,
    event_time: Vec<i64>,
    values: AggregatedColumns,
}

impl EventRows {
    /// How many rows.
    pub fn len(&self) -> usize {
        self.publish_time.len()
    }

    /// `true` when it holds no row.
    pub fn is_empty(&self) -> bool {
        self.publish_time.is_empty()
    }

    /// Rows made up by a test: entity numbers, publish and event times, and per
    /// aggregation its column (`None`: a count).
    #[cfg(test)]
    pub fn of_parts(
        entity: Vec<u32>,
        publish_time: Vec<i64>,
        event_time: Vec<i64>,
        columns: &[Option<ArrayRef>],
    ) -> Result<EventRows, ArrowError> {
        Ok(EventRows {
            entity,
            publish_time,
            event_time,
            values: AggregatedColumns::of_arrays(columns)?,
        })
    }

    /// The rows `refs` name (publish time, part, row) in their order, as one: an entity's
    /// events side by side, so that replaying them reads memory in order. The entity numbers
    /// are left out (the caller knows where each entity's rows are). Each column is gathered
    /// on a thread of its own: the reads are random and the columns independent, so the
    /// cores' memory loads overlap.
    pub fn gather(parts: &[EventRows], refs: &[(i64, u32, u32)]) -> Result<EventRows, ArrowError> {
        let order: Vec<(usize, usize)> = refs
            .iter()
            .map(|&(_, part, row)| (part as usize, row as usize))
            .collect();
        let aggregations = parts.first().map_or(0, |p| p.values.len());
        std::thread::scope(|scope| {
            let order = &order;
            let event_time = scope.spawn(move || {
                order
                    .iter()
                    .map(|&(part, row)| parts[part].event_time[row])
                    .collect::<Vec<i64>>()
            });
            let columns: Vec<_> = (0..aggregations)
                .map(|index| {
                    scope.spawn(move || {
                        let arrays: Option<Vec<&dyn Array>> =
                            parts.iter().map(|p| p.values.array(index)).collect();
                        arrays
                            .map(|arrays| arrow::compute::interleave(&arrays, order))
                            .transpose()
                    })
                })
                .collect();
            let publish_time = refs.iter().map(|&(published, _, _)| published).collect();
            let joined = |what: &str| {
                ArrowError::ComputeError(format!("the thread gathering {what} panicked"))
            };
            let columns = columns
                .into_iter()
                .map(|column| column.join().map_err(|_| joined("a column"))?)
                .collect::<Result<Vec<_>, ArrowError>>()?;
            Ok(EventRows {
                entity: Vec::new(),
                publish_time,
                event_time: event_time.join().map_err(|_| joined("event times"))?,
                values: AggregatedColumns::of_arrays(&columns)?,
            })
        })
    }

    /// Row `row`'s event for the aggregation at `aggregation`.
    pub fn event(&self, aggregation: usize, row: usize) -> Event {
        self.values.event(
            aggregation,
            row,
            self.event_time[row],
            self.publish_time[row],
        )
    }
}

/// Reads the events `plan` asks for from `files` of `table`.
pub async fn scan_events(
    table: &Table,
    files: Vec<ActiveFile>,
    plan: Arc<ScanPlan>,
) -> Result<(Vec<EventRows>, ScanCount), FileReadError> {
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
    // No row filter: the keys decide which rows are wanted, and a filter would decode them
    // twice; the other columns are few and cheap next to the key text. The files' rows come
    // back in the table's order, so that events published in the same millisecond replay
    // in the same order every time.
    let mut reads = futures::stream::iter(wanted)
        .map(|file| {
            let plan = plan.clone();
            fold_file(
                table.store().clone(),
                file.path,
                columns.clone(),
                None,
                Vec::new(),
                move |batch, rows: &mut Vec<EventRows>| {
                    let wanted = wanted_rows(batch, &plan)?;
                    if !wanted.is_empty() {
                        rows.push(wanted);
                    }
                    Ok(())
                },
            )
        })
        .buffered(FILES_AT_ONCE);
    let mut all = Vec::new();
    while let Some(read) = reads.next().await {
        let (mut rows, read) = read?;
        count.rows_read += read;
        all.append(&mut rows);
    }
    Ok((all, count))
}

/// The rows of `batch` of a spine entity with an event time in the plan's range.
fn wanted_rows(batch: &RecordBatch, plan: &ScanPlan) -> Result<EventRows, ArrowError> {
    let keys = KeyText::new(
        plan.keys
            .iter()
            .map(|k| column(batch, k))
            .collect::<Result<Vec<_>, _>>()?,
    )?;
    // One text key, the usual case, is looked up as it is, not copied first.
    let single_text_key = match plan.keys.as_slice() {
        [only] => column(batch, only)?.as_string_opt::<i32>(),
        _ => None,
    };
    let time = column(batch, &plan.event_time)?;
    let published = batch.column_by_name(PUBLISH_TIME_COLUMN);
    let (from, until) = plan.event_times;
    // Sized for every row: most rows of a table are usually wanted, and growing the
    // vectors row by row costs more than the memory a batch's worth of them holds briefly.
    let rows = batch.num_rows();
    let mut kept = Vec::with_capacity(rows);
    let (mut entity, mut event_time, mut publish_time) = (
        Vec::with_capacity(rows),
        Vec::with_capacity(rows),
        Vec::with_capacity(rows),
    );
    let mut key = String::new();
    for row in 0..rows {
        let Some(at) = event_time_millis(time, row).filter(|at| (from..until).contains(at)) else {
            continue;
        };
        if keys.has_null(row) {
            continue;
        }
        let number = match single_text_key {
            Some(texts) => plan.entities.number(texts.value(row)),
            None => {
                key.clear();
                keys.append(row, KEY_SEPARATOR, &mut key)?;
                plan.entities.number(&key)
            }
        };
        let Some(number) = number else {
            continue;
        };
        kept.push(u32::try_from(row).unwrap_or(u32::MAX));
        entity.push(number);
        event_time.push(at);
        publish_time.push(
            published
                .and_then(|c| event_time_millis(c, row))
                .unwrap_or(at),
        );
    }
    for vector in [&mut event_time, &mut publish_time] {
        vector.shrink_to_fit();
    }
    entity.shrink_to_fit();
    let kept = UInt32Array::from(kept);
    let columns = plan
        .aggregations
        .iter()
        .map(|a| {
            a.column
                .as_deref()
                .map(|name| arrow::compute::take(column(batch, name)?, &kept, None))
                .transpose()
        })
        .collect::<Result<Vec<_>, ArrowError>>()?;
    Ok(EventRows {
        entity,
        publish_time,
        event_time,
        values: AggregatedColumns::of_arrays(&columns)?,
    })
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef, ArrowError> {
    batch
        .column_by_name(name)
        .ok_or_else(|| ArrowError::SchemaError(format!("the table has no column `{name}`")))
}
